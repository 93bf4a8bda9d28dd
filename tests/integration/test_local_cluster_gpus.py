"""A LocalCluster hands the machine's GPUs out so that no two workers share a device, and
refuses GPUs no worker could offer before it starts anything."""

import pytest

from dsched import Client, LocalCluster, ResourceSpecError

FOUR_GPUS = {"SCHED_FAKE_NVML": '{"count": 4}'}


def devices_by_worker(client) -> dict[str, list[int]]:
    workers = client.scheduler_info()["workers"].values()
    return {w["name"]: sorted(gpu["index"] for gpu in w["gpus"]) for w in workers}


def test_the_gpus_are_divided_among_the_workers(tmp_path):
    with LocalCluster(n_workers=2, threads_per_worker=1, env=FOUR_GPUS) as cluster, \
            Client(cluster) as client:
        assert devices_by_worker(client) == {"local-0": [0, 1], "local-1": [2, 3]}


def test_workers_started_one_by_one_take_devices_no_one_holds():
    with LocalCluster(n_workers=0, env=FOUR_GPUS) as cluster:
        cluster.start_worker(resources="GPU=1", name="one")
        cluster.start_worker(resources="GPU=2", name="two")
        cluster.start_worker(resources="MEMORY=1e9", name="cpu")
        with pytest.raises(ValueError, match="only 1 of this machine's are left"):
            cluster.start_worker(resources="GPU=2", name="greedy")
        with Client(cluster) as client:
            assert devices_by_worker(client) == {"one": [0], "two": [1, 2], "cpu": []}


def test_on_a_machine_without_gpus_the_workers_say_so_and_nothing_else(capfd):
    with LocalCluster(n_workers=1, log_level="info", env={"SCHED_FAKE_NVML": '{"count": 0}'}):
        pass
    log = capfd.readouterr().err
    assert "No GPUs: NVML found no GPU" in log
    assert "turned off" not in log  # nobody turned them off


def test_a_gpu_offer_no_worker_could_make_is_refused_before_anything_starts(monkeypatch):
    def no_process(*args, **kwargs):
        raise AssertionError(f"started {args[0]!r}")

    with monkeypatch.context() as patched:
        patched.setattr("dsched.client.cluster.subprocess.Popen", no_process)
        with pytest.raises(ResourceSpecError, match="GPU=0.5: a worker's GPUs must be a whole"):
            LocalCluster(n_workers=1, resources="GPU=0.5", env=FOUR_GPUS)
        with pytest.raises(ResourceSpecError, match="whole number of devices"):
            Client(n_workers=1, resources={"GPU": 1.5})
    with LocalCluster(n_workers=0, env=FOUR_GPUS) as cluster:
        with pytest.raises(ResourceSpecError, match="whole number of devices"):
            cluster.start_worker(resources="GPU=0.5")
        assert cluster.workers == []

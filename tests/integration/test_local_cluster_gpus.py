"""A LocalCluster hands the machine's GPUs out so that no two workers share a device."""

import pytest

from dsched import Client, LocalCluster

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

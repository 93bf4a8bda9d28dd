"""Real workers honour the resources they advertise (issue #4, "Must show").

A worker with ``--resources GPU=2 --nthreads 4`` runs at most two GPU=1 tasks at once, each
pinned to its own device; ``--nworkers 3 --resources process=1`` gives three processes with
one ``process`` each; the command line, the environment and the config file all advertise the
same thing; and an invalid spec stops the worker before it registers.
"""

from __future__ import annotations

import subprocess
import sys

import cloudpickle

from deadline import wait_until

# The workers cannot import this test module, so ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def timed(seconds: float, index: int) -> dict:
    """Sleep, and say when, where and with which devices it ran."""
    import os
    import time

    start = time.time()
    time.sleep(seconds)
    return {"index": index, "start": start, "stop": time.time(), "pid": os.getpid(),
            "devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def max_overlap(intervals: list[dict]) -> int:
    """The most intervals open at one instant; one ending as another starts does not count."""
    edges = sorted([(r["start"], 1) for r in intervals] + [(r["stop"], -1) for r in intervals],
                   key=lambda edge: (edge[0], edge[1]))
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def overlapping_pairs(records: list[dict]):
    for i, a in enumerate(records):
        for b in records[i + 1:]:
            if a["start"] < b["stop"] and b["start"] < a["stop"]:
                yield a, b


def test_gpu2_worker_runs_two_gpu_tasks_at_once_each_on_its_own_device(daemons):
    daemons.scheduler()
    daemons.worker("--resources", "GPU=2", "--nthreads", "4")
    client = daemons.client()
    daemons.wait_for_workers(client, 1)

    futures = [client.submit(timed, 0.3, i, resources={"GPU": 1}) for i in range(8)]
    records = client.gather(futures, timeout=60)

    # Four threads could run four at once: only the two GPUs hold them to two.
    assert max_overlap(records) == 2
    assert all(r["devices"] in ("0", "1") for r in records), records
    pairs = list(overlapping_pairs(records))
    assert pairs, "no two GPU tasks ever ran together"
    for a, b in pairs:
        assert a["devices"] != b["devices"], (a, b)
    # Each device's tasks ran in that device's (reused) pinned child process.
    assert len({r["pid"] for r in records}) == 2


def test_nworkers_3_with_process_1_runs_three_tasks_at_once_in_three_processes(daemons):
    daemons.scheduler()
    daemons.worker("--nworkers", "3", "--nthreads", "2", "--resources", "process=1")
    client = daemons.client()
    info = daemons.wait_for_workers(client, 3)

    assert len(info["workers"]) == 3
    for worker in info["workers"].values():
        assert worker["resources"] == {"process": 1.0}
        assert worker["nthreads"] == 2

    futures = [client.submit(timed, 0.4, i, resources={"process": 1}) for i in range(9)]
    records = client.gather(futures, timeout=60)

    assert max_overlap(records) == 3
    for a, b in overlapping_pairs(records):
        assert a["pid"] != b["pid"], (a, b)
    assert len({r["pid"] for r in records}) == 3


def test_resources_from_env_and_config_file_match_the_command_line(daemons, tmp_path):
    config = tmp_path / "worker.toml"
    config.write_text("[worker.resources]\nGPU = 2\n")
    daemons.scheduler()
    daemons.worker("--resources", "GPU=2", "--name", "cli")
    daemons.worker("--name", "env", env={"SCHED_WORKER__RESOURCES__GPU": "2"})
    daemons.worker("--config", str(config), "--name", "file")
    # Precedence: the command line over the environment over the file.
    daemons.worker("--config", str(config), "--name", "env-over-file",
                   env={"SCHED_WORKER__RESOURCES__GPU": "3"})
    daemons.worker("--resources", "GPU=1", "--name", "cli-over-env",
                   env={"SCHED_WORKER__RESOURCES__GPU": "3"})
    client = daemons.client()
    info = daemons.wait_for_workers(client, 5)

    advertised = {w["name"]: w["resources"] for w in info["workers"].values()}
    assert advertised == {
        "cli": {"GPU": 2.0}, "env": {"GPU": 2.0}, "file": {"GPU": 2.0},
        "env-over-file": {"GPU": 3.0}, "cli-over-env": {"GPU": 1.0},
    }


def test_invalid_resource_spec_exits_2_naming_it_and_never_registers(daemons):
    address = daemons.scheduler()
    done = subprocess.run(
        [sys.executable, "-m", "dsched.cli.worker", address, "--resources", "foo"],
        env=daemons.env, capture_output=True, text=True, timeout=60,
    )

    assert done.returncode == 2, done
    assert "'foo'" in done.stderr and "NAME=VALUE" in done.stderr, done.stderr
    client = daemons.client()
    assert client.scheduler_info()["workers"] == {}
    # The same scheduler does take a valid worker, so "none" above means "refused".
    daemons.worker("--resources", "GPU=1")
    wait_until(lambda: client.scheduler_info()["workers"], 30, what="a valid worker registers")

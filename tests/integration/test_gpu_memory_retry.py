"""A Python GPU task that runs out of GPU memory, end to end against the NVML stand-in (one
80 GB device): submitted with ``gpu_memory_retry=True``, it runs exactly twice, the second
time holding more ``GPU_MEMORY``, and the scheduler's log says why; without it, it fails after
one attempt."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

from deadline import wait_until

cloudpickle.register_pickle_by_value(sys.modules[__name__])

GB = 10**9
ONE_80_GB_DEVICE = {"SCHED_FAKE_NVML": json.dumps({"gpus": [{"memory_total": 80 * GB}]})}


def train(directory: str) -> int:
    """Run out of GPU memory the first time; the next time, wait for the test's word and say
    how many attempts there were."""
    attempts = Path(directory) / "attempts"
    with attempts.open("a") as marks:
        marks.write("x")
    if attempts.read_text() == "x":
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    while not (Path(directory) / "release").exists():
        time.sleep(0.02)
    return len(attempts.read_text())


def always_too_big(directory: str) -> None:
    with (Path(directory) / "attempts").open("a") as marks:
        marks.write("x")
    raise RuntimeError("CUDA out of memory. Tried to allocate 90.00 GiB")


def gpu_cluster(daemons):
    daemons.scheduler()
    daemons.worker("--nthreads", "2", env=ONE_80_GB_DEVICE)
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    return client


def attempts(directory: Path) -> str:
    """A mark per attempt that has started so far."""
    path = directory / "attempts"
    return path.read_text() if path.exists() else ""


def memory_in_use(client) -> float:
    (worker,) = client.scheduler_info()["workers"].values()
    return worker["used"].get("GPU_MEMORY", 0)


def test_a_task_that_ran_out_runs_once_more_holding_more_gpu_memory(daemons, tmp_path):
    client = gpu_cluster(daemons)
    future = client.submit(train, str(tmp_path), resources={"GPU_MEMORY": "18G"},
                           gpu_memory_retry=True, pure=False)

    held = wait_until(lambda: attempts(tmp_path) == "xx" and memory_in_use(client),
                      what="the second attempt to run")
    assert held >= 36 * GB  # twice the 18 GB the first attempt held, or more

    (tmp_path / "release").touch()
    assert future.result(60) == 2  # exactly two attempts
    assert attempts(tmp_path) == "xx"
    log = daemons.scheduler_log()
    assert f"Task {future.key} ran out of GPU memory (" in log
    assert "retrying once with GPU_MEMORY=" in log


def test_without_the_option_it_fails_after_one_attempt(daemons, tmp_path):
    client = gpu_cluster(daemons)
    future = client.submit(train, str(tmp_path), resources={"GPU_MEMORY": "18G"}, pure=False)

    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        future.result(60)
    assert attempts(tmp_path) == "x"
    assert "ran out of GPU memory" not in daemons.scheduler_log()


def test_a_task_that_runs_out_again_fails_and_its_traceback_says_what_the_retry_was(
        daemons, tmp_path):
    client = gpu_cluster(daemons)
    future = client.submit(always_too_big, str(tmp_path), resources={"GPU_MEMORY": "18G"},
                           gpu_memory_retry=True, pure=False)

    with pytest.raises(RuntimeError, match="Tried to allocate 90.00 GiB"):
        future.result(60)
    assert attempts(tmp_path) == "xx"
    said = future.traceback()
    assert said.startswith("ran out of GPU memory (18 GB held); retried once with GPU_MEMORY=")
    assert "; it failed again:\nTraceback" in said
    assert (f"Task {future.key} erred (exception): ran out of GPU memory (18 GB held); retried "
            "once with GPU_MEMORY=") in daemons.scheduler_log()

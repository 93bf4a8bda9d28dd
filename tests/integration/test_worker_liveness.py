"""A worker stays in touch: heartbeats with its load, a drain on SIGTERM that lets the running
task finish and report, and reconnection to a scheduler that comes back on the same port."""

from __future__ import annotations

import signal
import sys

import cloudpickle

from cluster_helpers import free_ports
from deadline import wait_until

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FAST = {"SCHED_WORKER__HEARTBEAT_INTERVAL": "0.2",
        "SCHED_WORKER__RECONNECT_BACKOFF_MIN": "0.1",
        "SCHED_WORKER__RECONNECT_BACKOFF_MAX": "0.5"}


def long_task(directory: str, seconds: float) -> str:
    import pathlib
    import time

    (pathlib.Path(directory) / "started").touch()
    time.sleep(seconds)
    (pathlib.Path(directory) / "finished").touch()
    return "done"


def where() -> str:
    import os

    return os.environ["SCHED_WORKER_NAME"]


def test_heartbeats_bring_cpu_and_memory_to_the_scheduler(daemons):
    daemons.scheduler()
    daemons.worker("--memory-limit", "4GiB", env=FAST)
    client = daemons.client()
    daemons.wait_for_workers(client, 1)

    def metrics():
        (worker,) = client.scheduler_info()["workers"].values()
        found = worker["metrics"]
        return "cpu" in found and "memory" in found and found

    found = wait_until(metrics, 5, what="a heartbeat with cpu and memory")
    assert found["memory"] > 0 and found["cpu"] >= 0
    assert found["memory_limit"] == 4 * 2**30


def test_sigterm_lets_the_running_task_finish_and_report_then_exits_0(daemons, tmp_path):
    daemons.scheduler()
    worker = daemons.worker(env=FAST)
    client = daemons.client()
    daemons.wait_for_workers(client, 1)

    future = client.submit(long_task, str(tmp_path), 1.5)
    reported = []
    future.add_done_callback(lambda f: reported.append(f.status))
    wait_until(lambda: (tmp_path / "started").exists(), 30, what="the task to start")
    worker.send_signal(signal.SIGTERM)

    assert worker.wait(timeout=30) == 0
    assert (tmp_path / "finished").exists()
    # The worker reported the result before leaving: the client saw the task finish. (Killed
    # mid-task, it would have left the future pending.) Its result left with the worker (no
    # other could take it), so the future is pending again now, to be computed anew.
    wait_until(lambda: reported == ["finished"], 10, what="the task's completion report")


def test_worker_outlives_its_scheduler_and_registers_with_the_next_one(daemons):
    port = free_ports()
    daemons.scheduler("--port", str(port))
    worker = daemons.worker("--name", "survivor", env=FAST)
    daemons.wait_for_workers(daemons.client(), 1)

    daemons.scheduler_process.kill()
    daemons.scheduler_process.wait()
    # The worker retries (0.1 s, then up to 0.5 s apart) and keeps running meanwhile.
    assert worker.poll() is None
    assert daemons.scheduler("--port", str(port)).endswith(f":{port}")

    client = daemons.client()
    info = daemons.wait_for_workers(client, 1)
    assert [w["name"] for w in info["workers"].values()] == ["survivor"]
    assert worker.poll() is None
    assert client.submit(where).result(timeout=30) == "survivor"


def test_drain_deadline_stops_a_thread_task_that_would_run_on(daemons, tmp_path):
    daemons.scheduler()
    worker = daemons.worker(env={**FAST, "SCHED_WORKER__DRAIN_TIMEOUT": "0.5"})
    client = daemons.client()
    daemons.wait_for_workers(client, 1)

    client.submit(long_task, str(tmp_path), 600)
    wait_until(lambda: (tmp_path / "started").exists(), 30, what="the task to start")
    worker.send_signal(signal.SIGTERM)

    # Half a second to finish, then the task is stopped: the worker does not wait 10 minutes.
    assert worker.wait(timeout=20) == 0
    assert not (tmp_path / "finished").exists()

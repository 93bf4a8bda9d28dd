"""A worker killed with -9 mid-task: its task runs again elsewhere, or fails after too many
deaths with an error that says so (allowed_failures)."""

import os
import sys

import cloudpickle
import pytest

from deadline import wait_until
from dsched import TaskFailedError

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def report_then_wait(marker, gate):
    """Write which worker runs this, then wait until ``gate`` exists (or it runs again)."""
    import os

    name = os.environ["SCHED_WORKER_NAME"]
    first = not os.path.exists(marker)
    with open(marker, "a") as f:
        f.write(name + "\n")
    if first:
        wait_until(lambda: os.path.exists(gate), 60, interval=0.01, what=f"{gate} to appear")
    return name


def start_two(daemons, **env):
    daemons.scheduler(env=env)
    workers = {name: daemons.worker("--name", name, "--nthreads", "1") for name in ("a", "b")}
    client = daemons.client()
    daemons.wait_for_workers(client, 2)
    return workers, client


def test_a_task_on_a_killed_worker_runs_again_on_another(daemons, tmp_path):
    workers, client = start_two(daemons)
    marker, gate = str(tmp_path / "marker"), str(tmp_path / "gate")
    future = client.submit(report_then_wait, marker, gate)
    first = wait_until(lambda: os.path.exists(marker) and open(marker).read().split(),
                       what="the task started")[0]
    workers[first].kill()
    survivor = future.result(timeout=60)
    assert survivor != first
    assert open(marker).read().split() == [first, survivor]


def test_a_task_fails_once_it_has_killed_more_workers_than_allowed(daemons, tmp_path):
    workers, client = start_two(daemons, SCHED_SCHEDULER__ALLOWED_FAILURES="0")
    marker, gate = str(tmp_path / "marker"), str(tmp_path / "gate")
    future = client.submit(report_then_wait, marker, gate)
    first = wait_until(lambda: os.path.exists(marker) and open(marker).read().split(),
                       what="the task started")[0]
    workers[first].kill()
    with pytest.raises(TaskFailedError, match=r"1 worker\(s\) died while running this task") as failed:
        future.result(timeout=60)
    assert failed.value.error == "killed_worker"
    assert open(marker).read().split() == [first]  # not run again

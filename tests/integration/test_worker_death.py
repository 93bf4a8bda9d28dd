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
    with pytest.raises(TaskFailedError, match=r"1 worker\(s\) died while running task report_then_wait-") as failed:
        future.result(timeout=60)
    assert failed.value.error == "killed_worker"
    assert open(marker).read().split() == [first]  # not run again


def add_when(gate, started, x, y):
    """``x + y`` once ``gate`` exists; ``started`` is created when it begins."""
    import os

    open(started, "w").close()
    wait_until(lambda: os.path.exists(gate), 60, interval=0.01, what=f"{gate} to appear")
    return x + y


def add(x, y):
    return x + y


def test_a_chain_whose_intermediates_were_dropped_survives_losing_every_copy(daemons, tmp_path):
    daemons.scheduler()
    a = daemons.worker("--name", "a", "--nthreads", "1")
    b = daemons.worker("--name", "b", "--nthreads", "1")
    client = daemons.client()
    daemons.wait_for_workers(client, 2)
    gate, started = tmp_path / "gate", tmp_path / "started"
    d = client.submit(add, 1, 0, workers=["a"])
    t = client.submit(add_when, str(gate), str(started), d, 10, workers=["b"])
    final = client.submit(add, t, 100, resources={"GPU": 1})  # no worker has a GPU yet
    del d, t  # as inside a function: only the final future is kept
    wait_until(started.exists, what="t running on b")
    a.kill()  # the only copy of d goes; t already has its own
    wait_until(lambda: len(client.scheduler_info()["workers"]) == 1, what="a gone")
    gate.touch()
    wait_until(lambda: "GPU" in final.reason, what="final waiting for a GPU")
    b.kill()  # the only copy of t goes: final needs t again, and t needs d again
    wait_until(lambda: not client.scheduler_info()["workers"], what="b gone")
    daemons.worker("--name", "a", "--nthreads", "1")
    daemons.worker("--name", "b", "--nthreads", "1")
    daemons.worker("--name", "gpu", "--resources", "GPU=1")
    assert final.result(timeout=60) == 111
    assert "cancel" not in daemons.scheduler_log().lower()


def run_then_block(marker, gate):
    """Return at once the first time; any later run records its worker and waits for
    ``gate``."""
    import os

    runs = open(marker).read().split() if os.path.exists(marker) else []
    with open(marker, "a") as f:
        f.write(os.environ["SCHED_WORKER_NAME"] + "\n")
    if runs:
        wait_until(lambda: os.path.exists(gate), 60, interval=0.01, what=f"{gate} to appear")
    return len(runs)


def test_a_result_lost_and_then_killed_with_its_second_worker_fails_naming_the_task(
        daemons, tmp_path):
    """Dask's test_fan_out_pattern_deadlock, allowed_failures=0: f finished on one worker,
    which died; f ran again on the other, which died too. result() raises the killed-worker
    error naming f, not 'could not fetch the results of f' from the first, dead worker."""
    workers, client = start_two(daemons, SCHED_SCHEDULER__ALLOWED_FAILURES="0")
    marker, gate = str(tmp_path / "marker"), str(tmp_path / "gate")
    f = client.submit(run_then_block, marker, gate, key="f")
    assert f.result(timeout=60) == 0
    first = open(marker).read().split()[0]
    workers[first].kill()
    second = wait_until(lambda: open(marker).read().split()[1:], what="f to run again")[0]
    assert f.status == "pending"  # told that its result was lost
    workers[second].kill()
    with pytest.raises(TaskFailedError, match=r"1 worker\(s\) died while running task f ") \
            as failed:
        f.result(timeout=60)
    assert failed.value.error == "killed_worker"

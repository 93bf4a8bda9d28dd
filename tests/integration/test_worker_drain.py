"""A worker that drains (SIGTERM, or SIGHUP: the end of the session that started it) is sent no
new work, and hands the results only it holds to other workers before it leaves, so finished
work is not computed again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import cloudpickle

from deadline import wait_until
from task_helpers import wait_for

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FAST = {"SCHED_WORKER__HEARTBEAT_INTERVAL": "0.2"}


def where(_=None) -> str:
    import os

    return os.environ["SCHED_WORKER_NAME"]


def counted(path: str, value: int) -> int:
    """Return ``value``, adding a line to ``path`` each time it runs."""
    with open(path, "a") as f:
        f.write("ran\n")
    return value


def runs(path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def start(daemons, *names):
    daemons.scheduler()
    workers = {name: daemons.worker("--name", name, "--nthreads", "1", env=FAST)
               for name in names}
    client = daemons.client()
    daemons.wait_for_workers(client, len(names))
    return workers, client


def draining(client, name) -> bool:
    return any(w["name"] == name and w["draining"]
               for w in client.scheduler_info()["workers"].values())


def test_a_draining_worker_is_sent_no_new_work(daemons, tmp_path):
    workers, client = start(daemons, "a", "b")
    gate = tmp_path / "gate"
    long = client.submit(wait_for, str(gate), "long", workers=["a"])
    wait_until(lambda: client.scheduler_info()["tasks"].get("processing"), what="it runs")
    workers["a"].send_signal(signal.SIGTERM)
    wait_until(lambda: draining(client, "a"), what="a draining")
    assert set(client.gather(client.map(where, range(200)), timeout=60)) == {"b"}
    assert client.scheduler_info()["counters"]["rejected"] == 0  # none bounced off a
    gate.touch()
    assert long.result(timeout=30) == "long"
    assert workers["a"].wait(timeout=30) == 0


def test_a_draining_worker_hands_its_results_to_another_before_it_leaves(daemons, tmp_path):
    workers, client = start(daemons, "a", "b")
    ledger = tmp_path / "ledger"
    kept = client.submit(counted, str(ledger), 7, workers=["a"], pure=False)
    assert kept.result(timeout=30) == 7
    workers["a"].send_signal(signal.SIGTERM)
    assert workers["a"].wait(timeout=30) == 0
    wait_until(lambda: len(client.scheduler_info()["workers"]) == 1, what="a gone")
    assert kept.result(timeout=30) == 7  # fetched from b now
    assert client.submit(where, kept).result(timeout=30) == "b"
    assert runs(ledger) == 1  # never computed again
    assert client.scheduler_info()["counters"]["replicated"] == 1
    log = daemons.scheduler_log()
    assert "Worker a is draining: it takes no new tasks; copying 1 result(s)" in log


def test_what_cannot_be_moved_is_computed_again_and_the_log_says_so(daemons, tmp_path):
    workers, client = start(daemons, "a")
    ledger = tmp_path / "ledger"
    kept = client.submit(counted, str(ledger), 7, pure=False)
    assert kept.result(timeout=30) == 7
    workers["a"].send_signal(signal.SIGTERM)
    assert workers["a"].wait(timeout=30) == 0
    daemons.worker("--name", "b", "--nthreads", "1", env=FAST)
    wait_until(lambda: runs(ledger) == 2, what="the result computed again on b")
    log = daemons.scheduler_log()
    assert "(1 cannot be moved: no other worker)" in log
    assert "it alone held 1 result(s), 1 of them still needed and computed again" in log


def test_sighup_drains_a_worker_as_sigterm_does(daemons):
    daemons.scheduler()
    worker = daemons.worker("--no-nanny", "--name", "a", env=FAST, stderr=subprocess.PIPE,
                            text=True)
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    worker.send_signal(signal.SIGHUP)
    _, log = worker.communicate(timeout=60)
    assert worker.returncode == 0, log  # drained, not killed by the signal
    assert "INFO dsched: Received SIGHUP: draining (SIGTERM to exit at once)" in log
    assert "Worker a is draining" in daemons.scheduler_log()


def test_a_hang_up_of_the_session_drains_the_nanny_and_its_processes(daemons):
    daemons.scheduler()
    # Its own process group, as a command started in a terminal has: a hang-up reaches the
    # nanny and its worker processes together, and twice (from the shell, then the kernel).
    nanny = daemons.worker("--name", "n", "--nworkers", "2", env=FAST, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    client = daemons.client()
    daemons.wait_for_workers(client, 2)
    os.killpg(nanny.pid, signal.SIGHUP)
    os.killpg(nanny.pid, signal.SIGHUP)
    _, log = nanny.communicate(timeout=60)
    assert nanny.returncode == 0, log
    lines = log.splitlines()
    # The nanny's line; then each process drains once, on the hang-up or on the nanny's SIGTERM,
    # whichever it reads first (the nanny owns "at once"); the other signals change nothing.
    assert sum("Received SIGHUP: draining (SIGTERM to exit at once)" in line
               for line in lines) == 1, log
    assert sum(line.endswith(("INFO dsched: Received SIGHUP: draining",
                              "INFO dsched: Received SIGTERM: draining")) for line in lines) == 2
    assert "exiting at once" not in log and "was killed" not in log
    wait_until(lambda: not client.scheduler_info()["workers"], what="both processes gone")


def block_the_first_run(marker: str) -> str:
    """The first run waits (up to 60 s) until it is stopped; any later run returns at once."""
    import os
    import time

    first = not os.path.exists(marker)
    with open(marker, "a") as f:
        f.write(os.environ["SCHED_WORKER_NAME"] + "\n")
    if first:
        time.sleep(60)
    return os.environ["SCHED_WORKER_NAME"]


def test_a_task_stopped_at_the_drain_deadline_runs_again_elsewhere_and_does_not_fail(
        daemons, tmp_path):
    """A SIGTERM must not fail a user's task: the GPU task still running at the drain deadline
    is stopped for shutdown and handed back, not reported as an error of its own (which would
    spend its retries, here none). A job that takes its grace period to die keeps the worker
    connected meanwhile, so the stopped task's end is surely heard."""
    gpu = {**FAST, "SCHED_FAKE_NVML": '{"count": 1}', "SCHED_WORKER__DRAIN_TIMEOUT": "0.5",
           "SCHED_WORKER__JOB_KILL_GRACE": "2"}
    daemons.scheduler()
    a = daemons.worker("--name", "a", "--nthreads", "2", "--no-nanny", env=gpu)
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    marker = tmp_path / "marker"
    future = client.submit(block_the_first_run, str(marker), resources={"GPU": 1}, retries=0)
    job = client.submit_command(["sh", "-c", "trap '' TERM; sleep 30"])
    wait_until(lambda: marker.exists() and client.jobs([job.job_id(timeout=10)])["jobs"][0][
        "state"] == "running", what="the task and the job to run on a")
    daemons.worker("--name", "b", "--nthreads", "1", "--no-nanny", env=gpu)
    daemons.wait_for_workers(client, 2)
    a.send_signal(signal.SIGTERM)
    assert future.result(timeout=60) == "b"
    assert a.wait(timeout=30) == 0
    assert marker.read_text().split() == ["a", "b"]

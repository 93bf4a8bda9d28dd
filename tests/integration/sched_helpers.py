"""Running the ``sched`` command as a user would, against the daemons of a test
(``cluster_helpers.Daemons``): a subprocess with the cluster's token, bounded in time."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from contextlib import contextmanager

from deadline import wait_until


def sched(daemons, *args: str, timeout: float = 90.0, **popen) -> subprocess.CompletedProcess:
    """``sched -s ADDRESS ARGS...`` (through the console script's entry, ``cli/quick.py``, which
    hands all but submit and status to the click command): its exit status, stdout and stderr
    as text."""
    return subprocess.run([sys.executable, "-m", "dsched.cli.quick", "-s", daemons.address,
                           *args], env=daemons.env, capture_output=True, text=True,
                          timeout=timeout, **popen)


def submit(daemons, *args: str) -> int:
    """``sched submit ARGS...``: the number of the job queued."""
    done = sched(daemons, "submit", *args)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def views(daemons, *jobs: int) -> dict[int, dict]:
    """``sched status --json JOB...``: each job's view, by number."""
    done = sched(daemons, "status", "--json", *map(str, jobs))
    assert done.returncode == 0, done.stderr
    return {view["id"]: view for view in json.loads(done.stdout)["jobs"]}


@contextmanager
def worker(daemons, client, *args: str):
    """A worker for the block (``args`` as for sched-worker), registered before it starts,
    drained and gone after it, so that the next test's jobs cannot land on it."""
    before = len(client.scheduler_info()["workers"])
    process = daemons.worker("--no-nanny", *args)
    try:
        daemons.wait_for_workers(client, before + 1)
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        # Gone for good: the module's ``client`` fixture no longer waits for it.
        daemons.workers.remove(process)
        wait_until(lambda: len(client.scheduler_info()["workers"]) == before,
                   what="the worker to leave the scheduler")

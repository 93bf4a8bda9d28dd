"""The job queue's promises under faults, as a team would lean on them (issue: the job queue
keeps its promises): 200 jobs of mixed resources, a fifth of them cancelled at random moments
(some right after submit, by a client that closes at once), the worker process of one worker
killed with -9 twice and the scheduler once, and every job leaves a grandchild in a session of
its own behind.

Each job appends to a ledger (``start``/``end`` lines with its job, attempt, pid, worker,
device and the time). It holds ``lock-JOB`` for its whole life (an attempt that finds it taken
writes ``overlap``) and, when pinned to a device, ``device-WORKER-N`` (one that finds that
taken writes ``shared``): both locks die with the last process that holds them, the grandchild
excluded. The books: no cancelled job started after its cancel was applied; no job without
``requeue`` started twice; no two attempts of a job, nor two whole-device attempts on one
device, ran at once; every job ended; no process of any job (grandchildren included) is alive
at the end.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import psutil
import pytest

from deadline import wait_until
from dsched.jobstates import ENDED

SEED = int(os.environ.get("DSCHED_TEST_SEED", random.randrange(2**32)))
ENDED_STATES = {state.value for state in ENDED}
WORKER_ENV = {"SCHED_WORKER__RECONNECT_BACKOFF_MAX": "0.5",
              "SCHED_WORKER__HEARTBEAT_INTERVAL": "0.5"}
TWO_GPUS = {"SCHED_FAKE_NVML": json.dumps({"count": 2})}

#: $0 is the ledger's directory. The grandchild closes the locks, so that only the job's own
#: processes hold them; its pid goes to ``grandchildren``.
SCRIPT = (
    'dev="${CUDA_VISIBLE_DEVICES:-}"; '
    'me="$SCHED_JOB_ID $SCHED_JOB_ATTEMPT $$ $SCHED_WORKER_NAME ${dev:--}"; '
    'exec 9>>"$0/lock-$SCHED_JOB_ID"; '
    'flock -n 9 || echo "overlap $me 0" >> "$0/ledger"; '
    'if [ -n "$dev" ]; then exec 8>>"$0/device-$SCHED_WORKER_NAME-$dev"; '
    '  flock -n 8 || echo "shared $me 0" >> "$0/ledger"; fi; '
    'echo "start $me $(date +%s.%N)" >> "$0/ledger"; '
    'setsid sleep 600 </dev/null >/dev/null 2>&1 8>&- 9>&- & '
    'echo "$!" >> "$0/grandchildren"; '
    'sleep {seconds}; '
    'echo "end $me $(date +%s.%N)" >> "$0/ledger"'
)

#: (resources, share of the jobs): plain slots, abstract GPUs found by NVML, named devices.
MIX = [("slot=1", 0.4), ("GPU=1", 0.3), ("gpu0=1", 0.15), ("gpu1=1", 0.15)]


class Ledger:
    def __init__(self, directory: Path):
        self.directory = directory
        directory.mkdir()
        (directory / "ledger").touch()
        (directory / "grandchildren").touch()

    def command(self, seconds: float) -> list[str]:
        return ["sh", "-c", SCRIPT.replace("{seconds}", f"{seconds:.2f}"), str(self.directory)]

    def lines(self) -> list[tuple[str, int, int, int, str, str, float]]:
        text = (self.directory / "ledger").read_text()
        out = []
        for line in text[: text.rfind("\n") + 1].splitlines():
            event, job, attempt, pid, worker, device, when = line.split(" ")
            out.append((event, int(job), int(attempt), int(pid), worker, device, float(when)))
        return out

    def pids(self) -> set[int]:
        jobs = {line[3] for line in self.lines()}
        grandchildren = {int(p) for p in (self.directory / "grandchildren").read_text().split()}
        return jobs | grandchildren

    def alive(self) -> list[int]:
        """The ledger's processes still running (a pid reused by another program is not)."""
        found = []
        for pid in self.pids():
            try:
                process = psutil.Process(pid)
                if process.status() != psutil.STATUS_ZOMBIE and (
                        str(self.directory) in process.cmdline()
                        or process.cmdline()[:2] == ["sleep", "600"]):
                    found.append(pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return found


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger(tmp_path / "jobs")
    yield ledger
    for pid in ledger.alive():  # a test that failed midway leaves nothing behind
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def resources_for(rng: random.Random) -> str:
    pick = rng.random()
    for resources, share in MIX:
        if pick < share:
            return resources
        pick -= share
    return MIX[0][0]


@pytest.mark.timeout(300)
def test_two_hundred_jobs_through_cancels_and_kills_keep_every_promise(ledger, daemons,
                                                                       tmp_path):
    rng = random.Random(SEED)
    state_dir = str(tmp_path / "state")
    address = daemons.scheduler("--state-dir", state_dir,
                                env={"SCHED_SCHEDULER__RECOVERY_TIMEOUT": "20"})
    port = int(address.rsplit(":", 1)[1])
    nanny = daemons.worker("--name", "a", "--nthreads", "3", "--resources", "slot=3",
                           env=WORKER_ENV)
    daemons.worker("--name", "g", "--no-nanny", "--nthreads", "2", env={**WORKER_ENV, **TWO_GPUS})
    daemons.worker("--name", "n", "--no-nanny", "--nthreads", "2", "--resources", "gpu0=1 gpu1=1",
                   env={**WORKER_ENV, **TWO_GPUS})
    client = daemons.client()
    daemons.wait_for_workers(client, 3)

    futures: list = []
    cancelled_at: dict[int, float] = {}  # job -> when its cancel was applied
    closed_cancels: list = []  # futures cancelled by a client that closed at once

    def submit_some(n: int) -> None:
        for _ in range(n):
            future = client.submit_command(ledger.command(rng.uniform(0.1, 0.5)),
                                           resources=resources_for(rng),
                                           requeue=rng.random() < 0.3)
            futures.append(future)

    def cancel_some(n: int) -> None:
        candidates = [f for f in futures if f.id is not None and f.id not in cancelled_at]
        for future in rng.sample(candidates, min(n, len(candidates))):
            client.cancel_jobs([future.id])
            cancelled_at[future.id] = time.time()

    def cancel_right_after_submit(n: int) -> None:
        other = daemons.client()
        for _ in range(n):
            future = other.submit_command(ledger.command(0.2), resources=resources_for(rng))
            future.cancel()
            closed_cancels.append(future)
        other.close()
        done = time.time()
        for future in closed_cancels[-n:]:
            if future.id is not None:
                cancelled_at[future.id] = done

    def ends() -> int:
        return sum(1 for line in ledger.lines() if line[0] == "end")

    def kill_worker_a() -> None:
        (worker,) = wait_until(lambda: psutil.Process(nanny.pid).children(), 30,
                               what="worker a's process")
        worker.kill()
        worker.wait(10)

    submit_some(60)
    cancel_right_after_submit(10)
    wait_until(lambda: ends() >= 10, 60, what="10 jobs ended")
    cancel_some(10)
    kill_worker_a()
    submit_some(60)
    cancel_right_after_submit(10)
    wait_until(lambda: ends() >= 40, 90, what="40 jobs ended")
    daemons.scheduler_process.kill()
    daemons.scheduler_process.wait()
    daemons.scheduler("--state-dir", state_dir, port=port,
                      env={"SCHED_SCHEDULER__RECOVERY_TIMEOUT": "20"})
    wait_until(lambda: client.status == "running", 60, what="the client to reconnect")
    cancel_some(10)
    submit_some(60)
    wait_until(lambda: ends() >= 70, 90, what="70 jobs ended")
    kill_worker_a()
    cancel_some(10)

    # Every job ends: the kept futures by their result, the cancelled-at-once ones by name.
    for future in futures:
        try:
            future.result(timeout=180)
        except Exception:  # cancelled: CancelledError
            pass
    found = client.jobs(limit=100_000)
    jobs = {view["id"]: view for view in found["jobs"]}
    assert found["total"] == len(jobs) >= 180
    assert all(view["state"] in ENDED_STATES for view in jobs.values()), found["counts"]

    lines = ledger.lines()
    starts: dict[int, list] = {}
    for line in lines:
        if line[0] == "start":
            starts.setdefault(line[1], []).append(line)
    assert [line for line in lines if line[0] == "overlap"] == [], "two attempts of a job ran"
    assert [line for line in lines if line[0] == "shared"] == [], "a device had two owners"
    late = {job: [s[6] - at for s in starts.get(job, ()) if s[6] > at]
            for job, at in cancelled_at.items()}
    assert {job: t for job, t in late.items() if t} == {}, "a cancelled job started later"
    for future in closed_cancels:  # cancelled before close() returned: never started
        assert future.id is None or jobs[future.id]["state"] == "cancelled"
        assert future.id is None or future.id not in starts
    twice = {job: len(runs) for job, runs in starts.items()
             if len(runs) > 1 and not jobs[job]["requeue"]}
    assert twice == {}, "jobs without requeue started more than once"
    wait_until(lambda: not ledger.alive(), 30, what="every job's processes to end")
    print(f"{len(jobs)} jobs, {sum(map(len, starts.values()))} starts, "
          f"{len(cancelled_at)} cancelled, counts {found['counts']}; seed {SEED}")

"""Shell-command jobs under crashes: the scheduler killed at each of its failpoints and at
random moments, worker processes killed with -9, a worker frozen (SIGSTOP) past its job lease,
and a worker that never comes back.

Every job writes its attempts to a ledger (``job_ledger.py``), and an attempt that starts while
another attempt of its job still runs says so there. After each run: every acknowledged
submission is exactly one job and the scheduler holds no other; no job without ``requeue`` was
started twice; no two attempts of a job overlapped; every job ended; no job's process is left;
the scheduler counts no resource in use.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import time

import psutil
import pytest

from deadline import wait_until
from dsched.jobstates import ENDED
from job_ledger import JobLedger

SEED = int(os.environ.get("DSCHED_TEST_SEED", random.randrange(2**32)))
ENDED_STATES = {state.value for state in ENDED}
#: Quick reconnection: the scheduler is back within a second or two after each kill.
WORKER_ENV = {"SCHED_WORKER__RECONNECT_BACKOFF_MAX": "0.5",
              "SCHED_WORKER__HEARTBEAT_INTERVAL": "0.5"}


@pytest.fixture
def ledger(tmp_path):
    """The jobs' ledger. Set up before the daemons, so that it is torn down after them: then
    whatever job of it still runs (a test failed midway) is killed with its process group."""
    ledger = JobLedger(tmp_path / "jobs")
    yield ledger
    for pid in ledger.live_pids():
        try:
            os.killpg(pid, signal.SIGKILL)  # each job leads a group of its own
        except ProcessLookupError:
            pass


def submit(client, ledger: JobLedger, n: int, rng: random.Random, requeue: float = 0.25,
           seconds: float = 0.2, **options) -> list:
    """``n`` ledger jobs, a share ``requeue`` of them (at random) with ``requeue``."""
    return [client.submit_command(ledger.command(seconds), requeue=rng.random() < requeue,
                                  **options) for _ in range(n)]


def all_jobs(client) -> dict[int, dict]:
    found = client.jobs(limit=100_000)
    assert found["total"] == len(found["jobs"])
    return {view["id"]: view for view in found["jobs"]}


def wait_killed(process, daemons, failpoint: str | None = None) -> None:
    """Wait until the scheduler ``process`` is dead (by ``failpoint``, when named)."""
    wait_until(lambda: process.poll() is not None, 90,
               what=f"the scheduler to reach {failpoint}" if failpoint else "the scheduler to die")
    if failpoint is not None:
        assert f"failpoint {failpoint}: killed" in daemons.scheduler_log()
        assert process.returncode == -signal.SIGKILL


def check_the_books(client, ledger: JobLedger, futures: list) -> dict:
    """The checks every test ends with; the jobs by id."""
    ids = [future.job_id(timeout=60) for future in futures]
    assert len(set(ids)) == len(ids), "two submissions were given one job"
    jobs = all_jobs(client)
    assert sorted(jobs) == sorted(ids), "the scheduler holds a job nobody was told of"
    assert all(view["state"] in ENDED_STATES for view in jobs.values())
    lines = ledger.lines()
    assert ledger.overlaps(lines) == [], "two attempts of a job ran at once"
    starts = ledger.starts(lines)
    twice = {job: [(s.attempt, s.worker) for s in runs] for job, runs in starts.items()
             if len(runs) > 1 and not jobs[job]["requeue"]}
    assert twice == {}, "jobs without requeue started more than once"
    wait_until(lambda: not ledger.live_pids(), 30, what="every job's process to end")
    info = wait_until(lambda: (info := client.scheduler_info()) and all(
        not any(w["used"].values()) and w["executing"] == 0 and not w["jobs"]
        for w in info["workers"].values()) and info, 30,
        what="the scheduler to count no resource in use")
    assert info["workers"]
    return jobs


@pytest.mark.timeout(240)
def test_the_scheduler_killed_at_every_failpoint_and_at_random_moments(ledger, daemons, tmp_path):
    rng = random.Random(SEED)
    state_dir = str(tmp_path / "state")
    scheduler_env = {"SCHED_SCHEDULER__RECOVERY_TIMEOUT": "20"}

    def start(failpoint: str | None = None, port: int = 0):
        env = {**scheduler_env, "SCHED_FAILPOINTS": failpoint or ""}
        address = daemons.scheduler("--state-dir", state_dir, env=env, port=port)
        return address, daemons.scheduler_process

    address, process = start()
    port = int(address.rsplit(":", 1)[1])
    for name in ("a", "b"):
        daemons.worker("--name", name, "--no-nanny", "--nthreads", "3", "--resources", "slot=3",
                       env=WORKER_ENV)
    client = daemons.client()
    daemons.wait_for_workers(client, 2)
    futures = submit(client, ledger, 100, rng, resources="slot=1")

    def ends() -> int:
        return sum(1 for line in ledger.lines() if line.event == "end")

    # A random moment first, while jobs run.
    target = ends() + rng.randrange(5, 20)
    wait_until(lambda: ends() >= target, 60, what=f"{target} jobs ended")
    process.kill()
    wait_killed(process, daemons)
    hits = []

    # Each failpoint in turn; the client resubmits what was not acknowledged on reconnecting.
    rounds = [("after-submit-commit", 1), ("before-dispatch-commit", rng.randrange(2, 10)),
              ("after-dispatch-commit", rng.randrange(2, 10)),
              ("after-result-commit", rng.randrange(2, 10)), ("in-reconciliation", 1)]
    for name, count in rounds:
        _, process = start(f"{name}:{count}", port)
        if name == "after-submit-commit":
            wait_until(lambda: client.status == "running", 30, what="the client to reconnect")
            futures += submit(client, ledger, 100, rng, resources="slot=1")
        wait_killed(process, daemons, name)
        hits.append(name)

    # One more at a random moment, then a run to the end.
    _, process = start(port=port)
    target = ends() + rng.randrange(5, 20)
    wait_until(lambda: ends() >= target, 60, what=f"{target} jobs ended")
    process.kill()
    wait_killed(process, daemons)
    start(port=port)

    results = [future.result(timeout=120) for future in futures]
    books = check_the_books(client, ledger, futures)
    # No worker was lost, so nothing was lost or run again, requeue or not: each job once.
    assert {r.state for r in results} == {"completed"}
    starts = ledger.starts()
    assert sorted(starts) == sorted(books)
    assert [job for job, runs in starts.items() if len(runs) > 1] == []
    print(f"failpoints hit: {', '.join(hits)}; 2 random kills; {len(books)} jobs, "
          f"{sum(map(len, starts.values()))} runs; seed {SEED}")


def on_worker(client, name: str) -> dict[int, int]:
    """The jobs the scheduler has on the worker ``name`` (assigned or running): their attempt."""
    return {view["id"]: view["attempt"] for view in all_jobs(client).values()
            if view["worker"] == name and view["state"] in ("assigned", "running")}


#: Of the 1 s ledger jobs of the kill -9 test: started this recently, a job has time enough
#: left for its supervisor to kill it (it learns of the kill at once: its stdin ends).
YOUNG = 0.6


def started_within(pid: int, seconds: float) -> bool:
    """Whether process ``pid`` started less than ``seconds`` ago. Both times are read from
    the kernel's clock since boot (``psutil``'s start time adds a boot time rounded to the
    second, and can be a second off the wall clock)."""
    try:
        with open(f"/proc/{pid}/stat") as stat, open("/proc/uptime") as uptime:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
            now = float(uptime.read().split()[0])
    except (OSError, IndexError, ValueError):
        return False
    return now - ticks / os.sysconf("SC_CLK_TCK") < seconds


def names(client) -> set[str]:
    return {w["name"] for w in client.scheduler_info()["workers"].values()}


@pytest.mark.timeout(180)
def test_worker_processes_killed_with_9_lose_only_the_jobs_they_ran(ledger, daemons, tmp_path):
    rng = random.Random(SEED)
    daemons.scheduler("--state-dir", str(tmp_path / "state"))
    nanny = daemons.worker("--name", "a", "--nthreads", "3", "--resources", "slot=3",
                           env=WORKER_ENV)
    daemons.worker("--name", "b", "--no-nanny", "--nthreads", "3", "--resources", "slot=3",
                   env=WORKER_ENV)
    client = daemons.client()
    daemons.wait_for_workers(client, 2)
    futures = submit(client, ledger, 36, rng, requeue=0.5, seconds=1.0, resources="slot=1")

    # The attempts running on a when it is killed that had at least YOUNG of their second
    # left: each must be killed (one nearer its end may end by itself before its supervisor
    # acts on the kill, and then rightly completes).
    must_die: set[int] = set()
    for _ in range(2):
        def three_running_on_a():
            (worker,) = psutil.Process(nanny.pid).children()
            running = ledger.live_pids(ledger.running(worker="a"))
            young = {pid for pid in running if started_within(pid, YOUNG)}
            return len(running) == 3 and len(young) >= 2 and (worker, young)

        target = len(ledger.lines()) + rng.randrange(4, 20)
        wait_until(lambda: len(ledger.lines()) >= target, 60, what=f"{target} ledger lines")
        worker, young = wait_until(three_running_on_a, 60,
                                   what="three jobs running on a, two of them just started")
        worker.kill()
        must_die |= young
        worker.wait(10)
        # Its supervisors kill their jobs at once; the nanny starts the worker again, which
        # reports them lost.
        wait_until(lambda: not ledger.live_pids(ledger.running(worker="a")), 30,
                   what="the jobs of the killed process to die")
        lines = ledger.lines()
        gone = {(line.job, line.attempt) for line in lines
                if line.pid in ledger.running(lines, worker="a")}
        wait_until(lambda: "a" in names(client) and not gone & set(on_worker(client, "a").items()),
                   60, what="a back, having reported its lost jobs")

    results = {r.job: r for r in (future.result(timeout=120) for future in futures)}
    jobs = check_the_books(client, ledger, futures)
    lines = ledger.lines()
    # The attempts that never wrote their end are those of the killed processes.
    unended = ledger.running(lines)
    killed = [line for line in lines if line.event == "start" and line.pid in unended]
    assert {line.worker for line in killed} == {"a"}
    assert must_die <= unended, "a job of the killed worker process ran on to its end"
    runs = collections.Counter(line.job for line in killed)
    starts = ledger.starts(lines)
    for job, view in jobs.items():
        if job not in runs:
            assert results[job].state == "completed", view
        elif view["requeue"]:  # ran again, after the killed attempts
            assert results[job].state == "completed", view
            assert len(starts[job]) == runs[job] + 1, starts[job]
        else:
            assert (view["state"], view["reason"]) == ("lost", "worker_lost"), view
            assert "its worker process ended while it ran" in view["detail"], view
    print(f"2 kill -9 of worker a; {len(jobs)} jobs, {sum(map(len, starts.values()))} runs; "
          f"killed running: {sorted(runs)}; lost: "
          f"{sorted(j for j, v in jobs.items() if v['state'] == 'lost')}; seed {SEED}")


#: A short job lease, a scheduler quick to notice a silent worker, and a margin past the lease.
LEASE, MARGIN = 2.0, 1.0
LEASE_SCHEDULER_ENV = {"SCHED_SCHEDULER__HEARTBEAT_TIMEOUT": "1",
                       "SCHED_SCHEDULER__LEASE_MARGIN": str(MARGIN),
                       "SCHED_SCHEDULER__TICK_INTERVAL": "0.1"}
LEASE_WORKER_ENV = {**WORKER_ENV, "SCHED_WORKER__JOB_LEASE": str(LEASE),
                    "SCHED_WORKER__HEARTBEAT_INTERVAL": "0.2",
                    "SCHED_WORKER__JOB_KILL_GRACE": "1"}


@pytest.mark.timeout(120)
def test_a_worker_stopped_past_its_lease_starts_nothing_when_continued(ledger, daemons, tmp_path):
    rng = random.Random(SEED)
    daemons.scheduler("--state-dir", str(tmp_path / "state"), env=LEASE_SCHEDULER_ENV)
    # Jobs that ask for no resource, on two threads each (jobs are never sent ahead to a busy
    # worker, so each attempt on a runs, or is about to start when a is stopped).
    a = daemons.worker("--name", "a", "--no-nanny", "--nthreads", "2", env=LEASE_WORKER_ENV)
    daemons.worker("--name", "b", "--no-nanny", "--nthreads", "2", env=LEASE_WORKER_ENV)
    client = daemons.client()
    daemons.wait_for_workers(client, 2)
    # Jobs that outlive the lease, so that a's are killed by it while it is stopped.
    futures = submit(client, ledger, 16, rng, requeue=0.5, seconds=LEASE + 1.0)

    wait_until(lambda: len(ledger.live_pids(ledger.running(worker="a"))) == 2
               and len(on_worker(client, "a")) == 2, 60, what="a running two jobs")
    stopped_at = time.monotonic()
    a.send_signal(signal.SIGSTOP)
    try:
        seen = len(ledger.lines())
        wait_until(lambda: "a" not in names(client), 30, what="a removed")
        stale = set(on_worker(client, "a").items())  # its attempts, now in limbo
        wait_until(lambda: not stale & set(on_worker(client, "a").items()), 30,
                   what="a's attempts given up")
        given_up = time.monotonic() - stopped_at
        # Its jobs' supervisors (not stopped) killed them when the lease ran out, before that.
        wait_until(lambda: not ledger.live_pids(ledger.running(worker="a")), 10,
                   what="a's jobs killed at its lease")
    finally:
        a.send_signal(signal.SIGCONT)
    wait_until(lambda: "a" in names(client), 30, what="a back")

    results = {r.job: r for r in (future.result(timeout=90) for future in futures)}
    jobs = check_the_books(client, ledger, futures)
    assert given_up >= LEASE + MARGIN
    late = [line for line in ledger.lines()[seen:] if line.event == "start"
            and line.worker == "a" and (line.job, line.attempt) in stale]
    assert late == [], "a started attempts after its lease had run out"
    for job, attempt in stale:
        view = jobs[job]
        if view["requeue"]:
            assert results[job].state == "completed" and view["attempt"] > attempt, view
        else:
            assert (view["state"], view["reason"]) == ("lost", "worker_lost"), view
    starts = ledger.starts()
    print(f"a stopped {given_up:.1f} s until the scheduler gave up its {len(stale)} attempts "
          f"(lease {LEASE:g} s, margin {MARGIN:g} s); {len(jobs)} jobs, "
          f"{sum(map(len, starts.values()))} runs; lost: "
          f"{sorted(j for j, v in jobs.items() if v['state'] == 'lost')}; seed {SEED}")


@pytest.mark.timeout(120)
def test_jobs_of_a_worker_that_never_returns_end_lost_after_its_lease(ledger, daemons, tmp_path):
    rng = random.Random(SEED)
    recovery, lease = 2.0, 4.0
    state_dir = str(tmp_path / "state")
    env = {"SCHED_SCHEDULER__RECOVERY_TIMEOUT": str(recovery),
           "SCHED_SCHEDULER__LEASE_MARGIN": str(MARGIN), "SCHED_SCHEDULER__TICK_INTERVAL": "0.1"}
    address = daemons.scheduler("--state-dir", state_dir, env=env)
    port = int(address.rsplit(":", 1)[1])
    worker_env = {**LEASE_WORKER_ENV, "SCHED_WORKER__JOB_LEASE": str(lease)}
    a = daemons.worker("--name", "a", "--no-nanny", "--nthreads", "3", "--resources", "slot=3",
                       env=worker_env)
    daemons.worker("--name", "b", "--no-nanny", "--nthreads", "3", "--resources", "slot=3",
                   env=worker_env)
    client = daemons.client()
    daemons.wait_for_workers(client, 2)
    futures = submit(client, ledger, 24, rng, requeue=0.5, seconds=1.0, resources="slot=1")

    wait_until(lambda: len(ledger.live_pids(ledger.running(worker="a"))) == 3, 60,
               what="three jobs running on a")
    daemons.scheduler_process.kill()
    a.kill()  # its supervisors kill its jobs; nobody tells the scheduler
    daemons.scheduler_process.wait()
    a.wait()
    restarted = time.monotonic()
    daemons.scheduler("--state-dir", state_dir, env=env, port=port)

    stale = wait_until(lambda: client.status == "running" and on_worker(client, "a"), 30,
                       what="the jobs the journal has on a")
    wait_until(lambda: not client.jobs()["recovering"], 30, what="the recovery to end")
    resumed = time.monotonic() - restarted
    wait_until(lambda: not set(stale.items()) & set(on_worker(client, "a").items()), 30,
               what="a's jobs given up")
    given_up = time.monotonic() - restarted
    assert given_up >= lease + MARGIN and resumed >= recovery

    results = {r.job: r for r in (future.result(timeout=90) for future in futures)}
    jobs = check_the_books(client, ledger, futures)
    for job, attempt in stale.items():
        view = jobs[job]
        if view["requeue"]:
            assert results[job].state == "completed" and view["worker"] == "b", view
        else:
            assert (view["state"], view["reason"]) == ("lost", "worker_lost"), view
            assert "did not return within its job lease" in view["detail"], view
    assert {r.state for job, r in results.items() if job not in stale} == {"completed"}
    print(f"a killed with the scheduler: recovery over after {resumed:.1f} s (timeout "
          f"{recovery:g} s), its {len(stale)} jobs given up after {given_up:.1f} s (lease "
          f"{lease:g} s, margin {MARGIN:g} s); {len(jobs)} jobs; lost: "
          f"{sorted(j for j, v in jobs.items() if v['state'] == 'lost')}; seed {SEED}")

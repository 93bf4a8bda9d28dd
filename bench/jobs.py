"""Job queue benchmark: prints one JSON line.

1. ``submit_command`` against a real scheduler daemon (journal in a fresh state directory,
   WAL with synchronous=FULL): 1,000 submissions made at once from an asynchronous client and
   waited for until each is acknowledged (its row committed), then 1,000 one after another
   from a blocking client, each waited for before the next. Targets: 1,000 in under 2 s.
2. The reload of a journal of 100,000 jobs (mostly ended, some queued and held): reading the
   rows and rebuilding the job book, in this process; then a scheduler daemon's start on that
   journal, until it listens. Target: under 5 s.

    python bench/jobs.py [--jobs 1000] [--journal 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

from dsched import AsyncClient, Client
from dsched.auth import generate_token
from dsched.jobs import JobSpec, JobState
from dsched.resources import Resources
from dsched.scheduler import events as ev
from dsched.scheduler.job import Job
from dsched.scheduler.journal import FILENAME, Journal
from dsched.scheduler.state import SchedulerState


def start_scheduler(state_dir: str, token: str) -> tuple[subprocess.Popen, str, float]:
    """A scheduler daemon on this state directory; its address and seconds until it listens."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "dsched.cli.scheduler", "--host", "127.0.0.1", "--port", "0",
         "--state-dir", state_dir, "--log-level", "warning", "--no-dashboard"],
        env={**os.environ, "SCHED_TOKEN": token}, stdout=subprocess.PIPE, text=True)
    for line in process.stdout:
        match = re.search(r"listening at (\S+)", line)
        if match:
            return process, match.group(1), time.perf_counter() - started
    raise SystemExit("the scheduler did not start")


def stop(process: subprocess.Popen) -> None:
    process.kill()
    process.wait()


async def submit_at_once(address: str, token: str, n: int) -> float:
    async with AsyncClient(address, token=token) as client:
        started = time.perf_counter()
        futures = [client.submit_command(["true"], resources="GPU=1", name=f"bench-{i}")
                   for i in range(n)]
        await asyncio.gather(*(future.job_id() for future in futures))
        return time.perf_counter() - started


def submit_one_by_one(address: str, token: str, n: int) -> float:
    with Client(address, token=token, set_as_default=False) as client:
        started = time.perf_counter()
        for i in range(n):
            client.submit_command(["true"], hold=True).job_id()
        return time.perf_counter() - started


def write_journal(path: str, n: int) -> None:
    """``n`` jobs as a busy queue leaves them: most ended, the newest queued or held."""
    journal = Journal(path)
    states = [JobState.completed] * 8 + [JobState.failed, JobState.cancelled]
    rows = []
    for i in range(1, n + 1):
        spec = JobSpec(submission=f"s{i}", command=("python", "train.py", "--seed", str(i)),
                       resources=Resources.parse("GPU=1"), name=f"run-{i}")
        job = Job(i, spec, 1.7e9 + i)
        if i > n - 200:
            job.state = JobState.held if i % 2 else JobState.queued
        else:
            job.state = states[i % len(states)]
            job.attempt, job.started, job.worker = 1, True, f"w{i % 16}"
            job.start_time, job.end_time, job.exit_code = 1.7e9 + i, 1.7e9 + i + 60, 0
        rows.append(job.to_row())
        if len(rows) == 10_000:
            journal.write(rows)
            rows = []
    journal.write(rows)
    journal.close()


def reload_in_process(path: str) -> tuple[float, int]:
    """As the daemon does it (``Scheduler.load_jobs``): the collector off meanwhile."""
    started = time.perf_counter()
    gc.disable()
    journal = Journal(path)
    rows = journal.load()
    state = SchedulerState()
    state.handle(ev.JobsLoaded(rows=tuple(rows), now=0.0))
    journal.close()
    gc.enable()
    return time.perf_counter() - started, len(state.jobs.jobs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--journal", type=int, default=100_000)
    args = parser.parse_args()
    token = generate_token()
    result: dict = {"bench": "jobs", "python": platform.python_version(), "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="bench-jobs-") as tmp:
        process, address, _ = start_scheduler(os.path.join(tmp, "a"), token)
        try:
            at_once = asyncio.run(submit_at_once(address, token, args.jobs))
            one_by_one = submit_one_by_one(address, token, args.jobs)
        finally:
            stop(process)
        result.update(submits=args.jobs, submit_at_once_s=round(at_once, 3),
                      submit_at_once_per_s=round(args.jobs / at_once),
                      submit_one_by_one_s=round(one_by_one, 3),
                      submit_one_by_one_per_s=round(args.jobs / one_by_one))
        state_dir = os.path.join(tmp, "b")
        os.makedirs(state_dir)
        path = os.path.join(state_dir, FILENAME)
        write_journal(path, args.journal)
        reload_s, loaded = reload_in_process(path)
        process, _, start_s = start_scheduler(state_dir, token)
        stop(process)
        result.update(journal_jobs=loaded, journal_mb=round(os.path.getsize(path) / 1e6, 1),
                      reload_s=round(reload_s, 3), daemon_start_with_journal_s=round(start_s, 3))
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""Job queue benchmark: prints one JSON line.

1. ``submit_command`` against a real scheduler daemon (journal in a fresh state directory,
   WAL with synchronous=FULL): 1,000 submissions made at once from an asynchronous client and
   waited for until each is acknowledged (its row committed), then 1,000 one after another
   from a blocking client, each waited for before the next. Targets: 1,000 in under 2 s.
2. The reload of a journal of 100,000 jobs (mostly ended, some queued and held): reading the
   rows and rebuilding the job book, in this process; then a scheduler daemon's start on that
   journal, until it listens. Target: under 5 s.
3. Jobs at the speed of the machine, through a scheduler and one worker (``--no-nanny``), both
   daemons on 127.0.0.1: ``true_jobs_per_s``, 2,000 jobs of ``true`` on 4 slots, from the
   first submission to the last end; ``slot_handoff_ms``, 200 jobs of ``sleep 0.05`` on one
   slot: each job's start minus the previous one's end, from the job views' ``started`` and
   ``ended`` (the worker's wall clock: ``ended`` stamped by the supervisor once the command
   and all it started are gone, ``started`` once the next command is spawned), median and
   p99; ``gpu_handoff_ms``, the same on a worker offering ``gpu0=1`` to jobs asking
   ``gpu0=1``; ``true_cpu_ms_per_job``, the CPU time a job of ``true`` cost the scheduler, the
   worker, and the spawner with the supervisors it forked (their guards and commands
   included). Each figure is ``{"value": ..., "target": ..., "met": ...}``.
   Before them, ``file_create_us``: what making an empty file costs on this file system now
   (about 20 µs when rested; hundreds in the minutes after thousands of files were deleted,
   when every job's log costs as much: the job figures are then low, and a line on stderr
   says so).
4. Where Debian's task-spooler (``tsp``) is on PATH: the same shapes through it, on a private
   socket, and dsched's figure over its (``vs_tsp``). Its times are whole seconds, so the
   handoff of both is also given as the mean gap, ``(wall time - the jobs' run times) / n``.

5. ``sched submit`` from a shell loop, per call, and ``sched status`` with 2,000 jobs queued
   (``bench/cli_timing.py``); an array of 10,000 submitted from the shell, and 1,000,000 queued
   elements: submit, scheduler memory per element, ``sched status``, restart
   (``bench/job_arrays.py``).

    python bench/jobs.py [--jobs 1000] [--journal 100000] [--true-jobs 2000] [--handoffs 200]
                         [--elements 1000000] [--cli-calls 50]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cli_timing import cli_timings  # noqa: E402
from daemon import start_scheduler, stop  # noqa: E402
from job_arrays import array_figures  # noqa: E402
from dsched import AsyncClient, Client  # noqa: E402
from dsched.auth import generate_token  # noqa: E402
from dsched.jobs import JobSpec  # noqa: E402
from dsched.jobstates import JobState  # noqa: E402
from dsched.resources import Resources  # noqa: E402
from dsched.scheduler import events as ev  # noqa: E402
from dsched.scheduler.job import Job  # noqa: E402
from dsched.scheduler.journal import FILENAME, Journal  # noqa: E402
from dsched.scheduler.state import SchedulerState  # noqa: E402


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


def figure(value: float, target: str) -> dict:
    """A figure beside its target (``">= 500"``, ``"<= 5"``) and whether it meets it."""
    sign, bound = target.split()
    met = value >= float(bound) if sign == ">=" else value <= float(bound)
    return {"value": value, "target": target, "met": met}


def start_worker(address: str, token: str, directory: str, nthreads: int,
                 resources: str | None = None) -> subprocess.Popen:
    """One worker process (no nanny) with its job directory under ``directory``."""
    return subprocess.Popen(
        [sys.executable, "-m", "dsched.cli.worker", address, "--no-nanny", "--host", "127.0.0.1",
         "--port", "0", "--nthreads", str(nthreads), "--gpus", "none", "--name", "bench",
         "--local-directory", directory, "--log-level", "warning",
         *(["--resources", resources] if resources else [])],
        env={**os.environ, "SCHED_TOKEN": token}, stdout=subprocess.DEVNULL)


def cpu_seconds(pid: int) -> tuple[float, float]:
    """A process's CPU seconds (user and system), and those of its children it has reaped
    (none where it is gone: its parent has them)."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def job_cpu(scheduler: int, worker: int) -> tuple[float, float, float]:
    """CPU seconds so far of the scheduler, the worker, and the worker's spawner with its
    supervisors, reaped or still there (each with the guards and commands it reaped)."""
    parents = {int(entry): _parent(int(entry)) for entry in os.listdir("/proc")
               if entry.isdigit()}
    spawners = [pid for pid, parent in parents.items() if parent == worker]
    supervisors = [pid for pid, parent in parents.items() if parent in spawners]
    return (cpu_seconds(scheduler)[0], cpu_seconds(worker)[0],
            sum(sum(cpu_seconds(pid)) for pid in spawners + supervisors))


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as file:
            return int(file.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return 0


async def run_jobs(address: str, token: str, command: list[str], n: int,
                   resources: str | None, pids: tuple[int, int]) -> tuple[float, list, dict]:
    """``n`` jobs of ``command`` submitted at once, after one to warm up; the seconds from the
    first submission to the last end, the results, and the CPU milliseconds a job of the
    scheduler, the worker, and the spawner with its supervisors (Linux)."""
    async with AsyncClient(address, token=token) as client:
        await client.wait_for_workers(1, 60)
        await client.submit_command(command, resources=resources).result(60)
        before = job_cpu(*pids)
        started = time.perf_counter()
        futures = [client.submit_command(command, resources=resources) for _ in range(n)]
        results = await asyncio.gather(*(future.result(600) for future in futures))
        wall = time.perf_counter() - started
        after = job_cpu(*pids)
        cpu = {name: round((b - a) * 1000 / n, 1) for name, a, b in
               zip(("scheduler", "worker", "spawner_and_supervisors"), before, after)}
        return wall, results, cpu


def with_cluster(tmp: str, token: str, nthreads: int, resources: str | None, command: list[str],
                 n: int) -> tuple[float, list, dict]:
    """A fresh scheduler and worker, ``n`` jobs through them, both stopped after."""
    os.makedirs(tmp)
    scheduler, address, _ = start_scheduler(os.path.join(tmp, "state"), token)
    worker = start_worker(address, token, os.path.join(tmp, "worker"), nthreads, resources)
    try:
        return asyncio.run(run_jobs(address, token, command, n, resources,
                                    (scheduler.pid, worker.pid)))
    finally:
        for process in (worker, scheduler):  # the worker first: it leaves without reconnecting
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                stop(process)


def file_create_us(directory: str, n: int = 200) -> int:
    """The median microseconds this file system takes to make an empty file in a new
    directory under ``directory`` (the files stay until the run's clean-up): above 100, it is
    still busy with files deleted minutes ago (README), and every job's log costs as much."""
    os.makedirs(os.path.join(directory, "probe"))
    times = []
    for i in range(n):
        started = time.perf_counter()
        os.close(os.open(os.path.join(directory, "probe", str(i)), os.O_WRONLY | os.O_CREAT |
                         os.O_EXCL, 0o600))
        times.append((time.perf_counter() - started) * 1e6)
    return round(statistics.median(times))


def handoffs(results: list) -> list[float]:
    """Milliseconds from each job's end to the next one's start, in the order they ran."""
    ran = sorted(results, key=lambda r: r.started)
    return sorted((b.started - a.ended) * 1000 for a, b in zip(ran, ran[1:]))


def handoff_figures(tmp: str, token: str, n: int, resources: str | None) -> dict:
    wall, results, _ = with_cluster(tmp, token, 1, resources, ["sleep", "0.05"], n)
    gaps = handoffs(results)
    ran = sum(r.ended - r.started for r in results)
    return {"median": figure(round(statistics.median(gaps), 2), "<= 5"),
            "p99": figure(round(gaps[max(0, round(0.99 * len(gaps)) - 1)], 2), "<= 25"),
            "mean_gap_ms": round((wall - ran) * 1000 / n, 2)}


def dsched_job_figures(tmp: str, token: str, true_jobs: int, n_handoffs: int) -> dict:
    wall, results, cpu = with_cluster(os.path.join(tmp, "true"), token, 4, None, ["true"],
                                      true_jobs)
    assert all(r.ok for r in results), "a job of true did not complete"
    return {"true_jobs": true_jobs,
            "true_jobs_per_s": figure(round(true_jobs / wall), ">= 500"),
            "true_cpu_ms_per_job": cpu,
            "slot_handoff_ms": handoff_figures(os.path.join(tmp, "slot"), token, n_handoffs,
                                               None),
            "gpu_handoff_ms": handoff_figures(os.path.join(tmp, "gpu"), token, n_handoffs,
                                              "gpu0=1")}


def tsp_figures(tmp: str, true_jobs: int, n_handoffs: int) -> dict | None:
    """The same shapes through task-spooler, on a socket of its own; None without it."""
    tsp = shutil.which("tsp") or shutil.which("ts")
    if tsp is None:
        return None
    env = {**os.environ, "TS_SOCKET": os.path.join(tmp, "tsp.socket"), "TS_MAXFINISHED": "100000",
           "TMPDIR": tmp}

    def call(*args: str) -> str:
        return subprocess.run([tsp, *args], env=env, check=True, capture_output=True,
                              text=True).stdout.strip()

    def run(slots: int, command: list[str], n: int) -> tuple[float, list[str]]:
        call("-K") if os.path.exists(env["TS_SOCKET"]) else None
        call("-S", str(slots))
        started = time.perf_counter()
        ids = [call(*command) for _ in range(n)]
        # A job that needs every slot starts once all before it have ended.
        call("-w", call("-N", str(slots), "true"))
        return time.perf_counter() - started, ids

    try:
        wall, _ = run(4, ["true"], true_jobs)
        per_s = true_jobs / wall
        wall, ids = run(1, ["sleep", "0.05"], n_handoffs)
        ran = sum(float(re.search(r"Time run: ([0-9.]+)s", call("-i", i)).group(1)) for i in ids)
        return {"true_jobs_per_s": round(per_s), "mean_gap_ms": round((wall - ran) * 1000 /
                                                                      n_handoffs, 2)}
    finally:
        subprocess.run([tsp, "-K"], env=env, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--journal", type=int, default=100_000)
    parser.add_argument("--true-jobs", type=int, default=2000)
    parser.add_argument("--handoffs", type=int, default=200)
    parser.add_argument("--elements", type=int, default=1_000_000,
                        help="queued array elements (bench/job_arrays.py)")
    parser.add_argument("--cli-calls", type=int, default=50,
                        help="sched submit calls from a shell loop (bench/cli_timing.py)")
    args = parser.parse_args()
    token = generate_token()
    result: dict = {"bench": "jobs", "python": platform.python_version(), "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="bench-jobs-") as tmp:
        process, address, _ = start_scheduler(os.path.join(tmp, "a"), token)
        try:
            at_once = asyncio.run(submit_at_once(address, token, args.jobs))
            one_by_one = submit_one_by_one(address, token, args.jobs)
            cli = cli_timings(address, token, args.cli_calls)
        finally:
            stop(process)
        result["sched_submit_ms_per_call"] = figure(cli["sched_submit_ms_per_call"], "<= 50")
        result["sched_submit_config_file_ms_per_call"] = figure(
            cli["sched_submit_config_file_ms_per_call"], "<= 50")
        result["sched_status_2000_ms"] = figure(cli["sched_status_2000_ms"], "<= 150")
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
        result["submit_at_once_s"] = figure(result["submit_at_once_s"], "<= 0.1")
        # What is written so far goes to the disk first: the journal just written (tens of
        # MB), and the inode tables of files deleted minutes ago (an earlier run's clean-up):
        # ext4 without a journal looks past an inode freed in the last 60 s each time it
        # makes a file, in the last 360 s while its inode table block is unwritten (README).
        os.sync()
        result["file_create_us"] = file_create_us(tmp)
        if result["file_create_us"] > 100:
            print(f"bench/jobs.py: making a file takes {result['file_create_us']} microseconds "
                  "here (about 20 on a rested file system): files deleted in the last minutes "
                  "slow every job's log; the job figures will be low (README)", file=sys.stderr)
        jobs = dsched_job_figures(os.path.join(tmp, "c"), token, args.true_jobs, args.handoffs)
        result.update(jobs)
        os.sync()
        spooler = tsp_figures(tmp, args.true_jobs, args.handoffs)
        if spooler is not None:
            result["tsp"] = spooler
            result["vs_tsp"] = {
                "true_jobs_per_s": round(jobs["true_jobs_per_s"]["value"] /
                                         spooler["true_jobs_per_s"], 2),
                "mean_gap_ms": round(jobs["slot_handoff_ms"]["mean_gap_ms"] /
                                     spooler["mean_gap_ms"], 2)}
    for name, value in array_figures(args.elements).items():  # each beside its target
        result[name] = (figure(value["value"], value["target"]) if isinstance(value, dict)
                        else value)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

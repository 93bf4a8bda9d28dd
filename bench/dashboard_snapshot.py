"""What one look at the dashboard costs the scheduler at scale, printed as one JSON line.

A SchedulerState with 1,000 workers (CPU-only, 4-GPU and 8-GPU machines, each with a
heartbeat reporting its GPUs), 100,000 tasks of mixed shapes, most queued, some unrunnable,
and 100,000 jobs loaded as from a journal (most ended, the newest queued in several shapes or
held); then the median milliseconds of: building a snapshot (every section's part, from the
pure views), each section's part alone, rendering the page's panels from it, making the metrics
text (on a thread of its own, not the scheduler's loop), one page of the workers API, one
page of the jobs API filtered by state, and one job's whole record. A dashboard does the
first at most once a second, the panels and metrics at most once per snapshot, whatever the
number of viewers; a filtered list once per snapshot and filter, a job's record once per
snapshot and job.

    .venv/bin/python bench/dashboard_snapshot.py [--workers N] [--tasks N] [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from types import SimpleNamespace

from dsched.jobs import JobSpec
from dsched.jobstates import JobState
from dsched.resources import Resources
from dsched.scheduler import SchedulerState, events as ev
from dsched.scheduler.http import Dashboard, jobs
from dsched.scheduler.job import Job
from dsched.scheduler.http.snapshot import Snapshots
from dsched.settings import SchedulerConfig

SHAPES = ("", "GPU=1", "GPU=2", "MEMORY=8e9", "GPU=1 MEMORY=16e9", "TPU=1")


def cluster(workers: int, tasks: int) -> SchedulerState:
    state = SchedulerState()
    for i in range(workers):
        gpus = (0, 4, 8)[i % 3]
        resources = f"MEMORY=256e9{f' GPU={gpus}' if gpus else ''}"
        devices = tuple({"index": g, "name": "GPU", "uuid": f"GPU-{i}-{g}",
                         "memory_total": 80 * 2**30} for g in range(gpus))
        address = f"tcp://10.0.{i // 250}.{i % 250}:9000"
        state.handle(ev.WorkerJoined(address=address, name=f"w{i}", nthreads=16,
                                     resources=Resources.parse(resources), gpus=devices, now=0))
        state.handle(ev.WorkerHeartbeat(address=address, now=0, metrics={
            "cpu": 50, "memory": 2**30, "memory_limit": 2**36, "executing": 16,
            "gpus": [{"index": g, "utilization": 50, "memory_used": 2**34,
                      "memory_total": 80 * 2**30} for g in range(gpus)]}))
    specs = tuple(ev.TaskSpec(key=f"t-{i}", resources=Resources.parse(SHAPES[i % len(SHAPES)]))
                  for i in range(tasks))
    state.handle(ev.TasksSubmitted(client="c", tasks=specs, now=0))
    return state


def load_jobs(state: SchedulerState, n: int) -> None:
    """``n`` jobs as a busy queue leaves them: most ended, the newest tenth queued (some for
    what no worker has) or held."""
    ended = [JobState.completed] * 8 + [JobState.failed, JobState.cancelled]
    shapes = {shape: Resources.parse(shape) for shape in SHAPES}
    rows = []
    for i in range(1, n + 1):
        shape = SHAPES[i % len(SHAPES)]
        job = Job(i, JobSpec(submission=f"s{i}", command=("python", "train.py", str(i)),
                             resources=shapes[shape], name=f"run-{i % 100}"), 1.7e9 + i)
        if i > n - n // 10:
            job.state = JobState.held if i % 7 == 0 else JobState.queued
        else:
            job.state = ended[i % len(ended)]
            job.attempt, job.started, job.worker = 1, True, f"w{i % 1000}"
            job.start_time, job.end_time, job.exit_code = 1.7e9 + i, 1.7e9 + i + 60, 0
        rows.append(job.to_row())
    state.handle(ev.JobsLoaded(rows=tuple(rows), now=0))


def median_ms(f, repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1e3, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args()
    state = cluster(args.workers, args.tasks)
    load_jobs(state, args.jobs)
    shell = SimpleNamespace(state=state, address="10.0.0.1:8786", ready=True, not_ready={},
                            draining=False, clients={"c": None}, observe=None)
    dashboard = Dashboard(shell, SchedulerConfig(), token="bench")
    fresh = Snapshots(dashboard._build, clock=time.monotonic, max_age=0)
    build_ms = median_ms(fresh.current)
    dashboard.snapshots = Snapshots(dashboard._build, clock=time.monotonic, max_age=1e9)
    snapshot = dashboard.snapshots.current()

    def panels():
        snapshot.memo.clear()
        dashboard.render_panels(snapshot, {})

    def metrics():
        return dashboard.metrics_text(snapshot)

    def workers_page():
        json.dumps({"items": snapshot.parts["workers"]["items"][:100]})

    def jobs_page():
        rows = jobs.select(snapshot.parts["jobs"], {"state": ["queued"]})
        json.dumps({"items": jobs.items(rows[:100]), "total": len(rows)})

    newest_queued = next((row[0] for row in snapshot.parts["jobs"]["rows"]
                          if row[2] == "queued"), None)

    def job_record():
        snapshot.memo.pop("job records", None)
        jobs.record(shell, snapshot, newest_queued)

    print(json.dumps({
        "workers": args.workers, "tasks": args.tasks, "jobs": args.jobs,
        "snapshot_ms": build_ms,
        "parts_ms": {section.name: median_ms(lambda: section.build(shell,
                                                                    dashboard.observations))
                     for section in dashboard.sections},
        "panels_ms": median_ms(panels),
        "metrics_ms": median_ms(metrics),
        "workers_api_page_ms": median_ms(workers_page),
        "jobs_api_page_ms": median_ms(jobs_page),
        "job_record_ms": median_ms(job_record) if newest_queued is not None else None,
        "metrics_bytes": len(metrics()),
    }))


if __name__ == "__main__":
    main()

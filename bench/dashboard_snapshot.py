"""What one look at the dashboard costs the scheduler at scale, printed as one JSON line.

A SchedulerState with 1,000 workers (CPU-only, 4-GPU and 8-GPU machines, each with a
heartbeat reporting its GPUs) and 100,000 tasks of mixed shapes, most queued, some
unrunnable; then the median milliseconds of: building a snapshot (every section's part, from
the pure views), rendering the page's panels from it, making the metrics text (on a thread of
its own, not the scheduler's loop), and one page of the workers API. A dashboard does the
first at most once a second, the next two at most once per snapshot, whatever the number of
viewers.

    .venv/bin/python bench/dashboard_snapshot.py [--workers N] [--tasks N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from types import SimpleNamespace

from dsched.resources import Resources
from dsched.scheduler import SchedulerState, events as ev
from dsched.scheduler.http import Dashboard
from dsched.scheduler.http.snapshot import Snapshots
from dsched.settings import SchedulerConfig

SHAPES = ("", "GPU=1", "GPU=2", "MEMORY=8e9", "GPU=1 MEMORY=16e9", "TPU=1")


def cluster(workers: int, tasks: int) -> SchedulerState:
    state = SchedulerState(prefetch=2)
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
    args = parser.parse_args()
    state = cluster(args.workers, args.tasks)
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

    print(json.dumps({
        "workers": args.workers, "tasks": args.tasks,
        "snapshot_ms": build_ms,
        "panels_ms": median_ms(panels),
        "metrics_ms": median_ms(metrics),
        "workers_api_page_ms": median_ms(workers_page),
        "metrics_bytes": len(metrics()),
    }))


if __name__ == "__main__":
    main()

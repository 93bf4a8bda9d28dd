"""Scheduler throughput at scale: placement decisions per second and memory per queued task.

1,000 simulated workers (CPU-only, 4-GPU and 8-GPU machines) and 100,000 queued tasks of
mixed shapes (none, GPU=1, GPU=2, GPU=4, MEMORY, GPU+MEMORY) run to completion in the
discrete-event simulator. ``decisions_per_second`` counts the time of the placement pass
(finding workers, EASY reservations, queue and index updates, Execute actions);
``decisions_per_handle_second`` counts all of ``SchedulerState.handle`` (also submitting
100,000 tasks and the bookkeeping of every completion). The simulator's own time counts in
neither. Memory per queued task is measured apart with tracemalloc. Prints one JSON line.

    .venv/bin/python bench/sim_scale.py [--tasks N] [--workers N] [--seed S] [--prefetch N]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import tracemalloc

from dsched.resources import Resources
from dsched.policy import SchedulerPolicy
from dsched.scheduler import SchedulerState, events as ev
from dsched.sim import SimTask, SimWorker, Simulation

SHAPES = [  # (weight, prefix, resources, mean duration in seconds)
    (40, "prep", None, 2.0),
    (25, "train", "GPU=1", 8.0),
    (10, "train2", "GPU=2", 10.0),
    (5, "train4", "GPU=4", 12.0),
    (10, "load", "MEMORY=8e9", 3.0),
    (10, "infer", "GPU=1 MEMORY=16e9", 4.0),
]


def make_workers(n: int) -> list[SimWorker]:
    workers = []
    for i in range(n):
        kind = i % 10
        if kind < 6:
            workers.append(SimWorker(f"cpu{i}", nthreads=8, resources="MEMORY=64e9"))
        elif kind < 9:
            workers.append(SimWorker(f"gpu{i}", nthreads=8, resources="GPU=4 MEMORY=256e9"))
        else:
            workers.append(SimWorker(f"big{i}", nthreads=16, resources="GPU=8 MEMORY=512e9"))
    return workers


def make_tasks(n: int, seed: int) -> list[SimTask]:
    rng = random.Random(seed)
    weights = [s[0] for s in SHAPES]
    tasks = []
    for i in range(n):
        _, prefix, resources, mean = rng.choices(SHAPES, weights)[0]
        duration = round(rng.uniform(0.5, 1.5) * mean, 3)
        tasks.append(SimTask(f"{prefix}-{i}", duration, resources, prefix=prefix))
    return tasks


def throughput(n_workers: int, n_tasks: int, seed: int, policy: SchedulerPolicy) -> dict:
    """Run the workload; time every ``handle`` call, and apart from that the placement pass
    inside it (where the decisions are made), by wrapping the placer's ``schedule``."""
    state = SchedulerState(policy)
    clock = time.perf_counter
    in_handle = [0.0]
    in_placement = [0.0]
    handle = state.handle
    schedule = state.placer.schedule

    def timed_handle(event):
        t0 = clock()
        actions = handle(event)
        in_handle[0] += clock() - t0
        return actions

    def timed_schedule():
        t0 = clock()
        schedule()
        in_placement[0] += clock() - t0

    state.placer.schedule = timed_schedule  # type: ignore[method-assign]
    sim = Simulation(make_workers(n_workers), make_tasks(n_tasks, seed), state=state,
                     handle=timed_handle)
    t0 = clock()
    report = sim.run()
    wall = clock() - t0
    assert not report.unfinished, report.unfinished[:5]
    return {
        "decisions": report.decisions,
        "events": report.events,
        "placement_seconds": round(in_placement[0], 3),
        "decisions_per_second": round(report.decisions / in_placement[0]),
        "handle_seconds": round(in_handle[0], 3),
        "decisions_per_handle_second": round(report.decisions / in_handle[0]),
        "simulated_makespan_s": round(report.makespan, 1),
        "sim_wall_seconds": round(wall, 2),
    }


def memory_per_queued_task(n_workers: int, n_tasks: int, seed: int,
                           policy: SchedulerPolicy) -> dict:
    state = SchedulerState(policy)
    for w in make_workers(n_workers):
        state.handle(ev.WorkerJoined(address=w.address, name=w.name, nthreads=w.nthreads,
                                  resources=Resources.parse(w.resources), now=0))
    parsed: dict = {}

    def spec(t: SimTask) -> ev.TaskSpec:
        res = parsed.setdefault(t.resources, Resources.parse(t.resources))
        return ev.TaskSpec(key=t.key, resources=res, prefix=t.prefix)

    # Every thread busy and every prefetch slot taken, so that the tasks measured are queued.
    slots = sum(w.nthreads + state.policy.prefetch for w in make_workers(n_workers))
    fillers = [SimTask(f"filler-{i}", 1.0) for i in range(slots)]
    state.handle(ev.TasksSubmitted(client="c", tasks=tuple(map(spec, fillers)), now=0))
    event = ev.TasksSubmitted(client="c", tasks=tuple(map(spec, make_tasks(n_tasks, seed))), now=0)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    actions = state.handle(event)
    del actions
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert len(state.queue) == n_tasks, len(state.queue)
    return {"queued_tasks": n_tasks, "bytes_per_queued_task": round(grown / n_tasks)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--prefetch", type=int, default=SchedulerPolicy().prefetch,
                        help="tasks a worker may hold beyond its threads (default: the "
                             "scheduler's setting)")
    args = parser.parse_args(argv)
    policy = SchedulerPolicy(prefetch=args.prefetch)
    t0 = time.perf_counter()
    result = {"bench": "sim_scale", "workers": args.workers, "tasks": args.tasks,
              "prefetch": args.prefetch}
    result.update(throughput(args.workers, args.tasks, args.seed, policy))
    result.update(memory_per_queued_task(args.workers, args.tasks, args.seed, policy))
    result["target_decisions_per_second"] = 50_000
    result["total_seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()

"""Schedule quality: makespan against a lower bound, and the wait of large GPU tasks.

1. A seeded mixed workload (tasks needing GPU=2, GPU=1 and nothing, all submitted at once)
   on several 4-GPU workers: makespan divided by the lower bound, the largest of the area
   bound of each resource (GPU units and threads: total demand-seconds / capacity) and the
   longest task. Target: at most 1.10.
2. Starvation: a steady stream of GPU=1 tasks keeps every GPU busy while GPU=2 tasks
   arrive now and then; the longest wait of a GPU=2 task stays within a few task lengths
   (EASY backfill reserves a worker for it), where a greedy scheduler would make it wait
   until the stream ends.

Prints one JSON line.   .venv/bin/python bench/sim_makespan.py [--seed S]
"""

from __future__ import annotations

import argparse
import json
import random
import time

from dsched.resources import SCALE, Resources
from dsched.sim import SimTask, SimWorker, Simulation


def mixed(seed: int) -> dict:
    rng = random.Random(seed)
    workers = [SimWorker(f"gpu{i}", nthreads=8, resources="GPU=4") for i in range(8)]
    tasks = []
    for i in range(1400):
        kind = rng.random()
        if kind < 0.12:
            tasks.append(SimTask(f"big-{i}", rng.uniform(5, 15), "GPU=2", prefix="big"))
        elif kind < 0.45:
            tasks.append(SimTask(f"small-{i}", rng.uniform(2, 10), "GPU=1", prefix="small"))
        else:
            tasks.append(SimTask(f"cpu-{i}", rng.uniform(1, 5), None, prefix="cpu"))
    report = Simulation(workers, tasks).run()
    assert not report.unfinished
    gpu_capacity = sum(Resources.parse(w.resources)["GPU"] for w in workers) / SCALE
    gpu_area = sum(t.duration * Resources.parse(t.resources).get("GPU", 0) / SCALE
                   for t in tasks)
    thread_area = sum(t.duration for t in tasks)
    threads = sum(w.nthreads for w in workers)
    bound = max(gpu_area / gpu_capacity, thread_area / threads, max(t.duration for t in tasks))
    return {
        "mixed_tasks": len(tasks),
        "mixed_workers": len(workers),
        "makespan_s": round(report.makespan, 2),
        "lower_bound_s": round(bound, 2),
        "makespan_ratio": round(report.makespan / bound, 4),
        "target_ratio": 1.10,
    }


def stream(seed: int) -> dict:
    rng = random.Random(seed)
    workers = [SimWorker(f"gpu{i}", nthreads=4, resources="GPU=2") for i in range(4)]
    tasks = []
    now = 0.0
    # 8 GPUs, GPU=1 tasks of 4 s on average arriving at 1.9 per second: GPUs ~95% busy
    for i in range(1500):
        now += rng.expovariate(1.9)
        tasks.append(SimTask(f"small-{i}", rng.uniform(3, 5), "GPU=1", submit_at=now,
                             prefix="small"))
        if i % 100 == 50:
            tasks.append(SimTask(f"big-{i}", 4.0, "GPU=2", submit_at=now, prefix="big"))
    report = Simulation(workers, tasks).run()
    assert not report.unfinished
    big = [w for k, w in report.waits.items() if k.startswith("big")]
    small = [w for k, w in report.waits.items() if k.startswith("small")]
    return {
        "stream_big_tasks": len(big),
        "stream_longest_big_wait_s": round(max(big), 2),
        "stream_longest_small_wait_s": round(max(small), 2),
        "stream_span_s": round(now, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    result = {"bench": "sim_makespan", "seed": args.seed}
    result.update(mixed(args.seed))
    result.update(stream(args.seed))
    result["total_seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""GPU memory as a consumable, simulated: prints one JSON line.

Random mixes of jobs asking 4 to 70 GB of GPU memory (half of them with a GPU fraction too) on a
worker with devices of 24, 48 and 80 GB, through the real scheduler core (``dsched.sim``,
``validate`` after every event: no device over-committed on memory or share, checked by the
scheduler's books and, apart from them, by the simulated worker's). For each mix: the makespan
over a lower bound of it, three ways: the jobs queued in the order they were drawn (equal
priorities run in submission order); the same jobs with the larger ones first (each given its
memory in GB as ``priority``, as a user packing a sweep would: ``sched submit --priority``); and
the same jobs asking a whole GPU each (as a scheduler without memory accounting would have to
run them).

The bound is the largest of: the longest job; for each device size s (and 0), the memory-time
of the jobs that only devices larger than s can hold over those devices' memory; the same for
GPU share over their number; the time of the jobs over half the largest device, which never
share one, over the devices that hold them; and the time of the jobs over a third of it, by
how many of them each device holds at once (two on the 80 GB device, one on the 48 GB one,
one only on the 80 GB device if over two thirds).

    python bench/sim_gpu_memory.py [--mixes 200] [--jobs 60] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import os

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from dsched.sim import Simulation, SimTask, SimWorker  # noqa: E402

GB = 10**9
DEVICES = (24, 48, 80)


def mix(rng: random.Random, n: int) -> list[tuple[int, float, float]]:
    """``n`` jobs: (memory in GB, GPU fraction or 0, duration in seconds)."""
    return [(rng.randint(4, 70), rng.choice((0.0, 0.1, 0.25, 0.5)), rng.uniform(1.0, 10.0))
            for _ in range(n)]


def lower_bound(jobs: list[tuple[int, float, float]]) -> float:
    bound = max(d for _, _, d in jobs)
    for size in (0, *DEVICES[:-1]):
        hosts = [c for c in DEVICES if c > size]
        some = [(m, f, d) for m, f, d in jobs if m > size]
        bound = max(bound, sum(m * d for m, _, d in some) / sum(hosts),
                    sum(f * d for _, f, d in some) / len(hosts))
    # Jobs of more than half the largest device never share one: each device that can hold
    # them runs one at a time.
    for size in (0, *DEVICES[:-1]):
        big = [d for m, _, d in jobs if m > max(size, DEVICES[-1] / 2)]
        hosts = [c for c in DEVICES if c > size]
        bound = max(bound, sum(big) / len(hosts))
    # Jobs of more than a third of the largest device: the 80 GB device runs at most two of
    # them at once (one, if either is over two thirds), the 48 GB device one, the 24 GB device
    # none. Weighted 1 (2 over two thirds), no moment holds more than 3 of weight.
    third = DEVICES[-1] / 3
    weights = [(2 if m > 2 * third else 1) * d for m, _, d in jobs if m > third]
    return max(bound, sum(weights) / 3)


def makespan(jobs: list[tuple[int, float, float]], whole: bool = False,
             largest_first: bool = False) -> float:
    def resources(memory: int, fraction: float) -> str:
        if whole:
            return f"GPU=1 GPU_MEMORY={memory}G"
        return f"GPU_MEMORY={memory}G" + (f" GPU={fraction}" if fraction else "")

    worker = SimWorker("gpus", nthreads=64, gpu_memory=tuple(c * GB for c in DEVICES))
    tasks = [SimTask(f"job-{i}", d, resources(m, f), priority=m if largest_first else 0)
             for i, (m, f, d) in enumerate(jobs)]
    report = Simulation([worker], tasks, validate=True).run()
    assert not report.unfinished, report.unfinished
    return report.makespan


def figures(mixes: int, n: int, seed: int) -> dict:
    rng = random.Random(seed)
    shared, largest, whole = [], [], []
    for _ in range(mixes):
        jobs = mix(rng, n)
        bound = lower_bound(jobs)
        shared.append(makespan(jobs) / bound)
        largest.append(makespan(jobs, largest_first=True) / bound)
        whole.append(makespan(jobs, whole=True) / bound)

    def spread(ratios: list[float]) -> dict:
        return {"median": round(statistics.median(ratios), 3), "max": round(max(ratios), 3)}

    return {"mixes": mixes, "jobs": n, "devices_gb": list(DEVICES),
            "memory_over_bound": spread(shared), "largest_first_over_bound": spread(largest),
            "target": 1.10, "whole_gpus_over_bound": spread(whole)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mixes", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(json.dumps({"bench": "sim_gpu_memory", **figures(args.mixes, args.jobs, args.seed)}))


if __name__ == "__main__":
    main()

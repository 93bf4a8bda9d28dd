"""GPU memory placement through the scheduler core in the simulator: 200 random mixes of jobs
asking 4 to 70 GB (half with a GPU fraction too) on devices of 24, 48 and 80 GB. After every
event the scheduler's books are validated (no device over-committed on memory or share), and
the simulated worker books each grant on its own devices apart from them; every job runs,
and sharing devices by memory never takes longer than whole GPUs would in a mix."""

from __future__ import annotations

import importlib.util
import random
import statistics
from pathlib import Path

from dsched.sim import Simulation, SimTask, SimWorker

GB = 10**9


def run(jobs: list[tuple[int, float, float]], whole: bool = False, nthreads: int = 32) -> float:
    worker = SimWorker("gpus", nthreads=nthreads, gpu_memory=(24 * GB, 48 * GB, 80 * GB))
    tasks = [SimTask(f"job-{i}", duration, "GPU=1" if whole else
                     f"GPU_MEMORY={memory}G" + (f" GPU={fraction}" if fraction else ""))
             for i, (memory, fraction, duration) in enumerate(jobs)]
    report = Simulation([worker], tasks, validate=True).run()
    assert not report.unfinished and set(report.outcomes.values()) == {"finished"}
    return report.makespan


def test_200_random_mixes_never_over_commit_a_device_and_all_run():
    rng = random.Random(21)
    for _ in range(200):
        jobs = [(rng.randint(4, 70), rng.choice((0.0, 0.1, 0.25, 0.5)), rng.uniform(1, 10))
                for _ in range(rng.randint(5, 25))]
        run(jobs)


def test_sharing_devices_by_memory_beats_a_whole_gpu_each_on_small_jobs():
    rng = random.Random(7)
    jobs = [(rng.randint(4, 20), 0.0, rng.uniform(1, 10)) for _ in range(30)]
    assert run(jobs) < 0.5 * run(jobs, whole=True)


def test_heads_passed_over_are_looked_at_again_once_a_task_starts_beside_a_reserved_one():
    # Mixes 135 and 147 of bench/sim_gpu_memory.py (seed 1): a task started beside the
    # reserved one moved the device it is expected to start on, which let a head the pass had
    # already passed over start; validate() after each event finds any head that could start.
    rng = random.Random(1)
    mixes = [[(rng.randint(4, 70), rng.choice((0.0, 0.1, 0.25, 0.5)), rng.uniform(1.0, 10.0))
              for _ in range(60)] for _ in range(148)]
    for i in (135, 147):
        run(mixes[i], nthreads=64)


def test_largest_first_priorities_pack_mixes_within_1_10_of_the_lower_bound():
    # bench/sim_gpu_memory.py's mixes, each job given its memory in GB as priority (a user
    # packing a sweep): the median makespan over the bench's lower bound is at most 1.10.
    spec = importlib.util.spec_from_file_location(
        "sim_gpu_memory", Path(__file__).parents[2] / "bench" / "sim_gpu_memory.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rng = random.Random(1)
    ratios = []
    for _ in range(40):
        jobs = bench.mix(rng, 60)
        ratios.append(bench.makespan(jobs, largest_first=True) / bench.lower_bound(jobs))
    assert statistics.median(ratios) <= 1.10, sorted(ratios)

"""Worker executor benchmark: prints one JSON line.

What the executor adds to each task, measured with an empty task run one after another (so
the time per task is all overhead): on the thread pool (``ThreadRunner``: the hop to a pool
thread and back to the event loop), and in a child process pinned to a GPU (``GpuProcessPool``
with the abstract device 0: pickled request and reply over the child's pipes). The child's
start is reported apart, since later tasks on the same devices reuse it. No daemons, no
network, no GPU needed; takes a few seconds.

    python bench/worker_overhead.py [--tasks N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time

from dsched import serialize
from dsched.worker.executor import GpuProcessPool, ThreadRunner


def empty(value):
    return value


def summary(samples: list[float]) -> dict:
    """Microseconds per task: mean, median and 99th percentile."""
    micros = sorted(s * 1e6 for s in samples)
    return {"n": len(micros), "mean_us": round(statistics.fmean(micros), 1),
            "median_us": round(statistics.median(micros), 1),
            "p99_us": round(micros[min(len(micros) - 1, int(len(micros) * 0.99))], 1)}


async def thread_overhead(n: int) -> dict:
    runner = ThreadRunner(1)
    function = serialize.dumps(empty)
    try:
        await runner.run(function, (0,), {})  # unpickles and caches the function
        samples = []
        for i in range(n):
            start = time.perf_counter()
            outcome = await runner.run(function, (i,), {})
            samples.append(time.perf_counter() - start)
            assert outcome.ok and outcome.value == i
        return summary(samples)
    finally:
        runner.close()


async def child_overhead(n: int) -> dict:
    pool = GpuProcessPool(base_env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    function = serialize.dumps(empty)
    try:
        start = time.perf_counter()
        first = await pool.run("first", (0,), function, serialize.dumps(((0,), {})))
        child_start = time.perf_counter() - start
        assert first.ok
        samples = []
        for i in range(n):
            start = time.perf_counter()
            # The worker pickles the arguments once per task too (after substituting inputs).
            outcome = await pool.run(f"task-{i}", (0,), function, serialize.dumps(((i,), {})))
            samples.append(time.perf_counter() - start)
            assert outcome.ok and outcome.value == i
        return {**summary(samples), "child_start_ms": round(child_start * 1e3, 1)}
    finally:
        await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5000, help="tasks per executor")
    n = parser.parse_args().tasks
    result = {
        "bench": "worker_overhead",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "thread_pool": asyncio.run(thread_overhead(n)),
        "gpu_child_process": asyncio.run(child_overhead(n)),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())

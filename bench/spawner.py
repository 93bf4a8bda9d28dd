"""The cost of starting and ending a job attempt on the worker's side: prints one JSON line.

A spawner (``dsched.worker.jobspawner``) and the attempts it runs, without a scheduler or a
worker: ``--attempts`` attempts of ``true``, one after another, each recorded, locked and
handed to the spawner as the worker does, and waited for until its supervisor is done with it.
Printed: the wall milliseconds an attempt takes, and the CPU milliseconds it costs the spawner
and its supervisors (with the guards and commands they reaped), after 20 to warm up. This is
the part of ``bench/jobs.py``'s ``true_cpu_ms_per_job`` that is the spawner's, measured alone,
so a change to it shows through the noise of a shared machine.

    python bench/spawner.py [--attempts 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from jobs import _parent, cpu_seconds  # noqa: E402
from dsched.worker.jobrecords import new_record, open_locked_log, write_record  # noqa: E402
from dsched.worker.jobspawner import Spawner  # noqa: E402

WARM_UP = 20


def tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and its children, with those they reaped."""
    parents = {int(entry): _parent(int(entry)) for entry in os.listdir("/proc")
               if entry.isdigit()}
    return sum(sum(cpu_seconds(pid)) for pid in
               [root, *(pid for pid, parent in parents.items() if parent == root)])


async def attempts(n: int) -> dict:
    directory = tempfile.mkdtemp(prefix="bench-spawner-")
    spawner = Spawner()
    if not (await spawner.start() and await spawner.ready()):
        raise SystemExit("the spawner did not start")
    spawner.prepare("", 1)  # spares, as a worker of one thread in subreaper mode has them

    async def attempt(i: int) -> None:
        key = f"job-{i}.1"
        record, log = os.path.join(directory, f"{key}.json"), os.path.join(directory, f"{key}.log")
        write_record(record, new_record(key, {"command": ["true"]}, (), log, "bench"))
        lock = open_locked_log(log)
        try:
            spawned = await spawner.spawn(
                [record, str(lock), "1.0", repr(time.monotonic() + 60), ""], lock,
                lambda _: None)
        finally:
            os.close(lock)
        async for _ in spawned.stdout:  # AttemptStarted, AttemptEnded
            pass
        await spawned.wait()
        spawner.forget(record)

    try:
        for i in range(1, WARM_UP + 1):
            await attempt(i)
        root = spawner._process.pid
        cpu, started = tree_cpu(root), time.perf_counter()
        for i in range(WARM_UP + 1, WARM_UP + n + 1):
            await attempt(i)
        wall = time.perf_counter() - started
        cpu = tree_cpu(root) - cpu
    finally:
        await spawner.close()
    return {"attempts": n, "wall_ms_per_attempt": round(wall * 1000 / n, 2),
            "cpu_ms_per_attempt": round(cpu * 1000 / n, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=300)
    args = parser.parse_args()
    print(json.dumps({"bench": "spawner", "python": platform.python_version(),
                      "cpus": os.cpu_count(), **asyncio.run(attempts(args.attempts))}))


if __name__ == "__main__":
    main()

"""One client of the load test, run as its own process: connect, submit N tasks at once, check
every result, print one JSON line, exit 0 only when all were right.

    python load_client.py ADDRESS N INDEX [HOLD]    (the token comes from SCHED_TOKEN)

With HOLD, each task waits until the file HOLD is gone before it returns.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for deadline

from deadline import wait_until  # noqa: E402
from dsched import Client  # noqa: E402


def square(x: int) -> int:
    return x * x


def held_square(x: int, hold: str) -> int:
    import os

    wait_until(lambda: not os.path.exists(hold), 300, what=f"{hold} to go")
    return x * x


def main(address: str, n: int, index: int, hold: str | None = None) -> int:
    numbers = range(index * n, (index + 1) * n)  # no two clients share a task
    with Client(address, name=f"load-{index}") as client:
        if hold is None:
            futures = client.map(square, numbers, pure=False)
        else:
            futures = client.map(held_square, numbers, [hold] * n, pure=False)
        results = client.gather(futures, timeout=600)
    wrong = sum(1 for x, result in zip(numbers, results) if result != x * x)
    print(json.dumps({"client": index, "tasks": len(results), "wrong": wrong}), flush=True)
    return 0 if len(results) == n and not wrong else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:]))

"""Tasks that keep a ledger, and the ledger's reading: which tasks were executing where.

Each task appends ``start KEY PID WORKER`` as it begins and ``end KEY PID WORKER`` just before
it returns (one ``write`` per line on an ``O_APPEND`` file, so lines from many processes never
interleave). A task ends only while the test's *hold* file is absent: with the hold in place no
task anywhere can end, so a test can freeze the cluster, see exactly which tasks a process is
executing, and kill it or cut it off at that moment. Shipped to workers by value.
"""

from __future__ import annotations

import collections
import os
import sys
import time
from pathlib import Path

import cloudpickle

from deadline import wait_until

cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: Longest a task waits at the hold; tests lift it long before.
HOLD_TIMEOUT = 120.0


def record(ledger: str, event: str, key: str) -> None:
    line = f"{event} {key} {os.getpid()} {os.environ.get('SCHED_WORKER_NAME', '-')}\n"
    descriptor = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, line.encode())
    finally:
        os.close(descriptor)


def finish(ledger: str, hold: str, key: str) -> None:
    wait_until(lambda: not os.path.exists(hold), HOLD_TIMEOUT, interval=0.005,
               what=f"the hold {hold} to be lifted")
    record(ledger, "end", key)


def leaf(ledger: str, hold: str, key: str, value: int, seconds: float) -> int:
    """``value``, after ``seconds`` of (simulated) work."""
    record(ledger, "start", key)
    time.sleep(seconds)
    finish(ledger, hold, key)
    return value


def total(ledger: str, hold: str, key: str, seconds: float, values: list) -> int:
    """The sum of ``values`` (the results of other tasks), after ``seconds`` of work."""
    record(ledger, "start", key)
    time.sleep(seconds)
    finish(ledger, hold, key)
    return sum(values)


class Ledger:
    """The test's side: the file, and questions about what it says so far."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.touch()

    def lines(self) -> list[tuple[str, str, int, str]]:
        """(event, key, pid, worker) for every complete line so far."""
        text = self.path.read_text()
        complete = text[: text.rfind("\n") + 1]
        out = []
        for line in complete.splitlines():
            event, key, pid, worker = line.split(" ")
            out.append((event, key, int(pid), worker))
        return out

    def executing(self, lines=None, by: str = "pid") -> dict:
        """Per pid (or per worker name, ``by="worker"``), the keys started there and not
        (yet) ended there."""
        running: dict = collections.defaultdict(collections.Counter)
        for event, key, pid, worker in self.lines() if lines is None else lines:
            running[pid if by == "pid" else worker][key] += 1 if event == "start" else -1
        return {pid: +keys for pid, keys in running.items() if +keys}

    def executing_count(self) -> int:
        """How many tasks are executing now, in all processes together."""
        return sum(sum(keys.values()) for keys in self.executing().values())

    def count(self, event: str, lines=None) -> int:
        return sum(1 for line in (self.lines() if lines is None else lines) if line[0] == event)

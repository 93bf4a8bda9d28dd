"""Shell-command jobs that keep a ledger, and the ledger's reading: which attempts of which
jobs ran, where, in which process, and whether two attempts of one job ever ran at once.

Each job is ``sh -c SCRIPT DIR``: it appends ``start JOB ATTEMPT PID WORKER`` to ``DIR/ledger``,
works for a moment, and appends ``end ...`` (one ``echo`` into an ``O_APPEND`` file per line,
so lines of concurrent jobs never interleave). Before ``start`` it takes ``DIR/lock-JOB`` with
``flock -n``: the lock is held by the job's process group until the last of it dies (however
it dies), so an attempt that finds it taken runs while another attempt of the same job still
does, and says so with an ``overlap`` line.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import psutil

#: $0 is the ledger's directory; the job learns who it is from its environment.
SCRIPT = (
    'me="$SCHED_JOB_ID $SCHED_JOB_ATTEMPT $$ $SCHED_WORKER_NAME"; '
    'exec 9>>"$0/lock-$SCHED_JOB_ID"; '
    'flock -n 9 || echo "overlap $me" >> "$0/ledger"; '
    'echo "start $me" >> "$0/ledger"; '
    'sleep {seconds}; '
    'echo "end $me" >> "$0/ledger"'
)


def command(directory: Path, seconds: float = 0.2) -> list[str]:
    """The command of a ledger job that works ``seconds``."""
    return ["sh", "-c", SCRIPT.format(seconds=seconds), str(directory)]


@dataclass(frozen=True)
class Line:
    event: str  # start, end or overlap
    job: int
    attempt: int
    pid: int
    worker: str


class JobLedger:
    """The test's side: ``directory`` (created), and what its ledger says so far."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "ledger"
        self.path.touch()

    def command(self, seconds: float = 0.2) -> list[str]:
        return command(self.directory, seconds)

    def lines(self) -> list[Line]:
        """Every complete line so far, in the order they were written."""
        text = self.path.read_text()
        out = []
        for line in text[: text.rfind("\n") + 1].splitlines():
            event, job, attempt, pid, worker = line.split(" ")
            out.append(Line(event, int(job), int(attempt), int(pid), worker))
        return out

    def starts(self, lines: list[Line] | None = None) -> dict[int, list[Line]]:
        """The start lines of each job, in order."""
        out: dict[int, list[Line]] = collections.defaultdict(list)
        for line in self.lines() if lines is None else lines:
            if line.event == "start":
                out[line.job].append(line)
        return dict(out)

    def running(self, lines: list[Line] | None = None, worker: str | None = None) -> set[int]:
        """Pids that started and have not written their end (those killed included)."""
        alive: dict[int, Line] = {}
        for line in self.lines() if lines is None else lines:
            if line.event == "start" and worker in (None, line.worker):
                alive[line.pid] = line
            elif line.event == "end":
                alive.pop(line.pid, None)
        return set(alive)

    def overlaps(self, lines: list[Line] | None = None) -> list[Line]:
        return [line for line in (self.lines() if lines is None else lines)
                if line.event == "overlap"]

    def live_pids(self, pids: Iterable[int] | None = None) -> list[int]:
        """Those of ``pids`` (none: the ledger's) that still run a job of this ledger (a reused
        pid is not one)."""
        alive = []
        for pid in {line.pid for line in self.lines()} if pids is None else set(pids):
            try:
                if str(self.directory) in psutil.Process(pid).cmdline():
                    alive.append(pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        return alive

"""What one ``SchedulerState.handle`` call has decided so far, shared by the parts of the
state: the actions in order, the results to free (one message per worker) and the waiting
reasons to tell (one message per client and reason), the job rows and ended attempts' rows to
journal, the clock as the event gave it, and the counters kept since start.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Any

from .actions import INFO, SendFree, JournalWrite, LogLine, TellWaiting

_TRACEBACK = "Traceback (most recent call last):"
#: The most characters of a task's error in its one log line (the whole is at DEBUG).
LINE_LIMIT = 200


class Outbox:
    """``counters``, since start: ``placed`` tasks, worker ``deaths`` counted against tasks,
    ``rejected`` refusals, ``recomputed`` lost results, ``replicated`` results copied off
    draining workers, ``fetched`` inputs of placed tasks not held where they were placed,
    ``gpus_fenced`` devices fenced for a fault."""

    __slots__ = ("actions", "to_free", "waiting", "now", "counters", "rows", "causes",
                 "attempts")

    def __init__(self) -> None:
        self.actions: list = []
        self.to_free: dict[str, list[str]] = {}
        self.waiting: dict[tuple[str, str | None], list[str]] = {}
        self.now = 0.0
        self.counters: dict[str, int] = dict(
            placed=0, deaths=0, rejected=0, recomputed=0, replicated=0, fetched=0,
            gpus_fenced=0)
        self.rows: dict[int, Any] = {}
        self.causes: set[str] = set()
        self.attempts: list[dict] = []

    def log(self, level: int, msg: str, *args) -> None:
        self.actions.append(LogLine(level=level, msg=msg, args=args))

    def log_failure(self, prefix: str, text: str, msg: str, *args) -> None:
        """A task of key ``prefix`` failed with ``text`` (a traceback, or a reason): one line
        at INFO, ``msg % args`` and the gist of ``text``, paced by the shell; all of ``text``
        at DEBUG."""
        self.actions.append(LogLine(level=INFO, msg=msg + ": %s", args=(*args, gist(text)),
                                detail=text, pace=prefix))

    def free(self, address: str, key: str) -> None:
        """The worker at ``address`` may drop its copy of ``key``."""
        self.to_free.setdefault(address, []).append(key)

    def tell_waiting(self, client: str, reason: str | None, key: str) -> None:
        """``client``'s task ``key`` cannot run because of ``reason`` (None: now it can)."""
        self.waiting.setdefault((client, reason), []).append(key)

    def journal(self, job: Any, cause: str) -> None:
        """``job`` (a ``Job``) changed (``cause``): its row, as it is at the end of this
        call, goes to the journal before any action of the call is carried out."""
        self.rows[job.id] = job
        self.causes.add(cause)

    def attempt(self, row: dict) -> None:
        """An attempt ended: its row (``attemptrows.py``) goes to the journal with the job
        rows of this call, in one transaction."""
        self.attempts.append(row)

    def discard(self) -> None:
        """Drop what a handler that raised had decided so far: half a decision is never sent
        (nor written to the journal)."""
        self.actions, self.rows, self.causes, self.attempts = [], {}, set(), []
        self.to_free, self.waiting = {}, {}

    def take(self) -> list:
        """Everything decided, in order, the gathered messages last, and the journal write
        first; starts afresh."""
        actions = self.actions
        if self.rows or self.attempts:
            actions.insert(0, JournalWrite(rows=tuple(job.to_row() for job in self.rows.values()),
                                           causes=frozenset(self.causes),
                                           attempts=tuple(self.attempts)))
            self.rows, self.causes, self.attempts = {}, set(), []
        if self.to_free:
            for address, keys in self.to_free.items():
                actions.append(SendFree(worker=address, keys=tuple(keys)))
            self.to_free = {}
        if self.waiting:
            for (client, reason), keys in self.waiting.items():
                actions.append(TellWaiting(client=client, keys=tuple(keys), reason=reason))
            self.waiting = {}
        self.actions = []
        return actions


def gist(text: str) -> str:
    """``text`` on one line: of a traceback its last line (the exception), after whatever
    came before it ("dependency x failed: "); cut at ``LINE_LIMIT`` characters."""
    head, traceback, tail = text.partition(_TRACEBACK)
    if traceback:
        text = head + (tail.strip().splitlines() or [""])[-1]
    line = " ".join(text.split())
    return line if len(line) <= LINE_LIMIT else line[:LINE_LIMIT - 3] + "..."

"""What one ``SchedulerState.handle`` call has decided so far, shared by the parts of the
state: the actions in order, the results to free (one message per worker) and the waiting
reasons to tell (one message per client and reason), the job rows to journal, the clock as the
event gave it, and the counters kept since start.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Any

from .actions import Free, JournalWrite, Log, TaskWaiting


class Outbox:
    """``counters``, since start: ``placed`` tasks, worker ``deaths`` counted against tasks,
    ``rejected`` refusals, ``recomputed`` lost results, ``replicated`` results copied off
    draining workers, ``fetched`` inputs of placed tasks not held where they were placed."""

    __slots__ = ("actions", "to_free", "waiting", "now", "counters", "rows", "causes")

    def __init__(self) -> None:
        self.actions: list = []
        self.to_free: dict[str, list[str]] = {}
        self.waiting: dict[tuple[str, str | None], list[str]] = {}
        self.now = 0.0
        self.counters: dict[str, int] = dict(
            placed=0, deaths=0, rejected=0, recomputed=0, replicated=0, fetched=0)
        self.rows: dict[int, Any] = {}
        self.causes: set[str] = set()

    def log(self, level: int, msg: str, *args) -> None:
        self.actions.append(Log(level=level, msg=msg, args=args))

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

    def take(self) -> list:
        """Everything decided, in order, the gathered messages last, and the journal write
        first; starts afresh."""
        actions = self.actions
        if self.rows:
            actions.insert(0, JournalWrite(rows=tuple(job.to_row() for job in self.rows.values()),
                                           causes=frozenset(self.causes)))
            self.rows, self.causes = {}, set()
        if self.to_free:
            for address, keys in self.to_free.items():
                actions.append(Free(worker=address, keys=tuple(keys)))
            self.to_free = {}
        if self.waiting:
            for (client, reason), keys in self.waiting.items():
                actions.append(TaskWaiting(client=client, keys=tuple(keys), reason=reason))
            self.waiting = {}
        self.actions = []
        return actions

"""Tasks as the scheduler sees them: the TaskState enum and the Task record.

A Task is mutable and owned by SchedulerState; the shell and the dashboard read it. Links to
other tasks are Task objects (an incarnation), kept in dicts for a stable order.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from ..resources import Resources

if TYPE_CHECKING:
    from .queue import ShapeQueue


class TaskState(str, Enum):
    waiting = "waiting"  #: on dependencies that are not yet computed
    queued = "queued"  #: ready; waits for a worker that can start it now (see ``reason``)
    processing = "processing"  #: sent to a worker
    memory = "memory"  #: finished; the result is held on at least one worker
    released = "released"  #: not needed now; kept while dependents exist, to recompute them
    erred = "erred"

    def __str__(self) -> str:
        return self.value


WAITING = TaskState.waiting
QUEUED = TaskState.queued
PROCESSING = TaskState.processing
MEMORY = TaskState.memory
RELEASED = TaskState.released
ERRED = TaskState.erred
#: States of a task that has still to run (or is running).
ACTIVE = frozenset((WAITING, QUEUED, PROCESSING))


class Task:
    """One task (one incarnation of a key).

    ``deps``: the tasks it needs; ``dependents``: the tasks that need it; ``waiters``: those
    dependents still to run, which keep its result alive; ``waiting_on``: the deps not yet in
    memory (state ``waiting``). ``order`` sorts the ready queue: higher priority first, then
    submission order. ``deaths`` counts workers that died while it ran (``death_causes`` says
    how, where known), ``exceptions`` the times it raised, ``rejections`` the times a worker
    refused it; ``retries`` is what is left of ``retries=``. ``retry_at``: the time a refused
    task waits for (state ``waiting`` without ``waiting_on``) before it is queued again.
    ``job``: the shell-command job this task is an attempt of (None for a Python task).
    """

    __slots__ = (
        "key", "spec", "deps", "dependents", "waiters", "waiting_on", "resources", "priority",
        "order", "retries", "exceptions", "deaths", "restrict", "prefix", "wanted_by", "state",
        "error", "end_reason", "exception", "who_has", "nbytes", "processing_on", "started",
        "prefetched", "queue", "queued_at", "reported", "losses", "rejections", "retry_at",
        "death_causes", "job",
    )

    def __init__(
        self, key: str, spec: bytes, resources: Resources, priority: int, order: int,
        retries: int, restrict: frozenset[str] | None, prefix: str,
    ):
        self.key = key
        self.spec = spec
        self.deps: tuple[Task, ...] = ()
        self.dependents: dict[Task, None] = {}
        self.waiters: dict[Task, None] = {}
        self.waiting_on: dict[Task, None] | None = None
        self.resources = resources
        self.priority = priority
        self.order = order
        self.retries = retries
        self.exceptions = 0
        self.deaths = 0
        self.losses = 0  # times its result could not be fetched from any holder
        self.rejections = 0
        self.retry_at: float | None = None
        self.death_causes: tuple[str, ...] = ()
        self.restrict = restrict
        self.prefix = prefix
        self.wanted_by: tuple[str, ...] = ()
        self.state = WAITING
        self.error: str | None = None
        self.end_reason: str | None = None
        self.exception = b""
        self.who_has: dict[str, None] | None = None
        self.nbytes = 0
        self.processing_on: str | None = None
        self.started = 0.0
        self.prefetched = False
        self.queue: ShapeQueue | None = None
        self.queued_at = 0.0
        self.reported = False
        self.job = None  # the Job (``job.py``) whose attempt this task is, if any

    @property
    def dependencies(self) -> tuple[str, ...]:
        return tuple(d.key for d in self.deps)

    @property
    def unrunnable_reason(self) -> str | None:
        """Why no connected worker can ever run this queued task, or None."""
        if self.state is QUEUED and self.queue is not None:
            return self.queue.reason
        return None

    @property
    def reason(self) -> str | None:
        """The reason that goes with the state, for status displays."""
        state = self.state
        if state is QUEUED:
            return self.unrunnable_reason
        if state is WAITING:
            if self.retry_at is not None:
                return f"refused by a worker ({self.end_reason}); trying again shortly"
            n = len(self.waiting_on or ())
            return f"waiting for {n} dependenc{'y' if n == 1 else 'ies'}"
        if state is PROCESSING:
            return f"running on {self.processing_on}"
        return self.end_reason

    def __repr__(self) -> str:
        return f"<Task {self.key!r} {self.state.value}>"


def default_prefix(key: str) -> str:
    """The duration group of a key without an explicit prefix: the part before the first -."""
    return key.split("-", 1)[0]

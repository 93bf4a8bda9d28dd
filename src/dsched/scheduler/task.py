"""Tasks as the scheduler sees them: the TaskState enum, its transitions and the Task record.

A Task is mutable and owned by SchedulerState; the shell and the dashboard read it. Links to
other tasks are Task objects (an incarnation), kept in dicts for a stable order. Its state
changes only through the named transitions of ``TRANSITIONS`` (``Task.move``), from which the
state diagram in docs/architecture.md is drawn (``mermaid``).

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

#: Every change of a task's state: (from, to, name, why). A name leads to one state, from any
#: of the states its rows give; ``None`` is where a task starts. Changes of state go through
#: ``Task.move(name)`` and nowhere else.
TRANSITIONS: tuple[tuple[TaskState | None, TaskState, str, str], ...] = (
    (None, WAITING, "submit", "a client submitted it, or a job queued an attempt"),
    (WAITING, QUEUED, "queue", "its inputs are in memory, or its back-off is over"),
    (QUEUED, PROCESSING, "start", "sent to a worker that can start it now"),
    (WAITING, PROCESSING, "start", "a job's attempt, running on a worker that came back"),
    (PROCESSING, MEMORY, "finish", "its worker holds the result"),
    (QUEUED, MEMORY, "finish", "a worker that came back kept its result"),
    (PROCESSING, WAITING, "wait", "failed within its budget, or by no fault of its own"),
    (PROCESSING, WAITING, "back_off", "refused by a worker, within its budget"),
    (QUEUED, WAITING, "wait", "the result of an input was lost"),
    (RELEASED, WAITING, "wait", "wanted again, or needed to compute a lost result again"),
    (WAITING, ERRED, "fail", "a dependency failed, or its result was lost too often"),
    (QUEUED, ERRED, "fail", "a dependency failed, or no worker could run it in time"),
    (PROCESSING, ERRED, "fail", "out of budget, or its input cannot be sent"),
    (WAITING, RELEASED, "release", "nobody wants it any more"),
    (QUEUED, RELEASED, "release", "nobody wants it any more"),
    (PROCESSING, RELEASED, "release",
     "nobody wants it, stopped where it runs, or a job's attempt ended"),
    (MEMORY, RELEASED, "release", "nobody wants it and no dependent waits, its result freed"),
    (MEMORY, RELEASED, "lose", "no worker holds its result any more"),
)


def _moves() -> dict[str, tuple[frozenset[TaskState], TaskState]]:
    """Each transition's name -> the states it may be taken from, and the state it leads to."""
    moves: dict[str, tuple[frozenset[TaskState], TaskState]] = {}
    for source, target, name, _ in TRANSITIONS:
        sources, to = moves.get(name, (frozenset(), target))
        if to is not target:
            raise ValueError(f"transition {name!r} leads to {to} and to {target}")
        moves[name] = (sources | {source} if source is not None else sources, target)
    return moves


_MOVES = _moves()


class IllegalTransition(RuntimeError):
    """A task was moved in a way ``TRANSITIONS`` does not have: a bug of the scheduler."""


def mermaid() -> str:
    """The state diagram of a scheduler task, drawn from ``TRANSITIONS`` (Mermaid)."""
    lines = ["stateDiagram-v2"]
    for source, target, name, why in TRANSITIONS:
        lines.append(f"    {source or '[*]'} --> {target}: {name} ({why})")
    return "\n".join(lines) + "\n"


class Task:
    """One task (one incarnation of a key).

    ``deps``: the tasks it needs; ``dependents``: the tasks that need it; ``waiters``: those
    dependents still to run, which keep its result alive; ``waiting_on``: the deps not yet in
    memory (state ``waiting``). ``order`` sorts the ready queue: higher priority first, then
    submission order. ``deaths`` counts workers that died while it ran (``death_causes`` says
    how, where known), ``exceptions`` the times it raised, ``rejections`` the times a worker
    refused it, ``losses`` the times its result could not be fetched from any holder: each
    against its budget (``budget.py``), which for ``exceptions`` is ``retries`` (its
    ``retries=``). ``retry_at``: the time a refused task waits for (state ``waiting``
    without ``waiting_on``) before it is queued again.
    ``job``: the shell-command job this task is an attempt of (None for a Python task).
    ``gpus``: the devices it was granted where it was placed (``fit.py``), none while queued.
    ``oom_retry``: it may still be run once more, asking for more GPU memory, after an attempt
    that ran out of it (``gpu_memory_retry=True``; ``oomretry.py``); ``oom_retried``: the words
    of that retry once it was made (None before).
    """

    __slots__ = (
        "key", "spec", "deps", "dependents", "waiters", "waiting_on", "resources", "priority",
        "order", "retries", "exceptions", "deaths", "restrict", "prefix", "wanted_by", "state",
        "error", "end_reason", "exception", "who_has", "nbytes", "processing_on", "started",
        "prefetched", "queue", "queued_at", "reported", "losses", "rejections", "retry_at",
        "death_causes", "job", "gpus", "oom_retry", "oom_retried",
    )

    def __init__(
        self, key: str, spec: bytes, resources: Resources, priority: int, order: int,
        retries: int, restrict: frozenset[str] | None, prefix: str, oom_retry: bool = False,
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
        self.losses = 0
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
        self.gpus: tuple[int, ...] = ()
        self.oom_retry = oom_retry
        self.oom_retried: str | None = None

    def move(self, name: str) -> None:
        """Take the transition ``name`` of ``TRANSITIONS``; one the table does not have from
        the task's state raises ``IllegalTransition``."""
        sources, target = _MOVES[name]
        if self.state not in sources:
            raise IllegalTransition(f"task {self.key!r} cannot {name} from {self.state} "
                                    f"(to {target})")
        self.state = target

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

"""The records ``WorkerState`` keeps: a task (or a job's attempt) received, a result held, a
fetch under way.

Plain mutable records owned by one ``WorkerState``; nothing outside it changes them.

Pure data: no I/O, no logic beyond naming a queue position.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from ..resources import Resources
from ..protocol.ops import Replicated, TaskFinished


class WorkerTaskState(str, Enum):
    """Where a task stands on this worker. Tasks that ended are forgotten once reported."""

    FETCHING = "fetching"      # waiting for inputs from peers (or from a task here)
    READY = "ready"            # inputs here; waiting for a thread and its resources
    EXECUTING = "executing"
    CANCELLING = "cancelling"  # StopTask sent; it holds its resources until the shell confirms
    DONE = "done"              # its result is held here


RUNNING = (WorkerTaskState.EXECUTING, WorkerTaskState.CANCELLING)


@dataclass(eq=False)
class WorkerTask:
    key: str
    spec: bytes
    resources: Resources
    priority: int
    seq: int
    dependencies: tuple[str, ...]
    missing: set[str]
    state: WorkerTaskState = WorkerTaskState.FETCHING
    gpus: tuple[int, ...] = ()  # the devices it holds while it runs
    granted: tuple[int, ...] = ()  # the devices the scheduler granted it (Execute.gpus)
    job: dict | None = None  # a shell-command job's attempt: what Execute.job said
    #: Why a CANCELLING task is stopped: a user's cancel (the default), or the worker's shutdown
    #: (then it goes back to the scheduler as refused by a closing worker, never as an error).
    stopped_for: str = "cancel"
    stop_reason: str = ""  # for a fault (``gpufaults``): what failed

    @property
    def queue_entry(self) -> tuple[int, int, str]:
        # Higher priority first, then arrival order.
        return (-self.priority, self.seq, self.key)


@dataclass(frozen=True)
class HeldResult:
    """A result stored here. ``owned``: the scheduler counts this worker among its holders
    (computed here, or copied here when it asked), kept until FreeKeys, and ``report`` says so
    again if asked; otherwise a copy fetched (or freed while still an input) that goes when no
    task needs it."""

    nbytes: int
    owned: bool
    report: TaskFinished | Replicated | None = None


@dataclass
class Fetch:
    worker: str                                   # the peer asked now
    untried: list[str] = field(default_factory=list)
    tried: list[str] = field(default_factory=list)
    nbytes: int = 0
    replicate: bool = False                       # the scheduler asked to keep a copy
    error: str = ""                               # why the last try failed

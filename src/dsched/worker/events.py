"""The events ``WorkerState.handle`` takes: what the scheduler, peers and the executor said.

Each is a small frozen dataclass. The async shell builds them from messages and from the
executor's outcomes; times (``start``, ``stop``) are wall-clock seconds the shell measured,
because the state itself reads no clock.

Pure data: no I/O, no logic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Union

from ..resources import EMPTY, Resources


@dataclass(frozen=True)
class ExecuteRequested:
    """The scheduler asks this worker to run ``key``.

    ``spec`` is the task as the executor reads it (opaque here). ``who_has`` names every input
    the task needs and the workers that hold it (an input already here needs no workers);
    ``nbytes`` gives the size of each input where the scheduler knows it.
    """

    key: str
    spec: bytes
    resources: Resources = EMPTY
    priority: int = 0
    who_has: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    nbytes: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class DependencyFetched:
    """The input ``key`` arrived from ``worker`` and the shell now holds it."""

    key: str
    nbytes: int
    worker: str = ""


@dataclass(frozen=True)
class DependencyFetchFailed:
    """Fetching the input ``key`` from ``worker`` failed (peer gone, or it no longer has it).
    ``permanent``: the result itself cannot travel (the holder cannot pickle or send it, or it
    cannot be unpickled here), so asking again, or another holder, would fail the same way."""

    key: str
    worker: str
    reason: str = ""
    permanent: bool = False


@dataclass(frozen=True)
class TaskCompleted:
    """The executor finished ``key`` and the shell holds its result.

    ``duration`` is the time the function itself ran when the executor measured it apart
    from ``stop - start``; left out, the report uses ``stop - start``.
    """

    key: str
    nbytes: int
    start: float
    stop: float
    peak_memory: int = 0
    duration: float | None = None


@dataclass(frozen=True)
class TaskFailed:
    """``key`` raised: ``exception`` is the pickled exception (opaque), ``text`` its traceback."""

    key: str
    exception: bytes
    text: str
    start: float | None = None
    stop: float | None = None


@dataclass(frozen=True)
class TaskStopped:
    """The shell carried out StopTask for ``key``: its process is gone and it left no result.

    The shell sends exactly one of TaskCompleted, TaskFailed or TaskStopped per StartTask,
    whichever happened first, so that the resources are given back exactly once.
    """

    key: str
    reason: str = ""


@dataclass(frozen=True)
class CancelRequested:
    """The scheduler (or a user through it) cancels ``key``."""

    key: str


@dataclass(frozen=True)
class FreeKeys:
    """No future refers to these results any more: the worker may drop them."""

    keys: tuple[str, ...]


@dataclass(frozen=True)
class DrainRequested:
    """Stop taking work (SIGTERM): hand back tasks not yet started; running ones go on."""


@dataclass(frozen=True)
class ReplicateRequested:
    """The scheduler asks this worker to keep a copy of the result ``key``, fetched from one
    of ``who_has`` (a draining worker that is its only holder)."""

    key: str
    who_has: tuple[str, ...]
    nbytes: int = 0


Event = Union[
    ExecuteRequested, DependencyFetched, DependencyFetchFailed, TaskCompleted, TaskFailed,
    TaskStopped, CancelRequested, FreeKeys, DrainRequested, ReplicateRequested,
]

"""The instructions ``WorkerState.handle`` returns: what the async shell must now do.

Each is a small frozen dataclass; the shell carries them out in order and reports back with
events (a fetch ends in DependencyFetched or DependencyFetchFailed, a StartTask in exactly one
of TaskCompleted, TaskFailed or TaskStopped).

Pure data: no I/O, no logic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Union

from ..resources import EMPTY, Resources

#: Where a task runs: a thread of the worker process (which sees no GPU), or a child process
#: started with ``CUDA_VISIBLE_DEVICES`` naming exactly the task's devices.
THREAD = "thread"
GPU_PROCESS = "gpu-process"


# -- to the shell itself ------------------------------------------------------------------


@dataclass(frozen=True)
class FetchDependency:
    """Fetch the input ``key`` from the peer ``worker`` (``nbytes`` is 0 when unknown)."""

    key: str
    worker: str
    nbytes: int = 0


@dataclass(frozen=True)
class StartTask:
    """Run ``key`` now on ``gpus`` (NVML indices, ``()`` for none); its inputs are all here."""

    key: str
    spec: bytes
    gpus: tuple[int, ...] = ()
    where: str = THREAD
    dependencies: tuple[str, ...] = ()
    resources: Resources = EMPTY


@dataclass(frozen=True)
class StopTask:
    """Kill ``key`` (its process group); then send TaskStopped, or whatever beat the kill."""

    key: str


@dataclass(frozen=True)
class ReleaseResult:
    """Drop the stored data of ``key``: a freed result, or an input no local task needs."""

    key: str


# -- to the scheduler ---------------------------------------------------------------------


@dataclass(frozen=True)
class ReportDone:
    key: str
    nbytes: int
    start: float
    stop: float
    duration: float
    peak_memory: int = 0
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class ReportFailed:
    """The task raised; ``exception`` and ``text`` are passed on from TaskFailed unchanged."""

    key: str
    exception: bytes
    text: str
    start: float | None = None
    stop: float | None = None


@dataclass(frozen=True)
class ReportCancelled:
    key: str


@dataclass(frozen=True)
class ReportRejected:
    """This worker will not run ``key`` (it can never fit here, or the worker is closing).

    Not a failure of the task: the scheduler places it elsewhere or says why it cannot.
    """

    key: str
    reason: str


@dataclass(frozen=True)
class ReportMissingData:
    """``key`` cannot start: its input ``dependency`` was on none of the workers ``tried``
    (``reason``: the last fetch error).

    The task is dropped here; the scheduler recomputes the input or fails the task.
    """

    key: str
    dependency: str
    tried: tuple[str, ...] = ()
    reason: str = ""
    permanent: bool = False  # the result cannot travel at all: computing it again won't help


@dataclass(frozen=True)
class ReportDraining:
    """This worker takes no new work: the scheduler stops placing tasks here."""


@dataclass(frozen=True)
class ReportReplicated:
    """This worker now holds a copy of the result ``key``, as the scheduler asked."""

    key: str
    nbytes: int


@dataclass(frozen=True)
class ReportReplicateFailed:
    key: str
    reason: str


# -- what a worker (re)registers with ----------------------------------------------------


@dataclass(frozen=True)
class RunningTask:
    key: str
    state: str  # "executing" or "cancelling"
    resources: Resources
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class WorkerSnapshot:
    """``WorkerState.snapshot()``: what a worker tells a scheduler it (re)connects to, so that
    work under way is kept, not run twice: running tasks, tasks not yet started (in arrival
    order) and the results computed here that it still holds (key -> nbytes)."""

    running: tuple[RunningTask, ...]
    waiting: tuple[str, ...]
    results: Mapping[str, int]


Action = Union[
    FetchDependency, StartTask, StopTask, ReleaseResult, ReportDone, ReportFailed,
    ReportCancelled, ReportRejected, ReportMissingData, ReportDraining, ReportReplicated,
    ReportReplicateFailed,
]

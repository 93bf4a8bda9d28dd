"""The instructions ``WorkerState.handle`` returns: what the async shell must now do.

What the worker tells the scheduler is an op of ``protocol.ops``, which the shell sends as it
is: ``TaskFinished``, ``TaskErred``, ``TaskStopped``, ``TaskRejected``, ``MissingData``,
``Draining``, ``Replicated``, ``ReplicateFailed``. The rest, below, are for the shell itself;
it carries them out in order and reports back with events (a fetch ends in DependencyFetched
or DependencyFetchFailed, a StartTask in exactly one of TaskFinished, TaskErred or
TaskStopped).

Pure data: no I/O, no logic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Union

from ..protocol.ops import (
    Draining, MissingData, ReplicateFailed, Replicated, TaskErred, TaskFinished, TaskRejected,
    TaskStopped,
)
from ..resources import EMPTY, Resources

#: Where a task runs: a thread of the worker process (which sees no GPU), or a child process
#: started with ``CUDA_VISIBLE_DEVICES`` naming exactly the task's devices.
THREAD = "thread"
GPU_PROCESS = "gpu-process"


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
    spec: tuple
    gpus: tuple[int, ...] = ()
    where: str = THREAD
    dependencies: tuple[str, ...] = ()
    resources: Resources = EMPTY


@dataclass(frozen=True)
class KillTask:
    """Kill ``key`` (its process group); then send TaskStopped, or whatever beat the kill."""

    key: str


@dataclass(frozen=True)
class ReleaseResult:
    """Drop the stored data of ``key``: a freed result, or an input no local task needs."""

    key: str


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
    order) and the results held here that the scheduler counts (key -> nbytes)."""

    running: tuple[RunningTask, ...]
    waiting: tuple[str, ...]
    results: Mapping[str, int]


#: What the worker tells the scheduler.
Report = Union[TaskFinished, TaskErred, TaskStopped, TaskRejected, MissingData, Draining,
               Replicated, ReplicateFailed]
Action = Union[FetchDependency, StartTask, KillTask, ReleaseResult, Report]

__all__ = [
    "Action", "Draining", "FetchDependency", "GPU_PROCESS", "KillTask", "MissingData",
    "ReleaseResult", "ReplicateFailed", "Replicated", "Report", "RunningTask", "StartTask",
    "THREAD", "TaskErred", "TaskFinished", "TaskRejected", "TaskStopped", "WorkerSnapshot",
]

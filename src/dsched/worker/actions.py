"""The instructions ``WorkerState.handle`` returns: what the async shell must now do.

What the worker tells the scheduler is an op of ``protocol.ops``, which the shell sends as it
is: ``TaskFinished``, ``TaskErred``, ``TaskStopped``, ``TaskRejected``, ``MissingData``,
``Draining``, ``Replicated``, ``ReplicateFailed``, ``AttemptStarted``, ``AttemptEnded``. The
rest, below, are for the shell itself; it carries them out in order and reports back with
events (a fetch ends in DependencyFetched or DependencyFetchFailed, a StartTask in exactly one
of TaskFinished, TaskErred or TaskStopped, a StartJob or an EndUnstartedJob in one
AttemptEnded, after an AttemptStarted for a job that could be spawned).

Pure data: no I/O, no logic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Union

from ..protocol.ops import (
    AttemptEnded, AttemptStarted, Draining, MissingData, ReplicateFailed, Replicated, TaskErred,
    TaskFinished, TaskRejected, TaskStopped,
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
class StartJob:
    """Record the job attempt ``key`` durably, then spawn its supervisor: ``job`` is the
    Execute's (command, env, cwd, time_limit, name); ``gpus`` its devices (NVML indices, those
    of ``GPU=N`` and of ``gpu<N>`` together); it may run until ``lease_until`` (monotonic)
    unless the lease is extended. ``hold``: its supervisor prepares it and waits for a
    ProceedJob (or a DropJob) before it spawns the command."""

    key: str
    job: Mapping
    gpus: tuple[int, ...] = ()
    resources: Resources = EMPTY
    lease_until: float = 0.0
    hold: bool = False


@dataclass(frozen=True)
class ProceedJob:
    """The scheduler has committed the held attempt ``key``: its supervisor spawns it now."""

    key: str


@dataclass(frozen=True)
class DropJob:
    """The held attempt ``key`` never runs (the session that sent it ended before its
    Proceed): its supervisor exits without spawning it, and its record goes, unreported."""

    key: str


#: Why a job is stopped (``KillJob.why``): the scheduler cancelled it, the worker shuts down,
#: or it held its GPUs idle (``gpuuse``; ``reason`` says how long).
CANCEL = "cancel"
SHUTDOWN = "shutdown"
IDLE = "idle"


@dataclass(frozen=True)
class KillJob:
    """Stop the running job ``key``: SIGTERM to its group, SIGKILL after the grace period.
    Its supervisor then reports the AttemptEnded (cancelled, or lost for a shutdown)."""

    key: str
    why: str = CANCEL
    reason: str = ""  # for a fault: what failed (the job's error)


@dataclass(frozen=True)
class ExtendLease:
    """The running jobs may run until ``until`` (the worker's monotonic clock)."""

    until: float


@dataclass(frozen=True)
class EndUnstartedJob:
    """Report that the job ``key`` ended without starting (hand an AttemptEnded stamped with
    the time back to the state): nothing was recorded or spawned for it."""

    key: str
    outcome: str
    error: str


@dataclass(frozen=True)
class ForgetAttempt:
    """The scheduler has the outcome of ``key``: delete its record (its log stays)."""

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
    order) and the results held here that the scheduler counts (key -> nbytes); and the job
    attempts it knows, running ones as AttemptStarted, ended ones not yet acknowledged as
    AttemptEnded (jobs are in neither ``running`` nor ``waiting``)."""

    running: tuple[RunningTask, ...]
    waiting: tuple[str, ...]
    results: Mapping[str, int]
    attempts: tuple[AttemptStarted | AttemptEnded, ...] = ()


#: What the worker tells the scheduler.
Report = Union[TaskFinished, TaskErred, TaskStopped, TaskRejected, MissingData, Draining,
               Replicated, ReplicateFailed, AttemptStarted, AttemptEnded]
Action = Union[FetchDependency, StartTask, KillTask, ReleaseResult, StartJob, KillJob,
               ExtendLease, EndUnstartedJob, ForgetAttempt, ProceedJob, DropJob, Report]

__all__ = [
    "Action", "AttemptEnded", "AttemptStarted", "CANCEL", "Draining", "DropJob", "EndUnstartedJob",
    "ExtendLease", "FetchDependency", "ForgetAttempt", "GPU_PROCESS", "IDLE", "KillJob", "KillTask",
    "MissingData", "ProceedJob", "ReleaseResult", "ReplicateFailed", "Replicated", "Report", "RunningTask",
    "SHUTDOWN", "StartJob", "StartTask", "THREAD", "TaskErred", "TaskFinished", "TaskRejected",
    "TaskStopped", "WorkerSnapshot",
]

"""The events ``SchedulerState.handle`` takes: what workers, clients and the clock said.

Each is a small frozen dataclass. The async shell builds them from messages; every event
carries ``now``, the scheduler's monotonic clock in seconds as the shell read it, because the
state itself reads no clock. Times a worker measured (``start``, ``stop``) are only used as
differences, so the two clocks need not agree.

Pure data: no I/O, no clock, no logic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Union

from ..jobs import JobSpec
from ..protocol import ops
from ..resources import EMPTY, Resources
from ..settings import default_of

_frozen = dataclass(frozen=True, slots=True, kw_only=True)


@_frozen
class TaskSpec:
    """One task of a submission, as the client described it.

    ``spec`` is forwarded to the worker untouched. ``dependencies`` are keys of tasks known
    to the scheduler or submitted in the same batch. ``workers`` restricts the task to those
    worker names or addresses (``None``: anywhere). ``prefix`` groups tasks whose durations
    are alike (the function name); empty means the part of the key before the first ``-``.
    ``wanted``: the submitting client holds a future for this key (an intermediate task of a
    graph is run only while a wanted task needs it). ``gpu_memory_retry``: run it once more,
    asking for more GPU memory, if an attempt runs out of it (``oomretry.py``).
    """

    key: str
    spec: bytes = b""
    dependencies: tuple[str, ...] = ()
    resources: Resources = EMPTY
    priority: int = 0
    retries: int = 0
    workers: tuple[str, ...] | None = None
    prefix: str = ""
    wanted: bool = True
    gpu_memory_retry: bool = False


# -- workers ------------------------------------------------------------------------------


@_frozen
class WorkerJoined:
    """A worker registered: ``resources`` is its total, ``gpus`` the NVML info (opaque).

    A worker that reconnects (after a network fault, or to a restarted scheduler) also says
    what it kept: ``held``, the results it holds as (key, nbytes) pairs, and ``running``, the
    tasks it is still executing. The scheduler adopts what it still needs and has the
    worker drop the rest, so no work is done twice. ``previous_exit`` says how the worker's
    previous process under the same name ended, when its nanny restarted it after a crash
    ("killed by signal 11 (SIGSEGV)"). ``attempts``: the job attempts it knows (running, or
    ended and not yet acknowledged), as ``WorkerAttemptStarted``/``WorkerAttemptEnded`` ops on the wire;
    ``job_lease``: how long it lets jobs run when cut off from the scheduler; ``containment``:
    how it kills what its jobs and GPU tasks start (shown, not used); ``devices``: the indices
    behind its ``GPU`` resource (none: abstract, 0 to N-1), their memory in ``gpus``;
    ``running_gpus``: the devices each running task holds, by key (a peer's: checked on use).
    ``machine_restarted``: the worker's records may have lost attempts that started (its
    machine started again since they were written): one it does not list is lost, not put back.
    """

    address: str
    name: str
    nthreads: int
    resources: Resources = EMPTY
    gpus: tuple[Mapping[str, Any], ...] = ()
    held: tuple[tuple[str, int], ...] = ()
    running: tuple[str, ...] = ()
    previous_exit: str | None = None
    attempts: tuple[Mapping[str, Any], ...] = ()
    job_lease: float = default_of("worker.job_lease")
    containment: str = ""
    devices: tuple[int, ...] = ()
    running_gpus: Mapping[str, Any] = field(default_factory=dict)
    machine_restarted: bool = False
    now: float


@_frozen
class WorkerHeartbeat:
    """A worker is alive; ``metrics`` (load, memory, GPU use) is kept for display only.
    ``sent``: the worker's clock when it sent it, from which its jobs' lease runs on (0: none
    asked)."""

    address: str
    metrics: Mapping[str, Any] | None = None
    sent: float = 0.0
    now: float


@_frozen
class WorkerDraining:
    """The worker stops taking work (SIGTERM): it finishes what runs within its deadline, and
    leaves once the results only it holds that are still needed are held elsewhere."""

    address: str
    now: float


@_frozen
class WorkerLeft:
    """The connection to a worker closed, or it said goodbye (``expected``, after a drain):
    its work is rescheduled."""

    address: str
    reason: str = "worker left"
    expected: bool = False
    now: float


# -- what a worker reports about a task -----------------------------------------------------


@_frozen
class WorkerTaskFinished:
    """``worker`` ran ``key`` and holds its result of ``nbytes`` bytes.

    ``start``/``stop`` are the worker's own clock; ``duration`` overrides ``stop - start``
    when the worker measured the function apart from its overhead.
    """

    key: str
    worker: str
    nbytes: int = 0
    start: float = 0.0
    stop: float = 0.0
    duration: float | None = None
    now: float


@_frozen
class WorkerTaskErred:
    """``key`` raised on ``worker``: ``exception`` is opaque (pickled), ``text`` readable;
    ``gpu``: what it did with its devices, as the worker sampled it (``worker/gpuuse.py``);
    ``oom``: it ran out of their memory (``dsched.oom``)."""

    key: str
    worker: str
    exception: bytes = b""
    text: str = ""
    gpu: Mapping[str, Any] | None = None
    oom: bool = False
    now: float


@_frozen
class WorkerTaskStopped:
    """``worker`` stopped ``key`` after a CancelTask: its thread and resources are free."""

    key: str
    worker: str
    now: float


@_frozen
class WorkerTaskRejected:
    """``worker`` gave ``key`` back without running it (closing, or it does not fit there)."""

    key: str
    worker: str
    reason: str = ""
    now: float


@_frozen
class WorkerMissingData:
    """``worker`` could not start ``key``: input ``dependency`` was on none of ``tried``
    (``reason``: the last fetch error, when there was one). ``permanent``: the result cannot
    travel at all (it cannot be pickled or sent, or unpickled there)."""

    key: str
    worker: str
    dependency: str
    tried: tuple[str, ...] = ()
    reason: str = ""
    permanent: bool = False
    now: float


@_frozen
class WorkerReplicated:
    """``worker`` now holds a copy of the result of ``key`` (``nbytes``), as asked."""

    key: str
    worker: str
    nbytes: int = 0
    now: float


@_frozen
class WorkerReplicateFailed:
    """``worker`` could not copy the result of ``key`` from where it was told to."""

    key: str
    worker: str
    reason: str = ""
    now: float


@_frozen
class WorkerAttemptStarted:
    """``worker`` started a job attempt (``report``: what it said)."""

    worker: str
    report: ops.AttemptStarted
    now: float


@_frozen
class WorkerAttemptEnded:
    """A job attempt ended on ``worker`` (``report``: how)."""

    worker: str
    report: ops.AttemptEnded
    now: float


# -- clients ------------------------------------------------------------------------------


@_frozen
class TasksSubmitted:
    """``client`` submits a batch of tasks; dependencies may point inside the batch.
    ``request``: its request id, named in a refusal."""

    client: str
    tasks: tuple[TaskSpec, ...]
    request: int | None = None
    now: float


@_frozen
class CancelRequested:
    """``client`` cancels ``keys``: it drops its interest in them and in the tasks it wants
    that depend on them; a task stops only once no client wants it and nothing waits on it."""

    client: str
    keys: tuple[str, ...]
    now: float


@_frozen
class KeysReleased:
    """``client`` holds no future for ``keys`` any more."""

    client: str
    keys: tuple[str, ...]
    now: float


@_frozen
class ClientDisconnected:
    """``client`` went away: it releases every key it wanted."""

    client: str
    now: float


@_frozen
class JobsSubmitted:
    """``client`` submits shell-command jobs in its request ``request``; ``at``: the wall
    clock then (shown as the submit time); ``watch``: the client is told when each ends."""

    client: str
    request: int
    jobs: tuple[JobSpec, ...]
    at: float = 0.0
    watch: bool = False
    now: float


@_frozen
class JobsCancelled:
    """``client`` cancels the jobs ``jobs`` (queued or running alike)."""

    client: str
    request: int
    jobs: tuple[int, ...]
    now: float


@_frozen
class JobsReleased:
    """``client`` lets the held jobs ``jobs`` run."""

    client: str
    request: int
    jobs: tuple[int, ...]
    now: float


@_frozen
class JobsWatched:
    """``client`` wants to hear when each of ``jobs`` ends."""

    client: str
    jobs: tuple[int, ...]
    now: float


@_frozen
class WorkersWatched:
    """``client`` wants to hear how many workers are connected, now and on each change."""

    client: str
    now: float


@_frozen
class JobsLoaded:
    """At start, before anything else: the jobs of the journal, each as its row, and the first
    number new jobs may have (the journal's high-water mark: numbers below it may have been
    given, even if the journal lost their jobs)."""

    rows: tuple[Mapping[str, Any], ...]
    now: float
    next_id: int = 1


@_frozen
class WorkerGpuFenced:
    """The device ``index`` of ``worker`` faulted (``reason``): no new work there."""

    worker: str
    index: int
    reason: str
    now: float


@_frozen
class WorkerGpuReleased:
    """The fenced device ``index`` of ``worker`` takes work again."""

    worker: str
    index: int
    now: float


@_frozen
class GpuReleaseRequested:
    """``client`` (an operator) asks that the fenced device ``index`` of the worker named
    ``worker`` take work again; answered to ``request``."""

    client: str
    request: int
    worker: str
    index: int
    now: float


# -- the clock ----------------------------------------------------------------------------


@_frozen
class SchedulerDraining:
    """The scheduler drains (SIGTERM): it refuses new tasks and jobs from now on, and goes on
    placing what it holds."""

    now: float


@_frozen
class Tick:
    """Time passed: heartbeat timeouts, ``no_worker_timeout`` and backfill estimates."""

    now: float


Event = Union[
    WorkerJoined, WorkerHeartbeat, WorkerDraining, WorkerLeft, WorkerTaskFinished, WorkerTaskErred,
    WorkerTaskStopped, WorkerTaskRejected, WorkerMissingData, WorkerReplicated, WorkerReplicateFailed, WorkerAttemptStarted,
    WorkerAttemptEnded, TasksSubmitted, CancelRequested, KeysReleased, ClientDisconnected,
    JobsSubmitted, JobsCancelled, JobsReleased, JobsWatched, WorkersWatched, JobsLoaded,
    WorkerGpuFenced, WorkerGpuReleased, GpuReleaseRequested, SchedulerDraining, Tick,
]

__all__ = [
    "WorkerAttemptEnded", "WorkerAttemptStarted", "JobsCancelled", "JobsLoaded", "JobsReleased",
    "JobsSubmitted", "JobsWatched", "WorkerTaskStopped", "CancelRequested", "ClientDisconnected", "Event", "KeysReleased",
    "WorkerMissingData", "WorkerReplicateFailed", "WorkerReplicated", "WorkerTaskErred", "WorkerTaskFinished",
    "WorkerTaskRejected", "TaskSpec", "TasksSubmitted", "Tick", "WorkerDraining", "SchedulerDraining",
    "WorkerHeartbeat", "WorkerGpuFenced", "WorkerGpuReleased", "GpuReleaseRequested",
    "WorkerJoined", "WorkerLeft", "WorkersWatched",
]

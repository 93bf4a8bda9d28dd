"""The ops that daemons and clients exchange: one frozen dataclass per op and per direction,
named for the outcome or command it carries (a worker reports ``TaskFinished``, the scheduler
tells clients ``FutureFinished``; the cores' events and actions have names of their own, see
``docs/architecture.md``). This module is the table of declarations: each class under
``@op("wire-name")`` with its annotated fields, and nothing else; those between a client and
the scheduler are declared in ``clientops.py`` (a ``sched`` call loads only them) and named
here too. ``fields.py`` turns each into an op with ``OP``, ``to_wire()`` and a checking
``from_wire(d)``; ``decode(d)`` (from there too) finds the class by name, and a malformed op
raises ``BadOp``.

Pure: no I/O; payloads stay opaque bytes (nothing here unpickles).
"""

from __future__ import annotations

from ..resources import EMPTY, Resources
from .clientops import (  # noqa: F401 - theirs: every op is named here
    Cancel, CancelJobs, Error, Info, JobEnded, QueryHistory, QueryJobs, Release, ReleaseGpu,
    ReleaseJobs, Reply, Submit, SubmitJobs, WatchJobs, WatchWorkers, Welcome, WhoHas,
    WorkerCount,
)
from .fields import OPS, BadOp, Spec, Task, decode, field, op

TYPE_CHECKING = False  # typing is for type checkers only (see ``ints.py``); the fields'
if TYPE_CHECKING:  # annotations are read as text (``fields._KINDS``)
    from typing import Any


# -- a worker and the scheduler -----------------------------------------------------------------


@op("register")
class Register:
    """A worker's first op: who it is, what it offers, and what it kept from an earlier session
    (``held`` results by size, ``running`` tasks). ``previous_exit`` says how its previous
    process ended, when its nanny restarted it after a crash. ``attempts``: the job attempts
    it knows of, each an AttemptStarted (still running) or AttemptEnded (not yet acknowledged)
    as on the wire; ``job_lease``: its ``worker.job_lease``, always said (the scheduler holds
    its jobs by it). ``containment``: how it kills all that a job or GPU task started
    (``cgroup``, ``subreaper``; "" from a worker that does not say). ``devices``: the indices
    behind its ``GPU`` resource (their memory in ``gpus``; none: abstract, 0 to N-1);
    ``running_gpus``: the devices of each running task that holds some, by key.
    ``machine_restarted``: its machine has started again since a scheduler last heard from
    its job directory's worker (or it cannot tell): a record not yet on the disk may be gone,
    so an attempt it does not list may have started."""

    name: str
    address: str
    nthreads: int
    job_lease: float
    resources: Resources = EMPTY
    gpus: tuple[dict, ...] = ()
    pid: int | None = None
    host: str = ""
    memory_limit: int | None = None
    held: dict[str, int] = field(default_factory=dict)
    running: tuple[str, ...] = ()
    previous_exit: str | None = None
    attempts: tuple[dict, ...] = ()
    containment: str = ""
    devices: tuple[int, ...] = ()
    running_gpus: dict = field(default_factory=dict)
    machine_restarted: bool = False


@op("registered")
class Registered:
    address: str


@op("heartbeat")
class Heartbeat:
    """Load, memory and GPU use; ``sent``: the worker's monotonic clock when it sent this,
    echoed back in a Lease."""

    cpu: float = 0.0
    memory: int = 0
    memory_limit: int | None = None
    gpus: tuple[dict, ...] = ()
    executing: int = 0
    sent: float = 0.0


@op("lease")
class Lease:
    """The scheduler heard the heartbeat the worker sent at ``sent`` (its own clock): the
    worker's jobs may run until ``sent + job_lease`` without hearing more."""

    sent: float


@op("execute")
class Execute:
    """Run ``key`` now, on the devices ``gpus`` (``dsched.devices``); ``who_has`` names the
    workers holding each input, ``nbytes`` sizes. A shell-command job's attempt carries ``job``
    (its command, ``env``, ``cwd``, ``time_limit``; see ``dsched.jobs``) and an empty ``spec``.
    ``hold``: sent ahead of the scheduler's commit of the attempt: prepare it, but spawn its
    command only once a Proceed names it; dropped, unreported, if the session ends first."""

    key: str
    spec: Spec
    resources: Resources = EMPTY
    priority: int = 0
    who_has: dict[str, tuple[str, ...]] = field(default_factory=dict)
    nbytes: dict[str, int] = field(default_factory=dict)
    job: dict | None = None
    gpus: tuple[int, ...] = ()
    hold: bool = False


@op("proceed")
class Proceed:
    """The attempts ``keys``, sent with ``hold``, are committed: spawn their commands."""

    keys: tuple[str, ...]


@op("stop-task")
class StopTask:
    """Nobody needs ``key`` any more: stop it (its process group) if it runs."""

    key: str


@op("free")
class Free:
    """Nobody needs these results any more: drop them."""

    keys: tuple[str, ...]


@op("replicate")
class Replicate:
    """Keep a copy of the result ``key``, fetched from one of ``who_has``."""

    key: str
    who_has: tuple[str, ...]
    nbytes: int = 0


@op("retire")
class Retire:
    """A draining worker may leave now."""


@op("draining")
class Draining:
    """This worker takes no new work."""


@op("gpu-fenced")
class GpuFenced:
    """The device ``index`` of this worker reported a fatal fault (``reason``): it takes no
    new work until released; the work on it has been stopped (each ends lost)."""

    index: int
    reason: str


@op("gpu-released")
class GpuReleased:
    """The fenced device ``index`` takes work again."""

    index: int


@op("unfence-gpu")
class UnfenceGpu:
    """To a worker: take work on the fenced device ``index`` again (an operator said so)."""

    index: int


@op("replicated")
class Replicated:
    key: str
    nbytes: int = 0


@op("replicate-failed")
class ReplicateFailed:
    key: str
    reason: str = ""


@op("unregister")
class Unregister:
    reason: str = "worker unregistered"


# -- outcomes of a task, end to end ---------------------------------------------------------------


@op("task-finished")
class TaskFinished:
    """A worker ran ``key``: its result is held there (``nbytes``), computed between ``start``
    and ``stop`` (``duration``: the function alone; negative: not timed)."""

    key: str
    nbytes: int = 0
    start: float = 0.0
    stop: float = 0.0
    duration: float | None = None
    peak_memory: int = 0
    gpus: tuple[int, ...] = ()


@op("task-erred")
class TaskErred:
    """``key`` raised on a worker (``exception``: its pickle, opaque; ``text``: the
    traceback). ``gpu``: what it did with its devices, as the worker sampled it
    (``worker/gpuuse.py``); ``oom``: it ran out of their memory (``dsched.oom``)."""

    key: str
    exception: bytes = b""
    text: str = ""
    start: float | None = None
    stop: float | None = None
    gpu: dict | None = None
    oom: bool = False


@op("task-stopped")
class TaskStopped:
    """A worker stopped ``key`` as asked (``StopTask``): its thread and resources are free."""

    key: str
    reason: str = ""


@op("task-rejected")
class TaskRejected:
    """A worker will not run ``key`` (it never fits there, or the worker is closing)."""

    key: str
    reason: str = ""


@op("missing-data")
class MissingData:
    """``key`` cannot start: its input ``dependency`` was on none of ``tried`` (``reason``:
    the last fetch error; ``permanent``: the result cannot travel at all)."""

    key: str
    dependency: str
    tried: tuple[str, ...] = ()
    reason: str = ""
    permanent: bool = False


# -- the scheduler to a client: the ends and news of its futures ---------------------------------


@op("future-finished")
class FutureFinished:
    """The task of ``key`` finished; ``who_has``: the workers holding its result."""

    key: str
    nbytes: int = 0
    who_has: tuple[str, ...] = ()


@op("future-erred")
class FutureErred:
    """The task of ``key`` failed for good: ``error`` says how (see the scheduler's actions),
    ``exception`` is the task's own exception pickled (opaque; empty when dsched failed it),
    ``text`` the traceback or the reason."""

    key: str
    error: str = ""
    text: str = ""
    exception: bytes = b""


@op("future-cancelled")
class FutureCancelled:
    """This client's cancel (of ``key``, or of a task ``key`` depends on) took effect."""

    key: str
    reason: str = ""


@op("future-moved")
class FutureMoved:
    """The result of ``key``, already reported finished, is held by ``who_has`` now (copied
    off a draining worker, or computed again after a loss); none: lost, computed again."""

    key: str
    who_has: tuple[str, ...]


@op("future-waiting")
class FutureWaiting:
    """``keys`` cannot run on any connected worker because of ``reason``; no reason means
    they can run again."""

    keys: tuple[str, ...]
    reason: str | None = None


# -- attempts of shell-command jobs, between a worker and the scheduler ----------------------


@op("attempt-started")
class AttemptStarted:
    """The attempt ``key`` (``job-<id>.<attempt>``) runs: recorded on the worker's disk, its
    process group led by ``pid``, its output going to ``log`` on that worker."""

    key: str
    pid: int
    log: str
    gpus: tuple[int, ...] = ()
    started: float = 0.0


@op("attempt-ended")
class AttemptEnded:
    """The attempt ``key`` ended: ``outcome`` is ``completed``, ``failed`` (non-zero exit, or
    it could not start), ``timeout``, ``cancelled`` or ``lost`` (killed when the worker lost the
    scheduler for longer than its lease, or its worker process died under it). The worker
    keeps this until the scheduler acknowledges it (``AttemptAck``). ``gpu``: what the
    attempt did with its devices, as the worker sampled it (``worker/gpuuse.py``); ``oom``: it
    failed for want of GPU memory (``dsched.oom``)."""

    key: str
    outcome: str
    exit_code: int | None = None
    error: str = ""
    log: str = ""
    started: float | None = None
    ended: float = 0.0
    gpu: dict | None = None
    oom: bool = False


@op("attempt-ack")
class AttemptAck:
    """The scheduler has recorded how these attempts ended: the worker may forget them."""

    keys: tuple[str, ...]


# -- a worker's data port -----------------------------------------------------------------------


@op("get-log")
class GetLog:
    """Up to ``limit`` bytes of the log of the attempt ``key`` from ``offset``; answered by Log."""

    id: int
    key: str
    offset: int = 0
    limit: int = 1 << 20


@op("log")
class Log:
    """The bytes of a log from the offset asked; ``size``: its length now; ``ended``: the
    attempt has ended (nothing more will be written); ``error``: why there is none."""

    id: int
    data: bytes = b""
    size: int = 0
    ended: bool = False
    error: str = ""


@op("get-data")
class GetData:
    id: int
    keys: tuple[str, ...]


@op("data")
class Data:
    """The answer to GetData ``id``: pickled results (``data``), keys not held here
    (``missing``), results that cannot be sent and why (``errors``); ``more``: another
    message completes this answer."""

    id: int
    data: dict[str, bytes] = field(default_factory=dict)
    missing: tuple[str, ...] = ()
    errors: dict[str, str] = field(default_factory=dict)
    more: bool = False


__all__ = ["BadOp", "OPS", "decode", "op"] + sorted(
    cls.__name__ for cls in OPS.values())

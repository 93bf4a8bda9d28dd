"""The events ``WorkerState.handle`` takes: what the scheduler, the peers, the executor and the
operator said.

What the scheduler sends is an op of ``protocol.ops`` and goes to the state as it is:
``Execute``, ``StopTask``, ``Free``, ``Replicate``, ``Lease``, ``AttemptAck``. So does what a
job's supervisor writes of its attempt, ``AttemptStarted`` and ``AttemptEnded``, which the worker
passes on to the scheduler unchanged. The events below are the worker's own: a run of a task
ended (``RunFinished``, ``RunErred``, ``RunStopped``: what the executor saw; the core answers
with the ``TaskFinished``, ``TaskErred`` or ``TaskStopped`` op the scheduler hears), a fetch
from a peer ended, the session with the scheduler opened or was lost, the attempts an earlier
worker process left were found, or the worker was told to drain. Times are seconds the shell measured
(wall-clock, or ``time.monotonic()`` where a lease is concerned), because the state itself reads
no clock.

Pure data: no I/O, no logic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ..protocol.ops import (
    AttemptAck, AttemptEnded, AttemptStarted, Execute, Free, Lease, Replicate, StopTask,
    UnfenceGpu,
)


@dataclass(frozen=True)
class RunFinished:
    """A run of ``key`` returned: the shell holds its result (``nbytes``), computed between
    ``start`` and ``stop`` (``duration``: the function alone; None: not timed apart)."""

    key: str
    nbytes: int = 0
    start: float = 0.0
    stop: float = 0.0
    duration: float | None = None
    peak_memory: int = 0


@dataclass(frozen=True)
class RunErred:
    """A run of ``key`` raised (``exception``: its pickle; ``text``: the traceback); ``gpu``:
    what it did with its devices, as the shell sampled it; ``oom``: it ran out of their memory
    (``dsched.oom``). Its fields are those of the ``TaskErred`` the core reports it with, which
    takes them as they are."""

    key: str
    exception: bytes = b""
    text: str = ""
    start: float | None = None
    stop: float | None = None
    gpu: dict | None = None
    oom: bool = False


@dataclass(frozen=True)
class RunStopped:
    """The process running ``key`` is gone: stopped as asked, or died (``reason``)."""

    key: str
    reason: str = ""


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
class DrainRequested:
    """Stop taking work (SIGTERM): hand back tasks not yet started; running ones go on."""


@dataclass(frozen=True)
class DrainTimedOut:
    """The drain deadline passed with work still running: stop the jobs too."""


@dataclass(frozen=True)
class SessionOpened:
    """The scheduler accepted the Register this worker sent at ``sent`` (its monotonic clock):
    the job lease runs from then."""

    sent: float


@dataclass(frozen=True)
class SessionLost:
    """The registered session with the scheduler ended (it reconnects on its own)."""


@dataclass(frozen=True)
class GpuFaulted:
    """The device ``index`` reported a fatal fault (``reason``: "gpu fault: Xid 79 on gpu1
    (GPU-...)"), as the worker's watch of NVML's events saw it."""

    index: int
    reason: str


@dataclass(frozen=True)
class AttemptsRecovered:
    """A worker process that starts found these ended attempts in its job directory, kept
    until the scheduler acknowledges them."""

    ended: tuple[AttemptEnded, ...]


Event = Union[
    Execute, StopTask, Free, Replicate, Lease, AttemptAck, RunFinished, RunErred, RunStopped,
    AttemptStarted, AttemptEnded, DependencyFetched, DependencyFetchFailed, DrainRequested,
    DrainTimedOut, SessionOpened, SessionLost, AttemptsRecovered, GpuFaulted, UnfenceGpu,
]

__all__ = [
    "AttemptAck", "AttemptEnded", "AttemptStarted", "AttemptsRecovered", "DependencyFetchFailed",
    "DependencyFetched", "DrainRequested", "DrainTimedOut", "Event", "Execute", "Free",
    "GpuFaulted", "Lease", "UnfenceGpu",
    "Replicate", "RunErred", "RunFinished", "RunStopped", "SessionLost", "SessionOpened",
    "StopTask",
]

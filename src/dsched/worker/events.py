"""The events ``WorkerState.handle`` takes: what the scheduler, the peers, the executor and the
operator said.

What the scheduler sends is an op of ``protocol.ops`` and goes to the state as it is:
``Execute``, ``StopTask``, ``Free``, ``Replicate``. So does what the executor says of a task,
named as the scheduler will hear it: ``TaskFinished``, ``TaskErred``, ``TaskStopped`` (its
process is gone). The events below are the worker's own: a fetch from a peer ended, or the
worker was told to drain. Times are wall-clock seconds the shell measured, because the state
itself reads no clock.

Pure data: no I/O, no logic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ..protocol.ops import Execute, Free, Replicate, StopTask, TaskErred, TaskFinished, TaskStopped


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


Event = Union[
    Execute, StopTask, Free, Replicate, TaskFinished, TaskErred, TaskStopped, DependencyFetched,
    DependencyFetchFailed, DrainRequested,
]

__all__ = [
    "DependencyFetchFailed", "DependencyFetched", "DrainRequested", "Event", "Execute", "Free",
    "Replicate", "StopTask", "TaskErred", "TaskFinished", "TaskStopped",
]

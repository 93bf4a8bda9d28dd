"""The actions ``SchedulerState.handle`` returns: what the async shell must now do.

Each is a small frozen dataclass; the shell carries them out in order. Messages to workers
(SendExecute, SendStopTask, SendFree, CloseWorker, SendAttemptAck; SendProceed the shell makes
itself), reports to clients (each task end is reported once: TellFinished, TellErred or
TellCancelled; TellWaiting when the reason a queued task cannot run changes; JobsReply and
TellJobEnded for jobs; TellWorkerCount when the number of workers changes), JournalWrite,
which comes first in a call's actions and must be committed before any of the others is
carried out, and LogLine records for the ``logging`` module.

Pure data: no I/O, no logic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Union

from ..resources import Resources

_frozen = dataclass(frozen=True, slots=True, kw_only=True)

#: The ``who_has``/``nbytes`` of a task without dependencies (shared, read-only).
NO_INPUTS: Mapping = MappingProxyType({})


# -- to workers ---------------------------------------------------------------------------


@_frozen
class SendExecute:
    """Run ``key`` on ``worker`` now: it holds a free thread and ``resources`` for it.

    ``who_has`` maps each dependency key to the addresses of the workers holding it and
    ``nbytes`` gives each one's size, so the worker fetches its inputs from its peers. The
    attempt of a shell-command job carries ``job``, what to run (see ``Job.payload``); ``gpus``
    are the devices granted (``dsched.devices``).
    """

    key: str
    worker: str
    spec: bytes
    resources: Resources
    priority: int = 0
    who_has: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: NO_INPUTS)
    nbytes: Mapping[str, int] = field(default_factory=lambda: NO_INPUTS)
    job: Mapping | None = None
    gpus: tuple[int, ...] = ()
    #: Set by the shell's group commit, never by the state: the job attempt is sent ahead of
    #: the commit of its row, for the worker to prepare; SendProceed follows the commit.
    hold: bool = False


@_frozen
class SendProceed:
    """The held job attempts ``keys`` sent to ``worker`` ahead of their commit are committed:
    their commands may start (made by the group commit in place of their SendExecute)."""

    worker: str
    keys: tuple[str, ...]


@_frozen
class SendStopTask:
    """Stop ``key`` on ``worker`` (kill its process group): nobody needs it any more. The
    worker answers with CancelConfirmed, or with the task's end if that came first."""

    key: str
    worker: str


@_frozen
class SendFree:
    """``worker`` may drop the results of ``keys``: nothing needs them any more."""

    worker: str
    keys: tuple[str, ...]


@_frozen
class SendReplicate:
    """``worker`` should fetch a copy of the result of ``key`` from ``source`` and keep it:
    ``source`` is draining and is the only worker holding that result, still needed."""

    worker: str
    key: str
    source: str
    nbytes: int = 0


@_frozen
class SendUnfenceGpu:
    """The fenced device ``index`` of ``worker`` may take work again (an operator said so)."""

    worker: str
    index: int


@_frozen
class SendRetire:
    """The draining ``worker`` may leave: it runs nothing, and what it alone held that is
    still needed is held elsewhere now (or cannot be moved)."""

    worker: str


@_frozen
class SendAttemptAck:
    """``worker`` may forget how the job attempts ``keys`` ended: the journal holds it."""

    worker: str
    keys: tuple[str, ...]


@_frozen
class CloseWorker:
    """The scheduler gave up on ``worker`` (heartbeat timeout): close it. ``refused``: it was
    never accepted (a name already taken, no threads), which a worker takes as final."""

    worker: str
    reason: str
    refused: bool = False


# -- to clients ---------------------------------------------------------------------------


@_frozen
class TellFinished:
    """``key`` finished; its result (``nbytes``) is held on the workers in ``who_has``."""

    key: str
    clients: tuple[str, ...]
    nbytes: int
    who_has: tuple[str, ...] = ()


@_frozen
class TellMoved:
    """The result of ``key``, already reported finished, is now held by ``who_has``: it was
    lost with a worker and computed again. Not a second end: the clients' fetches go there."""

    key: str
    clients: tuple[str, ...]
    who_has: tuple[str, ...]


@_frozen
class TellErred:
    """``key`` failed for good.

    ``error`` says how: ``exception`` (the task raised; ``exception`` holds it, opaque),
    ``killed_worker`` (workers died running it), ``no_worker`` (``no_worker_timeout``),
    ``unfetchable`` (its result could never be sent to the workers that needed it),
    ``rejected`` (workers kept refusing it),
    ``dependency`` (an input failed; ``exception`` is that input's), ``unknown_dependency``,
    ``cycle`` or ``reserved_key`` (the submission was wrong).
    """

    key: str
    clients: tuple[str, ...]
    error: str
    text: str
    exception: bytes = b""


@_frozen
class TellCancelled:
    """``clients`` cancelled ``key`` (or a task it depends on): their futures end cancelled.
    The task itself runs on while another client wants it."""

    key: str
    clients: tuple[str, ...]
    reason: str


@_frozen
class TellWaiting:
    """The tasks ``keys`` of ``client`` cannot run on any connected worker because of
    ``reason``; ``reason`` None means they can run again (a fitting worker joined)."""

    client: str
    keys: tuple[str, ...]
    reason: str | None


@_frozen
class JobsReply:
    """The answer to a client's job request ``request``: ``value``, or ``error`` (nothing
    was done)."""

    client: str
    request: int
    value: object = None
    error: str = ""


@_frozen
class TellJobEnded:
    """Job ``job`` (its view) ended; ``clients`` asked to hear of it."""

    clients: tuple[str, ...]
    job: Mapping


@_frozen
class TellWorkerCount:
    """``count`` workers are connected now; ``clients`` asked to hear it, and each change."""

    clients: tuple[str, ...]
    count: int


# -- to the journal ---------------------------------------------------------------------------


@_frozen
class JournalWrite:
    """Commit ``rows`` (each the whole row of one job) to the journal before any other action
    of the same ``handle`` call is carried out. ``causes`` say why (``submit``, ``dispatch``,
    ``start``, ``end``, ...): the crash tests stop the scheduler around some of them.
    ``attempts``: a row for each attempt that ended (``attemptrows.py``), in the same
    transaction as the job rows."""

    rows: tuple[Mapping, ...]
    causes: frozenset[str]
    attempts: tuple[Mapping, ...] = ()


# -- to the log ---------------------------------------------------------------------------


@_frozen
class LogLine:
    """A decision worth a log line: ``logger.log(level, msg, *args)`` (formatted lazily).

    ``detail``: the long text the line stands for (a traceback), logged only at DEBUG.
    ``pace``: the key prefix of a task failure; such lines come in floods, so the shell logs
    few of them a minute and counts the rest (``pacedlog.py``)."""

    level: int
    msg: str
    args: tuple = ()
    detail: str = ""
    pace: str = ""

    def message(self) -> str:
        return self.msg % self.args if self.args else self.msg


@_frozen
class WorkerAccepted:
    """The worker that registered from ``worker`` is a member now: tell it so, before
    anything else addressed to it."""

    worker: str


@_frozen
class GrantLease:
    """A member worker's heartbeat sent at ``sent`` (its clock) extends its jobs' lease."""

    worker: str
    sent: float


@_frozen
class Refused:
    """``client``'s request ``request`` is refused, nothing of it done: ``reason``; ``keys``:
    the tasks it submitted, whose futures fail with it."""

    client: str
    request: int | None
    reason: str
    keys: tuple[str, ...] = ()


#: LogLine levels, the numbers of the ``logging`` module (not imported: this module does no I/O).
DEBUG, INFO, WARNING = 10, 20, 30

Action = Union[
    SendExecute, SendStopTask, SendFree, SendReplicate, SendRetire, SendAttemptAck, SendUnfenceGpu,
    SendProceed, CloseWorker, TellFinished,
    TellMoved, TellErred, TellCancelled, TellWaiting, JobsReply, TellJobEnded, TellWorkerCount,
    JournalWrite, LogLine, WorkerAccepted, GrantLease, Refused,
]

__all__ = [
    "Action", "SendAttemptAck", "SendProceed", "TellJobEnded", "JobsReply", "JournalWrite", "SendStopTask", "CloseWorker", "SendExecute", "SendFree", "LogLine", "NO_INPUTS",
    "SendReplicate", "TellCancelled", "TellErred", "TellFinished", "TellMoved",
    "TellWaiting", "TellWorkerCount", "SendRetire", "WorkerAccepted", "GrantLease", "Refused",
    "SendUnfenceGpu",
]

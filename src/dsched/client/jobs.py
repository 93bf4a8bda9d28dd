"""Shell-command jobs from Python: ``submit_command`` and the future of a job.

A job is queued by the scheduler, written to its journal before it is acknowledged, and runs
on a worker in a process group of its own (see ``docs/jobs.md``). ``submit_command`` returns a
:class:`JobFuture` at once: its ``job_id()`` is the job's number once the scheduler has
acknowledged it, and its ``result()`` a :class:`JobResult` once the job has ended, as
``subprocess.run`` returns a completed process: it holds the exit code and where the log is,
whether the command succeeded or not (``check()`` raises :class:`JobFailed` when it did not).
A cancelled job's ``result()`` raises CancelledError.

The client's ``JobDesk`` matches the scheduler's replies and job ends to the futures; it runs
on the client's loop, except ``submit``, which any thread may call. A JobFuture reaches its
client only through the ``Owner`` interface of :mod:`.future`, the desk only through the
client's outbox. Jobs outlive a restart of their scheduler, so a client that loses it while
jobs are in flight connects again and the desk sends their submissions and watches again: a
submission whose reply was lost names, under its submission id, the job it was already given,
not a second one.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import SchedError
from ..jobs import JobSpec
from ..jobspec import refusal
from ..protocol import ops
from .future import CancelledError, FutureState, FutureStatus, Owner
from .outbox import Deferred, ClientOutbox

PENDING = FutureStatus.pending
#: The most jobs one submit-jobs carries: a loop of a million submissions is a thousand ops of
#: about 100 KB, each a short step of the scheduler, not one op it would take seconds over.
BATCH = 1000
#: Submissions made on the client's own loop (an asynchronous client) go in batches of this
#: many, each sent as soon as it is full: the scheduler takes one while the caller, which
#: keeps the loop busy, makes the next.
EAGER = 100


@dataclass(frozen=True)
class JobResult:
    """How a job ended: ``state`` (``completed``, ``failed``, ``timeout``, ``lost``), the
    command's ``exit_code`` (None when it did not exit by itself: it could not start, or it
    was lost), where its ``log`` is (a path on ``worker``), and ``detail`` in words."""

    job: int
    state: str
    exit_code: int | None
    log: str
    worker: str
    address: str
    detail: str
    attempt: int
    started: float | None
    ended: float | None

    @property
    def ok(self) -> bool:
        return self.state == "completed"

    @property
    def returncode(self) -> int | None:
        """``exit_code``, by the name ``subprocess`` gives it."""
        return self.exit_code

    def check(self) -> "JobResult":
        """This result if the job completed; else raise JobFailed."""
        if not self.ok:
            raise JobFailed(self)
        return self

    @classmethod
    def from_view(cls, view: Mapping[str, Any]) -> "JobResult":
        return cls(job=view["id"], state=view["state"], exit_code=view.get("exit_code"),
                   log=view.get("log") or "", worker=view.get("worker") or "",
                   address=view.get("address") or "", detail=view.get("detail") or "",
                   attempt=view.get("attempt") or 0, started=view.get("started"),
                   ended=view.get("ended"))


class JobFailed(SchedError):
    """A job ended without completing (``JobResult.check``); ``result`` says how."""

    def __init__(self, result: JobResult):
        self.result = result
        how = f"exit code {result.exit_code}" if result.exit_code is not None else result.state
        where = f"; log: {result.worker}:{result.log}" if result.log else ""
        detail = f" ({result.detail})" if result.detail else ""
        super().__init__(f"job {result.job} {result.state}: {how}{detail}{where}")


class JobFuture:
    """A job submitted with ``submit_command`` (or watched with ``watch_jobs``).

    With a blocking Client, ``job_id()`` and ``result()`` block; with an asynchronous client
    on its own loop they return coroutines, and ``await future`` gives the result.
    """

    __slots__ = ("_owner", "_desk", "id", "_submitted", "_ended", "_result", "_cancel_asked")

    def __init__(self, owner: Owner, desk: "JobDesk", job_id: int | None = None):
        self._owner = owner
        self._desk = desk
        self.id = job_id
        self._cancel_asked = False  # asked again after a reconnect, should the first be lost
        self._submitted = FutureState("submission")
        self._ended = FutureState("job")
        self._result: JobResult | None = None
        if job_id is not None:
            self._submitted.finish(FutureStatus.finished)

    # -- what the desk tells it (on the loop) -------------------------------------------------

    def _acknowledged(self, job_id: int) -> None:
        self.id = job_id
        self._ended.key = f"job {job_id}"
        self._submitted.finish(FutureStatus.finished)

    def _failed(self, error: BaseException, status: FutureStatus = FutureStatus.error) -> None:
        for state in (self._submitted, self._ended):
            state.finish(status, exception=error, reason=str(error))

    def _cancelled_unsent(self) -> None:
        reason = "cancelled before it was submitted"
        self._submitted.finish(FutureStatus.cancelled, reason=reason)
        self._ended.finish(FutureStatus.cancelled, reason=reason)

    def _end(self, view: Mapping[str, Any]) -> None:
        if view.get("state") is None:  # the scheduler does not know it
            self._failed(SchedError(f"job {self.id}: {view.get('detail') or 'unknown job'}"))
            return
        self._result = JobResult.from_view(view)
        if view["state"] == "cancelled":
            self._ended.finish(FutureStatus.cancelled, reason=view.get("detail") or "")
        else:
            self._ended.finish(FutureStatus.finished)

    # -- the API ------------------------------------------------------------------------------

    @property
    def status(self) -> str:
        """``pending`` until the job ends, then how it ended (``completed``, ``failed``,
        ``timeout``, ``lost``, ``cancelled``), or ``error`` when it was never queued."""
        state = self._ended.status
        if state is FutureStatus.finished:
            return self._result.state
        return state.value

    def done(self) -> bool:
        return self._ended.status is not PENDING

    def cancelled(self) -> bool:
        return self._ended.status is FutureStatus.cancelled

    def job_id(self, timeout: float | None = None) -> Any:
        """The job's number, once the scheduler has queued it (raises why it did not)."""
        if self._owner.on_loop():
            return self._job_id_async(timeout)
        if not self._submitted.wait(timeout):
            raise TimeoutError(f"the job was not acknowledged within {timeout} seconds")
        return self._job_id_now()

    async def _job_id_async(self, timeout: float | None = None) -> int:
        await _wait(self._submitted, timeout, "the job was not acknowledged")
        return self._job_id_now()

    def _job_id_now(self) -> int:
        if self._submitted.exception is not None:
            raise self._submitted.exception
        if self.id is None:  # cancelled before it was sent
            raise CancelledError(f"the job was {self._submitted.reason}")
        return self.id

    def result(self, timeout: float | None = None) -> Any:
        """Wait until the job ends; its JobResult (CancelledError if it was cancelled)."""
        if self._owner.on_loop():
            return self._result_async(timeout)
        if not self._ended.wait(timeout):
            raise TimeoutError(f"job {self.id} did not end within {timeout} seconds")
        return self._result_now()

    async def _result_async(self, timeout: float | None = None) -> JobResult:
        await _wait(self._ended, timeout, f"job {self.id} did not end")
        return self._result_now()

    def _result_now(self) -> JobResult:
        state = self._ended
        if state.status is FutureStatus.cancelled:
            raise CancelledError(f"job {self.id} was cancelled: {state.reason}")
        if state.exception is not None:
            raise state.exception
        return self._result

    def __await__(self):
        return self._result_async().__await__()

    def cancel(self) -> None:
        """Cancel the job (queued or running); its result then raises CancelledError.

        The cancel is queued behind the job's submission: one asked before the submission
        left is never sent, nor is the job; one asked before the job's number came back goes
        as soon as it does. ``Client.close()`` waits until each is acknowledged."""
        if self._cancel_asked or self.done():
            return
        self._cancel_asked = True
        self._owner.send(Deferred(lambda: self._desk.cancel(self)))

    def _dependency_id(self) -> int:
        """Its job's number, as a dependency of another job (``jobspec.job_spec``)."""
        job = self.job_id() if not self._owner.on_loop() else self.id
        if job is None:
            raise ValueError("a dependency on a job not yet acknowledged: await its "
                             "job_id() first")
        return job

    def __repr__(self) -> str:
        return f"<JobFuture {self.id if self.id is not None else '(submitting)'}: {self.status}>"


async def _wait(state: FutureState, timeout: float | None, what: str) -> None:
    if state.status is not PENDING:
        return
    if timeout is None:  # no timer: a thousand jobs awaited at once do without a thousand
        return await state.wait_async()
    try:
        await asyncio.wait_for(state.wait_async(), timeout)
    except asyncio.TimeoutError:
        raise TimeoutError(f"{what} within {timeout} seconds") from None


class JobDesk:
    """A client's jobs in flight: submissions waiting for their number, futures waiting for
    their job's end. Everything but ``submit`` runs on the client's loop.

    Submissions queued one after another, with nothing queued between them, leave as one
    submit-jobs op (a batch), which the scheduler takes in one step and one commit: a loop of
    ``submit_command`` costs each job a fraction of an op. The scheduler takes or refuses a
    batch whole, so a job that runs after others goes alone: an unknown job among those is
    what the scheduler refuses one job for and not its neighbours (the rest it checks, the
    client checks first). A batch refused all the same is sent again job by job, so that each
    job is queued or refused as it would have been alone."""

    def __init__(self, owner: Owner, outbox: ClientOutbox):
        self.owner = owner
        self.outbox = outbox
        #: Batches sent and not yet answered, by request id.
        self.submitting: dict[int, list[_Submitting]] = {}
        self.watching: dict[int, list[JobFuture]] = {}
        #: Cancels sent and not yet acknowledged, by request id: their jobs.
        self.cancelling: dict[int, tuple[int, ...]] = {}
        self._settled = asyncio.Event()
        self._settled.set()
        #: The batch last queued, while it may still grow: its op not made, nothing after it.
        self._open: _Batch | None = None
        self._lock = threading.Lock()

    def submit(self, spec: JobSpec) -> JobFuture:
        """Queue ``spec`` (any thread); its future learns its number, then its end."""
        future = JobFuture(self.owner, self)
        item = _Submitting(self.outbox.next_id(), future, spec)
        alone = bool(spec.after_ok or spec.after_any)
        with self._lock:
            batch = self._open
            if (not alone and batch is not None and len(batch.items) < BATCH
                    and self.outbox.last_queued() is batch.deferred):
                batch.items.append(item)
                if len(batch.items) == EAGER and self.owner.on_loop():
                    self._open = None  # full: it goes now, and the next starts a batch
                    batch = None
                else:
                    return future
            else:
                batch = _Batch(item, self)
                self._open = None if alone else batch
        if batch is None:
            self.outbox.flush_now()
        else:
            self.outbox.enqueue(batch.deferred)
        return future

    def sent(self, batch: _Batch) -> ops.SubmitJobs | None:
        """On the loop, as the batch goes out: wait for its reply. A job cancelled before it
        left is not sent: it was never queued, and its future says it was cancelled."""
        with self._lock:  # closed: a later submission starts a batch of its own
            if self._open is batch:
                self._open = None
        items = []
        for item in batch.items:
            if item.future._cancel_asked:
                item.future._cancelled_unsent()
            else:
                items.append(item)
        if not items:
            return None
        return self._send(items, make=True)

    def _send(self, items: list[_Submitting], make: bool = False) -> ops.SubmitJobs | None:
        """Wait for the reply to ``items``, sent as one op (made here for the outbox to send
        where ``make``, else sent now)."""
        request = items[0].request
        self.submitting[request] = items
        self._settled.clear()
        op = ops.SubmitJobs(id=request, jobs=tuple(item.spec.to_wire() for item in items),
                            watch=True)
        if make:
            return op
        self.outbox.send(op)
        return None

    def cancel(self, future: JobFuture) -> ops.CancelJobs | None:
        """On the loop, in order after the job's submission: the cancel of its job, or None
        while its number is not known (then it goes with the submission's reply)."""
        if future.id is None or future.done():
            return None
        request = self.outbox.next_id()
        self.cancelling[request] = (future.id,)
        self._settled.clear()
        return ops.CancelJobs(id=request, jobs=(future.id,))

    def watch(self, job_id: int) -> JobFuture:
        """A future of the job ``job_id``, submitted before (on the loop)."""
        future = JobFuture(self.owner, self, job_id)
        self._watch(future)
        return future

    def _watch(self, future: JobFuture, told: bool = False) -> None:
        """Wait for the end of ``future``'s job; ``told``: the scheduler watches it for this
        client already (it was submitted with ``watch``)."""
        futures = self.watching.setdefault(future.id, [])
        futures.append(future)
        if len(futures) == 1 and not told:
            self.outbox.send(ops.WatchJobs(jobs=(future.id,)))

    def on_reply(self, op: Any) -> bool:
        """A Reply or Error: True if it answered a submission or a cancel here."""
        if self.cancelling.pop(op.id, None) is not None:
            self._settle()
            return True
        items = self.submitting.pop(op.id, None)
        if items is None:
            return False
        if type(op) is ops.Error:
            if len(items) > 1:  # nothing was queued: again, one by one
                for item in items:
                    if item.future._cancel_asked:  # never queued: it need not be
                        item.future._cancelled_unsent()
                    else:
                        self._send([item])
                self._settle()
                return True
            items[0].future._failed(refusal(op.reason))
        for item, job in zip(items, op.value if type(op) is ops.Reply else ()):
            future = item.future
            future._acknowledged(job)
            self._watch(future, told=True)
            if future._cancel_asked:  # asked while the number was on its way
                self.outbox.send(self.cancel(future))
        self._settle()
        return True

    def _settle(self) -> None:
        if not self.submitting and not self.cancelling:
            self._settled.set()

    async def settle(self, timeout: float) -> list[str]:
        """Wait until every submission and cancel sent has been answered (``Client.close``
        waits so, to drop nothing it was asked to send). What was left unanswered, in words."""
        try:
            await asyncio.wait_for(self._settled.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return self.unsettled()

    def unsettled(self) -> list[str]:
        return ([f"the submission of {' '.join(item.spec.command)[:60]!r}"
                 for items in self.submitting.values() for item in items]
                + [f"the cancel of job {job}" for jobs in self.cancelling.values()
                   for job in jobs])

    def on_ended(self, op: ops.JobEnded) -> None:
        for future in self.watching.pop(op.job.get("id"), ()):
            future._end(op.job)

    def in_flight(self) -> bool:
        """Whether a submission waits for its reply or a job for its end."""
        return bool(self.submitting or self.watching)

    def resend(self) -> None:
        """Connected again: each submission not answered goes again, with its submission id,
        each watched job is watched again, and each cancel asked of one is asked again (one
        asked while disconnected went nowhere; cancelling twice is harmless)."""
        for items in list(self.submitting.values()):
            self._send(items)
        if self.watching:
            self.outbox.send(ops.WatchJobs(jobs=tuple(self.watching)))
        self.cancelling.clear()
        cancelled = tuple(job for job, futures in self.watching.items()
                          if any(f._cancel_asked for f in futures))
        if cancelled:
            request = self.outbox.next_id()
            self.cancelling[request] = cancelled
            self.outbox.send(ops.CancelJobs(id=request, jobs=cancelled))
        self._settle()

    def lost(self, error: BaseException) -> None:
        """The scheduler is gone: every future here fails (the jobs themselves go on)."""
        futures = [*(item.future for items in self.submitting.values() for item in items),
                   *(f for fs in self.watching.values() for f in fs)]
        self.submitting, self.watching, self.cancelling = {}, {}, {}
        self._settled.set()
        for future in futures:
            future._failed(error, FutureStatus.lost)



class _Submitting:
    """A submission not yet answered: kept to be sent again after a reconnect."""

    __slots__ = ("request", "future", "spec")

    def __init__(self, request: int, future: JobFuture, spec: JobSpec):
        self.request, self.future, self.spec = request, future, spec


class _Batch:
    """Submissions queued one after another, to leave as one op by ``deferred``."""

    __slots__ = ("items", "deferred")

    def __init__(self, first: _Submitting, desk: JobDesk):
        self.items = [first]
        self.deferred = Deferred(lambda: desk.sent(self))

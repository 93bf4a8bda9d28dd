"""What the scheduler sends a client, each op to its handler; requests and their replies.

Future reports end or annotate the futures of their key: ``FutureFinished``, ``FutureMoved``
(a finished result is held elsewhere now: copied off a draining worker, or computed again after
a loss; held nowhere: lost, and its future is pending again until it ends anew),
``FutureErred``, ``FutureCancelled`` (this client's cancel took effect) and ``FutureWaiting``
(the reason no connected worker can run a task yet, or none once one can).
Job ends and the replies to job submissions go to the client's JobDesk; other replies to the
request waiting for them; an error without a request names the keys of a refused submit. The
number of workers (``WorkerCount``), once asked for, comes on each change, to whoever waits
for enough of them.

Runs on the client's loop. Sends nothing but requests, and decides nothing about the
connection: ``read`` returns why it ended and the client takes it from there.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, Callable, Mapping

from ..comm import Comm
from ..errors import CommClosedError, RemoteProtocolError, SchedError, TaskFailedError
from ..protocol import ops
from .future import FutureState, FutureStatus
from .jobs import JobDesk
from .outbox import ClientOutbox

logger = logging.getLogger("dsched.client")

States = Mapping[str, FutureState]


def task_finished(states: States, op: ops.FutureFinished) -> None:
    state = states.get(op.key)
    if state is not None:  # else released by now
        state.who_has = op.who_has
        state.nbytes = op.nbytes
        state.finish(FutureStatus.finished)


def result_moved(states: States, op: ops.FutureMoved) -> None:
    state = states.get(op.key)
    if state is not None:
        state.who_has = op.who_has
        if not op.who_has:  # lost with its workers: computed again, or failing for good
            state.reset()


def task_erred(states: States, op: ops.FutureErred) -> None:
    state = states.get(op.key)
    if state is None:
        return
    if op.exception:
        state.error_from_payload(op.exception, op.text, op.error)
    else:  # a failure of dsched's, not of the task's code: the message names the task
        text = op.text if op.key in op.text else f"task {op.key}: {op.text}"
        state.finish(FutureStatus.error, exception=TaskFailedError(text, op.error),
                     traceback=None, reason=op.error)


def task_cancelled(states: States, op: ops.FutureCancelled) -> None:
    state = states.get(op.key)
    if state is not None:
        state.finish(FutureStatus.cancelled, reason=op.reason)


def task_waiting(states: States, op: ops.FutureWaiting) -> None:
    reason = op.reason or ""
    for key in op.keys:
        state = states.get(key)
        if state is not None:
            state.reason = reason
    if reason:
        logger.warning("%d task(s) cannot run yet: %s", len(op.keys), reason)


TASK_REPORTS: dict[type, Callable[[States, Any], None]] = {
    ops.FutureFinished: task_finished, ops.FutureMoved: result_moved, ops.FutureErred: task_erred,
    ops.FutureCancelled: task_cancelled, ops.FutureWaiting: task_waiting,
}


class Reports:
    """One client's side of the connection's incoming half: a handler for each kind of op,
    and the requests waiting for their reply."""

    def __init__(self, outbox: ClientOutbox, jobs: JobDesk):
        self._outbox = outbox
        self._jobs = jobs
        self._requests: dict[int, asyncio.Future] = {}
        self._handlers: dict[type, Callable[[Any], None]] = {
            kind: functools.partial(apply, outbox.states) for kind, apply in TASK_REPORTS.items()}
        self._handlers.update({ops.JobEnded: jobs.on_ended, ops.Reply: self._reply,
                               ops.Error: self._error, ops.WorkerCount: self._worker_count})
        #: The number of workers connected, as the scheduler last said; None until it says,
        #: once this connection watches them (``workers_at_least``).
        self.worker_count: int | None = None
        self._watching = False
        self._count_waiters: dict[asyncio.Future, int] = {}

    async def read(self, comm: Comm) -> str:
        """Handle every op from ``comm`` until the connection ends; why it ended. A malformed
        op closes the connection with the reason."""
        try:
            async for op in comm:
                self.on_op(op)
        except CommClosedError as error:
            return error.reason
        except RemoteProtocolError as error:  # the scheduler sent something malformed
            comm.protocol_error(error)
            return f"protocol error: {error}"
        return "the scheduler closed the connection"

    def on_op(self, d: dict) -> None:
        op = ops.decode(d)
        handler = self._handlers.get(type(op))
        if handler is None:
            raise ops.BadOp(f"{op.OP} is not an op the scheduler sends a client")
        handler(op)

    async def request(self, make: Callable[[int], Any], timeout: float | None) -> Any:
        """Send the request ``make(id)`` after every op queued before it, and return the value
        of its reply (TimeoutError after ``timeout`` seconds)."""
        self._outbox.flush()
        request_id = self._outbox.next_id()
        waiter = asyncio.get_running_loop().create_future()
        self._requests[request_id] = waiter
        self._outbox.send(make(request_id))
        try:
            async with asyncio.timeout(timeout):
                return await waiter
        finally:
            self._requests.pop(request_id, None)

    async def workers_at_least(self, n: int) -> None:
        """Return once the scheduler says at least ``n`` workers are connected. The first call
        on a connection asks it to tell the number now and on each change (WatchWorkers); later
        calls wait on what it tells, and ask nothing."""
        if not self._watching:
            self._watching = True
            self._outbox.flush()
            self._outbox.send(ops.WatchWorkers())
        if self.worker_count is not None and self.worker_count >= n:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._count_waiters[waiter] = n
        try:
            await waiter
        finally:
            self._count_waiters.pop(waiter, None)

    def _worker_count(self, op: ops.WorkerCount) -> None:
        self.worker_count = op.count
        for waiter, n in list(self._count_waiters.items()):
            if n <= op.count and not waiter.done():
                waiter.set_result(None)

    def unsendable(self, op: dict, error: Exception) -> None:
        """``op`` cannot be encoded (the comm left it out): the call that made it fails, as if
        the scheduler had refused it, and nothing else does."""
        reason = f"cannot send {op.get('op')}: {error}"
        if op.get("op") == "submit":
            failure = SchedError(reason)
            for task in op.get("tasks", ()):
                state = self._outbox.states.get(task.get("key"))
                if state is not None:
                    state.finish(FutureStatus.error, exception=failure, reason=reason)
        elif type(op.get("id")) is int and op["id"]:
            self._reply(ops.Error(id=op["id"], reason=reason))
        else:
            logger.error("Left out an op that cannot be sent: %s", reason)

    def lost(self, error: BaseException) -> None:
        """The connection is gone: every request waiting raises ``error``, and so does every
        wait for workers (a new connection asks for their number again)."""
        for request in (*self._requests.values(), *self._count_waiters):
            if not request.done():
                request.set_exception(error)
        self._watching, self.worker_count = False, None

    def _reply(self, op: ops.Reply | ops.Error) -> None:
        if self._jobs.on_reply(op):
            return
        request = self._requests.pop(op.id, None)
        if request is None or request.done():
            return
        if type(op) is ops.Error:
            request.set_exception(SchedError(op.reason))
        else:
            request.set_result(op.value)

    def _error(self, op: ops.Error) -> None:
        if op.id is not None:
            self._reply(op)
            return
        logger.error("The scheduler refused a message: %s", op.reason)
        refused = SchedError(f"the scheduler refused the task: {op.reason}")
        for key in op.keys:  # the keys of a refused submit
            state = self._outbox.states.get(key)
            if state is not None:
                state.finish(FutureStatus.error, exception=refused, reason=op.reason)

"""Futures: a handle on one task's result, shared by every Future object of the same key.

The client keeps one :class:`FutureState` per key and counts the Future objects that point at
it; when the last one is garbage-collected the client tells the scheduler that nobody needs the
result, and the workers drop it. State changes arrive on the client's event loop thread and
wake blocking callers (``result()``), coroutines (``await future``) and done-callbacks.

``Future.__del__`` may run in any thread, at any allocation (the garbage collector), so it
takes no lock: it only queues the key for the client's loop, which does the counting.

A Future reaches its client only through the :class:`Owner` interface the client gives it,
and holds no rule of the client's: what a blocking call may do where is the client's to say.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from enum import Enum
from typing import Any, Callable, Coroutine, Protocol

from ..errors import SchedError
from ..serialize import loads_exception
from .bridge import on_loop

logger = logging.getLogger("dsched.client")


class FutureStatus(str, Enum):
    pending = "pending"
    finished = "finished"
    error = "error"
    cancelled = "cancelled"
    lost = "lost"


PENDING = FutureStatus.pending


class CancelledError(SchedError):
    """The task was cancelled (by a user, or because a task it depends on was)."""


#: Guards the waiters of every FutureState. Held only for a few field changes, never while
#: user code, a callback or anything that may block runs.
_LOCK = threading.Lock()


class FutureState:
    """What the client knows about one key; changed only on the client's loop thread.

    ``refs`` counts the live Future objects of the key (the client changes it under its lock);
    ``who_has`` lists the workers holding the result once it is finished, ``nbytes`` its size.
    Waiters are created only when someone waits: most futures of a big ``map`` never have any.
    """

    __slots__ = ("key", "status", "exception", "traceback", "reason", "refs", "who_has",
                 "nbytes", "_event", "_callbacks")

    def __init__(self, key: str):
        self.key = key
        self.status = PENDING
        self.exception: BaseException | None = None
        self.traceback: str | None = None
        self.reason = ""
        self.refs = 0
        self.who_has: tuple | list = ()
        self.nbytes = 0
        self._event: threading.Event | None = None
        self._callbacks: list[Callable[[FutureState], None]] | None = None

    def done(self) -> bool:
        return self.status is not PENDING

    def finish(self, status: FutureStatus, *, exception: BaseException | None = None,
               traceback: str | None = None, reason: str = "") -> bool:
        """End the state (once; later calls are ignored) and wake everything waiting on it."""
        with _LOCK:
            if self.status is not PENDING:
                return False
            self.status, self.exception, self.traceback, self.reason = (
                status, exception, traceback, reason)
            event, callbacks = self._event, self._callbacks
            self._callbacks = None
        if event is not None:
            event.set()
        if callbacks:
            for callback in callbacks:
                try:
                    callback(self)
                except Exception:  # a user's callback must not break the client
                    logger.exception("A done-callback of %s failed", self.key)
        return True

    def error_from_payload(self, payload: bytes, text: str, reason: str = "") -> None:
        self.finish(FutureStatus.error, exception=loads_exception(payload, text), traceback=text,
                    reason=reason)

    def reset(self) -> None:
        """Back to pending: the key was submitted again after it was cancelled or lost."""
        with _LOCK:
            self.status = PENDING
            self.exception = self.traceback = None
            self.reason = ""
            self._event = None

    def on_done(self, callback: Callable[["FutureState"], None]) -> bool:
        """Call ``callback(state)`` (on the thread that ends it) when the state ends; False,
        and no call, if it already has."""
        with _LOCK:
            if self.status is not PENDING:
                return False
            if self._callbacks is None:
                self._callbacks = []
            self._callbacks.append(callback)
            return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block this thread until the state ends; False if ``timeout`` passed first."""
        with _LOCK:
            if self.status is not PENDING:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    async def wait_async(self) -> None:
        """Wait on the running loop, whichever thread ends the state."""
        if self.status is not PENDING:
            return
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()

        def wake(state: FutureState) -> None:
            if on_loop(loop):
                _resolve(waiter)
            else:
                loop.call_soon_threadsafe(_resolve, waiter)

        if self.on_done(wake):
            await waiter


def _resolve(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Owner(Protocol):
    """All that a Future, or a JobFuture, asks of the client that made it."""

    #: The client, as ``Future.client`` shows it to users.
    client: Any

    def on_loop(self) -> bool:
        """Whether the caller runs on the client's loop: then calls that would block return
        coroutines (RuntimeError instead where the client is a blocking one: it would hang)."""

    def run(self, coroutine: Coroutine, timeout: float | None) -> Any:
        """Run ``coroutine`` on the client's loop from another thread and wait for its value."""

    async def values(self, futures: list["Future"]) -> list[Any]:
        """The results of ended ``futures`` (raising the first failure), from their workers."""

    def cancel(self, futures: list["Future"]) -> None:
        """Cancel the tasks of ``futures`` (and their dependents) if they have not ended."""

    def release(self, state: FutureState) -> None:
        """A Future of ``state`` is gone (any thread, no locks: it may be the GC)."""

    def send(self, op: Any) -> None:
        """Queue ``op`` for the scheduler, after everything queued before it (any thread)."""


class Future:
    """The result of a task that may not have finished yet.

    With a blocking :class:`~dsched.Client`, ``result()`` blocks; with an asynchronous client,
    on its own loop, ``result()``, ``exception()`` and ``traceback()`` return coroutines, and
    ``await future`` gives the result either way.
    """

    __slots__ = ("key", "_owner", "_state", "__weakref__")
    #: Dask takes an object with this flag and a ``key`` as a value computed already.
    __dask_future__ = True

    def __init__(self, key: str, owner: Owner, state: FutureState):
        # Made only by the client, which has already counted this reference in ``state``.
        self.key = key
        self._owner = owner
        self._state = state

    # -- status -----------------------------------------------------------------------------

    @property
    def status(self) -> str:
        """``pending``, ``finished``, ``error``, ``cancelled`` or ``lost``."""
        return self._state.status.value

    @property
    def reason(self) -> str:
        """Why a pending task cannot run yet (no workers, a resource no worker has, more than
        any worker offers), or why it failed or was cancelled; ``""`` when there is nothing
        to say."""
        return self._state.reason

    @property
    def client(self) -> Any:
        """The AsyncClient that made this future."""
        return self._owner.client

    def done(self) -> bool:
        return self._state.status is not PENDING

    def cancelled(self) -> bool:
        return self._state.status is FutureStatus.cancelled

    # -- results ----------------------------------------------------------------------------

    def result(self, timeout: float | None = None) -> Any:
        """Wait until the task ends; return its result or raise its exception.

        The exception has its original type, with the worker's traceback chained as its
        ``__cause__`` (a ``RemoteTraceback``). Raises TimeoutError after ``timeout`` seconds.
        """
        owner = self._owner
        if owner.on_loop():
            return self._result_async(timeout)
        self._wait_blocking(timeout)
        self._raise_if_failed()
        return owner.run(owner.values([self]), timeout)[0]

    def exception(self, timeout: float | None = None) -> Any:
        """The task's exception once it ends (None if it succeeded; CancelledError if it was
        cancelled, SchedulerLostError if the scheduler went away)."""
        if self._owner.on_loop():
            return self._after_async(timeout, self._exception_now)
        self._wait_blocking(timeout)
        return self._exception_now()

    def traceback(self, timeout: float | None = None) -> Any:
        """The worker's formatted traceback of a failed task (text), else None."""
        if self._owner.on_loop():
            return self._after_async(timeout, lambda: self._state.traceback)
        self._wait_blocking(timeout)
        return self._state.traceback

    def _exception_now(self) -> BaseException | None:
        if self._state.status is FutureStatus.cancelled:
            return self._cancelled_error()
        return self._state.exception

    def _wait_blocking(self, timeout: float | None) -> None:
        if not self._state.wait(timeout):
            raise TimeoutError(f"task {self.key} did not finish within {timeout} seconds")

    async def _wait_async(self, timeout: float | None = None) -> None:
        if self._state.status is not PENDING:
            return
        try:
            await asyncio.wait_for(self._state.wait_async(), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"task {self.key} did not finish within {timeout} seconds") from None

    async def _after_async(self, timeout: float | None, then: Callable[[], Any]) -> Any:
        await self._wait_async(timeout)
        return then()

    def _cancelled_error(self) -> CancelledError:
        reason = f": {self._state.reason}" if self._state.reason else ""
        return CancelledError(f"task {self.key} was cancelled{reason}")

    def _raise_if_failed(self) -> None:
        state = self._state
        if state.status is FutureStatus.cancelled:
            raise self._cancelled_error()
        if state.exception is not None:
            raise state.exception

    async def _result_async(self, timeout: float | None = None) -> Any:
        await self._wait_async(timeout)
        self._raise_if_failed()
        return (await self._owner.values([self]))[0]

    def __await__(self):
        return self._result_async().__await__()

    # -- control ----------------------------------------------------------------------------

    def cancel(self) -> None:
        """Cancel the task (and the tasks that depend on it) if it has not ended yet."""
        self._owner.cancel([self])

    def add_done_callback(self, fn: Callable[["Future"], Any]) -> None:
        """Call ``fn(self)`` once the task ends: at once if it has, else on the thread that
        ends it, which is the client's loop thread for a report from the scheduler and the
        caller's thread for ``cancel()`` (so ``fn`` must not block)."""
        def call(state: FutureState) -> None:
            fn(self)

        if not self._state.on_done(call):
            try:
                call(self._state)
            except Exception:
                logger.exception("A done-callback of %s failed", self.key)

    # -- identity and lifetime --------------------------------------------------------------

    def __del__(self) -> None:
        owner = getattr(self, "_owner", None)
        if owner is not None:
            try:
                owner.release(self._state)
            except Exception:  # interpreter shutdown
                pass

    def __copy__(self) -> "Future":
        return self

    def __deepcopy__(self, memo: dict) -> "Future":
        return self

    def __reduce__(self):
        raise TypeError(f"a Future ({self.key}) cannot be pickled; pass it to submit() as an "
                        f"argument (alone or in a list, tuple, set or dict) instead")

    def __repr__(self) -> str:
        return f"<Future: {self.status}, key: {self.key}>"

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Future) and other.key == self.key

"""The ops a client sends, in order, and the count of live Future objects per key.

Ops are queued from any thread (``submit`` and ``map`` pickle in the caller's thread) and leave
on the client's loop in the order they were queued, as one frame per loop iteration. A Future
that is garbage-collected queues its state here as well, so that its reference is counted in
that same order: a release never overtakes the submit of its key, and the releases found
between two other ops go as one. A request id is unique among the ops of one client.

Decides nothing about what to send, and reads nothing from the scheduler. ``enqueue``,
``hold`` and ``next_id`` may be called from any thread; the rest runs on the client's loop.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import threading
from typing import Any, Callable, Iterable

from ..protocol import ops
from .bridge import on_loop
from .future import FutureState, FutureStatus
from .submission import is_bulk

logger = logging.getLogger("dsched.client")

_ENDED_FOR_GOOD = (FutureStatus.cancelled, FutureStatus.lost)


class Deferred:
    """An op made only as it leaves the queue, so that what making it records (a reply to
    wait for) happens in order with the ops queued before it; None when nothing is left to
    send."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]):
        self.make = make


class ClientOutbox:
    """One client's queue of ops to the scheduler and table of the keys its futures hold.

    ``on_failure(reason)`` is called on the loop when queued ops could not be sent (a bug):
    the client can then no longer trust any pending future to end.
    """

    def __init__(self, on_failure: Callable[[str], None]):
        #: The state of each key a Future of this client holds; changed under ``lock``.
        self.states: dict[str, FutureState] = {}
        self.lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.comm: Any = None
        self._queue: collections.deque = collections.deque()
        self._flush_scheduled = False
        self._ids = itertools.count(1)
        self._on_failure = on_failure

    def attach(self, loop: asyncio.AbstractEventLoop, comm: Any = None) -> None:
        """Flush on ``loop`` (the client's, from its start) and send through ``comm`` (once
        connected; nothing is sent before)."""
        self.loop, self.comm = loop, comm

    def next_id(self) -> int:
        """A new request id (any thread)."""
        return next(self._ids)

    # -- references -------------------------------------------------------------------------

    def hold(self, key: str) -> tuple[FutureState, bool]:
        """Count one more Future of ``key``: its state, and whether the key must be
        (re)submitted (new here, or cancelled or lost before)."""
        with self.lock:
            state = self.states.get(key)
            submit = state is None
            if submit:
                state = self.states[key] = FutureState(key)
            elif state.status in _ENDED_FOR_GOOD:
                state.reset()
                submit = True
            state.refs += 1
        return state, submit

    def holds(self, key: str) -> bool:
        """Whether a future of this client holds ``key`` and it is not cancelled or lost."""
        state = self.states.get(key)
        return state is not None and state.status not in _ENDED_FOR_GOOD

    def held(self) -> list[FutureState]:
        with self.lock:
            return list(self.states.values())

    def forget(self, states: Iterable[FutureState]) -> None:
        """Drop ``states`` from the table: their keys are no longer this client's (cancelled);
        a later submit of the same call starts afresh."""
        with self.lock:
            for state in states:
                if self.states.get(state.key) is state:
                    del self.states[state.key]

    # -- the queue --------------------------------------------------------------------------

    def enqueue(self, item: Any) -> None:
        """Queue an op, a :class:`Deferred` one, or the state of a Future that is gone (any
        thread, no locks: the garbage collector may call it anywhere)."""
        self._queue.append(item)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop = self.loop
            if on_loop(loop):
                loop.call_soon(self.flush)
            else:
                loop.call_soon_threadsafe(self.flush)

    def last_queued(self) -> Any:
        """The item queued last and not yet sent, or None (any thread)."""
        try:
            return self._queue[-1]
        except IndexError:
            return None

    def flush(self) -> None:
        """On the loop: send the queued ops in order, counting released references."""
        self._flush_scheduled = False  # before draining, so a later append schedules again
        try:
            self._drain()
        except Exception as error:  # a bug: ops are lost, so pending futures may never end
            logger.exception("Client failed sending queued ops")
            self._on_failure(f"client error: cannot send queued ops: {error!r}")

    def flush_now(self) -> None:
        """On the loop: send what is queued at once (see ``Comm.flush_now``)."""
        self.flush()
        comm = self.comm
        if comm is not None:
            comm.flush_now()

    def _drain(self) -> None:
        queue = self._queue
        released: list[str] = []
        while queue:
            item = queue.popleft()
            if type(item) is FutureState:
                with self.lock:
                    item.refs -= 1
                    if item.refs > 0 or self.states.get(item.key) is not item:
                        continue
                    del self.states[item.key]
                released.append(item.key)
                continue
            if released:
                self.send(ops.Release(keys=tuple(released)))
                released = []
            op = item.make() if type(item) is Deferred else item
            if op is not None:  # a Deferred may find nothing left to send
                self.send(op)
        if released:
            self.send(ops.Release(keys=tuple(released)))

    def send(self, op: Any) -> None:
        """On the loop: write ``op`` now, ahead of anything still queued."""
        comm = self.comm
        if comm is not None and not comm.closed:
            # A submit with a large function or arguments is bulk: the user's own data, not
            # counted toward the outbox limit, which is there to catch a stuck scheduler.
            comm.write_nowait(op.to_wire(), bulk=is_bulk(op))

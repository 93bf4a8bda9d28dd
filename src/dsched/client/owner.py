"""The ``Owner`` a client gives its futures and job futures: all they may ask of it.

Each call goes to one of the client's parts (the bridge, the results, the outbox) or to the
cancel the client hands over; what a call may do depends only on the client's public state
(its loop, whether it is asynchronous, its status). Holds no client logic of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Coroutine

from ..errors import SchedError
from .bridge import on_loop, run_and_wait
from .future import Future, FutureState
from .outbox import ClientOutbox
from .results import Results

if TYPE_CHECKING:
    from .client import AsyncClient


class ClientOwner:
    """The ``future.Owner`` interface of ``client``, and nothing more."""

    __slots__ = ("client", "_outbox", "_results", "_cancel")

    def __init__(self, client: "AsyncClient", outbox: ClientOutbox, results: Results,
                 cancel: Callable[[list[Future]], None]):
        self.client = client
        self._outbox = outbox
        self._results = results
        self._cancel = cancel

    def on_loop(self) -> bool:
        client = self.client
        if not on_loop(client.loop):
            return False
        if not client.asynchronous:
            raise RuntimeError("a blocking call on the client's own event loop would hang it "
                               "(in a done-callback?); use the future's add_done_callback")
        return True

    def run(self, coroutine: Coroutine, timeout: float | None) -> Any:
        client = self.client
        loop = client.loop
        if loop is None or loop.is_closed() or client.status == "closed":
            coroutine.close()
            raise SchedError(f"the client is {client.status}")
        return run_and_wait(loop, coroutine, timeout)

    async def values(self, futures: list[Future]) -> list[Any]:
        return await self._results.values(futures)

    def cancel(self, futures: list[Future]) -> None:
        self._cancel(futures)

    def release(self, state: FutureState) -> None:
        if self.client.status in ("running", "disconnected"):
            self._outbox.enqueue(state)

    def send(self, op: Any) -> None:
        self._outbox.enqueue(op)

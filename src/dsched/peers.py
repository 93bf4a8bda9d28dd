"""Request and reply over pooled connections: how workers and clients fetch data from workers.

A :class:`PeerPool` keeps one authenticated connection per peer address and matches each reply
to its request by the ``id`` field, so many fetches share one connection at once. A reply too
large for one message comes as several ops with that ``id``, all but the last marked ``more``;
their dict and list fields are put together into one reply. A connection that breaks fails
every request waiting on it with CommClosedError and is dropped from the pool; the next request
opens a fresh one.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl as ssl_module
from typing import Any

from .comm import Comm, connect
from .errors import CommClosedError

logger = logging.getLogger(__name__)


class _Peer:
    def __init__(self, comm: Comm):
        self.comm = comm
        self.waiting: dict[int, asyncio.Future] = {}
        self.parts: dict[int, dict] = {}  # the parts of a reply so far, by request id
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for op in self.comm:
                request_id = op.get("id")
                if request_id not in self.waiting:
                    continue  # the request has given up
                if op.pop("more", False):
                    _merge(self.parts.setdefault(request_id, {}), op)
                    continue
                waiter = self.waiting.pop(request_id)
                reply = self.parts.pop(request_id, None)
                if reply is not None:
                    op = _merge(reply, op)
                if not waiter.done():
                    waiter.set_result(op)
        except CommClosedError as error:
            self._fail(error)
        except Exception as error:  # a bug here must still release the waiters
            logger.exception("Reading replies from %r failed", self.comm)
            self._fail(CommClosedError(f"reader failed: {error}"))
        else:
            self._fail(CommClosedError(self.comm.close_reason or "connection closed"))

    def _fail(self, error: Exception) -> None:
        waiting, self.waiting = self.waiting, {}
        for waiter in waiting.values():
            if not waiter.done():
                waiter.set_exception(error)


class PeerPool:
    """Connections to workers, opened on first use; ``request`` sends an op and awaits its reply."""

    def __init__(self, *, role: str, name: str, token: str | bytes,
                 ssl: ssl_module.SSLContext | None = None, timeout: float = 10.0,
                 limits: dict[str, int] | None = None):
        self._role, self._name, self._token, self._ssl = role, name, token, ssl
        self._timeout = timeout
        self._limits = limits or {}
        self._closed = False
        self._peers: dict[str, _Peer] = {}
        self._connecting: dict[str, asyncio.Future] = {}
        self._ids = itertools.count(1)

    async def _peer(self, address: str) -> _Peer:
        if self._closed:
            raise CommClosedError("the peer pool is closed")
        peer = self._peers.get(address)
        if peer is not None and not peer.comm.closed:
            return peer
        pending = self._connecting.get(address)
        if pending is None:
            pending = self._connecting[address] = asyncio.ensure_future(self._open(address))
            pending.add_done_callback(lambda _: self._connecting.pop(address, None))
        return await asyncio.shield(pending)

    async def _open(self, address: str) -> _Peer:
        comm = await connect(address, role=self._role, name=self._name, token=self._token,
                             ssl=self._ssl, timeout=self._timeout, **self._limits)
        if self._closed:  # closed while we were connecting: leave nothing behind
            await comm.close("done")
            raise CommClosedError("the peer pool is closed")
        peer = self._peers[address] = _Peer(comm)
        return peer

    async def request(self, address: str, op: dict[str, Any], timeout: float | None = None) -> dict:
        """Send ``op`` to the peer at ``address`` and return its reply (same ``id``)."""
        peer = await self._peer(address)
        request_id = next(self._ids)
        waiter = asyncio.get_running_loop().create_future()
        peer.waiting[request_id] = waiter
        try:
            peer.comm.write_nowait({**op, "id": request_id})
            return await asyncio.wait_for(waiter, timeout)
        finally:
            peer.waiting.pop(request_id, None)
            peer.parts.pop(request_id, None)

    async def close(self) -> None:
        self._closed = True
        peers, self._peers = list(self._peers.values()), {}
        for peer in peers:
            await peer.comm.close("done")
            peer.reader.cancel()


def _merge(reply: dict, part: dict) -> dict:
    """Add one part of a reply to the parts before it: dicts and lists add up."""
    for field, value in part.items():
        earlier = reply.get(field)
        if isinstance(earlier, dict) and isinstance(value, dict):
            earlier.update(value)
        elif isinstance(earlier, list) and isinstance(value, list):
            earlier.extend(value)
        else:
            reply[field] = value
    return reply

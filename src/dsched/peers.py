"""Fetching results (and job logs) from workers: how workers and clients ask a data port.

A :class:`PeerPool` keeps one authenticated connection per worker address and matches each
``Data`` reply to its ``GetData`` request by id, so many fetches share one connection at
once; a reply that came in several messages (``more``) is put back together here. A
connection that breaks, or a peer that answers with a malformed op, fails every request
waiting on it with CommClosedError and is dropped from the pool; the next request opens a
fresh one.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl as ssl_module

from .comm import Comm, connect
from .errors import CommClosedError, RemoteProtocolError
from .protocol import ops

logger = logging.getLogger(__name__)


class _Peer:
    def __init__(self, comm: Comm):
        self.comm = comm
        self.waiting: dict[int, asyncio.Future] = {}
        self.parts: dict[int, list[ops.Data]] = {}  # the parts of a reply so far, by id
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for d in self.comm:
                reply = ops.decode(d)
                kind = type(reply)
                if kind is not ops.Data and kind is not ops.Log:
                    raise ops.BadOp(f"a data port answered with {reply.OP}")
                if reply.id not in self.waiting:
                    continue  # the request has given up
                if kind is ops.Data and reply.more:
                    self.parts.setdefault(reply.id, []).append(reply)
                    continue
                waiter = self.waiting.pop(reply.id)
                parts = self.parts.pop(reply.id, None)
                if not waiter.done():
                    waiter.set_result(_joined([*parts, reply]) if parts else reply)
        except CommClosedError as error:
            self._fail(error)
        except RemoteProtocolError as error:
            self.comm.protocol_error(error)
            self._fail(CommClosedError(f"protocol error: {error}"))
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
    """Connections to workers' data ports, opened on first use."""

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

    async def get_data(self, address: str, keys: tuple[str, ...],
                       timeout: float | None = None) -> ops.Data:
        """Ask the worker at ``address`` for the results of ``keys``; its whole answer."""
        return await self._ask(address, lambda i: ops.GetData(id=i, keys=keys), timeout)

    async def get_log(self, address: str, key: str, offset: int = 0, limit: int = 1 << 20,
                      timeout: float | None = None) -> ops.Log:
        """Ask the worker at ``address`` for the log of the job attempt ``key`` from
        ``offset`` (at most ``limit`` bytes)."""
        return await self._ask(
            address, lambda i: ops.GetLog(id=i, key=key, offset=offset, limit=limit), timeout)

    async def _ask(self, address: str, request, timeout: float | None):
        peer = await self._peer(address)
        request_id = next(self._ids)
        waiter = asyncio.get_running_loop().create_future()
        peer.waiting[request_id] = waiter
        try:
            peer.comm.write_nowait(request(request_id).to_wire())
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


def _joined(parts: list[ops.Data]) -> ops.Data:
    """The parts of one answer as one."""
    data: dict = {}
    errors: dict = {}
    missing: list = []
    for part in parts:
        data.update(part.data)
        errors.update(part.errors)
        missing.extend(part.missing)
    return ops.Data(id=parts[-1].id, data=data, missing=tuple(missing), errors=errors)

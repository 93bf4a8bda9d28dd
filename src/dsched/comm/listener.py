"""Listener: accepts connections, runs their handshakes, and starts one handler task per
authenticated peer, logging any failure of it, or, given ``spawn``, in its owner's task group,
whose failure is then the owner's to see. It never hands a handler an unauthenticated peer.
"""

from __future__ import annotations

import asyncio
import logging
import ssl as ssl_module
from typing import Awaitable, Callable, Collection, Coroutine

from ..errors import CommClosedError
from ..protocol import ACCEPTOR, MAX_FRAME_SIZE, MAX_MESSAGE_SIZE, Handshake
from .addresses import format_address
from .connection import (ANSWER_TIMEOUT, CLOSE_TIMEOUT, HANDSHAKE_TIMEOUT, INBOX_LIMIT,
                         OUTBOX_LIMIT, Comm)
from .quiet import Limited
from .stream import FrameStream

logger = logging.getLogger("dsched.comm")
_refused = Limited(logger)  # a flood of strangers is one line a minute

Handler = Callable[[Comm], Awaitable[None]]
#: Starts a handler's task where its owner supervises it (a task group); None when the owner
#: is stopping and starts nothing more (the coroutine is then closed).
Spawn = Callable[[Coroutine], "asyncio.Task | None"]


class Listener:
    """A listening socket whose handler runs, as a logged task, once per authenticated peer."""

    def __init__(self, handler: Handler, *, tls: bool, spawn: Spawn | None = None):
        self.host = ""
        self.port = 0
        self.comms: set[Comm] = set()
        self._handler = handler
        self._spawn = spawn
        self._tls = tls
        self._server: asyncio.AbstractServer | None = None
        self._handshaking: set[FrameStream] = set()
        self._tasks: set[asyncio.Task] = set()
        self._closing = False

    @property
    def address(self) -> str:
        return format_address(self.host, self.port, tls=self._tls)

    def __repr__(self) -> str:
        return f"<Listener {self.address} with {len(self.comms)} peers>"

    def _accepted(self, connection: FrameStream) -> None:
        self._handshaking.add(connection)
        connection.ready.add_done_callback(lambda ready: self._handshake_done(connection, ready))

    def _handshake_done(self, connection: FrameStream, ready: asyncio.Future) -> None:
        self._handshaking.discard(connection)
        if ready.cancelled():
            return
        error = ready.exception()
        if error is not None:
            _refused.warning("Refused connection from %s: %s", connection.peer_address, error)
            return
        comm = ready.result()
        if self._closing:
            comm.abort("listener is closing")
            return
        if self._spawn is None:
            task = asyncio.get_running_loop().create_task(self._run_handler(comm))
        else:
            task = self._spawn(self._run_handler(comm))
            if task is None:  # its owner is stopping
                comm.abort("server is stopping")
                return
        logger.debug("Accepted %s %r from %s", comm.peer.role, comm.peer.name, comm.peer_address)
        self.comms.add(comm)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_handler(self, comm: Comm) -> None:
        reason = "handler finished"
        try:
            await self._handler(comm)
        except CommClosedError as error:
            logger.debug("Handler for %r ended: %s", comm, error.reason)
        except asyncio.CancelledError:
            reason = "server shutting down"
            raise
        except Exception:
            reason = "server error (see the server's log)"
            if self._spawn is not None:  # its owner's group sees it at once, and says why
                comm.close_nowait(reason)
                raise
            logger.exception("Handler for %r failed", comm)
        finally:
            self.comms.discard(comm)
            if self._closing:
                comm.abort(reason)
            elif not comm.closed:
                await comm.close(reason)

    async def close(self, reason: str = "server shutting down", *,
                    timeout: float = CLOSE_TIMEOUT) -> None:
        """Stop accepting, tell each peer ``reason``, then cancel handlers that do not end."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        for connection in list(self._handshaking):
            connection.abandon(reason)
        comms = list(self.comms)
        if comms:
            await asyncio.gather(*(comm.close(reason) for comm in comms), return_exceptions=True)
        tasks = list(self._tasks)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), timeout)
            except asyncio.TimeoutError:
                logger.warning("Listener %s: connections still open after %g s", self.address,
                               timeout)

    async def __aenter__(self) -> "Listener":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def listen(
    host: str,
    port: int,
    handler: Handler,
    *,
    token: bytes | str,
    ssl: ssl_module.SSLContext | None = None,
    role: str = "scheduler",
    name: str = "scheduler",
    accept_roles: Collection[str] | None = None,
    max_frame_size: int = MAX_FRAME_SIZE,
    max_message_size: int = MAX_MESSAGE_SIZE,
    outbox_limit: int = OUTBOX_LIMIT,
    inbox_limit: int = INBOX_LIMIT,
    handshake_timeout: float = HANDSHAKE_TIMEOUT,
    close_timeout: float = CLOSE_TIMEOUT,
    answer_timeout: float = ANSWER_TIMEOUT,
    spawn: Spawn | None = None,
) -> Listener:
    """Listen on ``host:port`` (0 for any free port); ``await handler(comm)`` runs per peer,
    in a task of its own, or of ``spawn``'s (a handler that raises then fails there)."""
    # Built once here so that bad arguments fail now, not on every connection.
    Handshake(ACCEPTOR, role=role, name=name, token=token, accept_roles=accept_roles)
    listener = Listener(handler, tls=ssl is not None, spawn=spawn)

    def factory() -> FrameStream:
        handshake = Handshake(ACCEPTOR, role=role, name=name, token=token,
                              accept_roles=accept_roles)
        connection = FrameStream(handshake, max_frame_size=max_frame_size,
                                 max_message_size=max_message_size,
                                 outbox_limit=outbox_limit, inbox_limit=inbox_limit,
                                 handshake_timeout=handshake_timeout,
                                 close_timeout=close_timeout, answer_timeout=answer_timeout)
        listener._accepted(connection)
        return connection

    loop = asyncio.get_running_loop()
    server = await loop.create_server(factory, host, port, ssl=ssl,
                                      ssl_handshake_timeout=handshake_timeout if ssl else None)
    listener._server = server
    listener.host, listener.port = server.sockets[0].getsockname()[:2]
    return listener

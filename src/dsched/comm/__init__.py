"""Asyncio TCP connections (TLS optional) that carry dsched frames: connect, listen, Comm.

``connect`` and ``listen`` give :class:`Comm` objects only after the handshake and the mutual
token check, so nothing from an unauthenticated peer reaches code that unpickles. A Comm only
moves batches of ops and applies flow control (every buffer bounded); what ops mean is for the
daemons. Limits are keyword arguments whose defaults are the constants below.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module

from ..errors import RemoteProtocolError
from ..protocol import INITIATOR, MAX_FRAME_SIZE, MAX_MESSAGE_SIZE, Handshake, PeerInfo
from .addresses import format_address, parse_address
from .connection import CLOSE_TIMEOUT, HANDSHAKE_TIMEOUT, INBOX_LIMIT, OUTBOX_LIMIT, Comm
from .listener import Handler, Listener, listen
from .stream import FrameStream

__all__ = [
    "CLOSE_TIMEOUT",
    "Comm",
    "HANDSHAKE_TIMEOUT",
    "Handler",
    "INBOX_LIMIT",
    "Listener",
    "MAX_FRAME_SIZE",
    "MAX_MESSAGE_SIZE",
    "OUTBOX_LIMIT",
    "PeerInfo",
    "connect",
    "format_address",
    "listen",
    "parse_address",
]


async def connect(
    address: str | tuple[str, int],
    *,
    role: str,
    name: str,
    token: bytes | str,
    ssl: ssl_module.SSLContext | None = None,
    server_hostname: str | None = None,
    timeout: float = HANDSHAKE_TIMEOUT,
    max_frame_size: int = MAX_FRAME_SIZE,
    max_message_size: int = MAX_MESSAGE_SIZE,
    outbox_limit: int = OUTBOX_LIMIT,
    inbox_limit: int = INBOX_LIMIT,
    close_timeout: float = CLOSE_TIMEOUT,
) -> Comm:
    """Connect, handshake and authenticate both ways; ``timeout`` covers all three.

    Raises AuthenticationError or VersionMismatchError (naming both versions) when the peer
    refuses us or fails to prove it holds the token, TimeoutError, or OSError from the socket.
    """
    host, port = parse_address(address)
    handshake = Handshake(INITIATOR, role=role, name=name, token=token)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout

    def factory() -> FrameStream:
        return FrameStream(handshake, max_frame_size=max_frame_size,
                           max_message_size=max_message_size, outbox_limit=outbox_limit,
                           inbox_limit=inbox_limit,
                           handshake_timeout=max(deadline - loop.time(), 0.001),
                           close_timeout=close_timeout)

    try:
        _, connection = await asyncio.wait_for(
            loop.create_connection(
                factory, host, port, ssl=ssl,
                server_hostname=(server_hostname or host) if ssl else None,
            ),
            timeout,
        )
    except asyncio.TimeoutError:
        raise TimeoutError(f"connecting to {host}:{port} took over {timeout:g} s") from None
    try:
        return await connection.ready
    except asyncio.CancelledError:
        connection.abort()
        raise
    except RemoteProtocolError as error:
        if ssl is None and type(error) is RemoteProtocolError:
            # A TLS server drops a peer that opens in plain text without a word.
            raise RemoteProtocolError(
                f"{error}; if the server at {host}:{port} uses TLS, this side needs TLS too "
                "(a CA file: --tls-ca, the tls.ca setting, or ssl= for a Client)") from None
        raise

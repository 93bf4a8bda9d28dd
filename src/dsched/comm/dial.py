"""``connect``: an authenticated asyncio connection to a daemon (its body is the package's
``dsched.comm.connect``; it lives here so that importing ``dsched.comm.addresses``, as the
sched command does to check an address, loads neither asyncio nor ssl)."""

from __future__ import annotations

import asyncio
import ssl as ssl_module

from ..environ import setting_variable
from ..errors import RemoteProtocolError, TlsMismatchError
from ..protocol import INITIATOR, MAX_FRAME_SIZE, MAX_MESSAGE_SIZE, Handshake
from .addresses import parse_address
from .connection import (ANSWER_TIMEOUT, CLOSE_TIMEOUT, HANDSHAKE_TIMEOUT, INBOX_LIMIT,
                         OUTBOX_LIMIT, Comm)
from .stream import FrameStream


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
    answer_timeout: float = ANSWER_TIMEOUT,
) -> Comm:
    """Connect, handshake and authenticate both ways; ``timeout`` covers all three, and a
    peer that sends no byte (of TLS or of the handshake) within ``answer_timeout`` is refused.

    Raises AuthenticationError or VersionMismatchError (naming both versions) when the peer
    refuses us or fails to prove it holds the token, TlsMismatchError when it closes without a
    word as a TLS server does to a plain peer, TimeoutError, or OSError from the socket (a
    ConnectionResetError that says TLS may be the cause when this side's TLS handshake ends).
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
                           close_timeout=close_timeout, answer_timeout=answer_timeout)

    try:
        _, connection = await asyncio.wait_for(
            loop.create_connection(
                factory, host, port, ssl=ssl,
                server_hostname=(server_hostname or host) if ssl else None,
                ssl_handshake_timeout=answer_timeout if ssl else None,
            ),
            timeout,
        )
    except asyncio.TimeoutError:
        raise TimeoutError(f"connecting to {host}:{port} took over {timeout:g} s") from None
    except ConnectionResetError as error:
        if ssl is None:
            raise
        # A server without TLS reads the TLS hello as garbage and hangs up.
        raise ConnectionResetError(
            f"the server at {host}:{port} closed the connection during the TLS handshake"
            f"{f' ({error})' if str(error) else ''}, as a server without TLS does: if it has "
            f"none, this side must not use TLS either: leave out its CA file ({TLS_HOW})"
        ) from None
    try:
        return await connection.ready
    except asyncio.CancelledError:
        connection.abort()
        raise
    except RemoteProtocolError as error:
        if ssl is None and handshake.received_bytes == 0:
            # A TLS server drops a peer that opens in plain text without a word; a dsched
            # server answers (its preamble, then a close op if it refuses), unless it closes
            # while the handshake is in flight.
            raise TlsMismatchError(
                f"the server at {host}:{port} closed the connection without a word, as a TLS "
                f"server does to a peer without TLS: this side needs TLS too, with the CA file "
                f"of the server's certificate ({TLS_HOW})"
            ) from None
        raise


#: How each program that connects is given TLS (the CA file that signed the server's
#: certificate, which it goes without where none is given), for the errors that say this side
#: needs TLS or must not use it.
TLS_HOW = ("sched-worker: --tls-ca; sched and Client: the client.tls.ca setting or "
           f"{setting_variable('client.tls.ca')}; Client(ssl=...)")

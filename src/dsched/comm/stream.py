"""FrameStream: the asyncio protocol under a Comm. It runs the handshake on the first bytes,
then receives straight into the message decoder's buffers (one copy, from the kernel) and hands
batches to its Comm. Nothing is handed on before the handshake and token check passed.
"""

from __future__ import annotations

import asyncio
from typing import Iterable

from ..errors import CommClosedError, RemoteProtocolError
from ..protocol import INITIATOR, Handshake, MessageDecoder
from ..protocol.messages import Chunk
from .connection import CLOSE_TIMEOUT, Comm

class FrameStream(asyncio.BufferedProtocol):
    """The asyncio protocol under a Comm: runs the handshake, then turns bytes into batches."""

    def __init__(self, handshake: Handshake, *, max_frame_size: int, max_message_size: int,
                 outbox_limit: int, inbox_limit: int, handshake_timeout: float,
                 close_timeout: float = CLOSE_TIMEOUT, answer_timeout: float | None = None):
        self.loop = asyncio.get_running_loop()
        self.handshake = handshake
        self.ready: asyncio.Future[Comm] = self.loop.create_future()
        # How the handshake ended is read by whoever awaits it, if anyone still does (a connect
        # cancelled inside create_connection never gets the stream): never "not retrieved".
        self.ready.add_done_callback(lambda ready: ready.cancelled() or ready.exception())
        self.comm: Comm | None = None
        self.peer_address = "?"
        self.writing_paused = False
        self._max_frame_size = max_frame_size
        self._max_message_size = max_message_size
        self._outbox_limit = outbox_limit
        self._inbox_limit = inbox_limit
        self._handshake_timeout = handshake_timeout
        self._answer_timeout = answer_timeout
        self._close_timeout = close_timeout
        self._handshake_buffer = bytearray(4096)
        self._decoder = MessageDecoder(max_frame_size, max_message_size=max_message_size)
        self._transport: asyncio.Transport | None = None
        self._lost = self.loop.create_future()
        self._writers: list[asyncio.Future] = []
        self._reading_paused = False
        self._handshake_timer: asyncio.TimerHandle | None = None
        self._answer_timer: asyncio.TimerHandle | None = None
        self._close_timer: asyncio.TimerHandle | None = None

    # -- asyncio callbacks -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peername = transport.get_extra_info("peername")
        if isinstance(peername, tuple):
            self.peer_address = f"{peername[0]}:{peername[1]}"
        self._handshake_timer = self.loop.call_later(self._handshake_timeout,
                                                     self._handshake_expired)
        if self._answer_timeout is not None and self._answer_timeout < self._handshake_timeout:
            self._answer_timer = self.loop.call_later(self._answer_timeout, self._silent)
        self.write((self.handshake.data_to_send(),))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.comm is None or self.comm.closed:
            # Also where bytes still arrive after a close: they are read and dropped.
            return memoryview(self._handshake_buffer)
        return self._decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        if self.comm is None:
            if not self.ready.done():
                self._handshake_data(bytes(self._handshake_buffer[:nbytes]))
            return
        if self.comm.closed:
            return
        try:
            batches = self._decoder.buffer_updated(nbytes)
        except RemoteProtocolError as error:
            self.comm.protocol_error(error)
            return
        self.comm._deliver(batches)

    def eof_received(self) -> bool:
        if self.comm is None:
            try:
                self.handshake.receive_eof()
            except RemoteProtocolError as error:
                self._reject(error)
        elif not self.comm.closed:
            try:
                self._decoder.eof()
                self.comm._mark_closed("peer closed the connection without a reason")
            except RemoteProtocolError as error:
                self.comm._mark_closed(str(error))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._handshake_timer, self._answer_timer, self._close_timer):
            if timer is not None:
                timer.cancel()
        reason = f"connection lost: {exc}" if exc else "connection closed"
        if not self.ready.done():
            self.ready.set_exception(CommClosedError(f"{reason} during the handshake"))
        if self.comm is not None:
            self.comm._mark_closed(reason)
        self.wake_writers()
        if not self._lost.done():
            self._lost.set_result(None)

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.comm is not None:
            self.comm._on_writable()
        if not self.writing_paused:
            self.wake_writers()

    # -- handshake -------------------------------------------------------------------------

    def _handshake_data(self, data: bytes) -> None:
        if self._answer_timer is not None:
            self._answer_timer.cancel()
            self._answer_timer = None
        try:
            self.handshake.receive_data(data)
        except RemoteProtocolError as error:
            self._reject(error)
            return
        self.write((self.handshake.data_to_send(),))
        if self.handshake.done:
            assert self.handshake.peer is not None
            if self._handshake_timer is not None:
                self._handshake_timer.cancel()
            self.comm = Comm(self, self.handshake.peer, max_frame_size=self._max_frame_size,
                             max_message_size=self._max_message_size,
                             outbox_limit=self._outbox_limit, inbox_limit=self._inbox_limit)
            self.ready.set_result(self.comm)
            try:
                batches = self._decoder.feed(self.handshake.leftover)
            except RemoteProtocolError as error:
                self.comm.protocol_error(error)
                return
            self.comm._deliver(batches)

    def _handshake_expired(self) -> None:
        if self.comm is None and not self.ready.done():
            reason = f"handshake not finished within {self._handshake_timeout:g} s"
            self.handshake.abandon(reason)
            self._reject(TimeoutError(reason))

    def _silent(self) -> None:
        """Not a byte from the peer yet. Every dsched daemon sends its first bytes at once, so
        a port that stays silent belongs to some other program: better said now than after
        the whole handshake timeout."""
        if self.comm is None and not self.ready.done():
            within = f"within {self._answer_timeout:g} s"
            reason = (f"the peer did not answer the dsched handshake {within}: is it a dsched "
                      "scheduler or worker?" if self.handshake.side == INITIATOR else
                      f"the peer sent nothing of the dsched handshake {within}")
            self.handshake.abandon(reason)
            self._reject(TimeoutError(reason))

    def abandon(self, reason: str) -> None:
        """Stop a handshake still in progress (the listener is closing)."""
        if self.comm is None and not self.ready.done():
            self.handshake.abandon(reason)
            self._reject(CommClosedError(reason))

    def _reject(self, error: Exception) -> None:
        self.write((self.handshake.data_to_send(),))
        self.close_transport()
        if not self.ready.done():
            self.ready.set_exception(error)

    # -- used by Comm ----------------------------------------------------------------------

    def write(self, chunks: Iterable[Chunk]) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        # Chunk by chunk, not writelines(): before 3.12 that joins the chunks into a new bytes
        # object, and in 3.12.1 and 3.13.0 it never pauses the protocol, so backpressure fails.
        # From 3.12 on, write() keeps a memoryview of what it could not send at once: no copy.
        for chunk in chunks:
            transport.write(chunk)

    async def wait_writable(self) -> None:
        while self.writing_paused and not self._lost.done():
            waiter = self.loop.create_future()
            self._writers.append(waiter)
            await waiter
        if self.comm is not None:
            self.comm._check_open()

    def wake_writers(self) -> None:
        writers, self._writers = self._writers, []
        for waiter in writers:
            if not waiter.done():
                waiter.set_result(None)

    def pause_reading(self) -> None:
        if not self._reading_paused and self._transport is not None:
            self._reading_paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._reading_paused and self._transport is not None:
            self._reading_paused = False
            if not self._transport.is_closing():
                self._transport.resume_reading()

    def close_transport(self) -> None:
        """Close after the buffered bytes are sent, but abort a peer that will not take them."""
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
            self._close_timer = self.loop.call_later(self._close_timeout, self.abort)

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    async def wait_lost(self) -> None:
        await asyncio.shield(self._lost)

"""Comm: one authenticated connection as the daemons see it: batches of ops in and out.

Flow control lives here: received batches pause reading past ``INBOX_LIMIT``, ``send`` waits
for the peer to drain, and fire-and-forget writes wait in an outbox whose overflow disconnects
the peer. Everything not yet taken by the transport waits in that one ordered outbox and goes
to the transport a piece at a time, so a large message is never copied into the transport's
buffer whole. What ops mean is for the daemons; a Comm never looks inside one but for ``close``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from ..errors import CommClosedError, LocalProtocolError, RemoteProtocolError
from ..protocol import PeerInfo
from ..settings import CommConfig
from ..protocol.messages import Batch, Chunk, close_op, encode_ops

from .quiet import Limited

if TYPE_CHECKING:
    from .stream import FrameStream

logger = logging.getLogger("dsched.comm")
_malformed = Limited(logger)  # peers that send what we cannot accept

# The defaults of the limits, as declared once in settings.py (see there what each means).
_DEFAULT = CommConfig()
HANDSHAKE_TIMEOUT = _DEFAULT.handshake_timeout
ANSWER_TIMEOUT = _DEFAULT.answer_timeout
OUTBOX_LIMIT = _DEFAULT.outbox_limit
INBOX_LIMIT = _DEFAULT.inbox_limit
CLOSE_TIMEOUT = _DEFAULT.close_timeout
#: Received batches not yet consumed before reading pauses (beside ``INBOX_LIMIT`` bytes):
#: small batches cost more than their bytes.
INBOX_MAX_BATCHES = 1024
#: Bytes handed to the transport at a time: what it cannot send at once it may copy.
WRITE_PIECE = 2**20


class Comm:
    """One authenticated connection. Iterate it for ops, ``send`` batches, ``close`` with a
    reason; once closed, by either side, receiving raises CommClosedError(reason)."""

    def __init__(self, connection: FrameStream, peer: PeerInfo, *, max_frame_size: int,
                 max_message_size: int, outbox_limit: int, inbox_limit: int):
        self.peer = peer
        self.peer_address = connection.peer_address
        self.max_frame_size = max_frame_size
        self.max_message_size = max_message_size
        self.outbox_limit = outbox_limit
        self.inbox_limit = inbox_limit
        self._connection = connection
        self._loop = connection.loop
        self._inbox: collections.deque[Batch] = collections.deque()
        self._inbox_bytes = 0
        self._current: collections.deque[dict] = collections.deque()
        self._receiver: asyncio.Future | None = None
        self._close_reason: str | None = None
        self._pending: list[dict] = []
        self._flush_scheduled = False
        # (chunk, counted): counted chunks are what the outbox limit holds a slow peer to.
        self._outbox: collections.deque[tuple[Chunk, bool]] = collections.deque()
        self._outbox_bytes = 0
        #: Called with ``(op, error)`` for each op that cannot be encoded, which is then left
        #: out and the rest sent, so that the caller fails only the call that made it. None:
        #: such an op is a bug of this side, and the connection closes.
        self.on_unsendable: Callable[[dict, LocalProtocolError], None] | None = None

    def __repr__(self) -> str:
        state = f"closed: {self._close_reason}" if self.closed else "open"
        return f"<Comm {self.peer.role} {self.peer.name!r} at {self.peer_address} ({state})>"

    @property
    def closed(self) -> bool:
        return self._close_reason is not None

    @property
    def close_reason(self) -> str | None:
        return self._close_reason

    @property
    def writing_paused(self) -> bool:
        """Whether the peer is slow: sends wait and fire-and-forget writes pile up."""
        return self._connection.writing_paused

    @property
    def outbox_bytes(self) -> int:
        """Bytes of fire-and-forget writes that piled up behind earlier ones because the peer
        is slow: what ``outbox_limit`` bounds."""
        return self._outbox_bytes

    # -- sending ---------------------------------------------------------------------------

    async def send(self, *ops: dict) -> None:
        await self.send_batch(ops)

    async def send_batch(self, ops: Sequence[dict]) -> None:
        """Send ``ops`` as one frame, waiting while the peer is slow to take them.

        A frame is written whole or not at all, so cancelling a send leaves the stream intact.
        """
        chunks = self._encode(ops)
        await self._connection.wait_writable()
        self._check_open()
        self._flush_pending()
        # Not counted toward the outbox limit: this sender waits for the peer to take it.
        self._write(chunks, counted=False)
        await self._connection.wait_writable()

    def write_nowait(self, op: dict, *, bulk: bool = False) -> None:
        """Queue ``op`` without waiting; the ops queued in one event-loop tick go as one frame.

        For small messages (events, acknowledgements): a peer that lets more than
        ``outbox_limit`` bytes of them pile up is disconnected. Bulk data goes by :meth:`send`,
        or, where the caller cannot wait, with ``bulk=True``: then ``op`` (a task's function
        and arguments) is written at once, in order, as a message of its own, and does not
        count toward the outbox limit, because the caller bounds its bulk data itself (the
        scheduler sends a worker only the tasks it can start now).
        """
        self._check_open()
        if not isinstance(op, dict) or not isinstance(op.get("op"), str):
            raise LocalProtocolError(f"an op must be a dict with a str 'op' key, not {op!r:.80}")
        if bulk:
            self._flush_pending()
            try:
                chunks = self._encode([op])
            except LocalProtocolError as error:
                self._sender_error(error, op)
                return
            self._write(chunks, counted=False)
            return
        self._pending.append(op)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush_pending)

    def flush_now(self) -> None:
        """Write what ``write_nowait`` queued now, not at the end of the loop's tick (the
        caller keeps the loop busy a while, and the peer can start on these meanwhile); not
        while the transport is full (that waits for the loop, as before)."""
        if not self.closed and not self._connection.writing_paused:
            self._flush_pending()

    def _flush_pending(self) -> None:
        self._flush_scheduled = False
        if not self._pending or self.closed:
            return
        ops, self._pending = self._pending, []
        try:
            chunks = self._encode_within_limit(ops)
        except LocalProtocolError as error:
            if self.on_unsendable is None:
                self._sender_error(error)
                return
            chunks = []
            for op in ops:  # one by one, to leave out only what cannot go
                try:
                    chunks += self._encode_within_limit([op])
                except LocalProtocolError as error:
                    self._sender_error(error, op)
        self._write(chunks, counted=True)
        if self._outbox_bytes > self.outbox_limit:
            self.abort(
                f"peer is not reading: {self._outbox_bytes} bytes waiting for it, over the "
                f"outbox limit of {self.outbox_limit}"
            )

    def _sender_error(self, error: LocalProtocolError, op: dict | None = None) -> None:
        if op is not None and self.on_unsendable is not None:
            self.on_unsendable(op, error)
            return
        logger.error("Closing %r: cannot send queued ops: %s", self, error)
        self._start_close(f"sender error: {error}")

    def _encode(self, ops: Sequence[dict]) -> list[Chunk]:
        return encode_ops(ops, max_frame_size=self.max_frame_size,
                          max_message_size=self.max_message_size)

    def _encode_within_limit(self, ops: list[dict]) -> list[Chunk]:
        """One message for ``ops``, or several when together they pass the frame or message
        limit (many large ops queued in one tick); only a single op over a limit is an error."""
        try:
            return self._encode(ops)
        except LocalProtocolError:
            if len(ops) == 1:
                raise
            middle = len(ops) // 2
            return (self._encode_within_limit(ops[:middle])
                    + self._encode_within_limit(ops[middle:]))

    def _write(self, chunks: Iterable[Chunk], counted: bool) -> None:
        outbox = self._outbox
        if not outbox and not self._connection.writing_paused:
            # The peer has taken all we wrote before: what waits now is one message (or one
            # tick's batch) on its way, not writes piling up behind a peer that stopped reading.
            counted = False
        for chunk in chunks:
            outbox.append((chunk, counted))
            if counted:
                self._outbox_bytes += len(chunk)
        self._on_writable()

    def _on_writable(self) -> None:
        """Move waiting chunks into the transport, a piece at a time, until it is full."""
        outbox, connection = self._outbox, self._connection
        while outbox and not connection.writing_paused:
            chunk, counted = outbox[0]
            if len(chunk) > WRITE_PIECE:
                view = memoryview(chunk)
                outbox[0] = (view[WRITE_PIECE:], counted)
                chunk = view[:WRITE_PIECE]
            else:
                outbox.popleft()
            if counted:
                self._outbox_bytes -= len(chunk)
            connection.write((chunk,))

    def _check_open(self) -> None:
        if self._close_reason is not None:
            raise CommClosedError(self._close_reason)

    # -- receiving -------------------------------------------------------------------------

    async def recv(self) -> Batch:
        """The next batch of ops; CommClosedError(reason) once the connection has ended."""
        if self._current:
            batch = Batch(self._current)
            self._current.clear()
            return batch
        while not self._inbox:
            self._check_open()
            if self._receiver is not None:
                raise RuntimeError(f"another task is already receiving on {self!r}")
            self._receiver = self._loop.create_future()
            try:
                await self._receiver
            finally:
                self._receiver = None
        batch = self._inbox.popleft()
        self._inbox_bytes -= batch.nbytes
        if self._inbox_bytes < self.inbox_limit // 2 and len(self._inbox) < INBOX_MAX_BATCHES // 2:
            self._connection.resume_reading()
        return batch

    def __aiter__(self) -> "Comm":
        return self

    async def __anext__(self) -> dict:
        if not self._current:
            self._current.extend(await self.recv())
        return self._current.popleft()

    def _deliver(self, batches: Iterable[Batch]) -> None:
        for batch in batches:
            if self.closed:
                return
            for index, op in enumerate(batch):
                if op["op"] == "close":
                    if index:
                        self._inbox.append(Batch(batch[:index], batch.nbytes))
                        self._inbox_bytes += batch.nbytes
                    reason = op.get("reason")
                    self._mark_closed(reason if isinstance(reason, str) else "peer closed")
                    self._connection.close_transport()
                    return
            self._inbox.append(batch)
            self._inbox_bytes += batch.nbytes
        self._wake_receiver()
        if self._inbox_bytes >= self.inbox_limit or len(self._inbox) >= INBOX_MAX_BATCHES:
            self._connection.pause_reading()

    def _wake_receiver(self) -> None:
        if self._receiver is not None and not self._receiver.done():
            self._receiver.set_result(None)

    # -- closing ---------------------------------------------------------------------------

    async def close(self, reason: str = "closed") -> None:
        """Send a close op with ``reason`` after everything queued, then close the socket;
        returns once it is closed (aborted after ``CLOSE_TIMEOUT`` if the peer stalls)."""
        if not self.closed:
            self._flush_pending()
            self._start_close(reason)
        await self._connection.wait_lost()

    def close_nowait(self, reason: str) -> None:
        """Send a close op with ``reason`` after everything queued, and close; ``close()``
        without waiting for the peer to take it."""
        if not self.closed:
            self._flush_pending()
            self._start_close(reason)

    def _start_close(self, reason: str) -> None:
        chunks = [chunk for chunk, _ in self._outbox]
        self._outbox.clear()
        self._outbox_bytes = 0
        self._mark_closed(reason)
        chunks.extend(encode_ops([close_op(reason)]))
        self._connection.write(chunks)
        self._connection.close_transport()

    def abort(self, reason: str) -> None:
        """Drop the connection at once, discarding unsent data (the peer is not reading)."""
        if not self.closed:
            logger.warning("Disconnecting %r: %s", self, reason)
            self._mark_closed(reason)
        self._connection.abort()

    def protocol_error(self, error: RemoteProtocolError) -> None:
        """The peer sent something bad (a frame, or an op the daemon could not accept): tell it
        why, close, keep the daemon going."""
        if self.closed:
            return
        _malformed.warning("Closing %r: %s", self, error)
        self._mark_closed(f"protocol error: {error}")
        self._connection.write(encode_ops([close_op(str(error))]))
        self._connection.close_transport()

    def _mark_closed(self, reason: str) -> None:
        if self._close_reason is None:
            self._close_reason = reason
            self._pending.clear()
            self._outbox.clear()
            self._outbox_bytes = 0
            self._wake_receiver()
            self._connection.wake_writers()

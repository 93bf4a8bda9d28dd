"""Messages: batches of operations, packed as msgpack, with large payloads sent out of band.

A message is one ops frame whose body is a msgpack list of op dicts (``{"op": "submit", ...}``),
preceded by the buffers of its :class:`Payload` values at or above the out-of-band threshold:
each as one buffer frame, or as parts (see ``framing``) when it is larger than a frame. The ops
frame refers to those buffers by index (msgpack ext type ``EXT_BUFFER``), so a pickled function
or result is written from the caller's memory and received into a buffer of its own, never
copied by us on either side; a result is limited by the message limit, not the frame limit.
Payloads are opaque bytes here: nothing is ever unpickled. Sans-IO: no sockets, no asyncio.
"""

from __future__ import annotations

import struct

import msgpack

from ..errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .framing import (
    HEADER,
    KIND_BUFFER,
    KIND_OPS,
    KIND_PART,
    MAX_FRAME_SIZE,
    MAX_MESSAGE_SIZE,
    PART,
    Frame,
    FrameDecoder,
)

#: Payloads at least this long travel as their own frame instead of inside the msgpack body.
OOB_THRESHOLD = 64 * 2**10
#: msgpack ext type code of a reference to an out-of-band buffer (its index, uint32).
EXT_BUFFER = 1
#: At most this many buffer frames may precede one ops frame.
MAX_BUFFERS = 10_000

_INDEX = struct.Struct(">I")

TYPE_CHECKING = False  # typing is for type checkers only (see ``ints.py``)
if TYPE_CHECKING:
    from typing import Any, Iterable, Sequence

#: What ``encode_ops`` gives to write: a header and body, or a payload's own memory.
Chunk = bytes | memoryview


class Batch(list):
    """A received list of op dicts; ``nbytes`` is what the message took on the wire."""

    __slots__ = ("nbytes",)

    def __init__(self, ops: Iterable[dict] = (), nbytes: int = 0):
        super().__init__(ops)
        self.nbytes = nbytes


class Payload:
    """Opaque binary data (a pickled function, argument or result) to send without copying.

    Wrap bytes in ``Payload`` to let the protocol send them out of band when they are large.
    A large payload is written from the caller's memory, so do not change a mutable buffer
    while it may still be queued; one Payload object put in several ops of a message is sent
    once. The receiver gets a bytes-like object: ``bytes`` when small, a read-only
    ``memoryview`` of the buffer it was received into when large.
    """

    __slots__ = ("data",)

    def __init__(self, data: bytes | bytearray | memoryview):
        try:
            self.data = memoryview(data).cast("B")
        except (TypeError, ValueError) as error:
            raise LocalProtocolError(f"Payload needs contiguous bytes, not {data!r:.60}") from error

    def __len__(self) -> int:
        return self.data.nbytes

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Payload) and self.data == other.data

    def __repr__(self) -> str:
        return f"Payload({len(self)} bytes)"


def any_out_of_band(payloads: Iterable[Payload | bytes]) -> bool:
    """Whether any of ``payloads`` is large enough to travel out of band (as bulk data)."""
    return any(len(payload) >= OOB_THRESHOLD for payload in payloads)


def close_op(reason: str, error: str | None = None) -> dict:
    """The op that ends a connection; ``error`` names the kind of failure (``"authentication"``)."""
    op = {"op": "close", "reason": str(reason)}
    if error is not None:
        op["error"] = error
    return op


def encode_ops(
    ops: Sequence[dict],
    *,
    max_frame_size: int = MAX_FRAME_SIZE,
    max_message_size: int = MAX_MESSAGE_SIZE,
    oob_threshold: int = OOB_THRESHOLD,
) -> list[Chunk]:
    """The chunks (headers, bodies, payload buffers) to write, in order, for one message.

    A payload larger than ``max_frame_size`` goes as parts, each a slice of the caller's
    memory. Raises LocalProtocolError for anything the peer could not accept: an empty batch,
    an op that is not a dict with a str ``"op"``, a value msgpack cannot encode, ops whose
    msgpack body is over ``max_frame_size``, or a message over ``max_message_size``.
    """
    if not ops:
        raise LocalProtocolError("cannot send an empty batch of ops")
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("op"), str):
            raise LocalProtocolError(f"an op must be a dict with a str 'op' key, not {op!r:.80}")
    buffers: list[memoryview] = []
    indices: dict[int, int] = {}  # id of a Payload -> its buffer's index

    def default(obj: Any) -> Any:
        if isinstance(obj, Payload):
            if obj.data.nbytes < oob_threshold:
                return obj.data
            index = indices.get(id(obj))
            if index is None:
                index = indices[id(obj)] = len(buffers)
                buffers.append(obj.data)
            return msgpack.ExtType(EXT_BUFFER, _INDEX.pack(index))
        raise TypeError(f"cannot send a {type(obj).__name__} over the wire")

    try:
        body = msgpack.packb(ops, default=default, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as error:
        raise LocalProtocolError(f"cannot encode ops: {error}") from error
    if len(body) > max_frame_size:
        raise LocalProtocolError(
            f"ops of {len(body)} bytes (without their out-of-band payloads) exceed the frame "
            f"limit of {max_frame_size} bytes (comm.max_frame_size)"
        )
    total = len(body) + sum(buffer.nbytes for buffer in buffers) if buffers else len(body)
    if total > max_message_size:
        raise LocalProtocolError(
            f"message of {total} bytes exceeds the message limit of {max_message_size} bytes "
            "(comm.max_message_size)"
        )
    chunks: list[Chunk] = []
    for buffer in buffers:
        _add_buffer(chunks, buffer, max_frame_size)
    chunks.append(HEADER.pack(len(body), KIND_OPS) + body)
    return chunks


def _add_buffer(chunks: list[Chunk], buffer: memoryview, max_frame_size: int) -> None:
    size = buffer.nbytes
    if size <= max_frame_size:
        chunks.append(HEADER.pack(size, KIND_BUFFER))
        chunks.append(buffer)
        return
    step = max_frame_size - PART.size
    if step < 1:
        raise LocalProtocolError(f"a frame limit of {max_frame_size} bytes leaves no room for "
                                 "the parts of a large payload")
    for offset in range(0, size, step):
        piece = buffer[offset : offset + step]
        chunks.append(HEADER.pack(PART.size + piece.nbytes, KIND_PART) + PART.pack(size, offset))
        chunks.append(piece)


def decode_ops(body: bytes | memoryview, buffers: Sequence[memoryview] = ()) -> list[dict]:
    """The batch of ops in an ops frame's body; RemoteProtocolError for anything malformed."""

    def ext_hook(code: int, data: bytes) -> Any:
        if code != EXT_BUFFER or len(data) != _INDEX.size:
            raise RemoteProtocolError(f"peer sent unknown msgpack ext type {code}")
        (index,) = _INDEX.unpack(data)
        if index >= len(buffers):
            raise RemoteProtocolError(f"peer referred to buffer {index} of {len(buffers)}")
        return buffers[index]

    try:
        batch = msgpack.unpackb(body, ext_hook=ext_hook, raw=False, use_list=True)
    except ProtocolError:
        raise
    except Exception as error:  # msgpack raises many types for malformed input
        raise RemoteProtocolError(f"peer sent malformed msgpack: {error!r:.200}") from error
    if type(batch) is not list or not batch:
        raise RemoteProtocolError(f"peer sent a frame that is not a list of ops: {batch!r:.80}")
    for op in batch:
        if type(op) is not dict or type(op.get("op")) is not str:
            raise RemoteProtocolError(f"peer sent an op without a str 'op' key: {op!r:.80}")
    return batch


class MessageDecoder:
    """Collects received bytes into batches of ops (buffers already put in their places).

    Same feeding interface as :class:`FrameDecoder`: :meth:`feed`, or :meth:`get_buffer` and
    :meth:`buffer_updated`. Returns a list of batches; each batch is a list of op dicts.
    """

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE, *,
                 max_message_size: int = MAX_MESSAGE_SIZE, max_buffers: int = MAX_BUFFERS):
        self.max_frame_size = max_frame_size
        self.max_message_size = max_message_size
        self.max_buffers = max_buffers
        self._frames = FrameDecoder(max_frame_size, max_message_size=max_message_size)
        self._buffers: list[memoryview] = []
        self._buffered = 0
        self._error: RemoteProtocolError | None = None

    @property
    def in_message(self) -> bool:
        return self._frames.in_frame or bool(self._buffers)

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        self._raise_if_failed()
        return self._frames.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> list[Batch]:
        self._raise_if_failed()
        return self._assemble(self._frames.buffer_updated(nbytes))

    def feed(self, data: bytes | bytearray | memoryview) -> list[Batch]:
        self._raise_if_failed()
        return self._assemble(self._frames.feed(data))

    def eof(self) -> None:
        """Raise RemoteProtocolError if the peer's EOF cut a message short."""
        self._frames.eof()
        if self._buffers:
            raise RemoteProtocolError("peer closed the connection in the middle of a message")

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _assemble(self, frames: Iterable[Frame]) -> list[Batch]:
        try:
            return self._assemble_frames(frames)
        except RemoteProtocolError as error:
            self._error = error
            self._buffers = []
            raise

    def _assemble_frames(self, frames: Iterable[Frame]) -> list[Batch]:
        batches: list[Batch] = []
        for kind, body in frames:
            if kind == KIND_BUFFER:
                # The frame decoder has already held the bytes to the message limit.
                self._buffers.append(memoryview(body).toreadonly())
                self._buffered += len(body)
                if len(self._buffers) > self.max_buffers:
                    raise RemoteProtocolError(
                        f"peer sent {len(self._buffers)} buffers for one message, over the "
                        f"limit of {self.max_buffers}"
                    )
                continue
            nbytes = self._buffered + len(body) + HEADER.size * (len(self._buffers) + 1)
            buffers, self._buffers, self._buffered = self._buffers, [], 0
            batches.append(Batch(decode_ops(body, buffers), nbytes))
        return batches

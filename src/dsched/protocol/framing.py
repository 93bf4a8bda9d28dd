"""Frames: a 9-byte header (body length, big-endian uint64; then a kind byte) and a body.

A message is any number of buffer frames and then one ops frame. A buffer larger than one
frame travels as *parts*: frames of their own kind whose body starts with the buffer's total
length and the part's offset in it (two big-endian uint64), so that the receiver can check the
total against the message limit and allocate the buffer once, before any of its bytes arrive.

:class:`FrameDecoder` turns received bytes into frames. It checks a claimed length against the
limits as soon as the header is complete, before it allocates anything for the body, and it
receives a large body (a whole buffer, or a part of one) straight into its final buffer
(``get_buffer`` / ``buffer_updated``, the shape of :class:`asyncio.BufferedProtocol`) so that
the bytes are copied once, from the kernel. Parts come out as one buffer frame, whole.
Sans-IO: no sockets, no asyncio.
"""

from __future__ import annotations

import struct
from collections import namedtuple

from ..errors import LocalProtocolError, RemoteProtocolError

#: Body length (network byte order), then the frame kind.
HEADER = struct.Struct(">QB")
#: The start of a part's body: the whole buffer's length, then this part's offset in it.
PART = struct.Struct(">QQ")

#: A msgpack list of op dicts: the last frame of a message.
KIND_OPS = 0
#: Opaque bytes that the message's ops frame refers to (an out-of-band payload).
KIND_BUFFER = 1
#: One piece of a buffer too large for a frame; the pieces of one buffer follow each other.
KIND_PART = 2
KINDS = (KIND_OPS, KIND_BUFFER, KIND_PART)

#: The default limit on one frame's body.
MAX_FRAME_SIZE = 256 * 2**20
#: The default limit on one message: its ops frame and all its buffers, however many frames.
MAX_MESSAGE_SIZE = 4 * 2**30

#: Bodies that fit in the scratch buffer are copied out of it; longer ones get their own buffer.
SCRATCH_SIZE = 64 * 2**10

Body = bytes | memoryview

#: A frame: its kind and its body (``bytes``, or a ``memoryview`` of a buffer of its own).
#: ``namedtuple``, not ``typing.NamedTuple``: the ``sched`` command need not load ``typing``.
Frame = namedtuple("Frame", ("kind", "body"))


def encode_header(kind: int, length: int, max_frame_size: int = MAX_FRAME_SIZE) -> bytes:
    """The header for a frame we are about to send; a frame over the limit is our bug."""
    if kind not in KINDS:
        raise LocalProtocolError(f"unknown frame kind {kind!r}")
    if length > max_frame_size:
        raise LocalProtocolError(
            f"frame of {length} bytes exceeds the limit of {max_frame_size} bytes"
        )
    return HEADER.pack(length, kind)


def check_header(length: int, kind: int, max_frame_size: int, setting: str = "") -> None:
    """Raise RemoteProtocolError for a header the peer should not have sent; ``setting`` names
    the configuration key of the limit, for the message."""
    if kind not in KINDS:
        raise RemoteProtocolError(f"peer sent a frame of unknown kind {kind}")
    if length > max_frame_size:
        raise RemoteProtocolError(
            f"peer sent a frame of {length} bytes, over the limit of {max_frame_size} bytes"
            + (f" ({setting})" if setting else "")
        )


class FrameDecoder:
    """Collects received bytes into whole frames.

    Feed it with :meth:`feed` (copies ``data`` in), or let a transport write into the view from
    :meth:`get_buffer` and then call :meth:`buffer_updated`. Small bodies come out as ``bytes``;
    bodies longer than the scratch buffer, and buffers sent in parts, come out as a
    ``memoryview`` of a buffer of their own, never copied again. After a
    :class:`RemoteProtocolError` the decoder stays failed.
    """

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE, *,
                 max_message_size: int = MAX_MESSAGE_SIZE, scratch_size: int = SCRATCH_SIZE):
        if scratch_size <= HEADER.size + PART.size:
            raise LocalProtocolError(f"scratch_size must exceed {HEADER.size + PART.size} bytes")
        self.max_frame_size = max_frame_size
        self.max_message_size = max_message_size
        self._scratch = bytearray(scratch_size)
        self._start = 0  # first byte not yet parsed
        self._end = 0  # end of the bytes received into the scratch buffer
        # The rest of the current body goes straight into _target (its own buffer, _owned,
        # or a slice of the buffer being assembled from parts).
        self._target: memoryview | None = None
        self._target_filled = 0
        self._owned: bytearray | None = None
        self._owned_kind = KIND_OPS
        self._assembly: bytearray | None = None
        self._assembled = 0  # bytes of _assembly received, so the offset the next part must have
        self._message_bytes = 0  # body bytes of the message so far, checked before allocating
        self._error: RemoteProtocolError | None = None

    @property
    def in_frame(self) -> bool:
        """Whether part of a frame is buffered (so an EOF now would cut it)."""
        return (self._target is not None or self._assembly is not None
                or self._end > self._start)

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """A non-empty writable view where the next received bytes must go."""
        self._raise_if_failed()
        if self._target is not None:
            return self._target[self._target_filled :]
        if self._end == len(self._scratch):
            # Move the unparsed tail to the front. _parse guarantees it is shorter than the
            # scratch buffer: a body that does not fit goes to a buffer of its own instead.
            tail = self._end - self._start
            self._scratch[:tail] = self._scratch[self._start : self._end]
            self._start, self._end = 0, tail
        return memoryview(self._scratch)[self._end :]

    def buffer_updated(self, nbytes: int) -> list[Frame]:
        """``nbytes`` were written into the last view from :meth:`get_buffer`."""
        self._raise_if_failed()
        if self._target is not None:
            self._target_filled += nbytes
        else:
            self._end += nbytes
        try:
            return self._parse()
        except RemoteProtocolError as error:
            self._fail(error)
            raise

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Add received bytes; returns the frames they complete, in order."""
        frames: list[Frame] = []
        view = memoryview(data).cast("B")
        while view:
            target = self.get_buffer(len(view))
            n = min(len(target), len(view))
            target[:n] = view[:n]
            frames.extend(self.buffer_updated(n))
            view = view[n:]
        return frames

    def eof(self) -> None:
        """The peer closed its side: raise RemoteProtocolError if that cut a frame short."""
        self._raise_if_failed()
        if self._assembly is not None:
            self._fail(RemoteProtocolError(
                f"peer closed the connection after {self._assembled} of the "
                f"{len(self._assembly)} bytes of a buffer sent in parts"
            ))
        elif self.in_frame:
            self._fail(RemoteProtocolError("peer closed the connection in the middle of a frame"))
        self._raise_if_failed()

    # -- internals ------------------------------------------------------------------------

    def _parse(self) -> list[Frame]:
        frames: list[Frame] = []
        while True:
            if self._target is not None:
                if self._target_filled < len(self._target):
                    break
                self._body_received(frames)
                continue
            available = self._end - self._start
            if available < HEADER.size:
                break
            length, kind = HEADER.unpack_from(self._scratch, self._start)
            check_header(length, kind, self.max_frame_size, "comm.max_frame_size")
            body_start = self._start + HEADER.size
            if kind == KIND_PART:
                if length <= PART.size:
                    raise RemoteProtocolError(f"peer sent a part frame of {length} bytes, "
                                              "too short to carry any of its buffer")
                if available < HEADER.size + PART.size:
                    break
                total, offset = PART.unpack_from(self._scratch, body_start)
                self._receive_part(total, offset, length - PART.size, body_start + PART.size)
                continue
            if self._assembly is not None:
                raise RemoteProtocolError(
                    f"peer sent a frame of kind {kind} after {self._assembled} of the "
                    f"{len(self._assembly)} bytes of a buffer sent in parts"
                )
            if available - HEADER.size >= length:
                self._count(kind, length)
                body = bytes(memoryview(self._scratch)[body_start : body_start + length])
                frames.append(Frame(kind, body))
                self._start = body_start + length
                continue
            if HEADER.size + length > len(self._scratch):
                self._count(kind, length)
                # Allocated only now, after the frame and message limits accepted the length.
                self._owned, self._owned_kind = bytearray(length), kind
                self._receive_into(memoryview(self._owned), body_start)
                continue
            break
        if self._start == self._end:
            self._start = self._end = 0
        return frames

    def _count(self, kind: int, length: int) -> None:
        """Add a body to the message's bytes; an ops frame ends the message."""
        total = self._message_bytes + length
        if total > self.max_message_size:
            raise RemoteProtocolError(
                f"peer sent a message of at least {total} bytes, over the limit of "
                f"{self.max_message_size} bytes (comm.max_message_size)"
            )
        self._message_bytes = 0 if kind == KIND_OPS else total

    def _receive_part(self, total: int, offset: int, length: int, data_start: int) -> None:
        if self._assembly is None:
            if offset != 0:
                raise RemoteProtocolError(
                    f"peer sent buffer parts out of order: the first part is at offset {offset}"
                )
            self._count(KIND_PART, total)
            # Allocated once for the whole buffer, after the message limit accepted its total.
            self._assembly, self._assembled = bytearray(total), 0
        elif total != len(self._assembly) or offset != self._assembled:
            raise RemoteProtocolError(
                f"peer sent buffer parts out of order: a part at offset {offset} of {total} "
                f"bytes where offset {self._assembled} of {len(self._assembly)} was next"
            )
        if offset + length > total:
            raise RemoteProtocolError(
                f"peer sent a part of {length} bytes at offset {offset}, past the end of its "
                f"{total}-byte buffer"
            )
        self._receive_into(memoryview(self._assembly)[offset : offset + length], data_start)

    def _receive_into(self, target: memoryview, body_start: int) -> None:
        """Take what scratch holds of this body; the rest is received straight into target."""
        have = min(self._end - body_start, len(target))
        target[:have] = memoryview(self._scratch)[body_start : body_start + have]
        self._start = body_start + have
        self._target, self._target_filled = target, have

    def _body_received(self, frames: list[Frame]) -> None:
        target, self._target = self._target, None
        if self._owned is not None:
            frames.append(Frame(self._owned_kind, memoryview(self._owned)))
            self._owned = None
            return
        assert self._assembly is not None and target is not None
        self._assembled += len(target)
        if self._assembled == len(self._assembly):
            frames.append(Frame(KIND_BUFFER, memoryview(self._assembly)))
            self._assembly = None

    def _fail(self, error: RemoteProtocolError) -> None:
        self._error = error
        self._target = self._owned = self._assembly = None
        self._start = self._end = 0

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

"""Frames: a 9-byte header (body length, big-endian uint64; then a kind byte) and a body.

:class:`FrameDecoder` turns received bytes into frames. It checks a claimed length against the
limit as soon as the header is complete, before it allocates anything for the body, and it
receives a large body straight into that body's own buffer (``get_buffer`` /
``buffer_updated``, the shape of :class:`asyncio.BufferedProtocol`) so that the bytes are
copied once, from the kernel. Sans-IO: no sockets, no asyncio.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, Union

from ..errors import LocalProtocolError, RemoteProtocolError

#: Body length (network byte order), then the frame kind.
HEADER = struct.Struct(">QB")

#: A msgpack list of op dicts.
KIND_OPS = 0
#: Opaque bytes that the next ops frame refers to (an out-of-band payload).
KIND_BUFFER = 1
KINDS = (KIND_OPS, KIND_BUFFER)

#: The default limit on one frame's body, and on one message (its ops frame plus buffers).
MAX_FRAME_SIZE = 256 * 2**20

#: Bodies that fit in the scratch buffer are copied out of it; longer ones get their own buffer.
SCRATCH_SIZE = 64 * 2**10

Body = Union[bytes, memoryview]


class Frame(NamedTuple):
    kind: int
    body: Body


def encode_header(kind: int, length: int, max_frame_size: int = MAX_FRAME_SIZE) -> bytes:
    """The header for a frame we are about to send; a frame over the limit is our bug."""
    if kind not in KINDS:
        raise LocalProtocolError(f"unknown frame kind {kind!r}")
    if length > max_frame_size:
        raise LocalProtocolError(
            f"frame of {length} bytes exceeds the limit of {max_frame_size} bytes"
        )
    return HEADER.pack(length, kind)


def check_header(length: int, kind: int, max_frame_size: int) -> None:
    """Raise RemoteProtocolError for a header the peer should not have sent."""
    if kind not in KINDS:
        raise RemoteProtocolError(f"peer sent a frame of unknown kind {kind}")
    if length > max_frame_size:
        raise RemoteProtocolError(
            f"peer sent a frame of {length} bytes, over the limit of {max_frame_size} bytes"
        )


class FrameDecoder:
    """Collects received bytes into whole frames.

    Feed it with :meth:`feed` (copies ``data`` in), or let a transport write into the view from
    :meth:`get_buffer` and then call :meth:`buffer_updated`. Small bodies come out as ``bytes``;
    bodies longer than the scratch buffer come out as a ``memoryview`` of a buffer of their own,
    never copied again. After a :class:`RemoteProtocolError` the decoder stays failed.
    """

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE, *, scratch_size: int = SCRATCH_SIZE):
        if scratch_size <= HEADER.size:
            raise LocalProtocolError(f"scratch_size must exceed {HEADER.size} bytes")
        self.max_frame_size = max_frame_size
        self._scratch = bytearray(scratch_size)
        self._start = 0  # first byte not yet parsed
        self._end = 0  # end of the bytes received into the scratch buffer
        self._large: bytearray | None = None
        self._large_kind = KIND_OPS
        self._large_filled = 0
        self._error: RemoteProtocolError | None = None

    @property
    def in_frame(self) -> bool:
        """Whether part of a frame is buffered (so an EOF now would cut it)."""
        return self._large is not None or self._end > self._start

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """A non-empty writable view where the next received bytes must go."""
        self._raise_if_failed()
        if self._large is not None:
            return memoryview(self._large)[self._large_filled :]
        if self._end == len(self._scratch):
            # Move the unparsed tail to the front. _parse guarantees it is shorter than the
            # scratch buffer: a frame that does not fit gets its own buffer instead.
            tail = self._end - self._start
            self._scratch[:tail] = self._scratch[self._start : self._end]
            self._start, self._end = 0, tail
        return memoryview(self._scratch)[self._end :]

    def buffer_updated(self, nbytes: int) -> list[Frame]:
        """``nbytes`` were written into the last view from :meth:`get_buffer`."""
        self._raise_if_failed()
        if self._large is not None:
            self._large_filled += nbytes
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
        if self.in_frame:
            self._fail(RemoteProtocolError("peer closed the connection in the middle of a frame"))
            self._raise_if_failed()

    # -- internals ------------------------------------------------------------------------

    def _parse(self) -> list[Frame]:
        frames: list[Frame] = []
        while True:
            if self._large is not None:
                if self._large_filled < len(self._large):
                    break
                frames.append(Frame(self._large_kind, memoryview(self._large)))
                self._large = None
                continue
            available = self._end - self._start
            if available < HEADER.size:
                break
            length, kind = HEADER.unpack_from(self._scratch, self._start)
            check_header(length, kind, self.max_frame_size)
            body_start = self._start + HEADER.size
            if available - HEADER.size >= length:
                body = bytes(memoryview(self._scratch)[body_start : body_start + length])
                frames.append(Frame(kind, body))
                self._start = body_start + length
                continue
            if HEADER.size + length > len(self._scratch):
                self._start_large(kind, length, body_start)
                continue
            break
        if self._start == self._end:
            self._start = self._end = 0
        return frames

    def _start_large(self, kind: int, length: int, body_start: int) -> None:
        # Allocated only now, after check_header accepted the length.
        self._large = bytearray(length)
        have = self._end - body_start
        self._large[:have] = memoryview(self._scratch)[body_start : self._end]
        self._large_kind = kind
        self._large_filled = have
        self._start = self._end = 0

    def _fail(self, error: RemoteProtocolError) -> None:
        self._error = error
        self._large = None
        self._start = self._end = 0

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

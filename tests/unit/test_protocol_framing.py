"""Framing: length-prefixed frames survive any split of the stream; bad headers are refused
before anything is allocated; a buffer sent in parts is assembled in one buffer allocated once,
and parts that are too large, out of order or cut short are refused; arbitrary bytes only ever
raise RemoteProtocolError."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsched.errors import LocalProtocolError, RemoteProtocolError
from dsched.protocol import HEADER, KIND_BUFFER, KIND_OPS, KIND_PART, FrameDecoder
from dsched.protocol.framing import PART, SCRATCH_SIZE, encode_header


def frame(body: bytes, kind: int = KIND_OPS) -> bytes:
    return encode_header(kind, len(body)) + body


def part(total: int, offset: int, data: bytes) -> bytes:
    return encode_header(KIND_PART, PART.size + len(data)) + PART.pack(total, offset) + data


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:])]


BODIES = [b"", b"a", b"hello world", bytes(range(256)) * 10, b"x" * (SCRATCH_SIZE - 20),
          b"y" * (SCRATCH_SIZE * 3 + 7)]


def test_the_header_is_a_big_endian_length_then_a_kind_byte():
    assert encode_header(KIND_OPS, 5) == b"\x00" * 7 + b"\x05" + b"\x00"
    assert HEADER.size == 9


@pytest.mark.parametrize("body", BODIES, ids=lambda b: f"{len(b)}B")
def test_a_frame_fed_one_byte_at_a_time_comes_out_once_and_whole(body):
    decoder = FrameDecoder()
    data = frame(body, KIND_BUFFER)
    frames = []
    for i in range(len(data)):
        frames += decoder.feed(data[i : i + 1])
        if i < len(data) - 1:
            assert decoder.in_frame
    assert len(frames) == 1
    assert frames[0].kind == KIND_BUFFER and bytes(frames[0].body) == body
    assert not decoder.in_frame


@settings(max_examples=200, deadline=None)
@given(bodies=st.lists(st.sampled_from(BODIES) | st.binary(max_size=300), max_size=8),
       cuts=st.lists(st.integers(min_value=0), max_size=20))
def test_frames_survive_any_split_of_the_stream(bodies, cuts):
    decoder = FrameDecoder()
    data = b"".join(frame(body) for body in bodies)
    frames = []
    for piece in split(data, cuts):
        frames += decoder.feed(piece)
    assert [bytes(f.body) for f in frames] == bodies
    decoder.eof()  # nothing left half-read


def test_a_large_body_is_received_straight_into_its_own_buffer():
    decoder = FrameDecoder()
    body = bytes(range(256)) * (SCRATCH_SIZE // 100)
    data = frame(body)
    frames, position, targets = [], 0, []
    while position < len(data):  # what a BufferedProtocol transport does
        target = decoder.get_buffer(-1)
        targets.append(target)
        n = min(len(target), len(data) - position)
        target[:n] = data[position : position + n]
        position += n
        frames += decoder.buffer_updated(n)
    assert len(frames) == 1 and bytes(frames[0].body) == body
    # The last writes went into the body's own buffer, which is what we got back: no copy.
    assert isinstance(frames[0].body, memoryview)
    assert frames[0].body.obj is targets[-1].obj


def test_a_header_claiming_4_gib_is_refused_without_allocating_it():
    decoder = FrameDecoder(max_frame_size=256 * 2**20)
    tracemalloc.start()
    try:
        with pytest.raises(RemoteProtocolError, match="4294967296 bytes, over the limit"):
            decoder.feed(struct.pack(">QB", 4 * 2**30, KIND_OPS) + b"partial body")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20


def test_a_decoder_stays_failed_after_a_bad_frame():
    decoder = FrameDecoder(max_frame_size=10)
    with pytest.raises(RemoteProtocolError):
        decoder.feed(frame(b"x" * 11))
    with pytest.raises(RemoteProtocolError):
        decoder.feed(frame(b"ok"))


def test_an_unknown_frame_kind_is_the_peers_fault():
    with pytest.raises(RemoteProtocolError, match="unknown kind 7"):
        FrameDecoder().feed(struct.pack(">QB", 1, 7) + b"x")


def test_eof_in_the_middle_of_a_frame_is_the_peers_fault():
    decoder = FrameDecoder()
    decoder.feed(frame(b"abcdef")[:-2])
    with pytest.raises(RemoteProtocolError, match="middle of a frame"):
        decoder.eof()


def test_sending_a_frame_over_the_limit_is_our_bug():
    with pytest.raises(LocalProtocolError):
        encode_header(KIND_OPS, 11, max_frame_size=10)
    with pytest.raises(LocalProtocolError):
        encode_header(9, 1)


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=2000), cuts=st.lists(st.integers(min_value=0), max_size=10))
def test_arbitrary_bytes_raise_only_remote_protocol_errors(data, cuts):
    decoder = FrameDecoder(max_frame_size=1000, scratch_size=64)
    try:
        for piece in split(data, cuts):
            decoder.feed(piece)
        decoder.eof()
    except RemoteProtocolError:
        pass


# -- buffers in parts -------------------------------------------------------------------------

PAYLOAD = bytes(range(256)) * 1000


def parts_of(data: bytes, step: int) -> bytes:
    return b"".join(part(len(data), i, data[i : i + step]) for i in range(0, len(data), step))


def test_parts_are_received_in_place_into_one_buffer_allocated_once():
    decoder = FrameDecoder(max_frame_size=PART.size + 100_000)
    data = parts_of(PAYLOAD, 100_000) + frame(b"ops")  # parts longer than the scratch buffer
    frames, position, targets = [], 0, []
    while position < len(data):  # what a BufferedProtocol transport does
        target = decoder.get_buffer(-1)
        targets.append(target)
        n = min(len(target), len(data) - position)
        target[:n] = data[position : position + n]
        position += n
        frames += decoder.buffer_updated(n)
    assert [f.kind for f in frames] == [KIND_BUFFER, KIND_OPS]
    assert bytes(frames[0].body) == PAYLOAD
    # Every write that did not go to the scratch buffer went straight into the one buffer
    # that came out: no buffer per part.
    scratch, assembled = targets[0].obj, frames[0].body.obj
    direct = [t for t in targets if t.obj is not scratch]
    assert len(direct) >= 2 and all(t.obj is assembled for t in direct)


def test_a_part_announcing_more_than_the_message_limit_is_refused_without_allocating_it():
    decoder = FrameDecoder(max_frame_size=2**20, max_message_size=2**30)
    tracemalloc.start()
    try:
        with pytest.raises(RemoteProtocolError, match=r"limit of 1073741824 bytes "
                                                      r"\(comm.max_message_size\)"):
            decoder.feed(part(4 * 2**30, 0, b"first bytes"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20


def test_buffers_of_one_message_together_over_the_limit_are_refused():
    decoder = FrameDecoder(max_message_size=1000)
    decoder.feed(frame(b"x" * 600, KIND_BUFFER) + frame(b"ops"))  # a message ends the count
    decoder.feed(frame(b"x" * 600, KIND_BUFFER))
    with pytest.raises(RemoteProtocolError, match="comm.max_message_size"):
        decoder.feed(part(600, 0, b"y" * 10))


@pytest.mark.parametrize("data, message", [
    (part(100, 10, b"x" * 10), "first part is at offset 10"),
    (part(100, 0, b"x" * 10) + part(100, 20, b"x" * 10), "offset 20 of 100 bytes where offset 10"),
    (part(100, 0, b"x" * 10) + part(100, 0, b"x" * 10), "offset 0 of 100 bytes where offset 10"),
    (part(100, 0, b"x" * 10) + part(200, 10, b"x" * 10), "offset 10 of 200 bytes where offset 10"),
    (part(100, 0, b"x" * 10) + frame(b"ops"), "frame of kind 0 after 10 of the 100 bytes"),
    (part(100, 0, b"x" * 10) + frame(b"b", KIND_BUFFER), "frame of kind 1 after 10 of the 100"),
    (part(100, 0, b"x" * 90) + part(100, 90, b"x" * 20), "past the end of its 100-byte buffer"),
    (encode_header(KIND_PART, PART.size) + PART.pack(100, 0), "too short to carry any"),
])
def test_parts_out_of_order_are_the_peers_fault(data, message):
    decoder = FrameDecoder()
    with pytest.raises(RemoteProtocolError, match=message):
        decoder.feed(data)
    with pytest.raises(RemoteProtocolError):  # and the decoder stays failed
        decoder.feed(frame(b"ok"))


def test_eof_between_parts_is_the_peers_fault():
    decoder = FrameDecoder()
    assert decoder.feed(part(100, 0, b"x" * 60)) == []
    assert decoder.in_frame
    with pytest.raises(RemoteProtocolError, match="after 60 of the 100 bytes"):
        decoder.eof()


def test_eof_inside_a_part_is_the_peers_fault():
    decoder = FrameDecoder()
    decoder.feed(part(100, 0, b"x" * 60)[:-5])
    with pytest.raises(RemoteProtocolError, match="of a buffer sent in parts"):
        decoder.eof()


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300), step=st.integers(1, 64),
       cuts=st.lists(st.integers(min_value=0), max_size=10))
def test_parts_survive_any_split_of_the_stream(data, step, cuts):
    decoder = FrameDecoder(max_frame_size=PART.size + step, scratch_size=64)
    stream = (parts_of(data, step) if data else b"") + frame(b"end")
    frames = []
    for piece in split(stream, cuts):
        frames += decoder.feed(piece)
    assert [(f.kind, bytes(f.body)) for f in frames] == \
        ([(KIND_BUFFER, data)] if data else []) + [(KIND_OPS, b"end")]
    decoder.eof()

"""Framing: length-prefixed frames survive any split of the stream; bad headers are refused
before anything is allocated; arbitrary bytes only ever raise RemoteProtocolError."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsched.errors import LocalProtocolError, RemoteProtocolError
from dsched.protocol import HEADER, KIND_BUFFER, KIND_OPS, FrameDecoder
from dsched.protocol.framing import SCRATCH_SIZE, encode_header


def frame(body: bytes, kind: int = KIND_OPS) -> bytes:
    return encode_header(kind, len(body)) + body


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

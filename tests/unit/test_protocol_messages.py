"""Messages: batches of ops round-trip through encode and decode, payloads travel out of band
without copies (in parts when larger than a frame), our mistakes raise LocalProtocolError naming
the limit's setting, and the peer's RemoteProtocolError."""

from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsched.errors import LocalProtocolError, RemoteProtocolError
from dsched.protocol import (
    HEADER,
    KIND_BUFFER,
    KIND_OPS,
    KIND_PART,
    OOB_THRESHOLD,
    MessageDecoder,
    Payload,
    close_op,
    decode_ops,
    encode_ops,
)
from dsched.protocol.framing import PART, encode_header

BIG = bytes(range(256)) * (OOB_THRESHOLD // 256 + 1)

# One of each kind of op the daemons exchange, with every kind of value msgpack carries.
OPS = [
    {"op": "submit", "key": "inc-1", "function": Payload(b"\x80\x05pickled"), "args": Payload(BIG),
     "resources": {"GPU": 10000}, "priority": -3, "retries": 0, "workers": ["w1"]},
    {"op": "submit-command", "key": "job-7", "argv": ["python", "train.py", "--lr", "0.1"],
     "env": {"SCHED_X": "é∂"}, "resources": {}},
    {"op": "task-finished", "key": "inc-1", "result": Payload(BIG + b"tail"), "nbytes": 2**40,
     "duration": 0.25, "worker": "tcp://127.0.0.1:4000"},
    {"op": "task-erred", "key": "x", "exception": b"pickled exc", "traceback": None},
    {"op": "heartbeat", "load": 0.5, "memory": 123456789, "gpus": [{"index": 0, "util": 99}],
     "executing": [], "ready": True, "ok": False},
    {"op": "cancel", "keys": ["a", "b"]},
    close_op("shutting down"),
    {"op": "empty"},
]


def plain(value):
    """Payloads and received memoryviews compare as their bytes."""
    if isinstance(value, Payload):
        return bytes(value.data)
    if isinstance(value, (bytes, memoryview, bytearray)):
        return bytes(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def wire(ops, **kwargs) -> bytes:
    return b"".join(bytes(chunk) for chunk in encode_ops(ops, **kwargs))


@pytest.mark.parametrize("op", OPS, ids=lambda op: op["op"])
def test_every_op_round_trips(op):
    (batch,) = MessageDecoder().feed(wire([op]))
    assert plain(batch) == [plain(op)]


def test_a_batch_of_every_op_round_trips_fed_one_byte_at_a_time():
    decoder = MessageDecoder()
    data = wire(OPS)
    batches = []
    for i in range(len(data)):
        batches += decoder.feed(data[i : i + 1])
    assert plain(batches) == [plain(OPS)]
    decoder.eof()


def test_large_payloads_go_as_their_own_frames_written_from_the_callers_memory():
    source = bytearray(BIG)
    chunks = encode_ops([{"op": "put", "data": Payload(source), "small": Payload(b"abc")}])
    assert len(chunks) == 3  # buffer header, the payload itself, then the ops frame
    assert isinstance(chunks[1], memoryview) and chunks[1].obj is source
    (batch,) = MessageDecoder().feed(b"".join(bytes(c) for c in chunks))
    received = batch[0]["data"]
    assert isinstance(received, memoryview) and received.readonly
    assert bytes(received) == BIG
    assert batch[0]["small"] == b"abc"  # small payloads stay inside the msgpack body


def test_the_oob_threshold_is_a_parameter():
    chunks = encode_ops([{"op": "put", "data": Payload(b"abcd")}], oob_threshold=4)
    assert len(chunks) == 3


@pytest.mark.parametrize(
    "ops, message",
    [
        ([], "empty batch"),
        (["submit"], "must be a dict"),
        ([{"key": "x"}], "str 'op' key"),
        ([{"op": 3}], "str 'op' key"),
        ([{"op": "x", "value": {1, 2}}], "cannot send a set"),
        ([{"op": "x", "value": object()}], "cannot send a object"),
        ([{"op": "x", "value": 2**70}], "cannot encode"),
    ],
)
def test_sending_what_the_peer_could_not_accept_is_our_bug(ops, message):
    with pytest.raises(LocalProtocolError, match=message):
        encode_ops(ops)


def test_a_message_over_the_message_limit_is_our_bug_and_names_the_setting():
    with pytest.raises(LocalProtocolError, match=r"message limit of 70000 bytes "
                                                  r"\(comm.max_message_size\)"):
        encode_ops([{"op": "put", "data": Payload(BIG), "more": Payload(BIG)}],
                   max_frame_size=1000, max_message_size=70_000)


def test_ops_over_the_frame_limit_are_our_bug_and_name_the_setting():
    with pytest.raises(LocalProtocolError, match=r"frame limit of 1000 bytes "
                                                  r"\(comm.max_frame_size\)"):
        encode_ops([{"op": "put", "inline": b"x" * 2000}], max_frame_size=1000)


def test_a_payload_larger_than_a_frame_goes_in_parts_sliced_from_the_callers_memory():
    source = bytearray(BIG)
    chunks = encode_ops([{"op": "put", "data": Payload(source)}], max_frame_size=10_000)
    headers, pieces = chunks[:-1:2], chunks[1:-1:2]
    assert len(pieces) == -(-len(BIG) // (10_000 - PART.size))
    assert all(isinstance(p, memoryview) and p.obj is source for p in pieces)  # no copies
    for header in headers:
        length, kind = HEADER.unpack_from(header)
        assert kind == KIND_PART and length <= 10_000
    (batch,) = MessageDecoder(max_frame_size=10_000).feed(b"".join(bytes(c) for c in chunks))
    assert isinstance(batch[0]["data"], memoryview) and batch[0]["data"] == BIG


def test_one_payload_in_many_ops_of_a_message_is_sent_once():
    shared = Payload(BIG)
    chunks = encode_ops([{"op": "submit", "fn": shared, "n": i} for i in range(5)])
    assert len(chunks) == 3  # one buffer header, one buffer, the ops frame
    (batch,) = MessageDecoder().feed(b"".join(bytes(c) for c in chunks))
    assert all(op["fn"] is batch[0]["fn"] for op in batch) and batch[0]["fn"] == BIG


def test_a_message_over_the_peers_message_limit_is_the_peers_fault():
    data = wire([{"op": "put", "data": Payload(BIG)}], max_frame_size=1000)
    with pytest.raises(RemoteProtocolError, match="comm.max_message_size"):
        MessageDecoder(max_frame_size=1000, max_message_size=len(BIG) - 1).feed(data)


def test_payload_needs_contiguous_bytes():
    with pytest.raises(LocalProtocolError):
        Payload(memoryview(b"abcdef")[::2])


def ops_frame(body: bytes) -> bytes:
    return encode_header(KIND_OPS, len(body)) + body


@pytest.mark.parametrize(
    "body",
    [
        b"\xc1",  # never-used msgpack byte
        msgpack.packb({"op": "x"}),  # not a list
        msgpack.packb([]),
        msgpack.packb([{"key": "x"}]),
        msgpack.packb([{"op": 1}]),
        msgpack.packb(["op"]),
        msgpack.packb([{"op": "x"}]) + b"extra",
        msgpack.packb([{"op": "x", "v": msgpack.ExtType(5, b"")}]),
        msgpack.packb([{"op": "x", "v": msgpack.ExtType(1, struct.pack(">I", 0))}]),
        msgpack.packb([{"op": "x", "v": "é"}]).replace("é".encode(), b"\xff\xfe"),
        b"\x91" * 5000,  # nested too deep
    ],
)
def test_malformed_ops_frames_are_the_peers_fault(body):
    with pytest.raises(RemoteProtocolError):
        MessageDecoder().feed(ops_frame(body))


def test_too_many_buffers_for_one_message_are_the_peers_fault():
    decoder = MessageDecoder(max_buffers=2)
    buffer_frame = encode_header(KIND_BUFFER, 1) + b"x"
    with pytest.raises(RemoteProtocolError, match="buffers"):
        decoder.feed(buffer_frame * 3)


def test_eof_between_a_buffer_and_its_ops_frame_is_the_peers_fault():
    decoder = MessageDecoder()
    decoder.feed(encode_header(KIND_BUFFER, 1) + b"x")
    with pytest.raises(RemoteProtocolError, match="middle of a message"):
        decoder.eof()


def test_decode_ops_checks_buffer_references():
    body = msgpack.packb([{"op": "x", "v": msgpack.ExtType(1, struct.pack(">I", 1))}])
    assert decode_ops(body, [memoryview(b"a"), memoryview(b"b")]) == [{"op": "x", "v": b"b"}]
    with pytest.raises(RemoteProtocolError, match="buffer 1 of 1"):
        decode_ops(body, [memoryview(b"a")])


# -- property tests --------------------------------------------------------------------------

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=20) | st.binary(max_size=40),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
ops_strategy = st.lists(
    st.fixed_dictionaries({"op": st.text(min_size=1, max_size=12)},
                          optional={"value": values,
                                    "payload": st.binary(max_size=200).map(Payload)}),
    min_size=1, max_size=5,
)


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(ops_strategy, min_size=1, max_size=4),
       cuts=st.lists(st.integers(min_value=0), max_size=12))
def test_any_batches_round_trip_through_any_split(batches, cuts):
    data = b"".join(wire(ops, oob_threshold=50) for ops in batches)
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    decoder = MessageDecoder()
    received = []
    for a, b in zip(points, points[1:]):
        received += decoder.feed(data[a:b])
    assert plain(received) == plain(batches)


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=4),
       max_frame_size=st.integers(200, 700),  # room for the ops; payloads go in parts
       cuts=st.lists(st.integers(min_value=0), max_size=12))
def test_payloads_of_many_frames_round_trip_byte_exact_through_any_split(sizes, max_frame_size,
                                                                         cuts):
    payloads = [bytes((i * 7 + n) % 256 for i in range(n)) for n in sizes]
    ops = [{"op": "put", "n": n, "data": Payload(p)} for n, p in enumerate(payloads)]
    chunks = encode_ops(ops, max_frame_size=max_frame_size, oob_threshold=16)
    data = b"".join(bytes(c) for c in chunks)
    decoder = MessageDecoder(max_frame_size=max_frame_size, max_message_size=len(data))
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    received = []
    for a, b in zip(points, points[1:]):
        received += decoder.feed(data[a:b])
    assert plain(received) == [plain(ops)]
    decoder.eof()


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=3000))
def test_arbitrary_bytes_raise_only_remote_protocol_errors(data):
    try:
        MessageDecoder(max_frame_size=2000).feed(data)
    except RemoteProtocolError:
        pass


@settings(max_examples=500, deadline=None)
@given(bodies=st.lists(st.binary(max_size=300) | values.map(msgpack.packb)
                      | st.lists(values | st.dictionaries(st.sampled_from(["op", "x"]), values),
                                 max_size=3).map(msgpack.packb), min_size=1, max_size=4),
       kinds=st.lists(st.sampled_from([KIND_OPS, KIND_BUFFER, KIND_PART]), min_size=4,
                      max_size=4))
def test_well_framed_garbage_raises_only_remote_protocol_errors(bodies, kinds):
    data = b"".join(encode_header(kind, len(body)) + body for body, kind in zip(bodies, kinds))
    try:
        MessageDecoder().feed(data)
    except RemoteProtocolError:
        pass

"""The handshake, pushed between two sans-IO objects with no network: both sides authenticate,
the token never crosses the wire, and anything wrong raises a RemoteProtocolError that says why."""

from __future__ import annotations

import hashlib
import hmac

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsched.errors import (
    AuthenticationError,
    LocalProtocolError,
    RemoteProtocolError,
    VersionMismatchError,
)
from dsched.protocol import (
    ACCEPTOR,
    INITIATOR,
    MAGIC,
    PROTOCOL_VERSION,
    Handshake,
    MessageDecoder,
    PeerInfo,
    encode_ops,
)
from dsched.protocol.framing import KIND_BUFFER, encode_header
from dsched.protocol.handshake import hmac_sha256, preamble

TOKEN = b"a shared secret token, 32+ bytes long"


def pair(client_token=TOKEN, server_token=TOKEN, **server_kwargs):
    client = Handshake(INITIATOR, role="client", name="alice", token=client_token)
    server = Handshake(ACCEPTOR, role="scheduler", name="sched", token=server_token,
                       **server_kwargs)
    return client, server


def exchange(client, server, *, step=None, wire=None):
    """Move bytes both ways until neither side has more to say; ``step`` splits each chunk."""
    for _ in range(10):
        moved = False
        for sender, receiver in ((client, server), (server, client)):
            data = sender.data_to_send()
            if wire is not None:
                wire.append(data)
            if data and not receiver.done:
                moved = True
                pieces = [data[i : i + step] for i in range(0, len(data), step)] if step else [data]
                for piece in pieces:
                    receiver.receive_data(piece)
        if not moved:
            return


@pytest.mark.parametrize("step", [None, 1, 7])
def test_both_sides_authenticate_and_learn_who_the_other_is(step):
    client, server = pair()
    exchange(client, server, step=step)
    assert client.done and server.done
    assert server.peer == PeerInfo(role="client", name="alice", version=PROTOCOL_VERSION)
    assert client.peer == PeerInfo(role="scheduler", name="sched", version=PROTOCOL_VERSION)


def test_the_token_never_crosses_the_wire():
    client, server = pair()
    wire: list[bytes] = []
    exchange(client, server, wire=wire)
    assert client.done and server.done
    assert TOKEN not in b"".join(wire)


def test_the_acceptor_proves_nothing_before_the_initiator_has_proved_itself():
    client, server = pair()
    server.receive_data(client.data_to_send())  # preamble and hello only
    frames = MessageDecoder().feed(server.data_to_send()[len(preamble()) :])
    assert [op["op"] for batch in frames for op in batch] == ["hello"]


def test_a_wrong_token_fails_on_both_sides_and_the_client_learns_why():
    client, server = pair(client_token=b"wrong")
    with pytest.raises(AuthenticationError, match="client 'alice' failed authentication"):
        exchange(client, server)
    with pytest.raises(AuthenticationError, match="refused the connection: authentication failed"):
        client.receive_data(server.data_to_send())
    assert not client.done and not server.done and server.failed


def test_a_server_without_the_token_cannot_fool_the_client():
    client = Handshake(INITIATOR, role="client", name="alice", token=TOKEN)
    impostor = Handshake(ACCEPTOR, role="scheduler", name="sched", token=b"guess")
    impostor.receive_data(client.data_to_send())
    client.receive_data(impostor.data_to_send())
    with pytest.raises(AuthenticationError):  # the impostor cannot check the client's proof
        impostor.receive_data(client.data_to_send())
    # Had it gone on regardless, the proof it can make does not pass at the client.
    forged_proof = encode_ops([{"op": "auth", "mac": impostor._mac(ACCEPTOR)}])[-1]
    with pytest.raises(AuthenticationError, match="scheduler 'sched' failed authentication"):
        client.receive_data(forged_proof)
    assert not client.done


def test_a_proof_reflected_back_is_refused():
    """An attacker who copies the client's own proof back as the server's proof gets nowhere:
    each proof names the side that made it."""
    client, server = pair()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    client_proof = client.data_to_send()  # the client's auth frame
    with pytest.raises(AuthenticationError):
        client.receive_data(client_proof)


@pytest.mark.parametrize("client_version, server_version", [(99, PROTOCOL_VERSION),
                                                            (PROTOCOL_VERSION, 0)])
def test_a_version_mismatch_names_both_versions_on_both_sides(client_version, server_version):
    client = Handshake(INITIATOR, role="client", name="a", token=TOKEN, version=client_version)
    server = Handshake(ACCEPTOR, role="scheduler", name="s", token=TOKEN, version=server_version)
    with pytest.raises(VersionMismatchError) as server_error:
        server.receive_data(client.data_to_send())
    with pytest.raises(VersionMismatchError) as client_error:
        client.receive_data(server.data_to_send())
    for error in (server_error.value, client_error.value):
        assert f"version {client_version}" in str(error)
        assert f"version {server_version}" in str(error)


@pytest.mark.parametrize("data", [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"G", b"\x89dsX",
                                  b"\x16\x03\x01\x02\x00"])
def test_a_peer_speaking_something_else_is_refused_on_its_first_wrong_byte(data):
    server = Handshake(ACCEPTOR, role="scheduler", name="s", token=TOKEN)
    with pytest.raises(RemoteProtocolError, match="does not speak the dsched protocol"):
        server.receive_data(data)
    assert server.data_to_send() == b""  # nothing for a stranger, not even our hello


def test_a_role_the_acceptor_does_not_take_is_refused_with_a_reason():
    client, server = pair(accept_roles={"worker"})
    with pytest.raises(RemoteProtocolError, match="does not accept connections from a client"):
        exchange(client, server)
    with pytest.raises(RemoteProtocolError, match="does not accept connections from a client"):
        client.receive_data(server.data_to_send())


def hello_frame(**fields) -> bytes:
    return encode_ops([{"op": "hello", **fields}])[-1]


@pytest.mark.parametrize(
    "frame",
    [
        hello_frame(role="admin", name="x", nonce=b"n" * 32),
        hello_frame(role="client", name=3, nonce=b"n" * 32),
        hello_frame(role="client", name="x" * 1000, nonce=b"n" * 32),
        hello_frame(role="client", name="x", nonce=b"short"),
        hello_frame(role="client", name="x"),
        encode_ops([{"op": "auth", "mac": b"m" * 32}])[-1],
        encode_ops([{"op": "hello"}, {"op": "hello"}])[-1],
        encode_header(KIND_BUFFER, 1) + b"x",
        encode_header(0, 5000) + b"x" * 5000,
    ],
)
def test_a_bad_hello_is_refused_and_the_peer_told_why(frame):
    server = Handshake(ACCEPTOR, role="scheduler", name="s", token=TOKEN)
    with pytest.raises(RemoteProtocolError) as error:
        server.receive_data(preamble() + frame)
    told = MessageDecoder().feed(server.data_to_send()[len(preamble()) :])
    close = told[-1][0]
    assert close["op"] == "close" and close["reason"] == str(error.value)


def test_bytes_after_the_handshake_are_left_for_the_message_decoder():
    client, server = pair()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    assert server.done
    first_message = encode_ops([{"op": "welcome"}])[-1]
    client.receive_data(server.data_to_send() + first_message)
    assert client.done and client.leftover == first_message
    with pytest.raises(LocalProtocolError):
        client.receive_data(b"more")


def test_abandoning_tells_the_peer_why():
    client, server = pair()
    server.receive_data(client.data_to_send())
    server.data_to_send()
    server.abandon("handshake not finished within 10 s")
    assert server.failed
    (batch,) = MessageDecoder().feed(server.data_to_send())
    assert batch == [{"op": "close", "reason": "handshake not finished within 10 s"}]


def test_eof_during_the_handshake_is_the_peers_fault():
    client, server = pair()
    server.receive_data(client.data_to_send()[:5])
    with pytest.raises(RemoteProtocolError, match="during the handshake"):
        server.receive_eof()


def test_bad_arguments_are_our_bug():
    for kwargs in [dict(role="king"), dict(token=b""), dict(name="x" * 300), dict(version=2**16)]:
        with pytest.raises(LocalProtocolError):
            Handshake(INITIATOR, **{"role": "client", "name": "a", "token": TOKEN, **kwargs})
    with pytest.raises(LocalProtocolError):
        Handshake("sideways", role="client", name="a", token=TOKEN)


# -- fuzzing ---------------------------------------------------------------------------------

def fuzz(handshake: Handshake, chunks: list[bytes]) -> None:
    try:
        for chunk in chunks:
            if handshake.done:
                break
            handshake.receive_data(chunk)
        handshake.receive_eof()
    except RemoteProtocolError:
        pass


@settings(max_examples=500, deadline=None)
@given(side=st.sampled_from([INITIATOR, ACCEPTOR]),
       chunks=st.lists(st.binary(max_size=200), max_size=6))
def test_arbitrary_bytes_raise_only_remote_protocol_errors(side, chunks):
    fuzz(Handshake(side, role="worker", name="w", token=TOKEN), chunks)


@settings(max_examples=500, deadline=None)
@given(side=st.sampled_from([INITIATOR, ACCEPTOR]),
       bodies=st.lists(st.binary(max_size=100)
                       | st.dictionaries(st.sampled_from(["op", "role", "name", "nonce", "mac",
                                                          "reason", "error"]),
                                         st.sampled_from(["hello", "auth", "close", "client",
                                                          "authentication", "x"])
                                         | st.binary(min_size=32, max_size=32)
                                         | st.integers(-(2**63), 2**63) | st.none()
                                         | st.lists(st.integers(0, 9), max_size=2)
                                         | st.dictionaries(st.text(max_size=2), st.none(),
                                                           max_size=2),
                                         ).map(lambda op: msgpack.packb([op])),
                       max_size=4))
def test_well_framed_nonsense_after_a_valid_preamble_raises_only_remote_errors(side, bodies):
    frames = [encode_header(0, len(body)) + body for body in bodies]
    fuzz(Handshake(side, role="worker", name="w", token=TOKEN), [MAGIC + b"\x00\x01", *frames])


@pytest.mark.parametrize("error", [[1], {"a": 1}, 3, None, "authentication", "nonsense"])
def test_a_close_op_of_any_shape_is_read_as_a_refusal(error):
    client = Handshake(INITIATOR, role="client", name="a", token=TOKEN)
    close = encode_ops([{"op": "close", "reason": ["not", "text"], "error": error}])[-1]
    with pytest.raises(RemoteProtocolError, match="refused the connection"):
        client.receive_data(preamble() + close)


@settings(max_examples=300)
@given(st.binary(max_size=200), st.binary(max_size=300))
def test_each_proof_is_the_hmac_sha256_the_standard_library_makes(key, message):
    # Made from the interpreter's own SHA-256 (hashlib's loads OpenSSL, 5 ms of a sched call);
    # both sides agreeing is not enough, it must be HMAC-SHA256 itself.
    assert hmac_sha256(key, message) == hmac.new(key, message, hashlib.sha256).digest()

"""The handshake that opens every connection: magic and version, hello, mutual HMAC proof.

The side that connected is the *initiator*, the side that accepted is the *acceptor*::

    initiator -> preamble (magic + version), hello {role, name, nonce}
    acceptor  -> preamble, hello                 only once the initiator's preamble checked out
    initiator -> auth {mac}                      proves it holds the token
    acceptor  -> auth {mac}                      only once the initiator's proof checked out

Each proof is an HMAC-SHA256, keyed by the shared token, of both hellos (so of both fresh
nonces) and the prover's side, so the token never crosses the wire, a proof cannot be replayed
on another connection or reflected back, and an unauthenticated initiator learns nothing to
guess the token from. The magic is checked on every received byte, so a peer that speaks
something else (HTTP, random bytes) is refused at once. Sans-IO: no sockets, no asyncio.
"""

from __future__ import annotations

import os
import struct
from _operator import _compare_digest as compare_digest  # hmac.compare_digest, as hmac has it
from collections import namedtuple

from ..errors import (
    AuthenticationError,
    LocalProtocolError,
    RemoteProtocolError,
    VersionMismatchError,
)
from .framing import HEADER, KIND_OPS, check_header
from .messages import close_op, decode_ops, encode_ops

#: 2: buffers larger than a frame travel as parts (frame kind 2), which version 1 refuses.
#: 3: the scheduler tells clients future-* ops, not the task-finished/-erred workers send.
#: 4: a job attempt may end ``idle`` (its worker stopped it for holding its GPUs idle), which
#: a scheduler of version 3 took for lost, and queued again with ``--requeue``.
#: 5: a job attempt may come ``hold``, to be spawned only on a later ``proceed``, which a worker
#: of version 4 would have run at once, before the scheduler had committed it.
PROTOCOL_VERSION = 5
#: A non-text first byte, so that text protocols fail on the first byte they send.
MAGIC = b"\x89dsched"
PREAMBLE_SIZE = len(MAGIC) + 2
ROLES = ("client", "worker", "peer", "scheduler")
INITIATOR = "initiator"
ACCEPTOR = "acceptor"
#: Handshake frames are tiny; a peer that has not authenticated gets no more buffer than this.
HANDSHAKE_MAX_FRAME = 4096
NONCE_SIZE = 32
MAX_NAME_LENGTH = 256

_PREAMBLE, _HELLO, _PROOF, _DONE, _FAILED = "preamble", "hello", "proof", "done", "failed"
_CLOSE_ERRORS = {"authentication": AuthenticationError, "version": VersionMismatchError}
_LENGTH = struct.Struct(">I")

TYPE_CHECKING = False  # typing is for type checkers only (see ``ints.py``)
if TYPE_CHECKING:
    from typing import Any, Callable, Collection


#: Who is at the other end (its ``role``, ``name`` and protocol ``version``), as its hello
#: said: trustworthy once the handshake is done.
PeerInfo = namedtuple("PeerInfo", ("role", "name", "version"))


def _sha256() -> Callable[[bytes], Any]:
    """The interpreter's own SHA-256 (``_sha256`` to Python 3.11, ``_sha2`` since), else
    hashlib's. Not hashlib's first: it loads OpenSSL's library, which costs each ``sched``
    call about 5 ms, for the few hundred bytes a handshake hashes."""
    try:
        from _sha256 import sha256
    except ImportError:
        try:
            from _sha2 import sha256
        except ImportError:  # an interpreter built without its own hashes
            from hashlib import sha256
    return sha256


_SHA256 = _sha256()
_BLOCK = 64  # SHA-256's block size in bytes
_INNER = bytes(x ^ 0x36 for x in range(256))
_OUTER = bytes(x ^ 0x5C for x in range(256))


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    """HMAC-SHA256 of ``message`` under ``key`` (RFC 2104): the bytes
    ``hmac.new(key, message, hashlib.sha256).digest()`` gives (a test holds them equal)."""
    if len(key) > _BLOCK:
        key = _SHA256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    inner = _SHA256(key.translate(_INNER) + message).digest()
    return _SHA256(key.translate(_OUTER) + inner).digest()


def preamble(version: int = PROTOCOL_VERSION) -> bytes:
    return MAGIC + version.to_bytes(2, "big")


class Handshake:
    """One side's handshake: feed it received bytes, send what :meth:`data_to_send` returns.

    :meth:`receive_data` raises a RemoteProtocolError (AuthenticationError,
    VersionMismatchError) when the peer fails; send :meth:`data_to_send` once more after that,
    since it may hold a close op that tells the peer why, then close the connection. Once
    :attr:`done`, :attr:`peer` says who the peer is and :attr:`leftover` holds the bytes that
    followed the handshake (the start of the message stream).
    """

    def __init__(
        self,
        side: str,
        *,
        role: str,
        name: str,
        token: bytes | str,
        version: int = PROTOCOL_VERSION,
        accept_roles: Collection[str] | None = None,
        nonce: bytes | None = None,
        max_frame_size: int = HANDSHAKE_MAX_FRAME,
    ):
        if side not in (INITIATOR, ACCEPTOR):
            raise LocalProtocolError(f"side must be {INITIATOR!r} or {ACCEPTOR!r}, not {side!r}")
        if role not in ROLES:
            raise LocalProtocolError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        if not isinstance(name, str) or len(name) > MAX_NAME_LENGTH:
            raise LocalProtocolError(f"name must be a str of at most {MAX_NAME_LENGTH} characters")
        if isinstance(token, str):
            token = token.encode()
        if not isinstance(token, bytes) or not token:
            raise LocalProtocolError("a non-empty token is required")
        if not 0 <= version < 2**16:
            raise LocalProtocolError(f"protocol version {version} does not fit in 16 bits")
        self.side = side
        self.role = role
        self.name = name
        self.version = version
        self.accept_roles = frozenset(accept_roles) if accept_roles is not None else None
        self.max_frame_size = max_frame_size
        self.peer: PeerInfo | None = None
        self.leftover = b""
        self.error: RemoteProtocolError | None = None
        #: Bytes received from the peer so far: 0 at a failure means it never said a word.
        self.received_bytes = 0
        self._token = token
        self._nonce = nonce if nonce is not None else os.urandom(NONCE_SIZE)
        self._state = _PREAMBLE
        self._received = bytearray()
        self._outgoing = bytearray()
        self._peer_version = version
        hello = {"op": "hello", "role": role, "name": name, "nonce": self._nonce}
        self._hello_frame = encode_ops([hello], max_frame_size=max_frame_size)[-1]
        self._hellos: dict[str, bytes] = {side: self._hello_frame[HEADER.size :]}
        if side == INITIATOR:
            self._outgoing += preamble(version) + self._hello_frame

    @property
    def done(self) -> bool:
        return self._state == _DONE

    @property
    def failed(self) -> bool:
        return self._state == _FAILED

    def data_to_send(self) -> bytes:
        data = bytes(self._outgoing)
        self._outgoing.clear()
        return data

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if self._state == _FAILED:
            raise self.error  # type: ignore[misc]
        if self._state == _DONE:
            raise LocalProtocolError("handshake is done: feed later bytes to the message decoder")
        self.received_bytes += len(data)
        self._received += data
        self._advance()

    def receive_eof(self) -> None:
        """The peer closed its side before the handshake finished."""
        if self._state in (_DONE, _FAILED):
            return
        raise self._fail(RemoteProtocolError("peer closed the connection during the handshake"))

    def abandon(self, reason: str) -> None:
        """Give up (a timeout, a shutdown); queues a close op where the peer can read one."""
        if self._state not in (_DONE, _FAILED):
            self._fail(RemoteProtocolError(reason))

    # -- steps ----------------------------------------------------------------------------

    def _advance(self) -> None:
        while self._state != _DONE:
            if self._state == _PREAMBLE:
                if not self._read_preamble():
                    return
                continue
            body = self._next_frame()
            if body is None:
                return
            op = self._single_op(body)
            if self._state == _HELLO:
                self._on_hello(op, body)
            else:
                self._on_proof(op)
        self.leftover = bytes(self._received)
        self._received.clear()

    def _read_preamble(self) -> bool:
        seen = bytes(self._received[: len(MAGIC)])
        if not MAGIC.startswith(seen):
            raise self._fail(RemoteProtocolError(
                f"peer does not speak the dsched protocol (it sent {bytes(self._received[:16])!r})"
            ))
        if len(self._received) < PREAMBLE_SIZE:
            return False
        version = int.from_bytes(self._received[len(MAGIC) : PREAMBLE_SIZE], "big")
        del self._received[:PREAMBLE_SIZE]
        if self.side == ACCEPTOR:
            # Our preamble goes out even on a mismatch, so the peer can name both versions too.
            self._outgoing += preamble(self.version)
        if version != self.version:
            raise self._fail(VersionMismatchError(
                f"protocol version mismatch: the peer speaks dsched protocol version {version}, "
                f"this side speaks version {self.version}"
            ))
        self._peer_version = version
        self._state = _HELLO
        if self.side == ACCEPTOR:
            self._outgoing += self._hello_frame
        return True

    def _next_frame(self) -> bytes | None:
        if len(self._received) < HEADER.size:
            return None
        length, kind = HEADER.unpack_from(self._received)
        try:
            check_header(length, kind, self.max_frame_size)
            if kind != KIND_OPS:
                raise RemoteProtocolError("peer sent a buffer frame during the handshake")
        except RemoteProtocolError as error:
            raise self._fail(error) from None
        end = HEADER.size + length
        if len(self._received) < end:
            return None
        body = bytes(self._received[HEADER.size : end])
        del self._received[:end]
        return body

    def _single_op(self, body: bytes) -> dict:
        try:
            batch = decode_ops(body)
        except RemoteProtocolError as error:
            raise self._fail(error) from None
        if len(batch) != 1:
            raise self._fail(RemoteProtocolError("peer sent a handshake frame with several ops"))
        op = batch[0]
        if op["op"] == "close":
            kind, reason = op.get("error"), op.get("reason")
            error_type = _CLOSE_ERRORS.get(kind, RemoteProtocolError) if isinstance(kind, str) \
                else RemoteProtocolError
            reason = reason if isinstance(reason, str) else "(no reason given)"
            raise self._fail(error_type(f"peer refused the connection: {reason}"), tell_peer=False)
        return op

    def _on_hello(self, op: dict, body: bytes) -> None:
        role, name, nonce = op.get("role"), op.get("name"), op.get("nonce")
        if op["op"] != "hello":
            raise self._fail(RemoteProtocolError(f"expected a hello, got a {op['op']!r:.40} op"))
        if role not in ROLES or not isinstance(name, str) or len(name) > MAX_NAME_LENGTH:
            raise self._fail(RemoteProtocolError(
                f"peer sent an invalid hello: role {role!r:.40}, name {name!r:.40}"
            ))
        if not isinstance(nonce, bytes) or len(nonce) != NONCE_SIZE:
            raise self._fail(RemoteProtocolError("peer sent an invalid hello: bad nonce"))
        if self.accept_roles is not None and role not in self.accept_roles:
            raise self._fail(RemoteProtocolError(
                f"this {self.role} does not accept connections from a {role}"
            ))
        self.peer = PeerInfo(role, name, self._peer_version)
        self._hellos[self._other_side] = body
        self._state = _PROOF
        if self.side == INITIATOR:
            self._send_op({"op": "auth", "mac": self._mac(INITIATOR)})

    def _on_proof(self, op: dict) -> None:
        mac = op.get("mac")
        if op["op"] != "auth" or not isinstance(mac, bytes):
            raise self._fail(RemoteProtocolError(f"expected an auth op, got a {op['op']!r:.40} op"))
        if not compare_digest(mac, self._mac(self._other_side)):
            assert self.peer is not None
            who = f"{self.peer.role} {self.peer.name!r}"
            raise self._fail(
                AuthenticationError(f"{who} failed authentication: it does not hold our token"),
                kind="authentication",
                tell=f"authentication failed: the {self.role} holds a different token",
            )
        if self.side == ACCEPTOR:
            self._send_op({"op": "auth", "mac": self._mac(ACCEPTOR)})
        self._state = _DONE

    # -- helpers --------------------------------------------------------------------------

    @property
    def _other_side(self) -> str:
        return ACCEPTOR if self.side == INITIATOR else INITIATOR

    def _mac(self, prover: str) -> bytes:
        transcript = b"dsched-auth-v1\0" + prover.encode() + b"\0"
        for side in (INITIATOR, ACCEPTOR):
            hello = self._hellos[side]
            transcript += _LENGTH.pack(len(hello)) + hello
        return hmac_sha256(self._token, transcript)

    def _send_op(self, op: dict) -> None:
        for chunk in encode_ops([op], max_frame_size=self.max_frame_size):
            self._outgoing += chunk

    def _fail(
        self,
        error: RemoteProtocolError,
        *,
        tell_peer: bool = True,
        kind: str | None = None,
        tell: str | None = None,
    ) -> RemoteProtocolError:
        """Record the failure and queue a close op if the peer reads our frames by now."""
        if tell_peer and self._state in (_HELLO, _PROOF):
            self._send_op(close_op(tell or str(error), kind))
        self._state = _FAILED
        self.error = error
        self._received.clear()
        return error

"""Hostile peers for a live daemon: what they send, and the asyncio code that sends it.

Three kinds. *Strangers* never authenticate: random bytes, HTTP, TLS, wrong magic or version,
huge or unknown frame headers, truncated or malformed handshakes, and pickles wherever bytes
go; each gets one connection, which the daemon must close. *Impostors* finish a handshake with
the wrong token and then send ops full of pickles anyway. *Insiders* hold the token and send
ops that are malformed (unknown ops, wrong types, missing fields), as a client or as a worker.

Every pickle here, if anything ever loaded it, would create a directory under the test's marks
directory, so "nothing was unpickled" is a directory that stayed empty.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import random
import socket
import struct
from dataclasses import dataclass, field
from typing import Callable

import msgpack

from dsched.errors import RemoteProtocolError
from dsched.protocol import (HEADER, INITIATOR, KIND_BUFFER, KIND_OPS, MAGIC, Handshake,
                             MessageDecoder)
from dsched.protocol.handshake import preamble
from dsched.protocol.messages import encode_ops
from dsched.settings import default_of

#: Seconds a daemon has to hang up on a stranger or answer an insider.
PATIENCE = 20.0


class Mark:
    """Unpickling this creates the directory ``path``: the trace a careless daemon leaves."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


@dataclass
class Marks:
    directory: str
    made: int = 0

    def pickle(self) -> bytes:
        self.made += 1
        return pickle.dumps(Mark(os.path.join(self.directory, f"mark-{self.made}")))


def frame(body: bytes, kind: int = KIND_OPS) -> bytes:
    return HEADER.pack(len(body), kind) + body


def ops_frame(*ops: dict) -> bytes:
    return b"".join(bytes(chunk) for chunk in encode_ops(list(ops)))


def hello(rng: random.Random, role: str = "client", **extra) -> bytes:
    handshake = Handshake(INITIATOR, role=role, name=f"stranger-{rng.randrange(10**6)}",
                          token="not-the-token")
    data = handshake.data_to_send()
    if not extra:
        return data
    op = {"op": "hello", "role": role, "name": "stranger", "nonce": rng.randbytes(32), **extra}
    return preamble() + frame(msgpack.packb([op], use_bin_type=True))


# -- strangers: (bytes to send, whether to end with EOF) ----------------------------------------


def garbage(rng, marks):
    data = rng.randbytes(rng.randint(1, 4096))
    return (data if data[:1] != MAGIC[:1] else b"\x00" + data), rng.random() < 0.5


def http(rng, marks):
    line = rng.choice([b"GET / HTTP/1.1", b"POST /api/submit HTTP/1.0", b"CONNECT x:1 HTTP/1.1",
                       b"PRI * HTTP/2.0"])
    return line + b"\r\nHost: 127.0.0.1\r\nContent-Length: 4\r\n\r\n" + marks.pickle(), False


def tls(rng, marks):
    return b"\x16\x03\x01" + struct.pack(">H", 512) + rng.randbytes(512), False


def wrong_magic(rng, marks):
    magic = bytearray(MAGIC)
    magic[rng.randrange(1, len(magic))] ^= 0xFF
    return bytes(magic) + b"\x00\x01" + marks.pickle(), rng.random() < 0.5


def wrong_version(rng, marks):
    version = rng.choice([0, 2, 99, 65535, rng.randrange(2, 65536)])
    return preamble(version) + hello(rng)[len(preamble()):] + marks.pickle(), False


def huge_length(rng, marks):
    length = rng.choice([4097, 2**31, 2**32, 2**63, 2**64 - 1])
    return preamble() + HEADER.pack(length, KIND_OPS) + marks.pickle(), False


def unknown_kind(rng, marks):
    return preamble() + frame(marks.pickle(), rng.randint(2, 255)), False


def buffer_frame(rng, marks):
    return hello(rng) + frame(marks.pickle(), KIND_BUFFER), False


def truncated(rng, marks):
    data = hello(rng) + ops_frame({"op": "auth", "mac": rng.randbytes(32)})
    return data[: rng.randrange(1, len(data))], True


def not_msgpack(rng, marks):
    return preamble() + frame(rng.choice([marks.pickle(), rng.randbytes(100), b"\xc1"])), False


def bad_hello(rng, marks):
    nonce = rng.randbytes(32)
    op = rng.choice([
        {"op": "hello", "role": "client", "name": marks.pickle(), "nonce": nonce},
        {"op": "hello", "role": "root", "name": "x", "nonce": nonce},
        {"op": "hello", "role": "client", "name": "x" * 300, "nonce": nonce},
        {"op": "hello", "role": "client", "name": "x", "nonce": marks.pickle()},
        {"op": "hello", "role": ["client"], "name": "x", "nonce": nonce},
        {"op": "submit", "tasks": [{"key": "x", "spec": [marks.pickle(), marks.pickle()]}]},
        {"op": "auth", "mac": marks.pickle()},
        {"hello": "client"},
    ])
    ops = [op] if rng.random() < 0.8 else [op, op]
    body = msgpack.packb(rng.choice([ops, op, "hello", 5, [], [5]]), use_bin_type=True)
    return preamble() + frame(body), False


def raw_pickle(rng, marks):
    return marks.pickle() * rng.randint(1, 3), rng.random() < 0.5


def hello_then_pickles(rng, marks):
    """A valid hello (with a pickle riding along), then ops instead of the proof."""
    spec = [marks.pickle(), marks.pickle()]
    return hello(rng, payload=marks.pickle()) + ops_frame(
        {"op": "submit", "tasks": [{"key": "x", "spec": spec}]},
        {"op": "execute", "key": "x", "spec": spec, "resources": {}},
        {"op": "get-data", "keys": [marks.pickle()]},
    ), False


STRANGERS: list[Callable] = [garbage, http, tls, wrong_magic, wrong_version, huge_length,
                             unknown_kind, buffer_frame, truncated, not_msgpack, bad_hello,
                             raw_pickle, hello_then_pickles]


# -- insiders: malformed ops, each with a defect the daemon must refuse ------------------------


def bad_client_op(rng: random.Random, n: int) -> dict:
    bad_task = rng.choice([
        {"spec": [b"", b""]},  # no key
        {"key": f"bad-{n}"},  # no spec
        {"key": f"bad-{n}", "spec": [b"", b""], "resources": {"GPU": -5}},
        {"key": f"bad-{n}", "spec": [b"", b""], "resources": "GPU=x"},
        {"key": f"bad-{n}", "spec": [b"", b""], "priority": "high"},
        {"key": f"bad-{n}", "spec": [b"", b""], "retries": [1]},
        {"key": f"bad-{n}", "spec": [b"", b""], "dependencies": 5},
        {"key": f"bad-{n}", "spec": [b"", b""], "workers": 7},
        "not a task", 5, None,
    ])
    return rng.choice([
        {"op": f"bogus-{n}", "id": n},
        {"op": "submit", "id": n},
        {"op": "submit", "id": n, "tasks": rng.choice([5, None, 1.5, True])},
        {"op": "submit", "id": n, "tasks": [bad_task]},
        {"op": "release"}, {"op": "release", "keys": rng.choice([5, None, 2.5])},
        {"op": "cancel"}, {"op": "cancel", "keys": rng.choice([5, None, 2.5])},
        {"op": "who-has", "id": n}, {"op": "who-has", "id": n, "keys": 5},
        {"op": "who-has", "id": n, "keys": [[1], {"a": 1}]},
    ])


#: What a worker says its job lease is, in every register op it sends.
JOB_LEASE = default_of("worker.job_lease")


def bad_register(rng: random.Random, n: int) -> dict:
    good = {"op": "register", "name": f"fake-{n}", "address": f"127.0.0.1:{n}", "nthreads": 1,
            "job_lease": JOB_LEASE}
    defect = rng.choice([
        {"nthreads": 0}, {"nthreads": -1}, {"nthreads": "4"}, {"nthreads": None},
        {"resources": {"GPU": "x"}}, {"resources": {"GPU": -1}}, {"resources": 5},
        {"held": {"k": "x"}}, {"held": 5}, {"running": 5}, {"op": "heartbeat"},
    ])
    op = {**good, **defect}
    if rng.random() < 0.2:
        del op[rng.choice(["nthreads", "address"])]
    return op


def bad_worker_op(rng: random.Random, n: int) -> dict:
    """Ops a registered worker might get wrong: unknown, or missing a field."""
    return rng.choice([
        {"op": f"bogus-{n}"}, {"op": "task-finished"}, {"op": "task-erred"},
        {"op": "task-stopped"}, {"op": "task-rejected"}, {"op": "missing-data"},
        {"op": "missing-data", "key": f"k-{n}"},  # no dependency
        {"op": "task-finished", "key": f"k-{n}", "nbytes": "10"},
        {"op": "execute", "key": f"k-{n}", "spec": [b"", b""]},  # the scheduler's op, not ours
    ])


def worse_worker_op(rng: random.Random, n: int) -> dict:
    """Ops of the right shape whose fields have the wrong types (a list for a key)."""
    return rng.choice([
        {"op": "future-cancelled", "key": [n]}, {"op": "task-rejected", "key": {"k": n}},
        {"op": "task-finished", "key": [n], "nbytes": 1, "start": 0, "stop": 1},
        {"op": "missing-data", "key": f"k-{n}", "dependency": [n], "tried": 5},
    ])


def bad_data_op(rng: random.Random, n: int) -> dict:
    return rng.choice([
        {"op": f"bogus-{n}"}, {"op": "execute", "key": "x", "spec": [b"", b""]},
        {"op": "get-data", "keys": 5}, {"op": "get-data", "keys": [[n]]},
        {"op": "get-data", "keys": None}, {"op": "free", "keys": ["x"]},
    ])


#: Ends a worker's session with the scheduler.
UNREGISTER = {"op": "unregister", "reason": "insider done"}
#: Ends a session with a worker's data port: it knows no such op.
GOODBYE = {"op": "goodbye"}


# -- the asyncio side ---------------------------------------------------------------------------


@dataclass
class Tally:
    """What was sent and how each connection ended."""

    frames: int = 0  # hostile frames and handshakes sent
    connections: int = 0
    not_closed: list[str] = field(default_factory=list)  # connections the daemon left open
    answers: int = 0  # error replies insiders got
    wrong: list[str] = field(default_factory=list)  # insiders served otherwise


async def open_raw(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    # Close with a reset rather than into TIME_WAIT: a hundred thousand connections would
    # otherwise hold on to the machine's ephemeral ports for a minute.
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))
    return reader, writer


async def read_to_eof(reader: asyncio.StreamReader) -> bool:
    """Whether the daemon hung up within PATIENCE."""
    async def drain() -> None:
        while await reader.read(65536):
            pass

    try:
        await asyncio.wait_for(drain(), PATIENCE)
        return True
    except (ConnectionError, OSError):
        return True
    except asyncio.TimeoutError:
        return False


async def stranger(port: int, data: bytes, eof: bool, tally: Tally, what: str) -> None:
    reader, writer = await open_raw(port)
    try:
        writer.write(data)
        if eof:
            writer.write_eof()
        tally.frames += 1
        tally.connections += 1
        if not await read_to_eof(reader):
            tally.not_closed.append(what)
    except (ConnectionError, OSError):
        pass  # hung up on before we finished sending: as good as closed
    finally:
        writer.close()


async def authenticate(port: int, token: str, role: str, name: str):
    """A raw connection past the handshake: (reader, writer, bytes already received)."""
    reader, writer = await open_raw(port)
    handshake = Handshake(INITIATOR, role=role, name=name, token=token)
    writer.write(handshake.data_to_send())
    while not handshake.done:
        chunk = await asyncio.wait_for(reader.read(65536), PATIENCE)
        if not chunk:
            raise ConnectionError(f"{name}: the daemon hung up during the handshake")
        handshake.receive_data(chunk)
        writer.write(handshake.data_to_send())
    return reader, writer, handshake.leftover


async def impostor(port: int, role: str, marks: Marks, tally: Tally) -> None:
    """A full handshake with the wrong token, then ops full of pickles all the same."""
    reader, writer = await open_raw(port)
    try:
        handshake = Handshake(INITIATOR, role=role, name="impostor", token="wrong-token")
        spec = [marks.pickle(), marks.pickle()]
        writer.write(handshake.data_to_send())
        while not handshake.failed and not handshake.done:
            chunk = await asyncio.wait_for(reader.read(65536), PATIENCE)
            if not chunk:
                break
            try:
                handshake.receive_data(chunk)
            except RemoteProtocolError:
                break  # refused, as it should be; the pickles below go out all the same
            finally:
                writer.write(handshake.data_to_send())
                writer.write(ops_frame({"op": "submit", "tasks": [{"key": "x", "spec": spec}]},
                                       {"op": "execute", "key": "x", "spec": spec}))
        assert not handshake.done, "a handshake with the wrong token succeeded"
        tally.frames += 1
        tally.connections += 1
        if not await read_to_eof(reader):
            tally.not_closed.append("impostor")
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def insider(port: int, token: str, role: str, op: dict, tally: Tally, *,
                  first: dict | None = None) -> None:
    """An authenticated peer (after ``first``, a valid register, when given) sends one
    malformed op; the daemon must close that connection with a close op that says why (a
    hang-up without a reason, or an answer of any other kind, goes to ``tally.wrong``)."""
    reader, writer, received = await authenticate(port, token, role, "insider")
    try:
        writer.write(b"".join(ops_frame(o) for o in [*([first] if first else []), op]))
        tally.frames += 1
        tally.connections += 1
        decoder, replies = MessageDecoder(), []
        data = received
        while True:
            replies += [r for batch in decoder.feed(data) for r in batch
                        if r.get("op") not in ("welcome", "registered")]
            if replies:
                break
            data = await asyncio.wait_for(reader.read(65536), PATIENCE)
            if not data:
                break
        if replies[:1] and replies[0].get("op") == "close" and replies[0].get("reason"):
            tally.answers += 1
        else:
            tally.wrong.append(f"{role} insider got {replies[:1]!r:.200} for {op!r:.200}")
        if not await read_to_eof(reader):
            tally.not_closed.append(f"{role} insider {op}")
    except (ConnectionError, OSError, asyncio.TimeoutError):
        tally.wrong.append(f"{role} insider: no answer to {op!r:.200}")
    finally:
        writer.close()


async def one_bad_op(port: int, token: str, role: str, op: dict, tally: Tally, *,
                     first: dict | None = None, last: dict) -> None:
    """An authenticated peer (after ``first``, when given) sends a malformed op, then ``last``,
    which ends any session; the daemon must hang up, at the latest after ``last``."""
    reader, writer, _ = await authenticate(port, token, role, "insider")
    try:
        writer.write(b"".join(ops_frame(o) for o in [*([first] if first else []), op, last]))
        tally.frames += 1
        tally.connections += 1
        if not await read_to_eof(reader):
            tally.not_closed.append(f"{role} insider {op}")
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()

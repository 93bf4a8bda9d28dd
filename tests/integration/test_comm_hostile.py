"""A real listening server on 127.0.0.1 meets hostile and broken peers, each on its own
connection: every one is closed (with a reason where it can read one), none reaches the
handler, memory does not follow a claimed frame size, and a well-behaved client connected all
the while keeps getting its echo replies."""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import tracemalloc

import psutil
import pytest

from deadline import wait_until_async
from dsched.comm import connect, listen
from dsched.errors import (
    AuthenticationError,
    CommClosedError,
    RemoteProtocolError,
    VersionMismatchError,
)
from dsched.protocol import INITIATOR, PROTOCOL_VERSION, Handshake, MessageDecoder
from dsched.protocol.handshake import preamble

TOKEN = "hostile-test-token"
DEADLINE = 10.0
FOUR_GIB = 4 * 2**30


@pytest.fixture
async def server():
    handled: list[str] = []  # the name of every peer the handler was given
    ended: dict[str, str] = {}  # peer name -> why its connection ended

    async def echo(comm):
        handled.append(comm.peer.name)
        try:
            async for op in comm:
                await comm.send(op)
        except CommClosedError as error:
            ended[comm.peer.name] = error.reason
            raise

    listener = await listen("127.0.0.1", 0, echo, token=TOKEN, handshake_timeout=1.0)
    listener.handled, listener.ended = handled, ended
    try:
        yield listener
    finally:
        await listener.close()


async def read_to_end(reader: asyncio.StreamReader) -> bytes:
    received = b""
    try:
        while chunk := await reader.read(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


async def hostile(listener, data: bytes, *, eof: bool = False) -> bytes:
    """Send ``data`` on a fresh connection; return all the server sent before it hung up."""
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    try:
        writer.write(data)
        if eof:
            writer.write_eof()
        # The server must hang up by itself: reading to EOF would time out otherwise.
        return await asyncio.wait_for(read_to_end(reader), DEADLINE)
    finally:
        await hang_up(writer)


async def hang_up(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


def refusal(received: bytes) -> RemoteProtocolError:
    """What a dsched client makes of the server's bytes."""
    client = Handshake(INITIATOR, role="client", name="probe", token="irrelevant")
    with pytest.raises(RemoteProtocolError) as error:
        client.receive_data(received)
        client.receive_eof()
    return error.value


async def eventually(predicate, timeout: float = DEADLINE) -> None:
    await wait_until_async(predicate, timeout)


class EchoClient:
    """A well-behaved client that keeps a round trip going for the whole test."""

    def __init__(self, comm):
        self.comm = comm
        self.replies = 0
        self.task = asyncio.get_running_loop().create_task(self.run())

    async def run(self):
        while True:
            await self.comm.send({"op": "echo", "i": self.replies})
            reply = await self.comm.__anext__()
            assert reply == {"op": "echo", "i": self.replies}
            self.replies += 1

    async def still_served(self):
        """Wait (bounded) until a few more replies arrive after this moment."""
        target = self.replies + 3

        def served() -> bool:
            assert not self.task.done(), self.task
            return self.replies >= target

        await wait_until_async(served, DEADLINE, what="more echo replies")


async def test_hostile_peers_are_cut_off_and_a_good_client_is_served_throughout(server):
    tracemalloc.start()
    rss_before = psutil.Process().memory_info().rss
    good = EchoClient(await connect(server.address, role="client", name="good", token=TOKEN))
    try:
        await good.still_served()

        # Random bytes (first byte forced off the magic) and an HTTP request: refused on the
        # first byte, and told nothing, not even our hello.
        assert await hostile(server, b"\x00" + os.urandom(4096)) == b""
        await good.still_served()
        http = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: curl\r\n\r\n"
        assert await hostile(server, http) == b""
        await good.still_served()

        # A length prefix claiming 4 GiB, right after a valid preamble.
        received = await hostile(server, preamble() + struct.pack(">QB", FOUR_GIB, 0))
        assert "4294967296 bytes, over the limit" in str(refusal(received))
        await good.still_served()

        # A truncated hello, then EOF.
        hello = Handshake(INITIATOR, role="client", name="cut", token=TOKEN).data_to_send()
        received = await hostile(server, hello[:-5], eof=True)
        assert "closed the connection during the handshake" in str(refusal(received))
        await good.still_served()

        # A valid handshake with the wrong token: refused, and the client is told why.
        with pytest.raises(AuthenticationError, match="refused the connection: authentication"):
            await connect(server.address, role="client", name="intruder", token="wrong")
        await good.still_served()

        # A client of another protocol version gets an error naming both versions.
        old = Handshake(INITIATOR, role="worker", name="old", token=TOKEN, version=99)
        received = await hostile(server, old.data_to_send())
        with pytest.raises(VersionMismatchError) as mismatch:
            old.receive_data(received)
        assert "version 99" in str(mismatch.value)
        assert f"version {PROTOCOL_VERSION}" in str(mismatch.value)
        await good.still_served()

        # One that never finishes its handshake (hello sent, proof never) is dropped on time.
        stalled = Handshake(INITIATOR, role="client", name="stalled", token=TOKEN)
        received = await hostile(server, stalled.data_to_send())
        assert "handshake not finished within 1 s" in str(refusal(received))
        # And one that sends nothing at all.
        assert await hostile(server, b"") == b""
        await good.still_served()

        _, peak = tracemalloc.get_traced_memory()
        assert peak < 32 * 2**20, f"peak {peak} bytes"
        assert psutil.Process().memory_info().rss - rss_before < 256 * 2**20
        assert server.handled == ["good"]  # nothing hostile ever reached the handler
    finally:
        tracemalloc.stop()
        good.task.cancel()
        await asyncio.gather(good.task, return_exceptions=True)
        await good.comm.close("done")


async def test_an_authenticated_peer_claiming_a_4_gib_frame_is_cut_off_with_a_reason(server):
    """Past the handshake the limit is the (larger) max frame size; it is still checked
    before allocation, the peer is told why, and the daemon goes on."""
    good = EchoClient(await connect(server.address, role="client", name="good", token=TOKEN))
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    tracemalloc.start()
    try:
        handshake = Handshake(INITIATOR, role="client", name="greedy", token=TOKEN)
        writer.write(handshake.data_to_send())
        while not handshake.done:
            chunk = await asyncio.wait_for(reader.read(65536), DEADLINE)
            assert chunk, "server hung up during a valid handshake"
            handshake.receive_data(chunk)
            writer.write(handshake.data_to_send())
        writer.write(struct.pack(">QB", FOUR_GIB, 0) + b"\x00" * 1000)
        received = handshake.leftover + await asyncio.wait_for(read_to_end(reader), DEADLINE)
        (batch,) = MessageDecoder().feed(received)
        assert batch[0]["op"] == "close"
        assert "4294967296 bytes, over the limit of 268435456" in batch[0]["reason"]
        _, peak = tracemalloc.get_traced_memory()
        assert peak < 32 * 2**20
        await good.still_served()
        assert "greedy" in server.handled
        await eventually(lambda: "protocol error" in server.ended.get("greedy", ""))
    finally:
        tracemalloc.stop()
        await hang_up(writer)
        good.task.cancel()
        await asyncio.gather(good.task, return_exceptions=True)
        await good.comm.close("done")

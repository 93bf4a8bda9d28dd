"""Comm over real loopback sockets: round trips, close with a reason, backpressure, the outbox
limit, handler failures, timeouts and TLS."""

from __future__ import annotations

import asyncio
import logging
import shutil
import ssl
import subprocess

import pytest

from deadline import wait_until_async
from dsched.auth import client_ssl_context, server_ssl_context
from dsched.comm import connect, listen, parse_address
from dsched.errors import CommClosedError, LocalProtocolError, RemoteProtocolError
from dsched.protocol import Payload

TOKEN = "comm-test-token"
DEADLINE = 10.0


async def eventually(predicate, timeout: float = DEADLINE) -> None:
    await wait_until_async(predicate, timeout)


async def echo(comm):
    async for op in comm:
        await comm.send(op)


@pytest.fixture
async def echo_server():
    listener = await listen("127.0.0.1", 0, echo, token=TOKEN)
    try:
        yield listener
    finally:
        await listener.close()


async def test_ops_and_large_payloads_round_trip(echo_server):
    comm = await connect(echo_server.address, role="client", name="c", token=TOKEN)
    try:
        assert comm.peer.role == "scheduler" and comm.peer.name == "scheduler"
        big = bytes(range(256)) * 4096  # 1 MiB
        await comm.send({"op": "put", "data": Payload(big)}, {"op": "ping", "n": 1})
        first = await comm.__anext__()
        assert first["op"] == "put" and bytes(first["data"]) == big
        assert await comm.__anext__() == {"op": "ping", "n": 1}
    finally:
        await comm.close("done")


async def test_ops_queued_in_one_tick_travel_as_one_batch(echo_server):
    got_batch = asyncio.Event()
    sizes = []

    async def record(comm):
        sizes.append(len(await comm.recv()))
        got_batch.set()
        await comm.recv()

    listener = await listen("127.0.0.1", 0, record, token=TOKEN)
    comm = await connect(listener.address, role="client", name="c", token=TOKEN)
    try:
        for i in range(100):
            comm.write_nowait({"op": "log", "i": i})
        await asyncio.wait_for(got_batch.wait(), DEADLINE)
        assert sizes == [100]
    finally:
        await comm.close("done")
        await listener.close()


async def test_flush_now_sends_what_is_queued_without_waiting_for_the_tick():
    batches: list[int] = []

    async def record(comm):
        async for batch_op in comm:
            batches.append(batch_op["i"])

    listener = await listen("127.0.0.1", 0, record, token=TOKEN)
    comm = await connect(listener.address, role="client", name="c", token=TOKEN)
    try:
        for i in range(3):
            comm.write_nowait({"op": "log", "i": i})
        comm.flush_now()  # these three leave now, as one message
        assert comm._pending == []
        for i in range(3, 5):
            comm.write_nowait({"op": "log", "i": i})
        assert len(comm._pending) == 2  # these at the end of the tick
        await eventually(lambda: len(batches) == 5)
        assert batches == [0, 1, 2, 3, 4]
    finally:
        await comm.close("done")
        await listener.close()


async def test_close_sends_a_reason_that_ends_the_peers_iteration():
    handled = asyncio.Event()

    async def greet_then_close(comm):
        await comm.send({"op": "hello-there"})
        comm.write_nowait({"op": "last-words"})
        await comm.close("scheduler is restarting")
        handled.set()

    listener = await listen("127.0.0.1", 0, greet_then_close, token=TOKEN)
    comm = await connect(listener.address, role="client", name="c", token=TOKEN)
    try:
        received = []
        with pytest.raises(CommClosedError) as closed:
            async for op in comm:
                received.append(op["op"])
        assert received == ["hello-there", "last-words"]  # everything sent before the close
        assert closed.value.reason == "scheduler is restarting"
        assert comm.closed and comm.close_reason == "scheduler is restarting"
        with pytest.raises(CommClosedError, match="restarting"):
            await comm.send({"op": "too-late"})
        await asyncio.wait_for(handled.wait(), DEADLINE)
    finally:
        await comm.close("done")
        await listener.close()


async def test_a_client_close_reason_reaches_the_handler():
    reasons: list[str] = []

    async def handler(comm):
        try:
            async for _ in comm:
                pass
        except CommClosedError as error:
            reasons.append(error.reason)

    listener = await listen("127.0.0.1", 0, handler, token=TOKEN)
    try:
        comm = await connect(listener.address, role="worker", name="w", token=TOKEN)
        await comm.close("worker draining")
        await eventually(lambda: reasons == ["worker draining"])
    finally:
        await listener.close()


async def test_closing_the_listener_tells_connected_peers_why(echo_server):
    comm = await connect(echo_server.address, role="client", name="c", token=TOKEN)
    await echo_server.close("scheduler stopping")
    with pytest.raises(CommClosedError, match="scheduler stopping"):
        await asyncio.wait_for(comm.recv(), DEADLINE)


async def test_send_waits_for_a_slow_reader_instead_of_buffering():
    start_reading = asyncio.Event()
    received = []

    async def slow(comm):
        await start_reading.wait()
        async for op in comm:
            received.append(op["i"])

    listener = await listen("127.0.0.1", 0, slow, token=TOKEN)
    comm = await connect(listener.address, role="client", name="c", token=TOKEN)
    sent = 0
    payload = Payload(b"x" * 2**20)

    async def sender():
        nonlocal sent
        for i in range(300):
            await comm.send({"op": "chunk", "i": i, "data": payload})
            sent += 1

    task = asyncio.get_running_loop().create_task(sender())
    try:
        await eventually(lambda: comm.writing_paused)
        # The sender is held back: what it sent is bounded by the reader's inbox and the
        # socket buffers, not by how much it wanted to send.
        assert sent < 200 and not task.done()
        start_reading.set()
        await asyncio.wait_for(task, 60)
        await eventually(lambda: len(received) == 300)
        assert received == list(range(300))
    finally:
        task.cancel()
        await comm.close("done")
        await listener.close()


async def test_a_peer_that_does_not_read_is_disconnected_at_the_outbox_limit():
    reasons: list[str] = []

    async def flood(comm):
        try:
            while True:
                for _ in range(16):
                    comm.write_nowait({"op": "event", "data": Payload(b"e" * 65536)})
                await asyncio.sleep(0)  # let each tick's batch go out
        except CommClosedError as error:
            reasons.append(error.reason)

    listener = await listen("127.0.0.1", 0, flood, token=TOKEN, outbox_limit=2**20)
    comm = await connect(listener.address, role="client", name="lazy", token=TOKEN)
    try:  # the client never reads
        await eventually(lambda: reasons)
        assert "peer is not reading" in reasons[0] and "outbox limit of 1048576" in reasons[0]
    finally:
        await comm.close("done")
        await listener.close()


async def test_bulk_writes_to_a_slow_reader_are_queued_in_order_without_tripping_the_limit():
    big = Payload(bytes(16 * 2**20))
    queued = asyncio.Event()

    async def bulk_sender(comm):
        comm.write_nowait({"op": "small", "n": 0})  # the reader stops reading after this
        comm.write_nowait({"op": "bulk", "n": 1, "data": big}, bulk=True)
        await eventually(lambda: comm.writing_paused)
        comm.write_nowait({"op": "bulk", "n": 2, "data": big}, bulk=True)  # behind the first
        comm.write_nowait({"op": "small", "n": 3})  # its flush checks the limit, next tick
        await asyncio.sleep(0)
        queued.set()
        await comm.recv()  # until the reader closes

    listener = await listen("127.0.0.1", 0, bulk_sender, token=TOKEN, outbox_limit=2**20)
    comm = await connect(listener.address, role="client", name="slow", token=TOKEN,
                         inbox_limit=1024)
    try:
        await asyncio.wait_for(queued.wait(), DEADLINE)
        received = [await asyncio.wait_for(comm.__anext__(), DEADLINE) for _ in range(4)]
        assert [op["n"] for op in received] == [0, 1, 2, 3]
        assert received[1]["data"] == big.data and received[2]["data"] == big.data
    finally:
        await comm.close("done")
        await listener.close()


async def test_a_large_message_reaches_the_transport_a_piece_at_a_time():
    # What a transport cannot send at once it may copy (Python before 3.12 does), so a large
    # message waiting for a slow reader must not be handed to it whole.
    buffered = []

    async def sender(comm):
        comm.write_nowait({"op": "small"})  # the reader stops reading after this
        sending = asyncio.ensure_future(comm.send({"op": "bulk", "data": Payload(bytes(2**26))}))
        await eventually(lambda: comm.writing_paused)
        buffered.append(comm._connection._transport.get_write_buffer_size())
        await sending
        await comm.recv()

    listener = await listen("127.0.0.1", 0, sender, token=TOKEN)
    comm = await connect(listener.address, role="client", name="slow", token=TOKEN,
                         inbox_limit=1024)
    try:
        await eventually(lambda: buffered)
        assert buffered[0] < 2**26 // 4  # not the message, nor most of it
        assert [(await comm.__anext__())["op"] for _ in range(2)] == ["small", "bulk"]
    finally:
        await comm.close("done")
        await listener.close()


async def test_fire_and_forget_writes_to_a_reading_peer_all_arrive_in_order():
    async def stream_events(comm):
        for tick in range(50):
            for i in range(2000):
                comm.write_nowait({"op": "event", "n": tick * 2000 + i, "pad": b"p" * 100})
            await asyncio.sleep(0)
        await comm.send({"op": "end"})  # goes after everything queued before it
        await comm.recv()

    listener = await listen("127.0.0.1", 0, stream_events, token=TOKEN)
    comm = await connect(listener.address, role="client", name="reader", token=TOKEN)
    try:
        seen = []
        async for op in comm:
            if op["op"] == "end":
                break
            seen.append(op["n"])
        assert seen == list(range(100_000))
    finally:
        await comm.close("done")
        await listener.close()


async def test_a_failing_handler_is_logged_and_its_peer_told(caplog):
    async def broken(comm):
        await comm.recv()
        raise ValueError("bug in the handler")

    listener = await listen("127.0.0.1", 0, broken, token=TOKEN)
    comm = await connect(listener.address, role="client", name="c", token=TOKEN)
    try:
        with caplog.at_level(logging.ERROR, logger="dsched.comm"):
            await comm.send({"op": "trigger"})
            with pytest.raises(CommClosedError, match="server error"):
                await asyncio.wait_for(comm.recv(), DEADLINE)
        assert "Handler for <Comm client 'c'" in caplog.text
        assert "ValueError: bug in the handler" in caplog.text
    finally:
        await comm.close("done")
        await listener.close()


async def test_bad_ops_are_our_bug_and_raise_at_the_sender(echo_server):
    comm = await connect(echo_server.address, role="client", name="c", token=TOKEN)
    try:
        with pytest.raises(LocalProtocolError):
            comm.write_nowait({"no": "op key"})
        with pytest.raises(LocalProtocolError):
            await comm.send({"op": "x", "value": {1, 2}})
        await comm.send({"op": "still-fine"})
        assert await comm.__anext__() == {"op": "still-fine"}
    finally:
        await comm.close("done")


async def plain_server(greeting: bytes):
    """A TCP server that sends ``greeting``, then waits for the client to hang up."""
    hung_up = asyncio.Event()

    async def serve(reader, writer):
        writer.write(greeting)
        await reader.read()
        writer.close()
        hung_up.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], hung_up


async def test_connect_gives_up_on_a_server_that_never_answers():
    server, port, hung_up = await plain_server(b"")
    try:
        with pytest.raises(TimeoutError, match="handshake not finished"):
            await connect(("127.0.0.1", port), role="client", name="c", token=TOKEN, timeout=0.5)
        await asyncio.wait_for(hung_up.wait(), DEADLINE)  # connect() did not leave it open
    finally:
        server.close()
        await server.wait_closed()


async def test_connect_refuses_a_server_that_stays_silent_within_seconds_not_the_timeout():
    server, port, hung_up = await plain_server(b"")
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with pytest.raises(TimeoutError, match=r"^the peer did not answer the dsched handshake "
                           r"within 0\.3 s: is it a dsched scheduler or worker\?$"):
            await connect(("127.0.0.1", port), role="client", name="c", token=TOKEN,
                          timeout=DEADLINE, answer_timeout=0.3)
        assert loop.time() - started < DEADLINE / 2  # not the whole connect timeout
        await asyncio.wait_for(hung_up.wait(), DEADLINE)  # connect() did not leave it open
    finally:
        server.close()
        await server.wait_closed()


async def test_a_listener_hangs_up_on_a_peer_that_sends_nothing_within_seconds(caplog):
    listener = await listen("127.0.0.1", 0, echo, token=TOKEN, handshake_timeout=DEADLINE,
                            answer_timeout=0.3)
    loop = asyncio.get_running_loop()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        started = loop.time()
        # DEBUG too: the refusal is a rate-limited warning, DEBUG after another test's.
        with caplog.at_level(logging.DEBUG, logger="dsched.comm"):
            await asyncio.wait_for(reader.read(), DEADLINE)  # its preamble waits for ours
            assert loop.time() - started < DEADLINE / 2
        writer.close()
        assert "sent nothing of the dsched handshake within 0.3 s" in caplog.text
    finally:
        await listener.close()


async def test_connect_refuses_a_server_that_speaks_something_else():
    server, port, hung_up = await plain_server(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    try:
        with pytest.raises(RemoteProtocolError, match="does not speak the dsched protocol"):
            await connect(f"127.0.0.1:{port}", role="client", name="c", token=TOKEN)
        await asyncio.wait_for(hung_up.wait(), DEADLINE)
    finally:
        server.close()
        await server.wait_closed()


def test_addresses_parse_as_users_write_them():
    assert parse_address("tcp://10.0.0.1:8786") == ("10.0.0.1", 8786)
    assert parse_address("node7:8786") == ("node7", 8786)
    assert parse_address("[::1]:8786") == ("::1", 8786)
    assert parse_address(("h", "9")) == ("h", 9)
    with pytest.raises(ValueError, match="host:port"):
        parse_address("no-port")


# -- TLS -------------------------------------------------------------------------------------


def make_cert(directory, name: str) -> tuple[str, str]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(cert),
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True,
    )
    return str(cert), str(key)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("TLS tests need the openssl command (the cryptography package is absent)")
    directory = tmp_path_factory.mktemp("certs")
    return {"server": make_cert(directory, "server"), "client": make_cert(directory, "client")}


async def test_tls_carries_the_protocol_and_checks_the_server(certs):
    server_cert, server_key = certs["server"]
    listener = await listen("127.0.0.1", 0, echo, token=TOKEN,
                            ssl=server_ssl_context(server_cert, server_key))
    try:
        assert listener.address.startswith("tls://")
        comm = await connect(listener.address, role="client", name="c", token=TOKEN,
                             ssl=client_ssl_context(ca=server_cert))
        await comm.send({"op": "secret", "data": Payload(b"s" * 200_000)})
        reply = await comm.__anext__()
        assert bytes(reply["data"]) == b"s" * 200_000
        await comm.close("done")
        # A client that does not trust the server's certificate does not get through.
        with pytest.raises(ssl.SSLCertVerificationError):
            await connect(listener.address, role="client", name="c", token=TOKEN,
                          ssl=client_ssl_context(ca=certs["client"][0]))
        # The token is still checked inside TLS.
        with pytest.raises(RemoteProtocolError, match="authentication"):
            await connect(listener.address, role="client", name="c", token="wrong",
                          ssl=client_ssl_context(ca=server_cert))
    finally:
        await listener.close()


async def test_tls_client_certificates_when_required(certs):
    server_cert, server_key = certs["server"]
    client_cert, client_key = certs["client"]
    listener = await listen(
        "127.0.0.1", 0, echo, token=TOKEN,
        ssl=server_ssl_context(server_cert, server_key, ca=client_cert, require_client_cert=True),
    )
    try:
        comm = await connect(listener.address, role="worker", name="w", token=TOKEN,
                             ssl=client_ssl_context(ca=server_cert, cert=client_cert,
                                                    key=client_key))
        await comm.send({"op": "ping"})
        assert await comm.__anext__() == {"op": "ping"}
        await comm.close("done")
        # Under TLS 1.3 the server refuses after the client thinks TLS is done, so the client
        # sees either the TLS alert or the connection closing during our handshake.
        with pytest.raises((ssl.SSLError, ConnectionError, RemoteProtocolError)):
            await connect(listener.address, role="worker", name="w", token=TOKEN,
                          ssl=client_ssl_context(ca=server_cert), timeout=5)
    finally:
        await listener.close()

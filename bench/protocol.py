"""Protocol benchmark: prints one JSON line.

Measures encode+decode throughput of small ops (batched 100 to a frame, and one to a frame)
and of ops carrying a 1 MB payload, then round trips per second and payload throughput over a
loopback connection with the real handshake. Each measurement runs for about two seconds. Last,
one 300 MB payload, larger than a frame, sent over loopback (in parts) and acknowledged.

    python bench/protocol.py
"""

from __future__ import annotations

import asyncio
import json
import platform
import sys
import time

from dsched.comm import connect, listen
from dsched.protocol import MessageDecoder, Payload, encode_ops

SECONDS = 2.0
TOKEN = "bench-token"
SMALL_OP = {"op": "task-finished", "key": "inc-0123456789abcdef", "nbytes": 28,
            "duration": 0.0012, "worker": "tcp://10.0.0.7:40123", "status": "memory"}
MEGABYTE = bytes(range(256)) * 4096
LARGE = 300 * 10**6


def codec_rate(ops: list[dict]) -> dict:
    """Encode a batch, decode it as a receiver would (copied in once), as often as time allows."""
    decoder = MessageDecoder()
    messages = decoded_ops = nbytes = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < SECONDS:
        for _ in range(20):
            chunks = encode_ops(ops)
            for chunk in chunks:
                for batch in decoder.feed(chunk):
                    messages += 1
                    decoded_ops += len(batch)
            nbytes += sum(len(chunk) for chunk in chunks)
    return {"messages_per_s": round(messages / elapsed),
            "ops_per_s": round(decoded_ops / elapsed),
            "MB_per_s": round(nbytes / elapsed / 1e6, 1)}


async def echo(comm) -> None:
    async for op in comm:
        await comm.send(op)


async def acknowledge(comm) -> None:
    async for op in comm:
        await comm.send({"op": "ack", "nbytes": len(op["data"])})


async def large_payload() -> dict:
    """Seconds and MB/s for one payload larger than the default frame limit, sent once."""
    listener = await listen("127.0.0.1", 0, acknowledge, token=TOKEN)
    comm = await connect(listener.address, role="client", name="bench", token=TOKEN)
    try:
        payload = Payload(bytes(LARGE))
        start = time.perf_counter()
        await comm.send({"op": "put", "data": payload})
        reply = await comm.__anext__()
        elapsed = time.perf_counter() - start
        assert reply["nbytes"] == LARGE
        return {"seconds": round(elapsed, 2), "MB_per_s": round(LARGE / elapsed / 1e6, 1)}
    finally:
        await comm.close("bench done")
        await listener.close()


async def loopback() -> dict:
    listener = await listen("127.0.0.1", 0, echo, token=TOKEN)
    comm = await connect(listener.address, role="client", name="bench", token=TOKEN)
    try:
        trips = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < SECONDS:
            await comm.send(SMALL_OP)
            await comm.__anext__()
            trips += 1
        round_trips = trips / elapsed

        # 1 MB payloads, echoed back: counts bytes both ways.
        payload, moved, in_flight = Payload(MEGABYTE), 0, 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < SECONDS:
            while in_flight < 8:
                await comm.send({"op": "put", "data": payload})
                in_flight += 1
            reply = await comm.__anext__()
            in_flight -= 1
            moved += 2 * len(reply["data"])
        while in_flight:
            await comm.__anext__()
            in_flight -= 1
        return {"round_trips_per_s": round(round_trips),
                "payload_echo_MB_per_s": round(moved / elapsed / 1e6, 1)}
    finally:
        await comm.close("bench done")
        await listener.close()


def main() -> None:
    result = {
        "bench": "protocol",
        "python": platform.python_version(),
        "small_ops_batched_100": codec_rate([SMALL_OP] * 100),
        "small_ops_one_per_frame": codec_rate([SMALL_OP]),
        "payload_1MB_ops": codec_rate([{"op": "put", "data": Payload(MEGABYTE)}]),
        "loopback": asyncio.run(loopback()),
        "payload_300MB_in_parts_loopback": asyncio.run(large_payload()),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())

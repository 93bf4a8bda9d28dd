"""Shared fixtures of the unit tests (no sockets, no processes)."""

import asyncio
import threading

import pytest

from dsched.client.client import AsyncClient


class FakeComm:
    """Stands in for the scheduler connection: records the ops the client sends."""

    closed = False

    def __init__(self):
        self.ops = []

    def write_nowait(self, op):
        self.ops.append(op)


@pytest.fixture
def client():
    """An AsyncClient running on a loop thread, connected to a FakeComm instead of a scheduler."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    client = AsyncClient("127.0.0.1:1", token="t")
    client.loop, client.comm, client.status = loop, FakeComm(), "running"
    client.asynchronous = False
    yield client
    client.status = "closed"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()

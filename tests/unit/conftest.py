"""Shared fixtures of the unit tests (no sockets, no processes)."""

import asyncio
import os
import threading

import pytest

from dsched import config
from dsched.client.client import AsyncClient


class FakeComm:
    """Stands in for the scheduler connection: records the ops the client sends."""

    closed = False

    def __init__(self):
        self.ops = []
        self.bulk = []  # the ops sent as bulk data

    def write_nowait(self, op, bulk=False):
        self.ops.append(op)
        if bulk:
            self.bulk.append(op)


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


@pytest.fixture
def home(tmp_path, monkeypatch):
    """No SCHED_* variables, an empty home and no system config file: config sees only what
    the test sets up."""
    for name in list(os.environ):
        if name.startswith("SCHED_"):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setattr(config, "SYSTEM_CONFIG", tmp_path / "etc" / "sched" / "config.toml")
    return home

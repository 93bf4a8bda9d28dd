"""Shared fixtures of the unit tests (no sockets, no processes)."""

import os

import pytest

from dsched import config
from dsched.client.blocking import LoopThreadClient
from dsched.client.bridge import LoopThread
from dsched.client.client import AsyncClient


class FakeComm:
    """Stands in for the scheduler connection: records the ops the client sends."""

    def __init__(self):
        self.ops = []
        self.bulk = []  # the ops sent as bulk data
        self.closed = False
        self.close_reason = None

    def write_nowait(self, op, bulk=False):
        self.ops.append(op)
        if bulk:
            self.bulk.append(op)

    def close_nowait(self, reason):
        self.closed, self.close_reason = True, reason


def offline(kind):
    """A ``kind`` of client running on a loop thread, connected to a FakeComm instead of a
    scheduler; stopped when the generator resumes."""
    thread = LoopThread("offline-client")
    client = kind("127.0.0.1:1", token="t")
    client._outbox.attach(thread.loop, FakeComm())
    client.status = "running"
    yield client
    client.status = "closed"
    thread.stop(5)


@pytest.fixture
def client():
    """A blocking Client's AsyncClient (its futures block), offline."""
    yield from offline(LoopThreadClient)


@pytest.fixture
def async_client():
    """An asynchronous client (its futures give coroutines on its loop), offline."""
    yield from offline(AsyncClient)


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

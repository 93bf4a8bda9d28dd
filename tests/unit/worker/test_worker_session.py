"""The worker's session with its scheduler, connecting through a stand-in ``connect``: a
scheduler that closes without a word, as a TLS server does to a worker without TLS, is a
refusal once it happens twice in a row (exit 78, as for a wrong token); once, between other
failures, it is one more failure to retry (a plain scheduler closing mid-handshake does it)."""

from __future__ import annotations

import asyncio

import pytest

from dsched.errors import TlsMismatchError
from dsched.worker import session as session_module
from dsched.worker.session import SchedulerSession

TLS = TlsMismatchError("the server at h:1 closed the connection without a word, as a TLS "
                       "server does to a peer without TLS: this side needs TLS too")


def make_session(stopped: asyncio.Event) -> SchedulerSession:
    def never(*args):
        raise AssertionError("the session never registers here")

    return SchedulerSession(
        "h:1", token="t", ssl=None, limits={}, name=lambda: "w", register=never, on_op=never,
        heartbeat=never, heartbeat_interval=1.0, reconnect_min=0.001, reconnect_max=0.001,
        connect_timeout=1.0, death_timeout=None, stopped=stopped)


def connecting(monkeypatch, stopped: asyncio.Event, outcomes: list) -> list:
    """``connect`` raises each of ``outcomes`` in turn, then stops the session."""
    tries: list = []

    async def connect(*args, **kwargs):
        tries.append(None)
        if len(tries) > len(outcomes):
            stopped.set()
            raise ConnectionRefusedError("stopped")
        raise outcomes[len(tries) - 1]

    monkeypatch.setattr(session_module, "connect", connect)
    return tries


async def test_a_tls_scheduler_twice_in_a_row_is_a_refusal(monkeypatch):
    stopped = asyncio.Event()
    tries = connecting(monkeypatch, stopped, [ConnectionRefusedError("not yet"), TLS, TLS])
    session = make_session(stopped)

    await asyncio.wait_for(session.run(), 30)

    assert len(tries) == 3 and stopped.is_set()
    assert session.refusal == str(TLS)


@pytest.mark.parametrize("outcomes", [
    [TLS, ConnectionRefusedError("restarting"), TLS],
    [TLS],
])
async def test_one_close_without_a_word_is_retried(monkeypatch, outcomes):
    stopped = asyncio.Event()
    tries = connecting(monkeypatch, stopped, outcomes)
    session = make_session(stopped)

    await asyncio.wait_for(session.run(), 30)

    assert len(tries) == len(outcomes) + 1  # every one retried, until the test stopped it
    assert session.refusal is None

"""A daemon's background activities (``dsched.activities``): the first that raises is said and
ends the rest; at the stop, those spawned ``until_stop`` are cancelled at once and the others
may end within the grace; nothing starts before the start or once stopping."""

from __future__ import annotations

import asyncio

import pytest

from dsched.activities import Activities


def activities(grace: float | None = None) -> tuple[Activities, list]:
    said: list = []
    return Activities("daemon", asyncio.Event(), lambda what, e: said.append((what, e)),
                      grace=grace), said


async def test_the_first_activity_that_raises_is_said_and_the_rest_are_cancelled():
    group, said = activities()
    await group.start()
    waiting = group.spawn(asyncio.Event().wait(), "waiting")
    boom = RuntimeError("boom")

    async def fails() -> None:
        raise boom

    async def fails_as_it_is_cancelled() -> None:  # a consequence: not said
        try:
            await asyncio.Event().wait()
        finally:
            raise RuntimeError("on the way out")

    group.spawn(fails_as_it_is_cancelled(), "second")
    group.spawn(fails(), "first")
    assert await group.ended() is False
    assert said == [("first", boom)]
    assert waiting.cancelled() and group.stopping


async def test_at_the_stop_some_are_cancelled_at_once_and_the_rest_have_the_grace():
    group, said = activities(grace=0.2)
    await group.start()
    finished = asyncio.Event()

    async def finishes() -> None:  # ends on its own, within the grace
        await asyncio.sleep(0.01)
        finished.set()

    ticker = group.spawn(asyncio.Event().wait(), "a ticker", until_stop=True)
    group.spawn(finishes(), "a commit")
    straggler = group.spawn(asyncio.Event().wait(), "a handler that does not end")
    group.stop.set()
    assert await group.ended() is True  # the straggler outlived the grace
    assert ticker.cancelled() and finished.is_set() and straggler.cancelled()
    assert said == []


async def test_nothing_runs_before_the_start_or_once_stopping():
    group, _ = activities()
    ran: list = []

    async def work() -> None:
        ran.append(1)

    early = work()
    with pytest.raises(RuntimeError, match="a job: the daemon is not started"):
        group.spawn(early, "a job")
    assert early.cr_frame is None  # closed: never awaited, no warning
    await group.start()
    group.stop.set()
    late = work()
    assert group.spawn(late, "late") is None and late.cr_frame is None
    assert await group.ended() is False and ran == []


async def test_its_tasks_are_named_after_the_daemon():
    group, _ = activities()
    await group.start()
    task = group.spawn(asyncio.Event().wait(), "serving a connection")
    assert task.get_name() == "daemon: serving a connection"
    group.stop.set()
    group.spawn(asyncio.sleep(0), "x")  # closed unrun: stopping
    task.cancel()
    await group.ended()

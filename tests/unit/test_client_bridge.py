"""The blocking bridge: a coroutine's own TimeoutError reaches the caller as it was raised; only
the bridge's own wait past its timeout says "no answer within"."""

import asyncio

import pytest

from dsched.client.bridge import LoopThread


@pytest.fixture
def thread():
    thread = LoopThread("test-bridge")
    yield thread
    thread.stop(5)


def test_a_coroutines_own_timeout_error_keeps_its_message(thread):
    async def gives_up():
        raise TimeoutError("1 of 1 jobs had not ended within 2 s")

    for timeout in (None, 30.0):
        with pytest.raises(TimeoutError, match="^1 of 1 jobs had not ended within 2 s$"):
            thread.run(gives_up(), timeout)


def test_no_answer_within_the_timeout_names_it_and_cancels_the_coroutine(thread):
    cancelled = asyncio.Event()

    async def never_answers():
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(TimeoutError, match="^no answer within 0.1 seconds$"):
        thread.run(never_answers(), 0.1)

    async def was_cancelled():
        await asyncio.wait_for(cancelled.wait(), 30)
        return True

    assert thread.run(was_cancelled(), 60)

"""wait, as_completed and progress wake on each ending task (fake scheduler, real loop)."""

import asyncio
import io

import pytest

from dsched import FIRST_COMPLETED, as_completed, progress, wait


def inc(x):
    return x + 1


def finish(client, *futures, delay=0.0):
    """Report ``futures`` finished, in order, from the client's loop (after ``delay``)."""
    def report():
        for future in futures:
            client._reports.on_op({"op": "future-finished", "key": future.key, "nbytes": 1,
                                   "who_has": ["w:1"]})

    client.loop.call_soon_threadsafe(client.loop.call_later, delay, report)


def cancel_report(client, future):
    client.loop.call_soon_threadsafe(client._reports.on_op, {
        "op": "future-cancelled", "key": future.key, "reason": "test"})


def test_wait_returns_when_all_have_ended(client):
    futures = client.map(inc, range(3))
    finish(client, *futures, delay=0.05)
    done, not_done = wait(futures, timeout=5)
    assert done == set(futures) and not not_done


def test_wait_first_completed_and_timeout(client):
    a, b = client.map(inc, range(2))
    finish(client, b, delay=0.05)
    done, not_done = wait([a, b], timeout=5, return_when=FIRST_COMPLETED)
    assert done == {b} and not_done == {a}
    with pytest.raises(TimeoutError, match="1 of 2 tasks"):
        wait([a, b], timeout=0.05)
    with pytest.raises(ValueError):
        wait([a], return_when="SOMETIMES")


def test_as_completed_yields_in_the_order_tasks_end(client):
    a, b, c = client.map(inc, range(3))
    finish(client, c, a, b, delay=0.05)
    assert list(as_completed([a, b, c], timeout=5)) == [c, a, b]


def test_as_completed_takes_futures_added_while_iterating(client):
    a, b = client.map(inc, range(2))
    seen = []
    stream = as_completed([a], timeout=5)
    finish(client, a)
    for future in stream:
        seen.append(future)
        if future is a:
            stream.add(b)
            finish(client, b, delay=0.02)
    assert seen == [a, b] and stream.is_empty()


def test_as_completed_times_out(client):
    (a,) = client.map(inc, range(1))
    with pytest.raises(TimeoutError):
        next(iter(as_completed([a], timeout=0.05)))


def test_async_iteration_of_as_completed(client):
    a, b = client.map(inc, range(2))
    finish(client, b, a, delay=0.05)

    async def collect():
        return [future async for future in as_completed([a, b], timeout=5)]

    assert asyncio.run(collect()) == [b, a]


def test_progress_draws_a_bar_to_the_end_counting_failures(client):
    futures = client.map(inc, range(4))
    finish(client, *futures[:3], delay=0.05)
    cancel_report(client, futures[3])
    out = io.StringIO()
    progress(futures, stream=out)
    text = out.getvalue()
    assert "0/4 done" in text
    assert text.rstrip().endswith("s") and "4/4 done, 1 failed" in text
    assert "[" + "#" * 40 + "]" in text

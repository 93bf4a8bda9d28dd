"""Futures and the client's bookkeeping, with the scheduler connection replaced by a list.

The client runs on a real loop thread, as under ``Client``; "reports from the scheduler" are
fed to it on that thread, and what it would send is read from the fake connection.
"""

import asyncio
import copy
import gc
import logging
import pickle
import threading

import pytest

from dsched import CancelledError
from dsched.serialize import RemoteTraceback, dumps_exception


def on_loop(client, fn=lambda: None, *args):
    """Run ``fn`` on the client's loop after everything queued there, and return its result."""
    async def call():
        return fn(*args)

    return asyncio.run_coroutine_threadsafe(call(), client.loop).result(5)


def sent(client, op=None):
    on_loop(client)
    return [o for o in client.comm.ops if op is None or o["op"] == op]


def report(client, **op):
    on_loop(client, client._reports.on_op, op)


def erred(client, key, exception):
    try:
        raise exception
    except Exception as error:
        payload, text = dumps_exception(error)
    report(client, op="future-erred", key=key, error="exception", text=text, exception=payload)


def inc(x):
    return x + 1


class Boom(Exception):
    pass


# -- submitting and releasing ------------------------------------------------------------------

def test_a_map_is_one_submit_and_a_finished_report_ends_its_future(client):
    futures = client.map(inc, range(3))
    (submit,) = sent(client, "submit")
    assert [task["key"] for task in submit["tasks"]] == [f.key for f in futures]
    assert not futures[0].done() and futures[0].status == "pending"
    report(client, op="future-finished", key=futures[0].key, nbytes=8, who_has=["w:1"])
    assert futures[0].done() and futures[0].status == "finished"
    assert not futures[1].done()


def test_dropping_the_last_future_of_a_key_releases_it_once(client):
    first = client.submit(inc, 1)
    again = client.submit(inc, 1)  # the same pure call: the same key, no second submit
    key = first.key
    assert again.key == key and len(sent(client, "submit")) == 1
    del first
    gc.collect()
    assert sent(client, "release") == []
    del again
    gc.collect()
    assert sent(client, "release") == [{"op": "release", "keys": [key]}]


def test_releases_are_batched_and_never_overtake_the_submit_of_their_key(client):
    gate = threading.Event()
    client.loop.call_soon_threadsafe(gate.wait, 5)  # hold the loop while we act
    old = client.submit(inc, 1, pure=False)
    del old  # a flush is now scheduled, ahead of the next submit
    futures = client.map(inc, range(10, 13), pure=False)
    keys = [f.key for f in futures]
    del futures
    gc.collect()
    gate.set()
    ops = sent(client)
    submit_at = next(i for i, op in enumerate(ops) if op["op"] == "submit"
                     and op["tasks"][0]["key"] == keys[0])
    releases = [(i, op) for i, op in enumerate(ops) if op["op"] == "release"]
    released = [key for _, op in releases for key in op["keys"]]
    assert sorted(released[1:]) == sorted(keys)
    assert all(i > submit_at for i, op in releases if set(op["keys"]) & set(keys))
    assert len(releases) <= 2


def test_deleting_a_future_while_the_client_lock_is_held_does_not_block(client):
    # The garbage collector may run Future.__del__ anywhere, also inside the client's lock.
    future = client.submit(inc, 1)

    def drop():
        nonlocal future
        with client._outbox.lock:
            del future

    thread = threading.Thread(target=drop, daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive()
    assert len(sent(client, "release")) == 1


# -- errors, tracebacks and cancellation ---------------------------------------------------------

def test_a_task_exception_comes_back_with_its_type_and_remote_traceback(client):
    future = client.submit(inc, 1)
    erred(client, future.key, Boom("bad input"))
    with pytest.raises(Boom, match="bad input") as raised:
        future.result()
    assert isinstance(raised.value.__cause__, RemoteTraceback)
    assert "raise exception" in str(raised.value.__cause__)
    assert isinstance(future.exception(), Boom)
    assert "Boom: bad input" in future.traceback()
    assert future.status == "error"


def test_a_failure_without_an_exception_is_a_task_failed_error(client):
    from dsched.client import TaskFailedError

    future = client.submit(inc, 1)
    report(client, op="future-erred", key=future.key, error="killed_worker",
           text="worker died 4 times", exception=b"")
    with pytest.raises(TaskFailedError, match="died 4 times") as raised:
        future.result()
    assert raised.value.error == "killed_worker"


def test_cancel_ends_the_future_at_once_and_a_new_submit_runs_afresh(client):
    future = client.submit(inc, 1)
    future.cancel()
    assert future.cancelled() and future.done()
    with pytest.raises(CancelledError):
        future.result()
    assert [op["op"] for op in sent(client)] == ["submit", "cancel", "release"]
    again = client.submit(inc, 1)
    assert not again.done() and again.key == future.key
    assert len(sent(client, "submit")) == 2


def test_a_cancelled_report_ends_dependents(client):
    future = client.submit(inc, 1)
    report(client, op="future-cancelled", key=future.key, reason="dependency x was cancelled")
    assert future.cancelled()
    assert "dependency x was cancelled" in str(future.exception())


def test_result_times_out(client):
    future = client.submit(inc, 1)
    with pytest.raises(TimeoutError):
        future.result(timeout=0.05)
    with pytest.raises(TimeoutError):
        future.exception(timeout=0.05)


# -- callbacks and identity -----------------------------------------------------------------------

def test_done_callbacks_run_once_and_a_failing_one_does_not_stop_the_others(client, caplog):
    future = client.submit(inc, 1)
    calls = []
    future.add_done_callback(lambda f: 1 / 0)
    future.add_done_callback(calls.append)
    with caplog.at_level(logging.ERROR, logger="dsched.client"):
        erred(client, future.key, Boom("x"))
        erred(client, future.key, Boom("again"))
    assert calls == [future]
    assert "done-callback" in caplog.text
    future.add_done_callback(calls.append)  # already done: called at once
    assert calls == [future, future]


def test_a_future_is_not_picklable_and_copies_are_itself(client):
    future = client.submit(inc, 1)
    with pytest.raises(TypeError, match="pass it to submit"):
        pickle.dumps(future)
    assert copy.copy(future) is future and copy.deepcopy([future])[0] is future
    assert future == client.submit(inc, 1) and hash(future) == hash(future.key)
    assert "pending" in repr(future)


def test_blocking_calls_on_the_clients_own_loop_are_refused(client):
    future = client.submit(inc, 1)
    with pytest.raises(RuntimeError, match="would hang"):
        on_loop(client, future.result)


def test_an_asynchronous_clients_futures_give_coroutines_on_its_loop(async_client):
    client = async_client
    future = client.submit(inc, 1)
    erred(client, future.key, Boom("async"))

    async def use():
        with pytest.raises(Boom):
            await future
        with pytest.raises(Boom):
            await future.result()
        return await future.exception(), await future.traceback()

    exception, text = asyncio.run_coroutine_threadsafe(use(), client.loop).result(5)
    assert isinstance(exception, Boom) and "Boom: async" in text


def test_a_refused_submit_fails_the_futures_it_names(client):
    from dsched import SchedError

    future = client.submit(inc, 1)
    report(client, op="error", id=None, reason="the scheduler is draining", keys=[future.key])
    with pytest.raises(SchedError, match="draining"):
        future.result(timeout=5)


def test_a_waiting_reason_reaches_the_future_and_clears_when_it_can_run(client):
    future = client.submit(inc, 1)
    reason = "no worker offers the resource 'TPU'"
    report(client, op="future-waiting", keys=[future.key], reason=reason)
    assert future.reason == reason and future.status == "pending"
    report(client, op="future-waiting", keys=[future.key], reason=None)
    assert future.reason == ""


# -- failures of the client's own background work ------------------------------------------------

class Unsendable:
    """An op that cannot be put on the wire: stands for a bug in the client."""

    def to_wire(self):
        raise ValueError("cannot encode this op")


def test_ops_that_cannot_be_sent_fail_every_pending_future_with_the_reason(client, caplog):
    from dsched import SchedulerLostError

    future = client.submit(inc, 1)
    with caplog.at_level(logging.ERROR, logger="dsched.client"):
        client._outbox.enqueue(Unsendable())
        with pytest.raises(SchedulerLostError, match="cannot encode this op"):
            future.result(timeout=5)
    assert "Client failed sending queued ops" in caplog.text
    assert client.comm.closed and "cannot encode this op" in client.comm.close_reason
    with pytest.raises(SchedulerLostError, match="cannot encode this op"):
        client.submit(inc, 2)


class ScriptedComm:
    """A connection that delivers ``ops`` and then ends with ``reason``."""

    closed = False

    def __init__(self, ops, reason):
        self._ops, self._reason = list(ops), reason

    def __aiter__(self):
        return self

    async def __anext__(self):
        from dsched.errors import CommClosedError

        if not self._ops:
            raise CommClosedError(self._reason)
        return self._ops.pop(0)


def test_a_report_the_client_fails_to_handle_fails_its_futures_instead_of_hanging(
        async_client, caplog, monkeypatch):
    from dsched import SchedulerLostError
    from dsched.protocol import ops

    client = async_client
    future = client.submit(inc, 1)

    def broken(op):
        raise RuntimeError("a bug in a handler")

    monkeypatch.setitem(client._reports._handlers, ops.FutureFinished, broken)
    assert len(sent(client, "submit")) == 1  # flushed to the FakeComm before it is replaced
    client._outbox.attach(client.loop, ScriptedComm(
        [{"op": "future-finished", "key": future.key, "nbytes": 1, "who_has": ["w:1"]}],
        "never reached"))
    with caplog.at_level(logging.ERROR, logger="dsched.client"):
        asyncio.run_coroutine_threadsafe(client._read(), client.loop).result(5)
    assert isinstance(future.exception(), SchedulerLostError)
    assert "client error: a bug in a handler" in str(future.exception())
    assert "Client failed handling a report" in caplog.text and client.status == "disconnected"


class QuietComm:
    """A connection on which the scheduler says nothing until ``end(reason)``."""

    def __init__(self):
        self.ops, self.closed = [], False
        self.reading = asyncio.Event()
        self._ended = asyncio.Event()
        self._reason = ""

    def write_nowait(self, op, bulk=False):
        self.ops.append(op)

    def end(self, reason):
        self._reason = reason
        self._ended.set()

    async def close(self, reason):
        self.closed = True
        self.end(reason)

    def __aiter__(self):
        return self

    async def __anext__(self):
        from dsched.errors import CommClosedError

        self.reading.set()
        await self._ended.wait()
        raise CommClosedError(self._reason)


async def started_on(comm, monkeypatch):
    """An AsyncClient started on the running loop, connected to ``comm``."""
    from dsched.client.client import AsyncClient

    client = AsyncClient("127.0.0.1:1", token="t")

    async def connect(loop):
        return comm

    monkeypatch.setattr(client, "_connect", connect)
    await client.start()
    await comm.reading.wait()
    return client


async def test_a_cancelled_reader_fails_the_pending_futures_instead_of_leaving_them(
        monkeypatch):
    from dsched import SchedulerLostError

    client = await started_on(QuietComm(), monkeypatch)
    future = client.submit(inc, 1)
    client._reader.cancel()  # as the loop's end does to a client nobody closed
    with pytest.raises(SchedulerLostError, match="reader was cancelled"):
        await asyncio.wait_for(future, 5)
    assert client.status == "disconnected"
    with pytest.raises(SchedulerLostError, match="reader was cancelled"):
        client.submit(inc, 2)
    await client.close()


async def test_a_failure_of_the_reader_itself_is_logged_and_fails_the_pending_futures(
        monkeypatch, caplog):
    from dsched import SchedulerLostError

    comm = QuietComm()
    client = await started_on(comm, monkeypatch)
    future = client.submit(inc, 1)
    lost = client._reports.lost

    def broken_once(error):
        monkeypatch.setattr(client._reports, "lost", lost)
        raise RuntimeError("a bug while failing requests")

    monkeypatch.setattr(client._reports, "lost", broken_once)
    with caplog.at_level(logging.ERROR, logger="dsched.client"):
        comm.end("the scheduler went away")
        with pytest.raises(SchedulerLostError, match="a bug while failing requests"):
            await asyncio.wait_for(future, 5)
    assert "The client's reader failed" in caplog.text
    await client.close()

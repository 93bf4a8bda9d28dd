"""Futures and job futures reach their client only through the ``Owner`` interface.

Each test drives them with a stub that implements that interface and nothing else: a future
that reached for anything more (a private method of the real client) would fail here with an
AttributeError.
"""

import asyncio
import gc
import itertools

import pytest

from dsched import CancelledError, wait
from dsched.client.future import Future, FutureState, FutureStatus, Owner
from dsched.client.jobs import JobDesk, JobFuture
from dsched.jobspec import job_spec
from dsched.protocol import ops
from dsched.serialize import dumps_exception

INTERFACE = {name for name in vars(Owner) if not name.startswith("_")} | set(
    Owner.__annotations__)


class StubOwner:
    """The Owner interface alone; what the futures ask of it is written to ``log``."""

    __slots__ = ("client", "_on_loop", "_log")

    def __init__(self, log, on_loop=False):
        self.client = "the client"
        self._on_loop = on_loop
        self._log = log

    def on_loop(self):
        return self._on_loop

    def run(self, coroutine, timeout):
        self._log.append(("run", timeout))
        return asyncio.run(coroutine)

    async def values(self, futures):
        self._log.append(("values", [future.key for future in futures]))
        return [f"value of {future.key}" for future in futures]

    def cancel(self, futures):
        self._log.append(("cancel", [future.key for future in futures]))
        for future in futures:
            future._state.finish(FutureStatus.cancelled, reason="stub")

    def release(self, state):
        self._log.append(("release", state.key))

    def send(self, op):
        self._log.append(("send", op))


def future_of(owner, key, status=None, **end):
    state = FutureState(key)
    if status is not None:
        state.finish(status, **end)
    return Future(key, owner, state)


def erred_state_fields(error):
    try:
        raise error
    except Exception as raised:
        payload, text = dumps_exception(raised)
    return payload, text


def public(cls):
    return {name for name in dir(cls) if not name.startswith("_")}


def test_the_stub_and_the_real_owner_are_the_interface_and_nothing_more():
    from dsched.client.owner import ClientOwner

    assert public(StubOwner) == public(ClientOwner) == INTERFACE == {
        "client", "on_loop", "run", "values", "cancel", "release", "send"}


def test_a_blocking_result_waits_then_runs_the_fetch_through_the_owner():
    log = []
    future = future_of(StubOwner(log), "k", FutureStatus.finished)
    assert future.result(timeout=5) == "value of k"
    assert log == [("run", 5), ("values", ["k"])]
    assert future.client == "the client" and future.done() and future.status == "finished"


def test_a_failed_future_raises_without_asking_its_owner_for_a_value():
    log = []
    state = FutureState("k")
    payload, text = erred_state_fields(KeyError("missing"))
    state.error_from_payload(payload, text)
    future = Future("k", StubOwner(log), state)
    with pytest.raises(KeyError, match="missing"):
        future.result(timeout=5)
    assert isinstance(future.exception(timeout=5), KeyError)
    assert "KeyError" in future.traceback(timeout=5)
    assert log == []


def test_on_the_owners_loop_the_results_are_coroutines():
    log = []
    future = future_of(StubOwner(log, on_loop=True), "k", FutureStatus.finished)

    async def use():
        return await future.result(), await future, await future.exception()

    assert asyncio.run(use()) == ("value of k", "value of k", None)
    assert log == [("values", ["k"]), ("values", ["k"])]


def test_cancel_and_the_last_reference_go_to_the_owner():
    log = []
    future = future_of(StubOwner(log), "k")
    future.cancel()
    assert future.cancelled()
    with pytest.raises(CancelledError, match="stub"):
        future.result(timeout=5)
    del future
    gc.collect()
    assert log == [("cancel", ["k"]), ("release", "k")]


def test_wait_asks_the_owner_whether_it_may_block():
    log = []
    owner = StubOwner(log)
    done, pending = future_of(owner, "a", FutureStatus.finished), future_of(owner, "b")
    assert wait([done, pending], timeout=0.01, return_when="FIRST_COMPLETED") == ({done},
                                                                                  {pending})


class StubOutbox:
    """What a JobDesk asks of the client's outbox: request ids, and ops to send in order."""

    def __init__(self, log):
        self._ids = iter(range(1, 100))
        self._log = log

    def next_id(self):
        return next(self._ids)

    def enqueue(self, item):
        self.send(item.make())

    def last_queued(self):  # each item leaves as it is queued
        return None

    def send(self, op):
        if op is not None:
            self._log.append(("send", op))


class HeldOutbox(StubOutbox):
    """An outbox whose queue leaves only when a test says so."""

    def __init__(self, log=None):
        super().__init__(log if log is not None else [])
        self._ids = itertools.count(1)
        self.queue = []

    def enqueue(self, item):
        self.queue.append(item)

    def last_queued(self):
        return self.queue[-1] if self.queue else None


class DeskOwner(StubOwner):
    __slots__ = ()

    def send(self, op):  # the client's outbox makes a Deferred op as it leaves
        made = op.make()
        if made is not None:
            self._log.append(("send", made))


def test_a_job_future_is_cancelled_and_answers_through_the_owner():
    log = []
    desk = JobDesk(DeskOwner(log), StubOutbox(log))
    job = desk.submit(job_spec(["true"]))
    job.cancel()  # not yet acknowledged: the cancel goes once it has a number
    assert [type(op) for _, op in log] == [ops.SubmitJobs]
    assert desk.on_reply(ops.Reply(id=1, value=[7]))
    assert job.job_id(timeout=5) == 7
    # the submission asked to be told of its end: no WatchJobs follows it
    assert log[0][1].watch and log[1:] == [("send", ops.CancelJobs(id=2, jobs=(7,)))]
    assert desk.unsettled() == ["the cancel of job 7"]
    assert desk.on_reply(ops.Reply(id=2, value={"7": "cancelled"}))
    assert desk.unsettled() == []
    job._end({"id": 7, "state": "cancelled", "detail": "by the stub"})
    with pytest.raises(CancelledError, match="by the stub"):
        job.result(timeout=5)


def test_a_job_cancelled_before_its_submission_left_is_never_sent():
    log = []
    desk = JobDesk(DeskOwner(log), StubOutbox(log))
    outbox = desk.outbox = HeldOutbox()
    job = desk.submit(job_spec(["true"]))
    job.cancel()
    assert outbox.queue.pop().make() is None
    assert log == [] and job.cancelled() and desk.unsettled() == []
    with pytest.raises(CancelledError, match="before it was submitted"):
        job.job_id(timeout=5)

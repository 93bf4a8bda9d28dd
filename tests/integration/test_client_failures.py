"""What a client sees when things go wrong: task exceptions with their remote tracebacks,
retries, cancellation (queued, running, and the dependents), and clear errors for a bad
address, a wrong token, a peer that is not a scheduler, a bad resource spec, and a
scheduler that dies.
"""

from __future__ import annotations

import socket
import sys
import threading
import time

import cloudpickle
import psutil
import pytest

from deadline import wait_until
from task_helpers import wait_for
from dsched import (CancelledError, Client, ResourceSpecError, SchedulerLostError, TaskExit,
                    TaskFailedError, wait)
from dsched.auth import generate_token
from dsched.errors import AuthenticationError, CommClosedError, SchedError
from dsched.serialize import RemoteTraceback, TaskError

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class CustomError(Exception):
    pass


class Unpicklable(Exception):
    def __init__(self):
        super().__init__("holds a lock")
        self.lock = threading.Lock()


def fail(kind, message):
    raise kind(message)


def raise_unpicklable():
    raise Unpicklable()


def inc(x):
    return x + 1


def mark_and_wait(marker, gate):
    """Say which process runs this (write the pid to ``marker``), then wait for ``gate``."""
    import os

    with open(marker, "w") as f:
        f.write(str(os.getpid()))
    return wait_for(gate, "done")


def touch(path):
    open(path, "w").close()


def flaky(path, failures):
    """Fail the first ``failures`` times it runs (counted in ``path``), then succeed."""
    with open(path, "a") as f:
        f.write("x")
    with open(path) as f:
        attempts = len(f.read())
    if attempts <= failures:
        raise RuntimeError(f"attempt {attempts} fails")
    return attempts


def task_counts(client) -> dict:
    return client.scheduler_info()["tasks"]


# -- exceptions ---------------------------------------------------------------------------------

def test_result_raises_the_tasks_exception_with_its_remote_traceback(client):
    future = client.submit(fail, ValueError, "bad value")
    with pytest.raises(ValueError, match="bad value") as raised:
        future.result(timeout=30)
    cause = raised.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert "in fail" in cause.text and "raise kind(message)" in cause.text
    assert future.status == "error"
    assert isinstance(future.exception(), ValueError)
    assert "ValueError: bad value" in future.traceback()


def test_exceptions_of_the_users_own_types_and_from_gpu_processes(client):
    with pytest.raises(CustomError, match="mine"):
        client.submit(fail, CustomError, "mine").result(timeout=30)
    on_gpu = client.submit(fail, KeyError, "in a child", resources={"GPU": 1})
    with pytest.raises(KeyError, match="in a child") as raised:
        on_gpu.result(timeout=30)
    assert "in fail" in raised.value.__cause__.text


def test_an_exception_that_cannot_be_pickled_is_named(client):
    with pytest.raises(TaskError, match="Unpicklable: holds a lock") as raised:
        client.submit(raise_unpicklable).result(timeout=30)
    assert "raise_unpicklable" in raised.value.__cause__.text


def make_lock():
    import threading

    return threading.Lock()


def test_a_result_that_cannot_be_pickled_is_a_clear_error_at_once(client):
    import time

    for resources in (None, {"GPU": 1}):  # a thread of the worker, and a GPU child process
        future = client.submit(make_lock, resources=resources)
        started = time.monotonic()
        with pytest.raises(SchedError) as raised:
            future.result(timeout=30)
        assert type(raised.value) is SchedError  # the same error, wherever the task ran
        assert str(raised.value) == (f"cannot send the result of {future.key}: TypeError: "
                                     "cannot pickle '_thread.lock' object")
        assert time.monotonic() - started < 5  # not after the fetch's patience runs out


def test_a_dependency_no_worker_can_send_fails_its_dependent_instead_of_looping(client):
    lock = client.submit(make_lock, workers=["a"], pure=False)
    user = client.submit(repr, lock, workers=["b"])  # must fetch the lock from worker a
    with pytest.raises(TaskFailedError, match="cannot be sent.*cannot pickle") as failed:
        user.result(timeout=60)
    assert failed.value.error == "unfetchable"
    assert client.scheduler_info()["counters"]["recomputed"] == 0  # not computed again


def exit_with(code):
    import sys

    sys.exit(code)


def interrupt():
    raise KeyboardInterrupt("stop")


def test_sys_exit_in_a_task_is_an_ordinary_error_that_names_it(client):
    for resources in (None, {"GPU": 1}):  # a thread of the worker, and a GPU child process
        with pytest.raises(TaskExit, match=r"the task raised SystemExit\(3\)") as raised:
            client.submit(exit_with, 3, resources=resources).result(timeout=30)
        assert isinstance(raised.value.original, SystemExit)
        assert "sys.exit(code)" in raised.value.__cause__.text
    with pytest.raises(TaskExit, match="KeyboardInterrupt"):
        client.submit(interrupt).result(timeout=30)
    assert client.submit(inc, 1).result(timeout=30) == 2  # the worker serves on


def test_a_program_whose_task_calls_sys_exit_goes_on_and_reports_it(cluster, tmp_path):
    import subprocess

    script = tmp_path / "driver.py"
    script.write_text(
        "import sys\n"
        "from dsched import Client\n"
        f"client = Client({cluster.address!r}, token={cluster.token!r})\n"
        "try:\n"
        "    client.submit(sys.exit, 3).result(timeout=30)\n"
        "except Exception as error:\n"
        "    print('caught:', error)\n"
        "print('still running')\n"
        "client.close()\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["caught: the task raised SystemExit(3)", "still running"]


def test_dependents_of_a_failed_task_fail_with_its_exception(client):
    failed = client.submit(fail, ZeroDivisionError, "root cause")
    dependent = client.submit(inc, failed)
    with pytest.raises(ZeroDivisionError, match="root cause"):
        dependent.result(timeout=30)


def test_gather_raises_the_first_error_or_skips_failures(client):
    good, bad = client.submit(inc, 1), client.submit(fail, ValueError, "no")
    with pytest.raises(ValueError):
        client.gather([good, bad], timeout=30)
    assert client.gather([good, bad, good], errors="skip", timeout=30) == [2, 2]


def test_retries_rerun_a_failing_task(client, tmp_path):
    assert client.submit(flaky, str(tmp_path / "a"), 2, retries=2).result(timeout=30) == 3
    with pytest.raises(RuntimeError, match="attempt 2 fails"):
        client.submit(flaky, str(tmp_path / "b"), 2, retries=1).result(timeout=30)


# -- cancellation ----------------------------------------------------------------------------

def test_cancelling_a_queued_task_cancels_its_dependents_and_it_never_runs(client, tmp_path):
    gate, marker = tmp_path / "gate", tmp_path / "ran"
    blockers = [client.submit(wait_for, str(gate), i, resources={"GPU": 1}) for i in range(2)]
    try:
        wait_until(lambda: task_counts(client).get("processing") == 2, 30,
                   what="both GPUs busy")
        queued = client.submit(touch, str(marker), resources={"GPU": 1})
        dependent = client.submit(inc, queued)
        wait_until(lambda: task_counts(client).get("queued") == 1, 30, what="a queued task")
        queued.cancel()
        assert queued.cancelled()
        with pytest.raises(CancelledError):
            queued.result()
        wait([dependent], timeout=30)
        assert dependent.cancelled()
        assert "cancelled" in str(dependent.exception())
    finally:
        gate.touch()
    assert client.gather(blockers, timeout=30) == [0, 1]
    assert client.submit(inc, 1, resources={"GPU": 1}).result(timeout=30) == 2
    assert not marker.exists()


def test_cancelling_a_running_gpu_task_kills_its_process(client, tmp_path):
    gate, marker = tmp_path / "gate", tmp_path / "pid"
    running = client.submit(mark_and_wait, str(marker), str(gate), resources={"GPU": 1})
    dependent = client.submit(inc, running)
    try:
        wait_until(lambda: marker.exists() and marker.read_text(), 30, what="the task starts")
        pid = int(marker.read_text())
        running.cancel()
        assert running.cancelled()
        wait_until(lambda: not psutil.pid_exists(pid)
                   or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 30,
                   what="the task's process killed")
        wait([dependent], timeout=30)
        assert dependent.cancelled()
    finally:
        gate.touch()
    assert client.submit(inc, 2, resources={"GPU": 2}).result(timeout=30) == 3  # both free


def test_one_clients_cancel_does_not_cancel_the_same_task_for_another(cluster, tmp_path):
    gate = tmp_path / "gate"
    with Client(cluster.address, token=cluster.token) as first, \
            Client(cluster.address, token=cluster.token) as second:
        mine = first.submit(wait_for, str(gate), 42)
        theirs = second.submit(wait_for, str(gate), 42)  # the same pure call: one task
        assert mine.key == theirs.key
        wait_until(lambda: task_counts(first).get("processing") == 1, 30, what="it runs")
        mine.cancel()
        assert mine.cancelled()
        gate.touch()
        assert theirs.result(timeout=30) == 42


def test_cancelling_a_running_thread_task_ends_its_future(client, tmp_path):
    gate, marker = tmp_path / "gate", tmp_path / "pid"
    running = client.submit(mark_and_wait, str(marker), str(gate), workers="b")
    dependent = client.submit(inc, running)
    try:
        wait_until(marker.exists, 30, what="the task starts")
        client.cancel([running])
        assert running.cancelled()
        wait([dependent], timeout=30)
        assert dependent.cancelled()
    finally:
        gate.touch()


# -- clear errors -----------------------------------------------------------------------------

def test_an_invalid_resource_spec_fails_at_submit_and_sends_nothing(client):
    wait_until(lambda: not task_counts(client), 30, what="an idle scheduler")
    for bad in ({"GPU": -1}, {"GPU": "two"}, "GPU", 7):
        with pytest.raises(ResourceSpecError):
            client.submit(inc, 1, resources=bad)
        with pytest.raises(ResourceSpecError):
            client.map(inc, range(3), resources=bad)
    assert task_counts(client) == {}
    assert client.submit(inc, 1).result(timeout=30) == 2


def test_a_gpu_request_no_worker_could_grant_fails_at_submit(client):
    for bad in ({"GPU": 1.5}, "GPU=2.5"):
        with pytest.raises(ResourceSpecError, match="not a fraction above one"):
            client.submit(inc, 1, resources=bad)
    from dsched import annotate

    with pytest.raises(ResourceSpecError, match="not a fraction above one"):
        with annotate(resources={"GPU": 1.5}):
            pass


def test_unknown_client_options_are_refused_not_ignored(cluster):
    with pytest.raises(TypeError, match="unexpected keyword argument.*bogus"):
        Client(cluster.address, token=cluster.token, bogus=1)
    with pytest.raises(TypeError, match="bogus"):
        Client(bogus=1)  # would start a LocalCluster, which takes no such option


def test_connecting_to_nothing_names_the_address_quickly():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    start = time.monotonic()
    with pytest.raises(OSError, match=f"scheduler at {address}"):
        Client(address, token=generate_token())
    assert time.monotonic() - start < 5


def test_a_port_that_accepts_but_never_answers_is_refused_in_seconds_saying_so():
    from dsched import config

    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel accepts for it
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        start = time.monotonic()
        with config.set({"comm.answer_timeout": 0.5}):
            with pytest.raises(OSError) as refused:
                Client(address, token=generate_token(), timeout=30)
    assert time.monotonic() - start < 10  # not the 30 s connect timeout
    assert str(refused.value) == (
        f"cannot connect to the scheduler at {address}: the peer did not answer the dsched "
        "handshake within 0.5 s: is it a dsched scheduler or worker?")


def test_a_wrong_token_is_an_authentication_error(cluster):
    with pytest.raises(AuthenticationError, match="refused this client's token"):
        Client(cluster.address, token=generate_token())


def test_pending_futures_fail_when_the_scheduler_dies(daemons, tmp_path):
    gate = tmp_path / "gate"
    daemons.scheduler()
    daemons.worker("--nthreads", "1", "--gpus", "none")
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    try:
        running = client.submit(wait_for, str(gate))
        waiting = client.submit(inc, running)
        wait_until(lambda: client.scheduler_info()["tasks"].get("processing") == 1, 30,
                   what="the task running")
        daemons.scheduler_process.kill()
        with pytest.raises(SchedulerLostError, match="lost the scheduler"):
            running.result(timeout=30)
        with pytest.raises(SchedulerLostError):
            waiting.result(timeout=30)
        assert running.status == "lost"
        with pytest.raises(SchedulerLostError):
            client.submit(inc, 1)
        with pytest.raises(SchedulerLostError):
            client.scheduler_info()
    finally:
        gate.touch()
    client.close()
    assert client.status == "closed"


async def test_a_peer_whose_first_op_is_not_welcome_is_refused_and_its_connection_closed():
    import asyncio
    import contextlib

    from dsched import AsyncClient
    from dsched.comm import listen
    from dsched.protocol import ops

    token = generate_token()
    reasons = []
    ended = asyncio.Event()

    async def not_a_scheduler(comm):
        comm.write_nowait(ops.Retire().to_wire())
        with contextlib.suppress(CommClosedError):  # the client closes it, saying why
            async for _ in comm:
                pass
        reasons.append(comm.close_reason)
        ended.set()

    listener = await listen("127.0.0.1", 0, not_a_scheduler, token=token, role="scheduler",
                            accept_roles={"client"})
    try:
        with pytest.raises(ops.BadOp, match="first op was retire, not welcome"):
            await AsyncClient(listener.address, token=token)
        await asyncio.wait_for(ended.wait(), 10)
        assert "connecting failed" in reasons[0]
    finally:
        await listener.close()

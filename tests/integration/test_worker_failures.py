"""A task's failure is the client's to see, and never the worker's end: an exception comes back
with its type and traceback; a GPU task whose process dies is a failure, and the worker goes
on to run the next GPU task in a fresh child, also when the child died while idle."""

from __future__ import annotations

import sys

import cloudpickle
import psutil
import pytest

from dsched.errors import SchedError

from deadline import wait_until

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def parse_setting(text: str) -> int:
    return int(text)


def die() -> None:
    import os

    os._exit(1)


def pinned() -> tuple[str, int]:
    import os

    return os.environ["CUDA_VISIBLE_DEVICES"], os.getpid()


def test_exception_reaches_the_client_with_its_type_and_traceback(daemons):
    daemons.scheduler()
    daemons.worker()
    client = daemons.client()

    future = client.submit(parse_setting, "eleven")

    with pytest.raises(ValueError, match="eleven"):
        future.result(timeout=30)
    assert "parse_setting" in future.traceback() and "int(text)" in future.traceback()
    assert type(future.exception()) is ValueError


def test_gpu_task_whose_process_dies_fails_and_the_worker_runs_the_next(daemons):
    daemons.scheduler()
    worker = daemons.worker("--resources", "GPU=1")
    client = daemons.client()

    before = client.submit(pinned, resources={"GPU": 1}).result(timeout=30)
    dying = client.submit(die, resources={"GPU": 1})
    with pytest.raises(SchedError, match="process"):
        dying.result(timeout=30)

    after = client.submit(pinned, resources={"GPU": 1}).result(timeout=30)
    assert after[0] == before[0] == "0"
    assert after[1] != before[1]  # the dead child was replaced, not reused
    assert worker.poll() is None
    (info,) = client.scheduler_info()["workers"].values()
    assert info["free"] == {"GPU": 1.0}


def leave_a_time_bomb() -> int:
    import os
    import threading

    # Dies after returning, while idle (as an out-of-memory kill would strike it).
    threading.Timer(0.1, os._exit, (1,)).start()
    return os.getpid()


def test_gpu_child_that_died_while_idle_is_not_given_the_next_task(daemons):
    daemons.scheduler()
    daemons.worker("--resources", "GPU=1")
    client = daemons.client()

    pid = client.submit(leave_a_time_bomb, resources={"GPU": 1}).result(timeout=30)
    wait_until(lambda: not psutil.pid_exists(pid), 10, what="the idle child to die")

    visible, fresh = client.submit(pinned, resources={"GPU": 1}).result(timeout=30)
    assert visible == "0" and fresh != pid


def submit_from_a_task(address: str, token: str) -> int:
    import dsched

    with dsched.Client(address, token=token) as client:
        return client.submit(len, "four").result(timeout=30)


def test_task_can_use_dsched_itself(daemons):
    address = daemons.scheduler()
    daemons.worker("--nthreads", "2")
    client = daemons.client()

    assert client.submit(submit_from_a_task, address, daemons.token).result(timeout=30) == 4

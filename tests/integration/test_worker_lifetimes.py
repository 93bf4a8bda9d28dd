"""No process outlives its worker, and one crashing task does not cost a machine.

``kill -9`` of a worker, alone or under its nanny, takes its GPU task's process and whatever
that started; ``kill -9`` of a nanny takes its worker processes, so that the same command can
start again at once. A task that ends its worker process (``os._exit``, a segfault) costs that
process only: the nanny says how it ended and starts another, which runs the next task.
"""

from __future__ import annotations

import os
import sys

import cloudpickle
import psutil
import pytest

from deadline import wait_until
from dsched import SchedError, TaskFailedError

cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: A task that kills its worker fails at once instead of being tried on the next process.
NO_RETRY = {"SCHED_SCHEDULER__ALLOWED_FAILURES": "0"}


def start_a_sleeper_and_wait(directory: str) -> None:
    import os
    import pathlib
    import subprocess
    import time

    sleeper = subprocess.Popen(["sleep", "600"])
    pids = pathlib.Path(directory) / "pids"
    pids.with_suffix(".tmp").write_text(f"{os.getpid()} {sleeper.pid}")
    pids.with_suffix(".tmp").rename(pids)
    time.sleep(600)


def end_the_worker_process(how: str) -> None:
    import os
    import resource
    import signal

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file from a test
    if how == "exit":
        os._exit(3)
    os.kill(os.getpid(), signal.SIGSEGV)


def kill_own_process() -> None:
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def pinned() -> str:
    import os

    return os.environ["CUDA_VISIBLE_DEVICES"]


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def gpu_task_that_starts_a_sleeper(daemons, client, tmp_path):
    """The task's future (hold it: a released one is cancelled), its process and its sleeper."""
    future = client.submit(start_a_sleeper_and_wait, str(tmp_path), resources={"GPU": 1})
    pids = wait_until(lambda: (tmp_path / "pids").exists() and (tmp_path / "pids").read_text(),
                      60, what="the GPU task to start its sleeper")
    child, sleeper = (psutil.Process(int(pid)) for pid in pids.split())
    return future, child, sleeper


def test_kill_9_of_a_worker_takes_its_gpu_task_and_what_that_started(daemons, tmp_path):
    daemons.scheduler()
    worker = daemons.worker("--no-nanny", "--resources", "GPU=1")
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    future, child, sleeper = gpu_task_that_starts_a_sleeper(daemons, client, tmp_path)
    assert child.ppid() == worker.pid

    worker.kill()

    wait_until(lambda: not alive(child) and not alive(sleeper), 30,
               what="the GPU task's process and its sleeper to die with the worker")


def test_kill_9_of_a_nannied_worker_process_takes_its_gpu_task_and_it_comes_back(daemons,
                                                                                   tmp_path):
    daemons.scheduler(env=NO_RETRY)
    nanny = daemons.worker("--resources", "GPU=1")
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    future, child, sleeper = gpu_task_that_starts_a_sleeper(daemons, client, tmp_path)
    worker = psutil.Process(child.ppid())
    assert worker.ppid() == nanny.pid

    worker.kill()

    wait_until(lambda: not alive(child) and not alive(sleeper), 30,
               what="the GPU task's process and its sleeper to die with the worker process")
    with pytest.raises(TaskFailedError):
        future.result(timeout=60)
    # The nanny's next process has the device to itself again.
    assert client.submit(pinned, resources={"GPU": 1}).result(timeout=60) == "0"


def test_kill_9_of_a_nanny_takes_its_workers_and_the_same_command_starts_again(daemons):
    daemons.scheduler()
    client = daemons.client()
    nanny = daemons.worker("--nworkers", "3", "--name", "w", "--nthreads", "1")
    daemons.wait_for_workers(client, 3)
    workers = psutil.Process(nanny.pid).children()
    assert len(workers) == 3

    nanny.kill()

    wait_until(lambda: not any(map(alive, workers)), 30, what="the worker processes to exit")
    again = daemons.worker("--nworkers", "3", "--name", "w", "--nthreads", "1")
    names = lambda: sorted(w["name"] for w in client.scheduler_info()["workers"].values())  # noqa: E731
    wait_until(lambda: names() == ["w-0", "w-1", "w-2"], 60, what="w-0, w-1 and w-2 registered")
    assert again.poll() is None


def test_a_task_that_ends_its_worker_process_costs_that_process_only(daemons, tmp_path):
    daemons.scheduler(env=NO_RETRY)
    log = tmp_path / "worker.log"
    with open(log, "w") as stderr:
        nanny = daemons.worker("--nthreads", "1", stderr=stderr)
    client = daemons.client()
    daemons.wait_for_workers(client, 1)

    for how, said in (("exit", "exited with code 3"),
                      ("segfault", "was killed by signal 11 (SIGSEGV)")):
        before = client.submit(os.getpid, pure=False).result(timeout=30)
        with pytest.raises(TaskFailedError):
            client.submit(end_the_worker_process, how).result(timeout=60)
        # The task waits for the next process, which the nanny starts.
        after = client.submit(os.getpid, pure=False).result(timeout=60)
        assert after != before
        wait_until(lambda: said in log.read_text(), 10, what=f"the nanny to log {said!r}")
    assert nanny.poll() is None


def test_a_gpu_task_whose_process_is_killed_fails_naming_the_signal(daemons):
    daemons.scheduler()
    daemons.worker("--resources", "GPU=1")
    client = daemons.client()

    with pytest.raises(SchedError, match=r"was killed by signal 9 \(SIGKILL\)"):
        client.submit(kill_own_process, resources={"GPU": 1}).result(timeout=60)

"""The nanny keeps N processes up, restarts one that dies and tells its successor how it
died, leaves alone one that stopped of its own accord, gives up when one is refused, and stops
them all."""

import asyncio
import logging
import os
import re
import signal
import socket
import sys
import time

import psutil
import pytest

from deadline import wait_until_async

from dsched.daemon import EXIT_CONFIG
from dsched.environ import PREVIOUS_EXIT_ENV
from dsched.worker.nanny import Nanny

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


async def wait_for(predicate, timeout=20.0):
    await wait_until_async(predicate, timeout)


async def test_nanny_restarts_a_dead_process_and_stops_all():
    nanny = Nanny([(f"w{i}", SLEEPER, dict(os.environ)) for i in range(3)], min_backoff=0.05)
    supervising = asyncio.ensure_future(nanny.run())
    try:
        await wait_for(lambda: len(nanny.pids()) == 3)
        victim = nanny.pids()[0]
        os.kill(victim, signal.SIGKILL)
        await wait_for(lambda: len(nanny.pids()) == 3 and victim not in nanny.pids())
        assert sum(child.restarts for child in nanny.children) == 1
        pids = nanny.pids()
    finally:
        await nanny.stop(deadline=10)
        await asyncio.wait_for(supervising, 10)
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


async def test_stop_kills_a_process_that_ignores_sigterm_after_the_deadline():
    stubborn = [sys.executable, "-c",
                "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"]
    nanny = Nanny([("w0", stubborn, dict(os.environ))])
    supervising = asyncio.ensure_future(nanny.run())
    await wait_for(lambda: len(nanny.pids()) == 1)
    started = time.monotonic()
    await nanny.stop(deadline=0.5)
    await asyncio.wait_for(supervising, 10)
    assert nanny.pids() == [] and time.monotonic() - started < 10


def recording(path, *, then: str) -> list[str]:
    """A process that appends what the nanny told it of its predecessor to ``path``, then
    does what the line ``then`` says, given how many processes came before it (``n``)."""
    script = (
        "import os, resource, signal, sys, time\n"
        f"path = {str(path)!r}\n"
        f"told = os.environ.get({PREVIOUS_EXIT_ENV!r}, '-')\n"
        "with open(path, 'a') as f: f.write(told + '\\n')\n"
        "n = len(open(path).read().splitlines()) - 1\n"
        "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file from the test\n"
        + then
    )
    return [sys.executable, "-c", script]


async def test_how_a_process_died_is_logged_and_told_to_the_next_one(tmp_path, caplog):
    told = tmp_path / "told"
    die_twice = recording(told, then=(
        "if n == 0: os._exit(3)\n"
        "if n == 1: os.kill(os.getpid(), signal.SIGSEGV)\n"
        "time.sleep(120)\n"))
    nanny = Nanny([("worker-0", die_twice, dict(os.environ))], min_backoff=0.05)
    supervising = asyncio.ensure_future(nanny.run())
    try:
        await wait_for(lambda: told.exists() and len(told.read_text().splitlines()) == 3)
    finally:
        await nanny.stop(deadline=10)
        await asyncio.wait_for(supervising, 10)

    first, second, third = told.read_text().splitlines()
    assert first == "-"  # the first process has no predecessor
    # How, alone: the scheduler names the process ("... ended the worker process of w: it").
    assert (second, third) == ("exited with code 3", "was killed by signal 11 (SIGSEGV)")
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(re.match(r"worker process worker-0 \(pid \d+\) exited with code 3 after .*; "
                        "restarting it", line) for line in logged), logged
    assert any(re.match(r"worker process worker-0 \(pid \d+\) was killed by signal 11 "
                        r"\(SIGSEGV\)", line) for line in logged), logged


async def test_a_process_that_stops_of_its_own_accord_is_not_restarted(tmp_path):
    runs = tmp_path / "runs"
    nanny = Nanny([("worker-0", recording(runs, then="sys.exit(0)\n"), dict(os.environ))],
                  min_backoff=0.05)

    assert await asyncio.wait_for(nanny.run(), 30) == 0
    assert len(runs.read_text().splitlines()) == 1 and nanny.children[0].restarts == 0


async def test_a_refused_process_stops_the_nanny_and_its_other_processes(tmp_path):
    runs = tmp_path / "runs"
    nanny = Nanny([("worker-0", SLEEPER, dict(os.environ)),
                   ("worker-1", recording(runs, then=f"sys.exit({EXIT_CONFIG})\n"),
                    dict(os.environ))], min_backoff=0.05)
    supervising = asyncio.ensure_future(nanny.run())
    await wait_for(lambda: runs.exists())

    assert await asyncio.wait_for(supervising, 30) == EXIT_CONFIG
    assert nanny.pids() == []
    assert len(runs.read_text().splitlines()) == 1  # not restarted


async def test_kill_stops_every_process_at_once_even_one_ignoring_sigterm():
    stubborn = [sys.executable, "-c",
                "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"]
    nanny = Nanny([("w0", stubborn, dict(os.environ)), ("w1", SLEEPER, dict(os.environ))])
    supervising = asyncio.ensure_future(nanny.run())
    await wait_for(lambda: len(nanny.pids()) == 2)
    processes = [psutil.Process(pid) for pid in nanny.pids()]

    nanny.kill()

    assert all(p.status() == psutil.STATUS_ZOMBIE for p in processes if p.is_running())
    await asyncio.wait_for(supervising, 10)


def _options(command: list[str], option: str) -> str:
    return command[command.index(option) + 1]


def test_processes_keep_one_name_each_for_the_nannys_life_and_their_own_job_directory():
    from dsched.settings import WorkerConfig, build, defaults
    from dsched.worker.main import process_commands

    cfg = defaults()
    cfg["worker"].update(scheduler_address="127.0.0.1:8786", nworkers=2,
                         job_directory="/var/lib/sched-jobs")
    commands = process_commands(build(WorkerConfig, cfg["worker"]), cfg, ())
    host = socket.gethostname()
    # Named without a --name, each restart of a process would be a new worker, with a new
    # job directory: a stable name lets it find what its predecessor left.
    assert [_options(c, "--name") for _, c, _ in commands] == [f"{host}-{os.getpid()}-0",
                                                               f"{host}-{os.getpid()}-1"]
    assert [env["SCHED_WORKER__JOB_DIRECTORY"] for _, _, env in commands] == [
        repr(f"/var/lib/sched-jobs/{host}-{os.getpid()}-{i}") for i in range(2)]
    cfg["worker"].update(nworkers=1, name="w")
    (_, command, env), = process_commands(build(WorkerConfig, cfg["worker"]), cfg, ())
    assert _options(command, "--name") == "w"
    assert env["SCHED_WORKER__JOB_DIRECTORY"] == repr("/var/lib/sched-jobs")


def test_a_gpu_per_process_that_the_devices_found_cannot_back_is_refused():
    from dsched.errors import ResourceSpecError
    from dsched.settings import WorkerConfig, build, defaults
    from dsched.worker.gpus import GpuDevice
    from dsched.worker.main import process_commands

    two = (GpuDevice(0), GpuDevice(1))
    cfg = defaults()
    cfg["worker"].update(scheduler_address="127.0.0.1:8786", nworkers=3, resources="GPU=1")
    # The third process would get no device, yet count one: its tasks would be pinned to
    # device 0, beside the first process's.
    with pytest.raises(ResourceSpecError, match="3 worker processes offering GPU=1 each need 3 "
                       "GPUs, but 2 were found"):
        process_commands(build(WorkerConfig, cfg["worker"]), cfg, two)
    cfg["worker"].update(nworkers=2)
    commands = process_commands(build(WorkerConfig, cfg["worker"]), cfg, two)
    assert [_options(c, "--gpus") for _, c, _ in commands] == ["0", "1"]
    cfg["worker"].update(nworkers=3, resources="")  # GPU left out: the devices are divided
    commands = process_commands(build(WorkerConfig, cfg["worker"]), cfg, two)
    assert [_options(c, "--gpus") for _, c, _ in commands] == ["0", "1", "none"]

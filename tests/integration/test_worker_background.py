"""A worker's background activities are owned: when one fails, the failure is not lost. The
worker stops, logs why with the traceback and keeps the reason; as a program it then exits 1,
so that its nanny starts it again (a clean exit would tell the nanny it meant to stop).

The failure is planted in the heartbeat, which runs in the background once registered, and
in a drain (started by a signal, in a task of its own)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys

from dsched.comm import listen
from dsched.resources import Resources
from dsched.settings import CommConfig, WorkerConfig
from dsched.worker.server import Worker, WorkerSetup

TOKEN = "background-test-token"


def broken_heartbeat(self):
    raise RuntimeError("the heartbeat broke")


async def test_a_failing_background_activity_stops_the_worker_and_says_why(
        monkeypatch, caplog, tmp_path):
    monkeypatch.setattr(Worker, "_heartbeat", broken_heartbeat)

    async def welcome(comm):
        await comm.recv()
        await comm.send({"op": "registered", "address": "127.0.0.1:1"})
        async for _ in comm:
            pass

    listener = await listen("127.0.0.1", 0, welcome, token=TOKEN, accept_roles={"worker"})
    config = WorkerConfig(scheduler_address=listener.address, host="127.0.0.1",
                          local_directory=str(tmp_path), heartbeat_interval=0.05)
    worker = Worker(config, CommConfig(), WorkerSetup(token=TOKEN, nthreads=1,
                                                      resources=Resources.parse({})))
    await worker.start()
    try:
        await asyncio.wait_for(worker.stopped.wait(), 30)
    finally:
        await worker.close()
        await listener.close()

    assert worker.failure == "RuntimeError: the heartbeat broke"
    logged = [r for r in caplog.records if r.levelno == logging.ERROR
              and "The worker failed (RuntimeError: the heartbeat broke)" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None


async def test_a_drain_that_fails_stops_the_worker_and_says_why(monkeypatch, tmp_path):
    config = WorkerConfig(scheduler_address="127.0.0.1:9", host="127.0.0.1",
                          local_directory=str(tmp_path), reconnect_backoff_min=0.05)
    worker = Worker(config, CommConfig(), WorkerSetup(token=TOKEN, nthreads=1,
                                                      resources=Resources.parse({})))
    await worker.start()

    def broken():
        raise RuntimeError("the books broke")

    monkeypatch.setattr(worker.state, "is_idle", broken)
    try:
        await worker.drain()
    finally:
        await worker.close()

    assert worker.stopped.is_set()
    assert worker.failure == "RuntimeError: the books broke"


PLANTED = """
from dsched.worker.server import Worker

def broken_heartbeat(self):
    raise RuntimeError("the heartbeat broke")

Worker._heartbeat = broken_heartbeat

from dsched.cli.worker import main

main()
"""


def test_a_worker_process_whose_background_activity_fails_exits_1(daemons, tmp_path):
    address = daemons.scheduler()

    done = subprocess.run(
        [sys.executable, "-c", PLANTED, address, "--no-nanny", "--host", "127.0.0.1",
         "--local-directory", str(tmp_path / "scratch")],
        env={**daemons.env, "SCHED_WORKER__HEARTBEAT_INTERVAL": "0.05"}, capture_output=True,
        text=True, timeout=60)

    assert done.returncode == 1, done.stderr
    assert "The worker failed (RuntimeError: the heartbeat broke); stopping" in done.stderr
    assert "Traceback" in done.stderr

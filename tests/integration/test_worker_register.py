"""What a worker says when it registers, seen by a stand-in scheduler on loopback: how its
nanny's previous process ended, told to the first scheduler it meets and to no later one; and
a refusal stops it, with the reason kept for its exit status."""

from __future__ import annotations

import asyncio

from deadline import wait_until_async
from dsched.comm import listen
from dsched.resources import Resources
from dsched.settings import CommConfig, WorkerConfig
from dsched.worker.server import Worker, WorkerSetup

TOKEN = "register-test-token"


class StandInScheduler:
    """Records each connection's register op, then answers with ``answer(comm, n)``."""

    def __init__(self, answer):
        self.registers: list[dict] = []
        self.answer = answer

    async def serve(self, comm) -> None:
        batch = await comm.recv()
        self.registers.append(batch[0])
        await self.answer(comm, len(self.registers))


async def run_worker(scheduler: StandInScheduler, tmp_path, name=None, **setup):
    listener = await listen("127.0.0.1", 0, scheduler.serve, token=TOKEN,
                            accept_roles={"worker"})
    config = WorkerConfig(scheduler_address=listener.address, host="127.0.0.1", name=name,
                          local_directory=str(tmp_path), reconnect_backoff_min=0.05,
                          reconnect_backoff_max=0.1)
    worker = Worker(config, CommConfig(), WorkerSetup(token=TOKEN, nthreads=1,
                                                      resources=Resources.parse({}), **setup))
    await worker.start()
    return listener, worker


async def test_how_the_previous_process_ended_is_told_to_the_first_scheduler_only(tmp_path):
    async def welcome_then_drop_once(comm, n):
        await comm.send({"op": "registered", "address": "127.0.0.1:1"})
        if n == 1:
            await comm.close("scheduler restarting")
        else:
            async for _ in comm:
                pass

    scheduler = StandInScheduler(welcome_then_drop_once)
    ended = "was killed by signal 11 (SIGSEGV)"
    listener, worker = await run_worker(scheduler, tmp_path, previous_exit=ended)
    try:
        await wait_until_async(lambda: len(scheduler.registers) == 2, 30,
                               what="the worker to register again")
    finally:
        await worker.close()
        await listener.close()

    first, second = scheduler.registers
    assert first["previous_exit"] == ended
    assert "previous_exit" not in second


async def test_a_first_process_says_nothing_of_a_previous_one(tmp_path):
    async def welcome(comm, n):
        await comm.send({"op": "registered", "address": "127.0.0.1:1"})
        async for _ in comm:
            pass

    scheduler = StandInScheduler(welcome)
    listener, worker = await run_worker(scheduler, tmp_path)
    try:
        await worker.wait_registered(30)
    finally:
        await worker.close()
        await listener.close()

    assert "previous_exit" not in scheduler.registers[0]


async def test_a_refusal_stops_the_worker_and_keeps_the_reason(tmp_path):
    async def refuse(comm, n):
        await comm.close("refused: a worker named 'w' is already registered")

    scheduler = StandInScheduler(refuse)
    listener, worker = await run_worker(scheduler, tmp_path, name="w")
    try:
        await asyncio.wait_for(worker.stopped.wait(), 30)
    finally:
        await worker.close()
        await listener.close()

    assert worker.refusal == "a worker named 'w' is already registered"
    assert len(scheduler.registers) == 1  # not tried again

"""``wait_for_workers``: the client asks the scheduler once to be told the number of workers,
and the scheduler tells it on each change; nothing is asked again while it waits. A scheduler in
this process, and workers that only register."""

from __future__ import annotations

import asyncio
import itertools
from contextlib import asynccontextmanager

import pytest

from deadline import wait_until_async
from dsched import Client
from dsched.comm import connect
from dsched.errors import SchedulerLostError
from dsched.protocol import ops
from dsched.scheduler.server import Scheduler
from dsched.settings import CommConfig, SchedulerConfig

TOKEN = "t"
_PORTS = itertools.count(21000)  # where the registering workers say they are


@asynccontextmanager
async def scheduler_and_client():
    """A scheduler, and a client of it whose every op sent is listed in ``client.sent``."""
    scheduler = Scheduler(SchedulerConfig(host="127.0.0.1", port=0), CommConfig(), token=TOKEN)
    await scheduler.start()
    client = await Client(scheduler.address, token=TOKEN, asynchronous=True, timeout=5)
    client.sent = []
    write = client.comm.write_nowait

    def spy(op: dict, **options) -> None:
        client.sent.append(op["op"])
        write(op, **options)

    client.comm.write_nowait = spy
    try:
        yield scheduler, client
    finally:
        await client.close()
        await scheduler.close()


async def join(address: str, name: str):
    """A worker's connection that registers, and does nothing else."""
    comm = await connect(address, role="worker", name=name, token=TOKEN)
    await comm.send(ops.Register(name=name, address=f"127.0.0.1:{next(_PORTS)}", nthreads=1,
                                 job_lease=60.0).to_wire())
    assert type(ops.decode((await comm.recv())[0])) is ops.Registered
    return comm


async def test_it_returns_as_a_worker_joins_having_asked_only_once():
    async with scheduler_and_client() as (scheduler, client):
        with pytest.raises(TimeoutError, match="fewer than 1 workers connected within 0.3 s"):
            await client.wait_for_workers(1, timeout=0.3)
        waiting = asyncio.ensure_future(client.wait_for_workers(2, timeout=30))
        first = await join(scheduler.address, "a")
        second = await join(scheduler.address, "b")
        try:
            await asyncio.wait_for(waiting, 5)  # told, not found by asking again
            await client.wait_for_workers(2, timeout=0)  # known already: at once
            assert client.sent == ["watch-workers"]
        finally:
            await first.close("done")
            await second.close("done")


async def test_the_number_follows_workers_that_leave():
    async with scheduler_and_client() as (scheduler, client):
        worker = await join(scheduler.address, "a")
        await client.wait_for_workers(1, timeout=30)
        await worker.close("leaving")
        await wait_until_async(lambda: client._reports.worker_count == 0, 30,
                               what="the client hears the worker left")
        with pytest.raises(TimeoutError, match="fewer than 1 workers connected within 0.2 s"):
            await client.wait_for_workers(1, timeout=0.2)
        assert client.sent == ["watch-workers"]


async def test_a_client_that_disconnects_is_told_no_more():
    async with scheduler_and_client() as (scheduler, client):
        await client.wait_for_workers(0, timeout=30)
        assert len(scheduler.state.membership.watchers) == 1
        await client.close()
        await wait_until_async(lambda: not scheduler.state.membership.watchers, 30,
                               what="the scheduler forgets the watcher")


async def test_a_wait_ends_with_the_scheduler():
    async with scheduler_and_client() as (scheduler, client):
        waiting = asyncio.ensure_future(client.wait_for_workers(1))
        await wait_until_async(lambda: scheduler.state.membership.watchers, 30,
                               what="the scheduler hears the client watch")
        await scheduler.close()
        with pytest.raises(SchedulerLostError):
            await asyncio.wait_for(waiting, 30)

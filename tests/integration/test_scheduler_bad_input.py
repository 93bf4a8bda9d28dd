"""Malformed ops get a clear error, and the scheduler goes on serving everyone else."""

import asyncio
import sys

import cloudpickle
import pytest

from dsched import Client
from dsched.comm import connect
from dsched.errors import CommClosedError

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def double(x):
    return 2 * x


async def exchange(address, token, role, *ops):
    comm = await connect(address, role=role, name="prober", token=token)
    try:
        if role == "client":
            await comm.recv()  # welcome
        await comm.send(*ops)
        return await asyncio.wait_for(comm.recv(), 30)
    finally:
        await comm.close("done")


def test_bad_client_ops_are_answered_with_errors(daemons):
    address = daemons.scheduler()
    daemons.worker("--nthreads", "1")
    bad_resources = {"op": "submit", "id": 1, "tasks": [
        {"key": "x", "spec": [b"", b""], "resources": {"GPU": -5}}]}
    replies = asyncio.run(exchange(address, daemons.token, "client", bad_resources))
    assert replies[0]["op"] == "error" and "malformed 'submit'" in replies[0]["reason"]
    replies = asyncio.run(exchange(address, daemons.token, "client", {"op": "bogus", "id": 2}))
    assert replies == [{"op": "error", "id": 2, "reason": "unknown op 'bogus'"}]
    with Client(address, token=daemons.token) as client:
        assert client.submit(double, 21).result(timeout=30) == 42


def test_a_bad_register_is_refused_with_a_reason(daemons):
    address = daemons.scheduler()
    register = {"op": "register", "name": "bad", "address": "127.0.0.1:1", "nthreads": 0}
    with pytest.raises(CommClosedError, match="refused: invalid register op"):
        asyncio.run(exchange(address, daemons.token, "worker", register))
    daemons.worker("--nthreads", "1")
    with Client(address, token=daemons.token) as client:
        client.wait_for_workers(1, timeout=30)
        assert client.submit(double, 4).result(timeout=30) == 8
        assert [w["name"] for w in client.scheduler_info()["workers"].values()] != ["bad"]

"""A malformed op closes that connection with a clear reason, and the scheduler goes on
serving everyone else."""

import asyncio
import sys

import cloudpickle
import pytest

from dsched import Client
from dsched.comm import connect
from dsched.errors import CommClosedError
from dsched.settings import default_of

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


def test_a_malformed_client_op_closes_that_connection_with_the_reason(daemons):
    address = daemons.scheduler()
    daemons.worker("--nthreads", "1")
    bad_resources = {"op": "submit", "id": 1, "tasks": [
        {"key": "x", "spec": [b"", b""], "resources": {"GPU": -5}}]}
    with pytest.raises(CommClosedError, match="a submit op: task field "
                                              "'resources': resource units out of range"):
        asyncio.run(exchange(address, daemons.token, "client", bad_resources))
    with pytest.raises(CommClosedError, match="unknown op 'bogus'"):
        asyncio.run(exchange(address, daemons.token, "client", {"op": "bogus", "id": 2}))
    with pytest.raises(CommClosedError, match="execute is not an op a client sends"):
        asyncio.run(exchange(address, daemons.token, "client",
                             {"op": "execute", "key": "x", "spec": [b"", b""]}))
    with Client(address, token=daemons.token) as client:
        assert client.submit(double, 21).result(timeout=30) == 42


def test_a_bad_register_is_refused_with_a_reason(daemons):
    address = daemons.scheduler()
    register = {"op": "register", "name": "bad", "address": "127.0.0.1:1", "nthreads": 0,
                "job_lease": default_of("worker.job_lease")}
    with pytest.raises(CommClosedError, match="refused: a worker needs at least one thread"):
        asyncio.run(exchange(address, daemons.token, "worker", register))
    with pytest.raises(CommClosedError, match="a register op: expected an int"):
        asyncio.run(exchange(address, daemons.token, "worker", {**register, "nthreads": "4"}))
    daemons.worker("--nthreads", "1")
    with Client(address, token=daemons.token) as client:
        client.wait_for_workers(1, timeout=30)
        assert client.submit(double, 4).result(timeout=30) == 8
        assert [w["name"] for w in client.scheduler_info()["workers"].values()] != ["bad"]

"""The client API against real daemons: submit, map, gather, futures as arguments, keys,
annotate, scheduler_info, releasing results, the asynchronous client and ``Client()``.

One scheduler and two workers serve the whole module: ``a`` offers GPU=2 (abstract devices
here), ``b`` offers nothing; both run two threads.
"""

from __future__ import annotations

import asyncio
import gc
import sys

import cloudpickle
import pytest

import dsched
from deadline import wait_until
from dsched import AsyncClient, Client, as_completed, wait
from dsched.peers import PeerPool

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def inc(x):
    return x + 1


def add(*args, **kwargs):
    return sum(args) + sum(kwargs.values())


def where():
    import os

    return os.environ.get("SCHED_WORKER_NAME"), os.environ.get("CUDA_VISIBLE_DEVICES")


def describe(value):
    return {"type": type(value).__name__, "value": value}


def payload(nbytes):
    return b"x" * nbytes


def task_counts(client) -> dict:
    return client.scheduler_info()["tasks"]


# -- submit, map, gather ---------------------------------------------------------------------

def test_submit_returns_a_future_with_the_result(client):
    future = client.submit(add, 1, 2, c=3)
    assert future.result(timeout=30) == 6
    assert future.done() and future.status == "finished" and future.key.startswith("add-")


def test_futures_inside_arguments_are_replaced_by_their_results(client):
    x, y = client.submit(inc, 1), client.submit(inc, 2)
    nested = client.submit(describe, {"pair": (x, y), "list": [x, [y]], "set": {x}})
    assert nested.result(timeout=30) == {
        "type": "dict", "value": {"pair": (2, 3), "list": [2, [3]], "set": {2}}}
    assert client.submit(add, x, y, z=x).result(timeout=30) == 7


def test_gather_keeps_the_structure(client):
    x, y = client.map(inc, [10, 20])
    assert client.gather({"x": x, "pair": (x, y), "list": [y]}, timeout=30) == {
        "x": 11, "pair": (11, 21), "list": [21]}
    assert client.gather(x) == 11


def test_map_over_several_iterables_and_explicit_keys(client):
    futures = client.map(add, [1, 2, 3], [10, 20, 30], key=["k1", "k2", "k3"])
    assert [f.key for f in futures] == ["k1", "k2", "k3"]
    assert client.gather(futures, timeout=30) == [11, 22, 33]
    prefixed = client.map(inc, range(2), key="step")
    assert all(f.key.startswith("step-") for f in prefixed)


def test_pure_calls_share_a_task_and_impure_ones_do_not(client):
    assert client.submit(inc, 5).key == client.submit(inc, 5).key
    assert client.submit(inc, 5, pure=False).key != client.submit(inc, 5, pure=False).key


def test_a_ten_thousand_task_map(client):
    futures = client.map(inc, range(10_000))
    assert client.gather(futures, timeout=120) == list(range(1, 10_001))
    del futures
    gc.collect()
    wait_until(lambda: not task_counts(client), 30, what="the map's results released")


def test_scheduler_info_lists_workers_resources_and_tasks(client):
    info = client.scheduler_info()
    by_name = {w["name"]: w for w in info["workers"].values()}
    assert by_name["a"]["resources"]["GPU"] == 2 and by_name["a"]["nthreads"] == 2
    assert "GPU" not in by_name["b"]["resources"]
    blocked = client.submit(inc, 1, resources={"GPU": 3})  # no worker offers three
    wait_until(lambda: task_counts(client).get("queued") == 1, 30, what="one queued task")
    blocked.cancel()


# -- annotate --------------------------------------------------------------------------------

def test_annotate_applies_to_every_submit_and_map_inside(client):
    with dsched.annotate(resources={"GPU": 1}):
        single = client.submit(where, pure=False)
        mapped = client.map(lambda _: where(), range(4), pure=False)
    outside = client.submit(where, workers="b", pure=False)
    for name, devices in client.gather([single, *mapped], timeout=30):
        assert name == "a" and devices in ("0", "1")
    assert outside.result(timeout=30) == ("b", "")


def test_explicit_arguments_win_over_annotations_and_nested_blocks_merge(client):
    with dsched.annotate(workers=["a"]):
        assert client.submit(where, workers=["b"], pure=False).result(timeout=30)[0] == "b"
        with dsched.annotate(resources={"GPU": 1}):
            name, devices = client.submit(where, pure=False).result(timeout=30)
    assert name == "a" and devices in ("0", "1")


# -- lifetime of results ---------------------------------------------------------------------

def held_by(addresses: list[str], key: str, token: str) -> list[str]:
    """The workers that would hand over ``key``'s result (asked directly, as a peer)."""
    async def ask() -> list[str]:
        pool = PeerPool(role="client", name="probe", token=token)
        try:
            replies = [await pool.get_data(a, (key,), timeout=10) for a in addresses]
        finally:
            await pool.close()
        return [a for a, reply in zip(addresses, replies) if key in reply.data]

    return asyncio.run(ask())


def test_dropping_the_last_future_lets_the_cluster_drop_the_result(client, cluster):
    wait_until(lambda: not task_counts(client), 30, what="an idle scheduler")
    future = client.submit(payload, 1000, pure=False)
    assert future.result(timeout=30) == b"x" * 1000
    key, copy = future.key, future
    workers = list(client.scheduler_info()["workers"])
    assert task_counts(client) == {"memory": 1}
    assert len(held_by(workers, key, cluster.token)) == 1
    del future
    gc.collect()
    assert task_counts(client) == {"memory": 1}  # ``copy`` still refers to it
    del copy
    gc.collect()
    wait_until(lambda: not task_counts(client), 30, what="the scheduler forgets the task")
    wait_until(lambda: not held_by(workers, key, cluster.token), 30,
               what="the worker drops the result")


# -- the asynchronous client -------------------------------------------------------------------

async def test_an_asynchronous_client_awaits_everything(cluster):
    client = await Client(cluster.address, asynchronous=True, token=cluster.token)
    try:
        assert isinstance(client, AsyncClient) and client.status == "running"
        await client.wait_for_workers(2, timeout=30)
        future = client.submit(inc, 1)
        assert await future == 2
        assert await future.result() == 2
        futures = client.map(inc, range(5))
        assert await client.gather(futures) == [1, 2, 3, 4, 5]
        done, not_done = await wait(futures, timeout=30)
        assert done == set(futures) and not not_done
        assert sorted([await f async for f in as_completed(futures)]) == [1, 2, 3, 4, 5]
        info = await client.scheduler_info()
        assert len(info["workers"]) == 2
        failed = client.submit(add, "a", 1)
        with pytest.raises(TypeError):
            await failed
        assert isinstance(await failed.exception(), TypeError)
    finally:
        await client.close()
    assert client.status == "closed"


async def test_async_with_an_async_client(cluster):
    async with AsyncClient(cluster.address, token=cluster.token) as client:
        assert await client.submit(add, 2, 3) == 5
        gated = client.submit(inc, 1, resources={"GPU": 5})  # never runs: cancelled
        await client.cancel([gated])
        assert gated.cancelled()


# -- Client() and closing --------------------------------------------------------------------

def test_client_with_no_address_starts_and_stops_a_local_cluster(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("SCHED_CONFIG", raising=False)
    monkeypatch.delenv("SCHED_CLIENT__SCHEDULER_ADDRESS", raising=False)
    with Client(n_workers=1, threads_per_worker=1) as client:
        processes = list(client.cluster._processes)
        assert client.submit(inc, 41).result(timeout=30) == 42
        assert len(client.scheduler_info()["workers"]) == 1
    assert client.status == "closed"
    assert all(process.poll() is not None for process in processes)


def test_a_token_file_under_home_is_found_as_the_config_files_would_be(cluster, monkeypatch,
                                                                     tmp_path):
    (tmp_path / "token").write_text(cluster.token)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("SCHED_TOKEN", raising=False)  # it would win over the file
    with Client(cluster.address, token_file="~/token") as client:
        assert client.submit(inc, 1).result(timeout=30) == 2


def test_closing_cancels_pending_futures_and_refuses_new_work(cluster):
    client = Client(cluster.address, token=cluster.token)
    pending = client.submit(inc, 1, resources={"GPU": 5})
    client.close()
    assert pending.cancelled() and client.status == "closed"
    with pytest.raises(dsched.SchedError, match="closed"):
        client.submit(inc, 1)
    client.close()  # twice is fine

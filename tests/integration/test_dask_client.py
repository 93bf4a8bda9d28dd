"""A dsched Client runs Dask collections on real daemons: compute, persist, get, Dask's
default scheduler, dsched futures inside Dask graphs, graphs sent in parts, and failures."""

from __future__ import annotations

import gc
import sys

import cloudpickle
import pytest

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
np = pytest.importorskip("numpy")

import dsched  # noqa: E402
from dsched.protocol import ops  # noqa: E402
from deadline import wait_until  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

CLUSTER_WORKERS = (("--name", "a", "--nthreads", "2", "--gpus", "none"),
                   ("--name", "b", "--nthreads", "2", "--gpus", "none"))


def inc(x):
    return x + 1


def fail(block):
    raise ZeroDivisionError("a block went wrong")


def nothing_left(client) -> bool:
    """True once the scheduler holds no task of this test (every future was dropped)."""
    gc.collect()
    return not client.scheduler_info()["tasks"]


@pytest.fixture
def client(cluster):
    with dsched.Client(cluster.address, token=cluster.token) as client:
        client.wait_for_workers(2, timeout=30)
        yield client


def test_compute_gives_futures_of_the_results(client):
    x = da.arange(100, chunks=10)
    total, doubled = client.compute([x.sum(), (x * 2)])
    assert isinstance(total, dsched.Future)
    assert total.result(timeout=60) == 4950
    np.testing.assert_array_equal(doubled.result(timeout=60), np.arange(100) * 2)
    assert client.compute(x.max(), sync=True) == 99
    assert client.compute([x.min(), 7], sync=True) == [0, 7]


def test_persist_serves_later_graphs_and_is_released_when_dropped(client):
    x = (da.arange(100, chunks=10) + 1).persist()
    futures = [v for v in dict(x.dask).values() if isinstance(v, dsched.Future)]
    assert len(futures) == 10
    dsched.wait(futures, timeout=60)
    assert (x * 2).sum().compute() == 2 * 5050
    assert dask.persist(x)[0].sum().compute() == 5050
    del x, futures
    wait_until(lambda: nothing_left(client), what="the persisted parts released")


def test_get_as_dask_scheduler_by_argument_and_by_config(cluster, client):
    x = da.arange(10, chunks=5) + 1
    assert dask.compute(x.sum(), scheduler=client) == (55,)
    with dsched.Client(cluster.address, token=cluster.token, set_as_default=False) as other:
        assert dask.config.get("scheduler") is client
        with dask.config.set(scheduler=other):
            assert x.sum().compute() == 55
    assert client.get({"a": 1, "b": (inc, "a")}, ["b", ["a"]]) == [2, [1]]


def test_the_newest_open_client_is_dasks_default(cluster):
    before = dask.config.get("scheduler", None)
    first = dsched.Client(cluster.address, token=cluster.token)
    second = dsched.Client(cluster.address, token=cluster.token)
    try:
        assert dask.config.get("scheduler") is second
        first.close()
        assert dask.config.get("scheduler") is second
        assert (da.ones(4, chunks=2) + 1).sum().compute() == 8
    finally:
        second.close()
        first.close()
    assert dask.config.get("scheduler", None) is before


def test_a_dsched_future_is_an_input_of_a_delayed_call(client):
    future = client.submit(inc, 1)
    assert dask.delayed(inc)(future).compute() == 3
    assert dask.delayed(sum)([future, future, 1]).compute() == 5


def test_a_graph_larger_than_a_frame_is_sent_in_parts(cluster, monkeypatch):
    with dsched.config.set({"comm.max_frame_size": 200_000}):
        client = dsched.Client(cluster.address, token=cluster.token)
    with client:
        assert client._async._limits["max_frame_size"] == 200_000
        sent = []
        outbox = client._async._outbox
        enqueue = outbox.enqueue
        monkeypatch.setattr(outbox, "enqueue",
                            lambda op: (sent.append(op), enqueue(op))[1])
        x = da.arange(4000, chunks=4)
        assert ((x + 1) * 2).sum().compute() == 2 * sum(range(1, 4001))
        assert sum(1 for op in sent if isinstance(op, ops.Submit)) > 3
        wait_until(lambda: nothing_left(client), what="every part's tasks released")


def test_a_failing_block_raises_its_own_error(client):
    x = da.ones(8, chunks=4).map_blocks(fail, dtype=float)
    with pytest.raises(ZeroDivisionError, match="a block went wrong"):
        x.sum().compute()

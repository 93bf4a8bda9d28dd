"""The seed page's "Resources with collections" examples run on dsched with Dask's
optimisation left on: a cluster of one ``GPU=1`` worker and one plain worker, real daemons.

Each annotated step records where it ran (worker, ``CUDA_VISIBLE_DEVICES``) in a file under
the test's directory; the results must equal those of Dask's threaded scheduler. The page
reads zarr and parquet files; here the array comes from NumPy (zarr is not installed) and the
dataframe from a parquet file the test writes.
"""

from __future__ import annotations

import sys
import uuid

import cloudpickle
import pytest

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
db = pytest.importorskip("dask.bag")
dd = pytest.importorskip("dask.dataframe")
np = pytest.importorskip("numpy")
pd = pytest.importorskip("pandas")

import dsched  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

CLUSTER_WORKERS = (("--name", "gpu", "--nthreads", "2", "--resources", "GPU=1"),
                   ("--name", "cpu", "--nthreads", "2", "--gpus", "none"))

#: Where the steps below record where they ran; set by the ``log`` fixture.
LOG = {"dir": ""}


def record(step: str, log_dir: str) -> None:
    import os

    with open(os.path.join(log_dir, f"{step}-{uuid.uuid4().hex}"), "w") as f:
        f.write(f"{os.environ.get('SCHED_WORKER_NAME', 'local')}|"
                f"{os.environ.get('CUDA_VISIBLE_DEVICES', '-')}")


def records(log_dir, step: str) -> list[tuple[str, str]]:
    """Where the tasks of ``step`` ran; leaves out the calls Dask makes in this process to
    infer the type of a block (``local``)."""
    found = [tuple(p.read_text().split("|")) for p in log_dir.glob(f"{step}-*")]
    return [where for where in found if where[0] != "local"]


def func1(block, log_dir):
    record("func1", log_dir)
    return block * 2 + 1


def func2(block, log_dir):
    record("func2", log_dir)
    return block - 3


def make(block, log_dir):
    record("make", log_dir)
    return block + 0.5


@pytest.fixture
def log(tmp_path):
    directory = tmp_path / "steps"
    directory.mkdir()
    return directory


@pytest.fixture
def client(cluster):
    """A client made as on the page (``Client(address)``): Dask's scheduler until closed."""
    with dsched.Client(cluster.address, token=cluster.token) as client:
        client.wait_for_workers(2, timeout=30)
        assert dask.config.get("scheduler") is client
        yield client
    assert dask.config.get("scheduler", None) is not client


def only_on_the_gpu(steps: list) -> None:
    assert steps and all(step == ("gpu", "0") for step in steps), steps


def holds_no_gpu(steps: list) -> None:
    assert steps and all(device in ("", "-") for _, device in steps), steps


def test_array_map_blocks_under_annotate_as_on_the_page(client, log):
    x = da.from_array(np.arange(64.0).reshape(8, 8), chunks=(4, 4))  # stands in for read_zarr
    with dask.annotate(resources={'GPU': 1}):
        y = x.map_blocks(func1, log_dir=str(log))
    z = y.map_blocks(func2, log_dir=str(log))
    result = z.compute()
    only_on_the_gpu(records(log, "func1"))
    assert len(records(log, "func1")) == 4
    expected = z.compute(scheduler="threads")
    np.testing.assert_array_equal(result, expected)


def test_fusion_boundaries_keep_unannotated_steps_off_the_gpu(client, log):
    x = da.ones((8, 8), chunks=(4, 4)).map_blocks(make, log_dir=str(log))
    with dask.annotate(resources={'GPU': 1}):
        y = x.map_blocks(func1, log_dir=str(log))
    z = y.map_blocks(func2, log_dir=str(log))
    result = z.compute(fusion="boundaries")
    only_on_the_gpu(records(log, "func1"))
    holds_no_gpu(records(log, "make"))
    holds_no_gpu(records(log, "func2"))
    np.testing.assert_array_equal(result, np.full((8, 8), (1 + 0.5) * 2 + 1 - 3))


# Dask warns that it drops annotations given while building a dataframe; the persist inside
# the block is what carries this one to dsched.
@pytest.mark.filterwarnings("ignore:Dask annotations .* detected")
def test_dataframe_persist_under_annotate_as_on_the_page(client, log, tmp_path):
    path = str(tmp_path / "table.parquet")
    pd.DataFrame({"a": range(40), "b": np.arange(40.0)}).to_parquet(path)
    x = dd.read_parquet(path).repartition(npartitions=4)
    with dask.annotate(resources={'GPU': 1}):
        y = x.map_partitions(func1, log_dir=str(log)).persist()
    z = y.map_partitions(func2, log_dir=str(log))
    del y  # Release distributed memory for y as soon as possible
    result = z.compute()
    only_on_the_gpu(records(log, "func1"))
    holds_no_gpu(records(log, "func2"))
    expected = dd.read_parquet(path).map_partitions(lambda df: df * 2 + 1 - 3).compute()
    pd.testing.assert_frame_equal(result.reset_index(drop=True),
                                  expected.reset_index(drop=True))


def test_requires_gives_one_dataframe_step_a_gpu(client, log):
    @dsched.requires(GPU=1)
    def on_gpu(frame, log_dir):
        return func1(frame, log_dir)

    frame = dd.from_pandas(pd.DataFrame({"a": range(20)}), npartitions=4)
    z = frame.map_partitions(on_gpu, log_dir=str(log)).map_partitions(func2, log_dir=str(log))
    result = z.compute()
    only_on_the_gpu(records(log, "func1"))
    holds_no_gpu(records(log, "func2"))
    pd.testing.assert_frame_equal(result, pd.DataFrame({"a": range(20)}) * 2 + 1 - 3)


def test_delayed_and_bag_under_annotate(client, log):
    with dask.annotate(resources={'GPU': 1}):
        value = dask.delayed(func1)(10, str(log))
        bag = db.from_sequence(range(8), npartitions=4).map(func1, str(log))
    total = dask.delayed(func2)(value, str(log))
    computed = dask.compute(total, bag.map(func2, str(log)).sum())
    only_on_the_gpu(records(log, "func1"))
    assert len(records(log, "func1")) == 9
    assert computed == (18, sum(i * 2 + 1 - 3 for i in range(8)))
    assert computed == dask.compute(total, bag.map(func2, str(log)).sum(), scheduler="threads")

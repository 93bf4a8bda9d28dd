"""The Python code on the seed page (Dask's "Worker Resources") runs on dsched with only the
imports changed, against daemons started the way that page starts Dask's.

Each block is kept here verbatim, as on the page, and :func:`port` makes the only changes:
``from distributed import`` -> ``from dsched import``, ``dask.annotate`` ->
``dsched.annotate``, ``dask.config.set`` -> ``dsched.config.set``, the page's placeholder
address -> the test scheduler's (``dsched.config.set`` accepts Dask's ``distributed.`` key
prefix, so the config block runs as written). The
token reaches ``Client(address)`` through ``SCHED_TOKEN``, as it would on a cluster.

The "Resources with collections" blocks (``map_blocks``, ``map_partitions``) run in
``test_dask_seed.py``, on Dask's own collections.
"""

from __future__ import annotations

import sys
import textwrap

import cloudpickle
import pytest

import dsched

cloudpickle.register_pickle_by_value(sys.modules[__name__])

PAGE_SUBMIT = """
from distributed import Client
client = Client('scheduler:8786')

data = [client.submit(load, fn) for fn in filenames]
processed = [client.submit(process, d, resources={'GPU': 1}) for d in data]
final = client.submit(aggregate, processed, resources={'MEMORY': 70e9})
"""

PAGE_ANNOTATE = """
with dask.annotate(resources={'GPU': 1}):
    processed = [client.submit(process, d) for d in data]
with dask.annotate(resources={'MEMORY': 70e9}):
    final = client.submit(aggregate, processed)
"""

PAGE_CONFIG = """
from distributed import LocalCluster

with dask.config.set({"distributed.worker.resources.GPU": 2}):
    cluster = LocalCluster()
"""

PAGE_PROCESSES = """
from distributed import Client
client = Client('scheduler:8786')

futures = [client.submit(non_thread_safe_function, arg,
                         resources={'process': 1}) for arg in args]
"""


def port(code: str, address: str = "") -> str:
    for dask_text, ours in (("from distributed import", "from dsched import"),
                            ("dask.annotate", "dsched.annotate"),
                            ("dask.config.set", "dsched.config.set"),
                            ("'scheduler:8786'", repr(address))):
        code = code.replace(dask_text, ours)
    return textwrap.dedent(code)


# -- the page's functions, defined here ------------------------------------------------------

def load(filename):
    import os

    return {"file": filename, "values": list(range(10)),
            "loaded_on": os.environ["SCHED_WORKER_NAME"]}


def process(record):
    import os
    import time

    start = time.time()
    time.sleep(0.2)  # stands in for work on the GPU
    return {**record, "total": sum(record["values"]), "start": start, "stop": time.time(),
            "worker": os.environ["SCHED_WORKER_NAME"],
            "device": os.environ["CUDA_VISIBLE_DEVICES"], "gpus": dsched.get_gpu_ids()}


def aggregate(records):
    import os

    return {"total": sum(r["total"] for r in records), "worker": os.environ["SCHED_WORKER_NAME"]}


def non_thread_safe_function(arg):
    import os
    import time

    start = time.time()
    time.sleep(0.3)
    return {"arg": arg, "pid": os.getpid(), "start": start, "stop": time.time()}


def most_at_once(records: list[dict]) -> int:
    edges = sorted([(r["start"], 1) for r in records] + [(r["stop"], -1) for r in records])
    running = peak = 0
    for _, change in edges:
        running += change
        peak = max(peak, running)
    return peak


def overlapping(a: dict, b: dict) -> bool:
    return a["start"] < b["stop"] and b["start"] < a["stop"]


@pytest.fixture
def page_cluster(daemons, monkeypatch):
    """The page's three workers: two with GPU=2 and one with MEMORY=100e9."""
    address = daemons.scheduler()
    daemons.worker("--resources", "GPU=2")
    daemons.worker("--resources", "GPU=2")
    daemons.worker("--resources", "MEMORY=100e9")
    monkeypatch.setenv("SCHED_TOKEN", daemons.token)
    probe = daemons.client()
    workers = daemons.wait_for_workers(probe, 3)["workers"].values()
    gpu = {w["name"] for w in workers if w["resources"].get("GPU") == 2}
    memory = {w["name"] for w in workers if "MEMORY" in w["resources"]}
    assert len(gpu) == 2 and len(memory) == 1
    return address, gpu, memory.pop()


def check_pipeline(namespace: dict, gpu: set[str], memory: str) -> None:
    records = namespace["client"].gather(namespace["processed"], timeout=60)
    assert {r["file"] for r in records} == set(namespace["filenames"])
    for record in records:
        assert record["worker"] in gpu
        assert record["device"] in ("0", "1") and record["gpus"] == [int(record["device"])]
    for name in gpu:  # GPU=2 per worker: at most two at once, never on the same device
        mine = [r for r in records if r["worker"] == name]
        assert most_at_once(mine) <= 2
        assert all(a["device"] != b["device"] for i, a in enumerate(mine)
                   for b in mine[i + 1:] if overlapping(a, b))
    final = namespace["final"].result(timeout=60)
    assert final == {"total": 45 * len(records), "worker": memory}


def test_submit_with_resources_as_on_the_page(page_cluster):
    address, gpu, memory = page_cluster
    namespace = {"load": load, "process": process, "aggregate": aggregate,
                 "filenames": [f"part-{i}.csv" for i in range(8)]}
    try:
        exec(port(PAGE_SUBMIT, address), namespace)
        check_pipeline(namespace, gpu, memory)
    finally:
        namespace["client"].close()


def test_annotate_as_on_the_page(page_cluster):
    address, gpu, memory = page_cluster
    namespace = {"load": load, "process": process, "aggregate": aggregate,
                 "filenames": [f"part-{i}.csv" for i in range(6)], "dsched": dsched}
    exec(port("from distributed import Client\nclient = Client('scheduler:8786')\n", address),
         namespace)
    try:
        client = namespace["client"]
        namespace["data"] = [client.submit(load, fn) for fn in namespace["filenames"]]
        exec(port(PAGE_ANNOTATE), namespace)
        check_pipeline(namespace, gpu, memory)
    finally:
        namespace["client"].close()


def test_local_cluster_takes_resources_from_the_config_as_on_the_page(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("SCHED_CONFIG", raising=False)
    namespace = {"dsched": dsched}
    exec(port(PAGE_CONFIG), namespace)
    cluster = namespace["cluster"]
    try:
        assert dsched.config.get("worker.resources") == {}  # the block has ended
        with dsched.Client(cluster) as client:
            workers = client.scheduler_info()["workers"].values()
            assert workers and all(w["resources"]["GPU"] == 2 for w in workers)
            assert client.submit(process, {"file": "f", "values": [1, 2], "loaded_on": "here"},
                                 resources={"GPU": 2}).result(timeout=60)["total"] == 3
    finally:
        cluster.close()


def test_one_task_per_process_as_on_the_page(daemons, monkeypatch):
    address = daemons.scheduler()
    daemons.worker("--nworkers", "3", "--nthreads", "2", "--resources", "process=1")
    monkeypatch.setenv("SCHED_TOKEN", daemons.token)
    probe = daemons.client()
    workers = daemons.wait_for_workers(probe, 3)["workers"].values()
    assert [w["resources"]["process"] for w in workers] == [1, 1, 1]
    namespace = {"non_thread_safe_function": non_thread_safe_function, "args": range(9)}
    exec(port(PAGE_PROCESSES, address), namespace)
    try:
        records = namespace["client"].gather(namespace["futures"], timeout=60)
    finally:
        namespace["client"].close()
    assert sorted(r["arg"] for r in records) == list(range(9))
    assert most_at_once(records) <= 3  # "at most 3 tasks running concurrently"
    assert len({r["pid"] for r in records}) == 3
    for i, a in enumerate(records):  # "each task will run in a separate process"
        for b in records[i + 1:]:
            assert not overlapping(a, b) or a["pid"] != b["pid"]

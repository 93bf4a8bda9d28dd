"""Dask array graphs through dsched and through Dask distributed, printed as one JSON line.

The graph: a 1,000-chunk random array, ``((x + 1) * 2).map_blocks(shift).sum()``. Dask's
optimisation fuses it to 2,335 keys (1,334 tasks once the 1,001 aliases fusion leaves are
resolved); without optimisation it has 5,335. Both schedulers run it on a local cluster of
two single-thread worker processes, the best of ``--rounds`` rounds each, with a fresh array
(new keys) every round:

* ``keys_per_s``: keys of the optimised graph per second of ``x.compute()``, start to result;
* ``unoptimised_keys_per_s``: the same with ``optimize_graph=False``;
* ``submit_s`` (dsched): how long ``client.compute`` takes to build and queue the graph;
* ``input_fetches`` (dsched): inputs a worker fetched from the other worker, per compute of
  the optimised graph (the scheduler's ``fetched`` counter).

When ``distributed`` is importable the same runs on Dask's LocalCluster (``n_workers=2,
threads_per_worker=1, processes=True``, worker-saturation ``inf`` as in ``throughput.py``)
and ``ratios`` says how many times dsched's throughput is Dask's. Install Dask in a separate
environment, never as a dependency of this project:

    python -m venv /tmp/dask-venv && /tmp/dask-venv/bin/pip install distributed
    PYTHONPATH=src /tmp/dask-venv/bin/python bench/dask_graphs.py

Options: ``--chunks``, ``--rounds``, ``--no-dask``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import time
import warnings


def shift(block):
    return block - 0.5


def graph(chunks: int):
    import dask.array as da

    x = da.random.random((chunks * 10,), chunks=10)
    return ((x + 1) * 2).map_blocks(shift).sum()


def sizes(chunks: int) -> dict:
    from dask._expr import FinalizeCompute
    from dask.base import collections_to_expr

    from dsched.dask.graph import Plan, optimised_graph

    counts = {}
    for label, optimize in (("keys", True), ("unoptimised_keys", False)):
        expr = FinalizeCompute(collections_to_expr([graph(chunks)], optimize)).optimize()
        counts[label] = len(expr.__dask_graph__())
    expr = FinalizeCompute(collections_to_expr([graph(chunks)], True)).optimize()
    counts["dsched_tasks"] = len(Plan(optimised_graph(expr)).nodes())
    return counts


def best_rate(client, chunks: int, rounds: int, keys: int, **options) -> float:
    """Keys per second of the best of ``rounds`` computes (the best, since the machine's
    other load only ever slows a round down)."""
    best = float("inf")
    for _ in range(rounds):
        collection = graph(chunks)
        start = time.perf_counter()
        collection.compute(**options)
        best = min(best, time.perf_counter() - start)
    return round(keys / best)


def workload(client, args, counts: dict) -> dict:
    graph(args.chunks).compute()  # warm up: imports, connections, worker processes
    return {
        "keys_per_s": best_rate(client, args.chunks, args.rounds, counts["keys"]),
        "unoptimised_keys_per_s": best_rate(client, args.chunks, args.rounds,
                                            counts["unoptimised_keys"], optimize_graph=False),
    }


def run_dsched(args, counts: dict) -> dict:
    from dsched import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, Client(cluster) as client:
        result = workload(client, args, counts)
        submits = []
        fetched = client.scheduler_info()["counters"]["fetched"]
        for _ in range(args.rounds):
            collection = graph(args.chunks)
            start = time.perf_counter()
            future = client.compute(collection)
            submits.append(time.perf_counter() - start)
            future.result()
        result["submit_s"] = round(min(submits), 3)
        fetched = client.scheduler_info()["counters"]["fetched"] - fetched
        result["input_fetches"] = round(fetched / args.rounds)
    return result


def run_dask(args, counts: dict) -> dict | None:
    try:
        import dask
        import distributed
    except ImportError:
        return None
    logging.getLogger("distributed").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    settings = {"distributed.scheduler.worker-saturation": float("inf"),
                "distributed.admin.system-monitor.gil.enabled": False}
    options = dict(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                   silence_logs=logging.ERROR)
    with dask.config.set(settings):
        with distributed.LocalCluster(**options) as cluster, distributed.Client(cluster) as client:
            result = workload(client, args, counts)
    result["version"] = distributed.__version__
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-dask", action="store_true")
    args = parser.parse_args()
    logging.getLogger("dsched").setLevel(logging.ERROR)
    import dask

    counts = sizes(args.chunks)
    report = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "dask": dask.__version__},
              "workload": {"chunks": args.chunks, "rounds": args.rounds, **counts},
              "dsched": run_dsched(args, counts)}
    with contextlib.suppress(ImportError):
        if not args.no_dask:
            dask_result = run_dask(args, counts)
            if dask_result is not None:
                report["dask"] = dask_result
                ours, theirs = report["dsched"], dask_result
                report["ratios"] = {
                    name: round(ours[name] / theirs[name], 2)
                    for name in ("keys_per_s", "unoptimised_keys_per_s")}
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()

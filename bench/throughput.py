"""Client throughput and latency: dsched side by side with Dask, printed as one JSON line.

Four numbers on a local cluster of two single-thread worker processes:

* ``map_tasks_per_s``: no-op tasks through ``client.map`` + ``client.gather`` (and
  ``map_tasks_per_s_prefetch`` with ``LocalCluster(prefetch=32)``, nearer Dask's setting);
* ``gpu_map_tasks_per_s``: the same with ``resources={"GPU": 1}`` on workers offering GPU=2;
* ``latency_ms``: one ``submit(...).result()`` round trip at a time (median and p99);
* ``chain_tasks_per_s``: a chain of tasks, each taking the previous one's future.

When ``distributed`` is importable the same workload runs on Dask's LocalCluster
(``n_workers=2, threads_per_worker=1, processes=True``, worker-saturation ``inf``) and the
ratios are printed too (throughputs dsched/Dask, latency Dask/dsched: above 1 means dsched
is better). Install Dask in a separate environment, never as a dependency of this project:

    python -m venv /tmp/dask-venv && /tmp/dask-venv/bin/pip install distributed
    /tmp/dask-venv/bin/pip install -e .   # dsched itself, in that venv
    /tmp/dask-venv/bin/python bench/throughput.py

Options: ``--tasks`` (per map round), ``--rounds``, ``--latency`` (round trips), ``--chain``,
``--prefetch``, ``--no-dask``; ``--poll-dashboard SECONDS`` runs the dsched side while a
client reads the scheduler's dashboard (the page's panels, the workers and tasks API and the
metrics) every SECONDS (0: back to back), to show that looking does not slow placement.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import statistics
import time
import warnings


def noop(x):
    return x


def inc(x):
    return x + 1


def map_rate(client, n: int, rounds: int, **options) -> float:
    """Tasks per second of the best of ``rounds`` maps of ``n`` no-op tasks (the best, since
    the machine's other load only ever slows a round down)."""
    rates = []
    for _ in range(rounds):
        start = time.perf_counter()
        futures = client.map(noop, range(n), pure=False, **options)
        client.gather(futures)
        rates.append(n / (time.perf_counter() - start))
        del futures
    return max(rates)


def latency(client, n: int) -> dict[str, float]:
    """Milliseconds per ``submit(...).result()``, one at a time."""
    times = []
    for i in range(n):
        start = time.perf_counter()
        client.submit(noop, i, pure=False).result()
        times.append(time.perf_counter() - start)
    times.sort()
    return {"median": round(statistics.median(times) * 1e3, 3),
            "p99": round(times[min(len(times) - 1, int(len(times) * 0.99))] * 1e3, 3)}


def chain_rate(client, n: int) -> float:
    """Tasks per second through a chain of ``n`` tasks, each depending on the one before."""
    start = time.perf_counter()
    future = client.submit(inc, 0, pure=False)
    for _ in range(n - 1):
        future = client.submit(inc, future, pure=False)
    assert future.result() == n
    return n / (time.perf_counter() - start)


def workload(client, args) -> dict:
    client.gather(client.map(noop, range(500), pure=False))  # warm up: imports, connections
    return {
        "map_tasks_per_s": round(map_rate(client, args.tasks, args.rounds)),
        "latency_ms": latency(client, args.latency),
        "chain_tasks_per_s": round(chain_rate(client, args.chain)),
    }


def gpu_workload(client, args) -> dict:
    client.gather(client.map(noop, range(200), pure=False, resources={"GPU": 1}))
    return {"gpu_map_tasks_per_s": round(
        map_rate(client, args.tasks, args.rounds, resources={"GPU": 1}))}


def poll_dashboard(url: str, interval: float, stop, count) -> None:
    """Read the dashboard at ``url`` every ``interval`` seconds until ``stop`` is set, as a
    browser tab and a Prometheus scrape would; ``count`` counts the requests."""
    import urllib.request

    while not stop.is_set():
        for path in ("api/v1/panels", "api/v1/workers", "api/v1/tasks", "metrics"):
            with urllib.request.urlopen(url + path, timeout=30) as reply:
                reply.read()
            with count.get_lock():
                count.value += 1
        stop.wait(interval)


@contextlib.contextmanager
def dashboard_poller(cluster, interval: float | None, polls: list[int]):
    """While the block runs, a process of its own (as a browser is) reads ``cluster``'s
    dashboard every ``interval`` seconds (None: not at all); adds its requests to ``polls``."""
    if interval is None:
        yield
        return
    import multiprocessing

    stop, count = multiprocessing.Event(), multiprocessing.Value("l", 0)
    poller = multiprocessing.Process(target=poll_dashboard, daemon=True,
                                     args=(cluster.dashboard_link, interval, stop, count))
    poller.start()
    try:
        yield
    finally:
        stop.set()
        poller.join(30)
        polls.append(count.value)


def run_dsched(args) -> dict:
    from dsched import Client, LocalCluster

    polls: list[int] = []
    with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, Client(cluster) as client, \
            dashboard_poller(cluster, args.poll_dashboard, polls):
        result = workload(client, args)
    # Dask runs with worker-saturation inf (every task sent to a worker at once); the nearest
    # setting here is a deep prefetch queue on each worker.
    with LocalCluster(n_workers=2, threads_per_worker=1, prefetch=args.prefetch) as cluster, \
            Client(cluster) as client, dashboard_poller(cluster, args.poll_dashboard, polls):
        client.gather(client.map(noop, range(500), pure=False))
        result["map_tasks_per_s_prefetch"] = round(map_rate(client, args.tasks, args.rounds))
    with LocalCluster(n_workers=2, threads_per_worker=1, resources={"GPU": 2}) as cluster, \
            Client(cluster) as client, dashboard_poller(cluster, args.poll_dashboard, polls):
        result.update(gpu_workload(client, args))
    if args.poll_dashboard is not None:
        result["dashboard_requests"] = sum(polls)
    return result


def run_dask(args) -> dict | None:
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
            result = workload(client, args)
        with distributed.LocalCluster(resources={"GPU": 2}, **options) as cluster, \
                distributed.Client(cluster) as client:
            result.update(gpu_workload(client, args))
    result["version"] = distributed.__version__
    return result


def ratios(ours: dict, theirs: dict) -> dict:
    return {
        "map_throughput": round(ours["map_tasks_per_s"] / theirs["map_tasks_per_s"], 2),
        "map_throughput_prefetch": round(
            ours["map_tasks_per_s_prefetch"] / theirs["map_tasks_per_s"], 2),
        "gpu_map_throughput": round(ours["gpu_map_tasks_per_s"] / theirs["gpu_map_tasks_per_s"], 2),
        "latency_median": round(theirs["latency_ms"]["median"] / ours["latency_ms"]["median"], 2),
        "latency_p99": round(theirs["latency_ms"]["p99"] / ours["latency_ms"]["p99"], 2),
        "chain": round(ours["chain_tasks_per_s"] / theirs["chain_tasks_per_s"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--latency", type=int, default=300)
    parser.add_argument("--chain", type=int, default=2000)
    parser.add_argument("--prefetch", type=int, default=32,
                        help="scheduler.prefetch for the map_tasks_per_s_prefetch run")
    parser.add_argument("--no-dask", action="store_true")
    parser.add_argument("--poll-dashboard", type=float, metavar="SECONDS",
                        help="read the dashboard every SECONDS during the dsched runs")
    args = parser.parse_args()
    logging.getLogger("dsched").setLevel(logging.ERROR)
    report = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "workload": {"tasks": args.tasks, "rounds": args.rounds,
                           "latency_round_trips": args.latency, "chain": args.chain,
                           "prefetch": args.prefetch, "poll_dashboard": args.poll_dashboard},
              "dsched": run_dsched(args)}
    with contextlib.suppress(ImportError):
        if not args.no_dask:
            dask_result = run_dask(args)
            if dask_result is not None:
                report["dask"] = dask_result
                report["ratios"] = ratios(report["dsched"], dask_result)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()

"""Prometheus metrics: every family the scheduler exports, made at scrape time from a snapshot.

Nothing is counted per task for Prometheus: the families of each section are made from that
section's part of the current snapshot (``Collector``), the histograms included (their
buckets are kept by ``observe.py``). Names follow Prometheus's rules (base units, ``_total``
counters, histograms rather than averages), and labels take only bounded values: a worker's
name, a GPU's index, a resource name, a state or a kind of reason or error, never a task key,
a job's number, name or command.
The process's own families (CPU, memory, file descriptors, garbage collection) come with them.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client import gc_collector, platform_collector, process_collector
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily, InfoMetricFamily, Metric)

#: The media type of the metrics text.
CONTENT_TYPE = CONTENT_TYPE_LATEST

from ...jobstates import ENDED
from ..reasons import REASON_KINDS
from ..views import PENDING_TEXTS

#: SchedulerState.counters -> (family, help): each counts since the scheduler started.
COUNTERS = {
    "placed": ("dsched_placements_total", "Tasks placed on a worker"),
    "deaths": ("dsched_task_worker_deaths_total",
               "Times a worker died while executing a task (once per task it was running)"),
    "rejected": ("dsched_task_refusals_total", "Times a worker refused a task it was sent"),
    "recomputed": ("dsched_recomputations_total",
                   "Results lost with their workers and computed again"),
    "replicated": ("dsched_result_copies_total",
                   "Results copied off draining workers to keep them"),
    "fetched": ("dsched_input_fetches_total",
                "Task inputs a worker had to fetch from another worker (the task was placed "
                "where the input was not held)"),
    "gpus_fenced": ("dsched_gpu_faults_total",
                    "GPU devices fenced because they reported a fatal fault"),
}
PENDING_REASONS = tuple(PENDING_TEXTS) + REASON_KINDS
ENDED_STATES = sorted(s.value for s in ENDED)


def _gauge(name: str, help: str, labels: Sequence[str], rows: Iterable[tuple]) -> Metric:
    family = GaugeMetricFamily(name, help, labels=list(labels))
    for *values, value in rows:
        family.add_metric([str(v) for v in values], value)
    return family


def _histogram(name: str, help: str, histogram: dict[str, Any]) -> Metric:
    return HistogramMetricFamily(name, help, buckets=[tuple(b) for b in histogram["buckets"]],
                                 sum_value=histogram["sum"])


def cluster_metrics(part: dict[str, Any]) -> Iterator[Metric]:
    yield InfoMetricFamily("dsched_build", "The dsched version and Python running the scheduler",
                           value={"version": part["version"], "python": part["python"]})
    yield GaugeMetricFamily("dsched_ready", "1 while the scheduler takes work (readyz says 200)",
                            value=1 if part["ready"] else 0)
    yield GaugeMetricFamily("dsched_clients_connected", "Clients connected to the scheduler",
                            value=part["clients"])
    yield _histogram("dsched_event_loop_lag_seconds",
                     "How late the scheduler's event loop woke a timer, sampled twice a second",
                     part["loop_lag_histogram"])
    resources = part["resources"]
    yield _gauge("dsched_resource_capacity", "Each resource offered by the connected workers, "
                 "in all", ["resource"], ((n, r["total"]) for n, r in resources.items()))
    yield _gauge("dsched_resource_allocated", "Each resource held by running tasks, in all",
                 ["resource"], ((n, r["used"]) for n, r in resources.items()))


def worker_metrics(part: dict[str, Any]) -> Iterator[Metric]:
    items = part["items"]
    yield _gauge("dsched_workers", "Workers connected: taking work (connected) or draining",
                 ["state"], part["by_state"].items())
    yield _gauge("dsched_worker_threads", "Threads of each worker", ["worker"],
                 ((w["name"], w["nthreads"]) for w in items))
    yield _gauge("dsched_worker_threads_busy", "Threads of each worker running a task",
                 ["worker"], ((w["name"], w["threads_busy"]) for w in items))
    yield _gauge("dsched_worker_resource_capacity", "Each resource a worker offers",
                 ["worker", "resource"],
                 ((w["name"], r["name"], r["total"]) for w in items for r in w["resources"]))
    yield _gauge("dsched_worker_resource_allocated", "Each resource of a worker held by tasks",
                 ["worker", "resource"],
                 ((w["name"], r["name"], r["used"]) for w in items for r in w["resources"]))
    yield _gauge("dsched_worker_memory_bytes", "Memory a worker uses, by its last heartbeat",
                 ["worker"], ((w["name"], w["memory"]) for w in items if w["memory"] is not None))
    yield _gauge("dsched_worker_heartbeat_age_seconds", "Seconds since a worker's last heartbeat",
                 ["worker"], ((w["name"], w["heartbeat_age"]) for w in items))
    gpus = [(w["name"], g) for w in items for g in w["gpus"]]
    yield _gauge("dsched_gpu_fenced", "1 for a GPU fenced for a fault (no new work there)",
                 ["worker", "gpu"], ((name, g["index"], int(bool(g["fenced"]))) for name, g in gpus))
    yield _gauge("dsched_gpu_memory_total_bytes", "Memory of each GPU", ["worker", "gpu"],
                 ((name, g["index"], g["memory_total"]) for name, g in gpus))
    yield _gauge("dsched_gpu_memory_used_bytes", "Memory in use on each GPU, by the last "
                 "heartbeat", ["worker", "gpu"],
                 ((name, g["index"], g["memory_used"]) for name, g in gpus
                  if g["memory_used"] is not None))
    yield _gauge("dsched_gpu_utilization_ratio", "Fraction of time a kernel ran on each GPU, "
                 "by the last heartbeat", ["worker", "gpu"],
                 ((name, g["index"], g["utilization"]) for name, g in gpus
                  if g["utilization"] is not None))


def task_metrics(part: dict[str, Any]) -> Iterator[Metric]:
    yield _gauge("dsched_tasks", "Tasks the scheduler holds, by state", ["state"],
                 part["counts"].items())
    by_reason = part["pending"]["by_reason"]
    yield _gauge("dsched_tasks_pending", "Tasks not started (waiting or queued), by the kind of "
                 "reason", ["reason"], ((r, by_reason.get(r, 0)) for r in PENDING_REASONS))
    counters = part["counters"]
    for key, (name, help) in COUNTERS.items():
        yield CounterMetricFamily(name, help, value=counters.get(key, 0))
    failed = CounterMetricFamily("dsched_task_failures_total", "Tasks that failed for good, by "
                                 "how (exception, killed_worker, dependency, ...)",
                                 labels=["error"])
    for error, n in part["failed"].items():
        failed.add_metric([error], n)
    yield failed
    yield _histogram("dsched_task_queue_wait_seconds", "Seconds a ready task waited in the "
                     "queue before it was placed (jobs' attempts apart)", part["queue_wait"])
    yield _histogram("dsched_task_run_seconds", "Seconds finished tasks ran, as their workers "
                     "measured", part["run_time"])


def job_metrics(part: dict[str, Any]) -> Iterator[Metric]:
    yield _gauge("dsched_jobs", "Shell-command jobs the scheduler holds, by state", ["state"],
                 part["counts"].items())
    yield _gauge("dsched_jobs_waiting", "Queued and held jobs, by the reason they wait",
                 ["reason"], part["waiting"].items())
    ended = CounterMetricFamily("dsched_jobs_ended", "Jobs that ended since the scheduler "
                                "started, by the state they ended in", labels=["state"])
    for state in ENDED_STATES:
        ended.add_metric([state], part["ended"].get(state, 0))
    yield ended
    yield GaugeMetricFamily("dsched_jobs_unreachable", "Jobs assigned or running on workers "
                            "that are away (lost once their lease and margin pass)",
                            value=part["unreachable"])
    yield GaugeMetricFamily("dsched_jobs_recovering", "1 while a restarted scheduler waits "
                            "for the workers that held jobs (no job is dispatched)",
                            value=1 if part["recovering"] else 0)
    yield _histogram("dsched_job_queue_wait_seconds", "Seconds an attempt of a job waited in "
                     "the queue before it was dispatched (holds and dependencies not counted)",
                     part["queue_wait"])
    yield _histogram("dsched_job_run_seconds", "Seconds attempts of jobs ran, from start to "
                     "end, as their workers measured", part["run_time"])
    yield _histogram("dsched_journal_commit_seconds", "Seconds each group commit of the job "
                     "journal took (every journaled change waits for its commit)",
                     part["commit_time"])
    yield CounterMetricFamily("dsched_journal_rows_written", "Job rows committed to the "
                              "journal", value=part["rows_written"])


class Collector:
    """The families of every section with metrics, from ``parts()`` (the current snapshot's
    parts) at each scrape, through ``metrics``: section name -> its families' maker."""

    def __init__(self, parts: Callable[[], dict[str, Any]],
                 metrics: dict[str, Callable[[Any], Iterable[Metric]]]):
        self.parts, self.metrics = parts, metrics

    def collect(self) -> Iterator[Metric]:
        parts = self.parts()
        for name, make in self.metrics.items():
            yield from make(parts[name])

    def describe(self) -> list:
        return []  # so that registering takes no snapshot


def registry(collector: Collector) -> CollectorRegistry:
    """A registry of its own (not the process-wide default) with the scheduler's families and
    the process's."""
    registry = CollectorRegistry()
    registry.register(collector)
    process_collector.ProcessCollector(registry=registry)
    platform_collector.PlatformCollector(registry=registry)
    gc_collector.GCCollector(registry=registry)
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The text Prometheus scrapes."""
    return generate_latest(registry)

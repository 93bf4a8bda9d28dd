"""Read-only views of a SchedulerState for the dashboard and its API and the client's
``scheduler_info``: plain dicts and lists that msgpack and JSON can carry. The jobs' views
(``sched status``'s among them) are ``jobviews.py``.

Each costs the number of workers, shape queues or tasks it walks, said in its docstring; the
dashboard calls them at most once a second, never per request or per task.

Pure: no I/O, no clock (ages are measured on the state's own clock); never changes the state.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from .task import PROCESSING, TaskState

if TYPE_CHECKING:
    from .state import SchedulerState


def _quantities(resources) -> dict[str, float]:
    return {name: resources.quantity(name) for name in sorted(resources)}


def worker_info(state: "SchedulerState") -> dict[str, dict[str, Any]]:
    """Each worker by address: name, threads, resources total, used and free, GPUs with their
    last heartbeat's use of them, load, the jobs it runs."""
    return {
        address: {
            "name": w.name,
            "nthreads": w.nthreads,
            "executing": w.assigned,
            "resources": _quantities(w.resources),
            "used": _quantities(w.used),
            "free": _quantities(w.resources - w.used),
            "gpus": _gpus(w.gpus, (w.metrics or {}).get("gpus") or (), _fenced(w)),
            "metrics": dict(w.metrics or {}),
            "draining": w.draining,
            "containment": w.containment,
            "jobs": sorted(t.job.id for t in w.processing.values() if t.job is not None),
        }
        for address, w in state.workers.items()
    }


def task_counts(state: "SchedulerState") -> dict[str, int]:
    """How many tasks are in each state (job attempts are jobs, counted as jobs)."""
    return dict(Counter(t.state.value for t in state.tasks.values() if t.job is None))


def tasks_by_state(state: "SchedulerState") -> dict[str, int]:
    """How many tasks are in each state, every state named (zero included), job attempts
    aside. Walks the tasks."""
    counts = Counter(t.state for t in state.tasks.values() if t.job is None)
    return {s.value: counts.get(s, 0) for s in TaskState}


def workers(state: "SchedulerState") -> list[dict[str, Any]]:
    """Each connected worker, by name: its state, threads (busy: running a task; the rest of
    its assigned tasks wait there for a thread), each resource used of total, each GPU with
    what its last heartbeat said, memory and the age of that heartbeat. Walks the workers."""
    now = state.now
    out = []
    for w in sorted(state.workers.values(), key=lambda w: w.name):
        metrics = w.metrics or {}
        used = w.used
        out.append({
            "name": w.name,
            "address": w.address,
            "state": "draining" if w.draining else "connected",
            "nthreads": w.nthreads,
            "threads_busy": w.assigned - w.prefetched,
            "tasks_waiting": w.prefetched,
            "resources": [{"name": name, "used": used.quantity(name),
                           "total": w.resources.quantity(name)} for name in sorted(w.resources)],
            "gpus": _gpus(w.gpus, metrics.get("gpus") or (), _fenced(w)),
            "cpu": metrics.get("cpu"),
            "memory": metrics.get("memory"),
            "memory_limit": metrics.get("memory_limit"),
            "heartbeat_age": max(0.0, now - w.last_seen),
        })
    return out


def _fenced(w: WorkerInfo) -> dict[int, str]:
    return w.room.devices.fenced if w.room.devices is not None else {}


def _gpus(devices, usage, fenced: dict[int, str]) -> list[dict[str, Any]]:
    """The devices a worker registered, joined by index with its last heartbeat's use of
    them (``utilization`` as a fraction of time busy; None until a heartbeat says), and why
    each is fenced ("" when it is not)."""
    by_index = {u.get("index"): u for u in usage}
    out = []
    for device in sorted(devices, key=lambda d: d.get("index", 0)):
        u = by_index.get(device.get("index"), {})
        utilization = u.get("utilization")
        out.append({
            "index": device.get("index"),
            "name": device.get("name") or "",
            "uuid": device.get("uuid") or "",
            "memory_total": u.get("memory_total") or device.get("memory_total") or 0,
            "memory_used": u.get("memory_used"),
            "utilization": None if utilization is None else utilization / 100,
            "fenced": fenced.get(device.get("index"), ""),
        })
    return out


def resource_totals(state: "SchedulerState") -> dict[str, dict[str, float]]:
    """Each resource name: its total over the connected workers and how much of it running
    tasks hold. Walks the workers."""
    totals: dict[str, dict[str, float]] = {}
    for w in state.workers.values():
        used = w.used
        for name in w.resources:
            entry = totals.setdefault(name, {"used": 0.0, "total": 0.0})
            entry["used"] += used.quantity(name)
            entry["total"] += w.resources.quantity(name)
    return dict(sorted(totals.items()))


#: What keeps a task that has no unrunnable reason from running, by kind (the unrunnable
#: reasons are ``reasons.REASON_KINDS``, with their own texts).
PENDING_TEXTS = {
    "capacity": "waiting for a worker with a free thread and the resources",
    "dependencies": "waiting for its inputs",
    "retry_backoff": "refused by a worker; trying again shortly",
}


def pending(state: "SchedulerState", counts: dict[str, int],
            limit: int = 1000) -> dict[str, Any]:
    """Work that has not started and why: ``by_reason`` counts the tasks of each kind of
    reason, ``groups`` (at most ``limit``, the unrunnable first, then the largest) the queued
    tasks of one demand and reason, and the tasks waiting for inputs or for a refusal's
    back-off. ``counts`` is ``tasks_by_state``. Walks the shape queues, not the tasks."""
    now = state.now
    by_reason: Counter = Counter()
    groups = []
    for q in state.queue.queues.values():
        tasks = q.live - q.jobs
        if not tasks:
            continue
        if q.reason is None:
            kind, text, since = "capacity", PENDING_TEXTS["capacity"], None
        else:
            kind, text, since = q.reason_kind, q.reason, max(0.0, now - q.unrunnable_since)
        by_reason[kind] += tasks
        groups.append({"reason": kind, "text": text, "tasks": tasks,
                       "resources": str(q.resources) if q.resources else "",
                       "workers": sorted(q.restrict) if q.restrict is not None else None,
                       "unrunnable_for": since})
    retrying = sum(t.job is None for t in state.graph.retrying)
    dependencies = counts.get(TaskState.waiting.value, 0) - retrying
    for kind, n in (("dependencies", dependencies), ("retry_backoff", retrying)):
        if n > 0:
            by_reason[kind] += n
            groups.append({"reason": kind, "text": PENDING_TEXTS[kind], "tasks": n,
                           "resources": "", "workers": None, "unrunnable_for": None})
    groups.sort(key=lambda g: (g["unrunnable_for"] is None, -g["tasks"], g["text"]))
    return {"by_reason": dict(sorted(by_reason.items())), "total": sum(by_reason.values()),
            "groups": groups[:limit], "groups_total": len(groups)}


def waiting(state: "SchedulerState", limit: int = 100) -> dict[str, int]:
    """Why queued tasks cannot run on any connected worker: each reason with its task count.

    The reasons are distinct: no workers yet; a resource no worker has; more than any single
    worker offers; restricted to workers that are not connected. Walks the shape queues, not
    the tasks, so it costs the number of distinct resource shapes.
    """
    reasons: dict[str, int] = {}
    for queue in state.queue.queues.values():
        tasks = queue.live - queue.jobs
        if queue.reason is not None and tasks:
            reasons[queue.reason] = reasons.get(queue.reason, 0) + tasks
            if len(reasons) >= limit:
                break
    return reasons


def processing_count(state: "SchedulerState") -> int:
    """Tasks running on workers; job attempts aside (jobs outlive a scheduler restart)."""
    return sum(1 for task in state.tasks.values()
               if task.state is PROCESSING and task.job is None)


def who_has(state: "SchedulerState", keys) -> dict[str, list[str]]:
    """The workers holding each of ``keys`` now (an empty list while it is recomputed)."""
    result = {}
    for key in keys:
        task = state.tasks.get(key)
        result[key] = list(task.who_has or ()) if task is not None else []
    return result

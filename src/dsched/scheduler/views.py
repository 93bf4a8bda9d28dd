"""Read-only views of a SchedulerState for the API, ``sched status`` and the client's
``scheduler_info``: plain dicts that msgpack and JSON can carry.

Pure: no I/O, no clock; never changes the state.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from .task import PROCESSING

if TYPE_CHECKING:
    from .state import SchedulerState


def _quantities(resources) -> dict[str, float]:
    return {name: resources.quantity(name) for name in sorted(resources)}


def worker_info(state: "SchedulerState") -> dict[str, dict[str, Any]]:
    """Each worker by address: name, threads, resources total, used and free, GPUs, load."""
    return {
        address: {
            "name": w.name,
            "nthreads": w.nthreads,
            "executing": w.assigned,
            "resources": _quantities(w.resources),
            "used": _quantities(w.used),
            "free": _quantities(w.free),
            "gpus": [dict(gpu) for gpu in w.gpus],
            "metrics": dict(w.metrics or {}),
            "draining": w.draining,
        }
        for address, w in state.workers.items()
    }


def task_counts(state: "SchedulerState") -> dict[str, int]:
    """How many tasks are in each state."""
    return dict(Counter(task.state.value for task in state.tasks.values()))


def waiting(state: "SchedulerState", limit: int = 100) -> dict[str, int]:
    """Why queued tasks cannot run on any connected worker: each reason with its task count.

    The reasons are distinct: no workers yet; a resource no worker has; more than any single
    worker offers; restricted to workers that are not connected. Walks the shape queues, not
    the tasks, so it costs the number of distinct resource shapes.
    """
    reasons: dict[str, int] = {}
    for queue in state.queue.queues.values():
        if queue.reason is not None and queue.live:
            reasons[queue.reason] = reasons.get(queue.reason, 0) + queue.live
            if len(reasons) >= limit:
                break
    return reasons


def processing_count(state: "SchedulerState") -> int:
    return sum(1 for task in state.tasks.values() if task.state is PROCESSING)


def who_has(state: "SchedulerState", keys) -> dict[str, list[str]]:
    """The workers holding each of ``keys`` now (an empty list while it is recomputed)."""
    result = {}
    for key in keys:
        task = state.tasks.get(key)
        result[key] = list(task.who_has or ()) if task is not None else []
    return result

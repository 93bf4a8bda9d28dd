"""Read-only views of a SchedulerState for the API, ``sched status`` and the client's
``scheduler_info``: plain dicts that msgpack and JSON can carry.

Pure: no I/O, no clock; never changes the state.
"""

from __future__ import annotations

from collections import Counter
from itertools import islice
from typing import TYPE_CHECKING, Any

from .task import PROCESSING, QUEUED

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
            "jobs": sorted(t.job.id for t in w.processing.values() if t.job is not None),
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


# -- jobs ---------------------------------------------------------------------------------------

#: The job reason for each kind of reason a queue has (``reasons.KINDS``).
_JOB_REASON = {"misspecified": "too_large", "no_workers": "no_workers",
               "restricted": "no_workers", "missing_resources": "missing_resources",
               "too_large": "too_large"}


def jobs_view(state: "SchedulerState", ids=(), states=(), offset: int = 0,
              limit: int = 1000) -> dict[str, Any]:
    """Jobs by id (``ids``; none: all) and state (``states``; none: any), newest first, from
    ``offset``, at most ``limit``: ``{"jobs": [...], "total": n, "counts": {state: n}}``."""
    book = state.jobs.jobs
    wanted = set(states)
    counts = Counter(j.state.value for j in book.values())
    if ids:
        chosen: Any = [book[i] for i in sorted(set(ids), reverse=True) if i in book]
        if wanted:
            chosen = [j for j in chosen if j.state.value in wanted]
        total = len(chosen)
    else:  # ids grow with submission, and the book keeps them in that order
        chosen = reversed(book.values())
        if wanted:
            chosen = (j for j in chosen if j.state.value in wanted)
        total = sum(counts.get(s, 0) for s in wanted) if wanted else len(book)
    page = islice(chosen, max(0, offset), max(0, offset) + max(0, limit))
    return {"jobs": [job_view(state, j) for j in page], "total": total,
            "counts": dict(counts), "recovering": state.jobs.recovering}


def job_view(state: "SchedulerState", job) -> dict[str, Any]:
    """One job as ``sched status --json`` shows it, with the reason a queued one waits."""
    view = job.view()
    t = job.task
    if t is not None and t.state is QUEUED:
        view["reason"], view["detail"] = queued_reason(state, t)
        if job.detail:  # what happened to its last attempt
            view["detail"] += f" ({job.detail})"
    return view


def queued_reason(state: "SchedulerState", t) -> tuple[str, str]:
    """Why the queued task ``t`` has not started: a job reason and its words."""
    q = t.queue
    if q.reason is not None:
        return _JOB_REASON[q.reason_kind], q.reason
    demand = t.resources
    fitting = [w for w in state.workers.values() if not w.draining and demand.fits(w.resources)
               and (not q.restrict or w.name in q.restrict or w.address in q.restrict)]
    reservation = state.placer.backfill.reservation
    holder = reservation.task if reservation is not None else None
    if any(demand.fits(w.free) and w.assigned < w.nthreads for w in fitting):
        if holder is not None and holder is not t:
            return "priority", (f"{_label(holder)}, ahead of it, has resources reserved on "
                                f"{reservation.worker.name}")
        return "priority", "others ahead of it are placed first"
    if holder is t:
        w = reservation.worker
    else:
        w = max(fitting, key=lambda w: (sum(min(w.free.get(n), demand[n]) for n in demand),
                                        -w.assigned, w.name))
    short = [n for n in sorted(demand) if w.free.get(n) < demand[n]]
    wanted = ", ".join(short) if short else "a free slot"
    users = [_label(x) for x in w.processing.values()
             if any(x.resources.get(n) for n in short)][:3]
    detail = f"waiting for {wanted} on {w.name}"
    if users:
        detail += f" (in use by {', '.join(users)})"
    if holder is not None and holder is not t and reservation.worker is w:
        detail += f", reserved for {_label(holder)}"
    return "resources", detail


def _label(t) -> str:
    return f"job {t.job.id}" if t.job is not None else f"task {t.key}"

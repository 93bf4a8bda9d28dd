"""Read-only views of a SchedulerState for the dashboard and its API, ``sched status`` and the
client's ``scheduler_info``: plain dicts and lists that msgpack and JSON can carry.

Each costs the number of workers, shape queues or tasks it walks, said in its docstring; the
dashboard calls them at most once a second, never per request or per task.

Pure: no I/O, no clock (ages are measured on the state's own clock); never changes the state.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain, islice
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from ..jobs import ENDED, JobState, Reason
from .task import PROCESSING, QUEUED, TaskState

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
            "free": _quantities(w.free),
            "gpus": _gpus(w.gpus, (w.metrics or {}).get("gpus") or ()),
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
            "gpus": _gpus(w.gpus, metrics.get("gpus") or ()),
            "cpu": metrics.get("cpu"),
            "memory": metrics.get("memory"),
            "memory_limit": metrics.get("memory_limit"),
            "heartbeat_age": max(0.0, now - w.last_seen),
        })
    return out


def _gpus(devices, usage) -> list[dict[str, Any]]:
    """The devices a worker registered, joined by index with its last heartbeat's use of
    them (``utilization`` as a fraction of time busy; None until a heartbeat says)."""
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


# -- jobs ---------------------------------------------------------------------------------------

#: The job reason for each kind of reason a queue has (``reasons.REASON_KINDS``).
_JOB_REASON = {"invalid_request": "too_large", "no_workers": "no_workers",
               "all_draining": "no_workers", "restricted": "no_workers",
               "missing_resource": "missing_resources", "too_large": "too_large",
               "no_single_worker": "too_large"}


def jobs_view(state: "SchedulerState", ids=(), states=(), offset: int = 0,
              limit: int = 1000) -> dict[str, Any]:
    """Jobs by id (``ids``; none: all) and state (``states``; none: any), from ``offset``, at
    most ``limit``: ``{"jobs": [...], "total": n, "counts": {state: n}}``. Those on workers come
    first, then those waiting, then those ended, each newest first: a page of a long queue
    still shows every running job."""
    book = state.jobs.jobs
    wanted = set(states)
    counts = Counter(j.state.value for j in book.values())
    if ids:
        chosen: Any = [book[i] for i in sorted(set(ids), reverse=True) if i in book]
        if wanted:
            chosen = [j for j in chosen if j.state.value in wanted]
        total = len(chosen)
    else:  # ids grow with submission, and the book keeps them in that order
        on_workers = sorted((i for jobs in state.jobs.on_worker.values() for i in jobs),
                            reverse=True)
        shown = set(on_workers)
        chosen = chain((book[i] for i in on_workers),
                       (j for j in reversed(book.values()) if not j.ended and j.id not in shown),
                       (j for j in reversed(book.values()) if j.ended))
        if wanted:
            chosen = (j for j in chosen if j.state.value in wanted)
        total = sum(counts.get(s, 0) for s in wanted) if wanted else len(book)
    # Any integer may come over the wire; islice takes those below sys.maxsize only.
    start = min(max(0, offset), total)
    page = islice(chosen, start, start + min(max(0, limit), total))
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
    elif t is not None and t.retry_at is not None:  # refused: waits out a back-off
        view["reason"] = Reason.refused.value
        view["detail"] = f"{job.detail}; trying again shortly"
    elif job.cancelling and job.state in (JobState.assigned, JobState.running):
        view["detail"] = f"{job.detail}; stopping on {job.worker}"
    elif job.state is JobState.assigned and view["reason"] is None:
        # Jobs are never sent ahead: an assigned one starts as soon as its worker hears of it.
        view["reason"] = Reason.starting.value
        view["detail"] = f"starting on {job.worker}" + (f" ({job.detail})" if job.detail else "")
    elif job.wait is Reason.recovering:
        view["detail"] = ("the scheduler restarted and waits for the workers that ran jobs"
                          + (f" ({job.detail})" if job.detail else ""))
    return view


def queued_reason(state: "SchedulerState", t) -> tuple[str, str]:
    """Why the queued task ``t`` has not started: a job reason and its words."""
    q = t.queue
    if q.reason_kind == "missing_resource":
        # The names are what a reader of `sched status` acts on: they end the sentence.
        missing = t.resources.missing_names(state.placer.index.offered)
        s = "s" if len(missing) > 1 else ""
        return "missing_resources", f"requires resource{s} no worker has: {', '.join(missing)}"
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


#: The fields of each row of ``job_table``, in order.
JOB_ROW = ("id", "name", "state", "reason", "detail", "resources", "priority", "worker",
           "attempt", "submitted", "started", "ended", "exit_code")
#: The reasons a queued or held job may wait for (a lost job carries ``worker_lost``).
WAITING_REASONS = tuple(r.value for r in Reason if r is not Reason.worker_lost)
_WAITING = frozenset((JobState.queued, JobState.held))
_NAMES = {member: member.value for member in (*JobState, *Reason)}
_STATE_OF = attrgetter("state")


def job_table(state: "SchedulerState", ended_rows: dict | None = None) -> dict[str, Any]:
    """Every job in a few words, newest first: ``rows`` (tuples of the ``JOB_ROW`` fields; a
    queued job with the placer's reason and words, as ``job_view`` gives them, less the note on
    its last attempt that ``job_view`` adds), ``counts`` by state and ``waiting`` (queued and
    held jobs) by reason, every state and reason named; ``unreachable``: jobs on workers that
    are away; ``recovering``: no job is dispatched until workers return.

    Walks the jobs once; the placer's reason is worked out once per shape queue (it is the same
    for every job there but the one holding the reservation), not per job. ``ended_rows``, when
    given, keeps the rows of ended jobs by id from one call to the next: an ended job does not
    change, so its row is made once."""
    book = state.jobs
    reservation = state.placer.backfill.reservation
    holder = reservation.task if reservation is not None else None
    known = ended_rows if ended_rows is not None else {}
    names = _NAMES
    by_queue: dict[int, tuple[str, str]] = {}
    needs: dict = {}
    waiting: Counter = Counter()

    def row_of(job) -> tuple:
        spec, job_state = job.spec, job.state
        reason, detail = names.get(job.wait), job.detail
        t = job.task
        if t is not None and t.state is QUEUED:
            if t is holder:
                reason, detail = queued_reason(state, t)
            else:
                found = by_queue.get(t.queue.qid)
                if found is None:
                    found = by_queue[t.queue.qid] = queued_reason(state, t)
                reason, detail = found
        elif t is not None and t.retry_at is not None:
            reason, detail = names[Reason.refused], f"{detail}; trying again shortly"
        if job_state in _WAITING and reason is not None:
            waiting[reason] += 1
        resources = needs.get(spec.resources)
        if resources is None:
            resources = needs[spec.resources] = str(spec.resources) if spec.resources else ""
        row = (job.id, spec.name, names[job_state], reason, detail, resources, spec.priority,
               job.worker, job.attempt, job.submitted, job.start_time, job.end_time,
               job.exit_code)
        if job_state in ENDED:
            known[job.id] = row
        return row

    jobs = book.jobs
    counts = Counter(map(_STATE_OF, jobs.values()))
    get = known.get
    rows = [get(job_id) or row_of(job) for job_id, job in reversed(jobs.items())]
    return {"rows": rows, "counts": {s.value: counts.get(s, 0) for s in JobState},
            "waiting": {r: waiting.get(r, 0) for r in WAITING_REASONS},
            "unreachable": len(book.limbo), "recovering": book.recovering}

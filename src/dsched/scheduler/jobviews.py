"""Read-only views of the jobs of a SchedulerState: ``sched status`` (``jobs_view``, ``job_view``,
with the reason each queued job waits) and the dashboard's jobs table (``job_table``).

Each costs the jobs it walks, said in its docstring; the dashboard calls them at most once a
second, never per request or per job.

Pure: no I/O, no clock; never changes the state.
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from itertools import chain, islice
from typing import TYPE_CHECKING, Any, Iterator

from ..devices import GPU_MEMORY, shortfall
from ..jobstates import ENDED, JobState, Reason
from ..resources import GPU
from .fit import could_host, devices_for
from .jobarray import array_view, shown_state
from .task import QUEUED

if TYPE_CHECKING:
    from .state import SchedulerState


# -- jobs ---------------------------------------------------------------------------------------

#: The job reason for each kind of reason a queue has (``reasons.REASON_KINDS``).
_JOB_REASON = {"invalid_request": "too_large", "no_workers": "no_workers",
               "all_draining": "no_workers", "restricted": "no_workers",
               "missing_resource": "missing_resources", "too_large": "too_large",
               "no_single_worker": "too_large"}


def jobs_view(state: "SchedulerState", ids=(), states=(), offset: int = 0,
              limit: int = 1000, expand: bool = False) -> dict[str, Any]:
    """Jobs by id (``ids``; none: all) and state (``states``; none: any), from ``offset``, at
    most ``limit``: ``{"jobs": [...], "total": n, "counts": {state: n}}``. Those on workers come
    first, then those waiting, then those ended, each newest first: a page of a long queue
    still shows every running job. An array is one job, its elements counted in ``counts``
    and shown by id, or after it when ``expand``; ``counts`` counts elements, not arrays.
    Costs the jobs kept (elements made included), not the elements still waiting."""
    book = state.jobs
    jobs = book.jobs
    wanted = set(states)
    counts = Counter(j.state.value for j in jobs.values() if j.array is None)
    for array in book.arrays.by_id.values():
        for name, n in array.unmade_counts().items():
            counts[name] += n
    if ids:
        chosen: Any = [j for j in map(partial(_named, state), sorted(set(ids), reverse=True))
                       if j is not None]
    else:  # ids grow with submission, and the book keeps them in that order
        on_workers = sorted((i for jobs_there in book.on_worker.values() for i in jobs_there
                             if jobs[i].parent is None), reverse=True)
        shown = set(on_workers)
        arrays = [j for j in reversed(jobs.values()) if j.array is not None and not j.ended
                  and shown_state(j) is JobState.running]
        shown.update(j.id for j in arrays)
        chosen = chain((jobs[i] for i in on_workers), arrays,
                       (j for j in reversed(jobs.values())
                        if not j.ended and j.parent is None and j.id not in shown),
                       (j for j in reversed(jobs.values()) if j.ended and j.parent is None))
    if expand:  # each array followed by its elements, counted and walked without making them
        top = list(chosen)
        expanded = {j.id for j in top if j.array is not None}
        top = [j for j in top if j.parent is None or j.parent.id not in expanded]
        total = sum(_expanded_count(j, wanted) for j in top)
        chosen = chain.from_iterable(_expanded(j, wanted) for j in top)
    else:
        if wanted:
            chosen = [j for j in chosen if shown_state(j).value in wanted]
        total = len(chosen) if isinstance(chosen, list) else len(jobs) - book.arrays.made
    # Any integer may come over the wire; islice takes those below sys.maxsize only.
    start = min(max(0, offset), total)
    page = islice(chosen, start, start + min(max(0, limit), total))
    return {"jobs": [job_view(state, _shown(state, item)) for item in page], "total": total,
            "counts": dict(counts), "recovering": book.recovering}


def _named(state: "SchedulerState", job_id: int):
    """The job ``job_id``: one kept, or an array's element not yet made (shown, not kept)."""
    job = state.jobs.jobs.get(job_id)
    if job is not None:
        return job
    found = state.jobs.arrays.containing(job_id)
    return state.jobs.arrays.view_of_unmade(*found) if found is not None else None


def _expanded(job, wanted: set) -> Iterator:
    """``job`` if it is in a ``wanted`` state (none: any), then, for an array, its elements in
    order that are: a made one as itself, one not made as (array, position)."""
    if not wanted or shown_state(job).value in wanted:
        yield job
    array = job.array
    if array is None:
        return
    elements = array.elements
    unmade = next(iter(array.unmade_counts()), None)  # the state they all show
    if unmade is not None and (not wanted or unmade in wanted):
        for position in range(array.size):
            element = elements.get(position)
            if element is None:
                yield array, position
            elif not wanted or element.state.value in wanted:
                yield element
    else:
        for position in sorted(elements):
            if not wanted or elements[position].state.value in wanted:
                yield elements[position]


def _expanded_count(job, wanted: set) -> int:
    """How many items ``_expanded`` gives, without walking the elements not made."""
    n = int(not wanted or shown_state(job).value in wanted)
    array = job.array
    if array is not None:
        n += sum(1 for e in array.elements.values() if not wanted or e.state.value in wanted)
        n += sum(count for name, count in array.unmade_counts().items()
                 if not wanted or name in wanted)
    return n


def _shown(state: "SchedulerState", item):
    """The Job to show for an item of ``_expanded``."""
    return state.jobs.arrays.view_of_unmade(*item) if isinstance(item, tuple) else item


def job_view(state: "SchedulerState", job) -> dict[str, Any]:
    """One job as ``sched status --json`` shows it, with the reason a queued one waits."""
    view = job.view()
    t = job.task
    if job.array is not None:
        view["state"] = shown_state(job).value
        view["array"] = array_view(job)
        if not job.ended and view["reason"] is None:
            view["detail"] = job.array.summary() + (
                f" ({job.detail})" if job.detail else "")
    elif job.parent is not None and job.attempt == 0 and job.state is JobState.queued and (
            job.wait is not Reason.recovering):
        parent = job.parent  # not fed yet: it waits as its array does, or for its turn
        if parent.state is JobState.held:
            view["state"] = JobState.held.value
        if parent.wait is not None or parent.state is not JobState.queued:
            view["reason"] = (parent.wait or Reason.held).value
            view["detail"] = f"array {parent.id}: {job_view(state, parent)['detail']}"
        else:
            view["reason"] = Reason.priority.value
            view["detail"] = f"waiting for earlier elements of array {parent.id}"
    elif t is not None and t.state is QUEUED:
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
    fitting = [w for w in state.workers.values() if not w.draining and could_host(q, w)]
    reservation = state.placer.backfill.reservation
    holder = reservation.task if reservation is not None else None
    devices_free = [w for w in fitting if not q.devices or w.room.devices is None
                    or devices_for(demand, w.room.devices) is not None]
    if any(demand.fits(w.free) and w.assigned < w.nthreads for w in devices_free):
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
    if w not in devices_free and (not short or demand.get(GPU_MEMORY)):
        # what is short on its devices, where the totals do not say it (or memory is asked)
        short = [n for n in (GPU, GPU_MEMORY) if demand.get(n)]
        wanted = shortfall(demand, [w.room.devices], free=True)
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
        if job.array is not None and job_state not in ENDED:  # its elements, counted
            job_state = shown_state(job)
            detail = job.array.summary() + (f" ({detail})" if detail else "")
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
    counts = Counter(j.state for j in jobs.values() if j.array is None)  # elements, not arrays
    for array in book.arrays.by_id.values():
        for name, n in array.unmade_counts().items():
            counts[JobState(name)] += n
    get = known.get
    rows = [get(job_id) or row_of(job) for job_id, job in reversed(jobs.items())]
    return {"rows": rows, "counts": {s.value: counts.get(s, 0) for s in JobState},
            "waiting": {r: waiting.get(r, 0) for r in WAITING_REASONS},
            "unreachable": len(book.limbo), "recovering": book.recovering}

"""Every invariant of SchedulerState, checked by ``SchedulerState.validate()``.

Slow (it rebuilds the indexes from scratch and asks the policy about every queue head), so
it is for tests and the simulator, never for the daemon's hot path.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from ..resources import EMPTY
from ..jobstates import JobState
from .job import ON_WORKER
from .task import ACTIVE, ERRED, MEMORY, PROCESSING, QUEUED, RELEASED, WAITING, TaskState

if TYPE_CHECKING:
    from .state import SchedulerState


def check(s: SchedulerState) -> None:
    _check_workers(s)
    _check_tasks(s)
    _check_queue(s)
    _check_index(s)
    _check_quiescent(s)
    _check_jobs(s)


def _check_workers(s: SchedulerState) -> None:
    ahead: dict[int, int] = {}
    for w in s.workers.values():
        assert w.stopped_ahead <= w.stopping.keys(), w
        for t in w.sent_ahead():
            ahead[t.priority] = ahead.get(t.priority, 0) + 1
    assert s.placer.ahead == ahead, (s.placer.ahead, ahead)
    for address, w in s.workers.items():
        assert w.address == address, (address, w)
        held = (*w.processing.values(), *w.stopping.values())
        assigned = len(held)
        assert assigned <= w.nthreads + s.policy.prefetch, f"{w} holds {assigned} tasks"
        assert not any(t.prefetched for t in w.stopping.values()), w
        waiting = w.sent_ahead()
        assert len(waiting) == w.prefetched, w
        assert assigned - w.prefetched <= w.nthreads, f"{w} runs more than its threads"
        assert (address in s.placer.prefetching) == bool(w.prefetched), w
        for t in waiting:  # a task with resources waits there only behind one of lower priority
            assert not t.resources or any(h.priority < t.priority for h in waiting), (w, t)
        used = EMPTY
        for t in held:
            used = used + t.resources
        assert used.fits(w.resources), f"{w} over capacity: {used} of {w.resources}"
        assert used + w.free == w.resources, f"{w} accounting: {used} + {w.free}"
        devices = w.room.devices
        if devices is not None:  # no device over-committed, and only held tasks hold one
            devices.check()
            assert set(devices.held) <= {t.key for t in held}, (w, devices.held)
        for key, t in w.processing.items():
            assert t.key == key and s.tasks.get(key) is t, (w, key)
            assert t.state is PROCESSING and t.processing_on == address, (w, t)
        for key, t in w.stopping.items():
            assert t.key == key and t.processing_on != address and key not in w.processing, (
                w, t)
        for key in w.has_what:
            t = s.tasks[key]
            assert t.state is MEMORY and address in (t.who_has or ()), (w, t)
        assert (address in s.membership.draining) == w.draining, w
        assert not w.evacuating or w.draining, w
        for key, target in w.evacuating.items():
            assert target in s.workers and not s.workers[target].draining, (w, key, target)


def _check_tasks(s: SchedulerState) -> None:
    tasks = s.tasks
    for key, t in tasks.items():
        assert t.key == key and isinstance(t.state, TaskState), t
        state = t.state
        if state is not ERRED:
            for d in t.deps:
                assert tasks.get(d.key) is d, f"{t} needs forgotten {d}"
                assert t in d.dependents, (t, d)
        for dd in t.dependents:
            assert t in dd.deps and tasks.get(dd.key) is dd, (t, dd)
        waiters = {dd for dd in t.dependents if dd.state in ACTIVE}
        assert set(t.waiters) == waiters, f"{t} waiters {list(t.waiters)} != {waiters}"
        assert (state is QUEUED) == (t.queue is not None), t
        assert (state is PROCESSING) == (t.processing_on is not None), t
        assert (state is MEMORY) == bool(t.who_has), t
        assert (t.retry_at is not None) == (t in s.graph.retrying), t
        assert t.retry_at is None or (state is WAITING and not t.waiting_on), t
        assert (state is WAITING) == bool(t.waiting_on or t.retry_at is not None), t
        if t.retry_at is not None:
            assert all(d.state is MEMORY for d in t.deps), t
        elif state is WAITING:
            for d in t.deps:
                if d in t.waiting_on:
                    assert d.state in ACTIVE, (t, d)
                else:
                    assert d.state is MEMORY, (t, d)
        elif state is QUEUED:
            assert all(d.state is MEMORY for d in t.deps), t
        elif state is PROCESSING:
            assert s.workers[t.processing_on].processing.get(key) is t, t
        elif state is MEMORY:
            for address in t.who_has:
                assert key in s.workers[address].has_what, (t, address)
        if state in (MEMORY, ERRED):
            assert t.reported, f"{t} ended unreported"
        for client in t.wanted_by:
            assert key in s.clients.get(client, ()), (t, client)
        if not t.wanted_by:
            assert not (state in ACTIVE and not t.waiters), f"{t} runs for nobody"
            assert not (state is MEMORY and not t.waiters), f"{t} result leaked"
            assert not (state in (RELEASED, ERRED) and not t.dependents), f"{t} not forgotten"
    for client, keys in s.clients.items():
        assert keys, client
        for key in keys:
            assert client in tasks[key].wanted_by, (client, key)


def _check_queue(s: SchedulerState) -> None:
    rq = s.queue
    queued = [t for t in s.tasks.values() if t.state is QUEUED]
    assert rq.size == len(queued) == sum(q.live for q in rq.queues.values()), "queue size"
    assert rq.resource_free == {q.qid for q in rq.queues.values() if q.empty}, "resource-free"
    heads = []
    for key, q in rq.queues.items():
        assert rq.by_id[q.qid] is q and q.key == key, q
        live = q.tasks()
        assert len(live) == q.live > 0, q
        assert sum(t.job is not None for t in live) == q.jobs, q
        for t in live:
            assert t.state is QUEUED and (t.resources, t.restrict) == key, (q, t)
        assert q.heap[0][1] is live[0] and q.head_order == live[0].order, q
        heads.append((q.head_order, q.qid, q))
        judged = s.placer.reasons.of(q)
        assert (q.reason_kind, q.reason) == (judged or (None, None)), (q, q.reason)
        assert (q.reason is not None) == (q.fifo is not None), q
    assert sorted(heads) == rq.heads, "heads"
    assert len(rq.by_id) == len(rq.queues)


def _check_index(s: SchedulerState) -> None:
    index = s.placer.index
    slots: dict[int, set[str]] = {}
    free: dict[str, dict[int, set[str]]] = {}
    totals: dict = {}
    offered: dict[str, int] = {}
    open_slots = 0
    for address, w in s.workers.items():
        assert index.by_name[w.name] == address, w
        if w.draining:  # out of every index but by_name
            assert w.slot_key == 0 and not any(w.free_keys.values()), w
            continue
        assigned = len(w.processing) + len(w.stopping)
        room = max(0, w.nthreads + s.policy.prefetch - assigned)
        open_slots += room
        assert w.slot_key == room, w
        if room:
            slots.setdefault(room, set()).add(address)
        totals.setdefault(w.resources, set()).add(address)
        for name in w.resources.names():
            offered[name] = offered.get(name, 0) + 1
            units = w.free.get(name, 0) if assigned < w.nthreads else 0
            assert w.free_keys[name] == units, (w, name)
            if units:
                free.setdefault(name, {}).setdefault(units, set()).add(address)
    assert index.open_slots == open_slots, "open slots"
    assert {k: set(g) for k, g in index.slots.groups.items()} == slots, "slot index"
    assert index.slots.keys == sorted(slots), "slot keys"
    assert set(index.free) == set(offered), "free index names"
    for name, buckets in index.free.items():
        assert {k: set(g) for k, g in buckets.groups.items()} == free.get(name, {}), name
        assert buckets.keys == sorted(free.get(name, {})), name
    assert {k: set(g) for k, g in index.totals.items()} == totals, "totals"
    assert index.offered == offered, "offered"
    assert len(index.by_name) == len(s.workers), "names"


def _check_quiescent(s: SchedulerState) -> None:
    """No head-of-line blocking: no queue head could start on any worker now."""
    placer = s.placer
    backfill = placer.backfill
    saved = backfill.reservation
    workers = list(s.workers.values())
    x = xq = None
    try:
        for _, qid, q in s.queue.heads:
            assert s.queue.by_id[qid] is q
            if q.reason is not None:
                continue
            t = q.heap[0][1]
            w = placer.choice.best_of(t, q, workers, x, xq)
            assert w is None, f"{t} could start on {w} now (reserved: {backfill.reservation})"
            if x is None and not q.empty:
                x, xq = t, q
    finally:
        backfill.reservation = saved
    r = backfill.reservation
    if r is not None:
        assert r.task.state is QUEUED and s.workers.get(r.worker.address) is r.worker, r


def _check_jobs(s: SchedulerState) -> None:
    book = s.jobs
    connected = {w.name: w for w in s.workers.values()}
    on_worker = {}
    for job_id, job in book.jobs.items():
        assert job.id == job_id and book.by_submission[job.spec.submission] == job_id, job
        t = job.task
        if t is not None:
            assert t.job is job and t.key == job.key and s.tasks.get(t.key) is t, job
            assert job.state in (JobState.queued, JobState.assigned, JobState.running), job
            # A queued job's attempt is in the queue, or waits out a refusal's back-off.
            assert job.state is not JobState.queued or t.state is QUEUED or (
                t.retry_at is not None), (job, t)
            assert not job.cancelling, job
        if job.state in ON_WORKER:
            on_worker.setdefault(job.worker, set()).add(job_id)
            w = connected.get(job.worker)
            if job_id in book.limbo:
                assert job.deadline is not None and t is None, job
                assert w is None, f"{job} in limbo while its worker is connected"
            else:
                assert w is not None, f"{job} on {job.worker}, which is not connected"
                assert t is not None and w.processing.get(t.key) is t or (
                    job.cancelling and job.key in w.stopping), job
        else:
            assert job_id not in book.limbo and job.deadline is None, job
            # An array being cancelled waits for its elements on workers.
            assert not job.cancelling or job.array is not None, job
        if job.state is JobState.queued and t is None:
            # An array that is not waiting feeds its elements to the queue instead.
            assert job.wait is not None or job.array is not None, (
                f"{job} is queued, in no queue, with no reason")
        if job.ended or job.state is JobState.held:
            assert t is None, job
        if job.array is not None:
            _check_array(book, job)
        if job.parent is not None:
            array = job.parent.array
            assert array.elements.get(job.position) is job, job
            assert job.id == job.parent.id + 1 + job.position, job
            assert (job.position in array.live) == (not job.ended and job.position < array.cursor
                                                    and job.position not in array.waiting), job
    assert on_worker == {name: set(ids) for name, ids in book.on_worker.items()}, (
        on_worker, book.on_worker)
    assert not book.recovering or s.recovery.awaited, "recovering with nobody awaited"
    for key, t in s.tasks.items():
        if t.job is not None:
            assert t.job.task is t, t


def _check_array(book, job) -> None:
    """An array's counts agree with its elements, it runs no more than its limit, and the
    elements it made wait in the queue, run, or have ended (``jobarray.py``)."""
    array = job.array
    assert job.task is None, job
    ended = Counter(e.state for e in array.elements.values() if e.ended)
    assert ended == +array.ended, (job, ended, array.ended)
    assert len(array.live) <= array.limit, job
    assert all(array.elements[p].state is JobState.queued and array.elements[p].task is None
               for p in array.waiting), job
    assert array.head is None or array.head.position in array.live, job
    if job.ended:
        assert not array.live and not array.waiting, job

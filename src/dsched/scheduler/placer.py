"""The placer: which queued task starts on which worker, now.

A task goes to a worker only when that worker can start it now (``startable``, the one rule:
a free thread, or for a resource-free task one of ``prefetch`` extra slots; its resources
free; its worker restriction; not draining; not still stopping an earlier run of the same
key). Among the workers that can, the one holding most of its input bytes wins (without
inputs, where its dependent's other inputs are: ``groups.py``, which may also give a worker a
task just behind the head), then the best fit for GPU demands (least free GPU that still fits,
so whole multi-GPU workers stay free), else the least loaded. A pass looks only at queue
heads whose queue changed and at workers whose load dropped, so a decision costs the same at
10 or 10,000 workers; EASY backfill (``backfill.py``) keeps the first waiting large task from
being starved, and ``reasons.py`` says why a queue cannot run anywhere. The placer owns the
ready queue, the worker index and the learned durations, and books each placement on them.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Iterable

from .actions import DEBUG, NO_INPUTS, StopTask, Execute, Log
from .backfill import Backfill
from .groups import Groups
from .outbox import Outbox
from .queue import ReadyQueue, ShapeQueue
from .reasons import Reasons
from .task import PROCESSING, QUEUED, Task
from .worker import FreeArithmetic, WorkerIndex, WorkerInfo


class Placer:
    """``workers`` is the membership's dict of connected workers (read here, never changed);
    ``duration_weight``: the weight of the newest duration in each per-prefix average."""

    def __init__(self, workers: dict[str, WorkerInfo], out: Outbox, *, prefetch: int,
                 duration_weight: float):
        self.workers = workers
        self.out = out
        self.prefetch = prefetch
        self.duration_weight = duration_weight
        self.queue = ReadyQueue()
        self.index = WorkerIndex(prefetch)
        self.durations: dict[str, float] = {}
        self.backfill = Backfill(self)
        self.reasons = Reasons(self)
        self.groups = Groups(self)
        self._arithmetic = FreeArithmetic()
        #: Workers whose load dropped since the last pass: room for queues not dirty.
        self._dirty: dict[str, WorkerInfo] = {}
        #: Called with each job attempt placed, before its Execute; returns what to run (the
        #: job book sets it).
        self.on_job_placed = None

    # -- workers coming and going -----------------------------------------------------------

    def add_worker(self, w: WorkerInfo) -> None:
        self.index.add(w)
        self._dirty[w.address] = w

    def withdraw_worker(self, w: WorkerInfo) -> None:
        """``w`` is draining: nothing may start there any more."""
        self.index.withdraw(w)
        self._dirty.pop(w.address, None)
        self.backfill.forget_worker(w)

    def remove_worker(self, w: WorkerInfo) -> None:
        self.index.remove(w)
        self._dirty.pop(w.address, None)
        self.backfill.forget_worker(w)

    # -- the queue ---------------------------------------------------------------------------

    def enqueue(self, t: Task) -> None:
        """Queue ``t``; its clients hear at once when its shape cannot run anywhere."""
        t.state = QUEUED
        t.queued_at = self.out.now
        q, created = self.queue.push(t, self.index.offered)
        if created:
            judged = self.reasons.of(q)
            if judged is not None:
                self.reasons.set(q, judged)
                return
        reason = q.reason
        if reason is not None:
            for client in t.wanted_by:
                self.out.tell_waiting(client, reason, t.key)

    def dequeue(self, t: Task) -> None:
        self.queue.remove(t)

    def learn(self, prefix: str, duration: float) -> None:
        """A task of ``prefix`` ran for ``duration`` seconds (backfill estimates use it)."""
        if duration >= 0:
            old = self.durations.get(prefix)
            self.durations[prefix] = (
                duration if old is None else old + self.duration_weight * (duration - old))

    # -- the one rule ------------------------------------------------------------------------

    def startable(self, t: Task, q: ShapeQueue, w: WorkerInfo) -> bool:
        """Whether ``w`` can start ``t`` (of queue ``q``) now."""
        if w.draining:
            return False
        restrict = q.restrict
        if restrict is not None and w.name not in restrict and w.address not in restrict:
            return False
        assigned = len(w.processing) + len(w.stopping)
        if q.empty:
            if assigned >= w.nthreads + self.prefetch:
                return False
        elif assigned >= w.nthreads or not (
                q.resources.fits(w.free_units) if q.multi  # one name: a lookup does
                else w.free_units.get(q.primary, 0) >= q.primary_units):
            return False
        return not (w.stopping and t.key in w.stopping)

    # -- the placement pass ------------------------------------------------------------------

    def schedule(self) -> None:
        """Start what can start now. Invariant after each pass: the head of every queue can
        start on no worker, so only queues whose head changed need a search of all workers,
        and the others only a look at the workers whose load dropped."""
        backfill = self.backfill
        if backfill.reservation is not None and backfill.stale():
            freed = backfill.drop()
            if freed is not None:
                self._dirty[freed.address] = freed
        rq = self.queue
        dirty_queues = rq.dirty
        dirty_workers = self._dirty
        if not dirty_queues and not dirty_workers:
            return
        index = self.index
        heads = rq.heads
        if not heads or not index.open_slots:
            dirty_queues.clear()
            dirty_workers.clear()
            return
        roomy = [w for w in dirty_workers.values() if w.slot_key]
        x = xq = None
        i = 0
        # heads is sorted; a placement replaces heads[i] by a later entry, so stay at i
        while i < len(heads) and (dirty_queues or roomy) and index.open_slots:
            _, qid, q = heads[i]
            if q.reason is not None:
                dirty_queues.discard(qid)
                i += 1
                continue
            t = q.heap[0][1]
            if qid in dirty_queues:
                w = self.find(t, q, x, xq)
            elif len(roomy) == 1:  # the usual case: a look at the index entry first
                w = roomy[0]
                room = (w.slot_key if q.empty
                        else w.free_keys.get(q.primary, 0) >= q.primary_units)
                if not (room and self.startable(t, q, w)) or (
                        x is not None and backfill.blocks(t, q, w, x, xq)):
                    w = None
            elif roomy:
                w = self.find_among(t, q, roomy, x, xq)
            else:
                w = None
            if w is None:
                dirty_queues.discard(qid)
                if x is None and not q.empty:  # the first that must wait reserves
                    x, xq = t, q
                    r = backfill.reservation
                    if r is not None and r.task is not t:
                        freed = backfill.drop()
                        if freed is not None and freed.slot_key and freed not in roomy:
                            roomy.append(freed)
                i += 1
                continue
            if t.dependents and not t.deps:
                t = self.groups.instead(t, q, w, x, xq)
            rq.take(t, q)
            self.place(t, w, q)
            freed = backfill.forget_task(t)
            if freed is not None and freed.slot_key and freed not in roomy:
                roomy.append(freed)
            if not w.slot_key and w in roomy:
                roomy.remove(w)
        dirty_queues.clear()
        dirty_workers.clear()

    # -- choosing a worker -------------------------------------------------------------------

    def find(self, t: Task, q: ShapeQueue, x: Task | None = None,
             xq: ShapeQueue | None = None) -> WorkerInfo | None:
        """The worker to start ``t`` on now, or None. ``x`` (of ``xq``) is the task holding
        the reservation this pass, which a placement must not delay."""
        if t.deps or t.dependents:  # near its inputs, or its group's
            w = (self._by_locality if t.deps else self.groups.find)(t, q, x, xq)
            if w is not None:
                return w
        if q.restrict is not None:
            return self.best_of(t, q, self.restricted(q.restrict), x, xq)
        workers = self.workers
        startable = self.startable
        blocks = self.backfill.blocks
        if q.empty:  # the index files workers by free slots: look at the roomiest first
            buckets = self.index.slots
            groups = buckets.groups
            for slots in reversed(buckets.keys):
                for address in groups[slots]:
                    w = workers[address]
                    if startable(t, q, w) and not (x is not None and blocks(t, q, w, x, xq)):
                        return w
            return None
        # The index files workers that have a free thread by the free units of each name:
        # search the primary name's buckets, smallest fit first for GPUs, else largest first.
        buckets = self.index.free.get(q.primary)
        if buckets is None:
            return None
        keys = buckets.keys
        groups = buckets.groups
        first = bisect_left(keys, q.primary_units)
        span = range(first, len(keys)) if q.best_fit else range(len(keys) - 1, first - 1, -1)
        for i in span:
            for address in groups[keys[i]]:
                w = workers[address]
                if startable(t, q, w) and not (x is not None and blocks(t, q, w, x, xq)):
                    return w
        return None

    def find_among(self, t: Task, q: ShapeQueue, candidates: list[WorkerInfo],
                   x: Task | None, xq: ShapeQueue | None) -> WorkerInfo | None:
        """``find`` among a few ``candidates`` (the workers whose load just dropped), their
        index entries first because that test usually fails."""
        if q.empty:
            fitting = [w for w in candidates if w.slot_key]
        else:
            primary, units = q.primary, q.primary_units
            # free_keys holds a worker's free units only while it has a free thread
            fitting = [w for w in candidates if w.free_keys.get(primary, 0) >= units]
        if len(fitting) == 1:
            w = fitting[0]
            if self.startable(t, q, w) and not (x is not None
                                                and self.backfill.blocks(t, q, w, x, xq)):
                return w
            return None
        if not fitting:
            return None
        return self.best_of(t, q, fitting, x, xq)

    def best_of(self, t: Task, q: ShapeQueue, candidates: Iterable[WorkerInfo],
                x: Task | None, xq: ShapeQueue | None) -> WorkerInfo | None:
        best = None
        best_rank = None
        blocks = self.backfill.blocks
        for w in candidates:
            if not self.startable(t, q, w):
                continue
            if x is not None and blocks(t, q, w, x, xq):
                continue
            rank = self._rank(t, q, w)
            if best is None or rank > best_rank:
                best, best_rank = w, rank
        return best

    def _rank(self, t: Task, q: ShapeQueue, w: WorkerInfo) -> tuple[int, int]:
        """Higher is better: input bytes held there, then fit."""
        held = 0
        address = w.address
        for d in t.deps:
            if d.who_has and address in d.who_has:
                held += d.nbytes
        if q.empty:
            return held, w.slot_key
        units = w.free_units.get(q.primary, 0)
        return held, (-units if q.best_fit else units)

    def _by_locality(self, t: Task, q: ShapeQueue, x: Task | None,
                     xq: ShapeQueue | None) -> WorkerInfo | None:
        held: dict[str, int] = {}
        for d in t.deps:
            if d.who_has and d.nbytes:
                for address in d.who_has:
                    held[address] = held.get(address, 0) + d.nbytes
        if not held:
            return None
        workers = self.workers
        return self.best_of(t, q, [workers[a] for a in held if a in workers], x, xq)

    def restricted(self, restrict: frozenset[str]) -> list[WorkerInfo]:
        """The connected workers a restriction names (by name or address) that take work
        (not draining), in name order."""
        found: dict[str, WorkerInfo] = {}
        by_name = self.index.by_name
        workers = self.workers
        for name in sorted(restrict):
            address = by_name.get(name, name)
            w = workers.get(address)
            if w is not None and not w.draining:
                found[address] = w
        return list(found.values())

    # -- booking -----------------------------------------------------------------------------

    def adopt(self, t: Task, w: WorkerInfo) -> bool:
        """``w`` reconnected still running ``t``, which was queued to run again: book it there
        if it has a thread and the resources for it now (the worker ignores the Execute)."""
        q = t.queue
        if q is None or len(w.processing) + len(w.stopping) >= w.nthreads \
                or not self.startable(t, q, w):
            return False
        self.dequeue(t)
        self.place(t, w, q)
        return True

    def book(self, t: Task, w: WorkerInfo) -> bool:
        """Book ``t``, already running on ``w`` (a job attempt found on a worker that came
        back), if ``w`` has a thread and the resources for it now; sends nothing."""
        resources = t.resources
        if w.draining or len(w.processing) + len(w.stopping) >= w.nthreads \
                or not resources.fits(w.free_units):
            return False
        self._book(t, w, resources.is_empty())
        return True

    def place(self, t: Task, w: WorkerInfo, q: ShapeQueue) -> None:
        self._book(t, w, q.empty)
        out = self.out
        out.counters["placed"] += 1
        actions = out.actions
        if q.empty:
            actions.append(Log(level=DEBUG, msg="Scheduling task %s on worker %s",
                               args=(t.key, w.name)))
        else:
            actions.append(Log(level=DEBUG, msg="Scheduling task %s (requires %s) on worker %s",
                               args=(t.key, t.resources, w.name)))
        if t.job is not None:
            actions.append(Execute(key=t.key, worker=w.address, spec=t.spec,
                                   resources=t.resources, priority=t.priority,
                                   job=self.on_job_placed(t, w)))
        elif t.deps:
            who_has = {d.key: tuple(d.who_has or ()) for d in t.deps}
            out.counters["fetched"] += sum(w.address not in held for held in who_has.values())
            nbytes = {d.key: d.nbytes for d in t.deps}
            actions.append(Execute(key=t.key, worker=w.address, spec=t.spec,
                                   resources=t.resources, priority=t.priority,
                                   who_has=who_has, nbytes=nbytes))
        else:
            actions.append(Execute(key=t.key, worker=w.address, spec=t.spec,
                                   resources=t.resources, priority=t.priority,
                                   who_has=NO_INPUTS, nbytes=NO_INPUTS))

    def _book(self, t: Task, w: WorkerInfo, empty: bool) -> None:
        t.state = PROCESSING
        t.processing_on = w.address
        t.started = self.out.now
        if len(w.processing) + len(w.stopping) >= w.nthreads:
            t.prefetched = True
            w.prefetched += 1
        w.processing[t.key] = t
        if empty:
            self.index.update(w, False)
        else:
            w.free, w.free_units = self._arithmetic.take(w.free, t.resources)
            self.index.update(w)
        w.version += 1

    def release_slot(self, w: WorkerInfo, t: Task) -> None:
        """``t`` left ``w`` (ended, stopped or moved): give back its thread and resources."""
        resources = t.resources
        if resources:
            w.free, w.free_units = self._arithmetic.give(w.free, resources)
        if t.prefetched:
            t.prefetched = False
            w.prefetched -= 1
        elif w.prefetched:
            for other in (*w.processing.values(), *w.stopping.values()):
                if other.prefetched:  # the worker starts it on the thread just freed
                    other.prefetched = False
                    other.started = self.out.now
                    w.prefetched -= 1
                    break
        t.processing_on = None
        self.index.update(w, bool(resources))
        w.version += 1
        self._dirty[w.address] = w

    def stop(self, t: Task) -> None:
        """Nobody needs ``t`` any more: stop it where it runs. It keeps its thread and
        resources there until the worker confirms (or reports its end), but backfill now
        expects them back at once, which may let a blocked task start: ``w`` is looked at."""
        w = self.workers[t.processing_on]
        w.stopping[t.key] = w.processing.pop(t.key)
        t.processing_on = None
        w.version += 1
        self._dirty[w.address] = w
        self.out.actions.append(StopTask(key=t.key, worker=w.address))

    def tick(self) -> None:
        """Time passed: estimates drift; the reserved task looks for its best worker again."""
        freed = self.backfill.drop()
        if freed is not None:
            self._dirty[freed.address] = freed

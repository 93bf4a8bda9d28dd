"""The placement pass of SchedulerState: start what can start now, and the slot accounting.

A mixin that SchedulerState is built from, split out to keep each file readable; it holds
no state of its own. Which worker a task goes to is ``policy.py``'s decision; this pass
decides which queue heads to ask about, keeps the EASY reservation current, and books a
placement (or its end) on the worker, the index and the queue.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .actions import DEBUG, NO_INPUTS, CancelTask, Execute, Log
from .queue import ShapeQueue
from .task import PROCESSING, QUEUED, Task
from .worker import WorkerInfo

if TYPE_CHECKING:
    from .state import SchedulerState

    _Base = SchedulerState
else:
    _Base = object


class Placement(_Base):
    def _schedule(self) -> None:
        """Start what can start now. Invariant after each pass: the head of every queue
        can start on no worker, so only queues whose head changed need a search of all
        workers, and the others only a look at the workers whose load dropped."""
        r = self.policy.reservation
        if r is not None and not (
                r.task.state is QUEUED and r.task.queue is not None
                and r.task.queue.reason is None
                and self.workers.get(r.worker.address) is r.worker):
            self._check_reservation()  # drop it; its worker is free for others again
        rq = self.queue
        dirty_queues = rq.dirty
        dirty_workers = self._dirty_workers
        if not dirty_queues and not dirty_workers:
            return
        index = self.index
        heads = rq.heads
        if not heads or not index.open_slots:
            dirty_queues.clear()
            dirty_workers.clear()
            return
        policy = self.policy
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
                w = policy.find(t, q, None, x, xq)
            elif not roomy:
                w = None
            elif len(roomy) == 1:
                w = roomy[0]
                if q.empty:
                    fits = w.slot_key > 0
                else:  # free_keys holds a worker's free units only while a thread is free
                    fits = w.free_keys.get(q.primary, 0) >= q.primary_units and (
                        not q.multi or q.resources.fits(w.free_units))
                w = policy.find_among(t, q, roomy, x, xq) if fits else None
            else:
                w = policy.find_among(t, q, roomy, x, xq)
            if w is None:
                dirty_queues.discard(qid)
                if x is None and not q.empty:
                    x, xq = t, q
                    r = policy.reservation
                    if r is not None and r.task is not t:
                        policy.reservation = None
                        if r.worker.slot_key and r.worker not in roomy:
                            roomy.append(r.worker)
                i += 1
                continue
            rq.pop(q)
            self._place(t, w, q)
            r = policy.reservation
            if r is not None and r.task is t:
                policy.reservation = None
                if r.worker.slot_key and r.worker not in roomy:
                    roomy.append(r.worker)
            if not w.slot_key and w in roomy:
                roomy.remove(w)
        dirty_queues.clear()
        dirty_workers.clear()

    def _check_reservation(self) -> None:
        r = self.policy.reservation
        if r is None:
            return
        t = r.task
        q = t.queue
        alive = self.workers.get(r.worker.address) is r.worker
        if t.state is not QUEUED or q is None or q.reason is not None or not alive:
            self.policy.reservation = None
            if alive:
                self._dirty_workers[r.worker.address] = r.worker

    def _place(self, t: Task, w: WorkerInfo, q: ShapeQueue) -> None:
        t.state = PROCESSING
        t.processing_on = w.address
        t.started = self.now
        if len(w.processing) + len(w.stopping) >= w.nthreads:
            t.prefetched = True
            w.prefetched += 1
        w.processing[t.key] = t
        if q.empty:
            self.index.update(w, False)
        else:
            w.free, w.free_units = self._arithmetic.take(w.free, t.resources)
            self.index.update(w)
        w.version += 1
        self.counters["placed"] += 1
        actions = self._actions
        if q.empty:
            actions.append(Log(level=DEBUG, msg="Scheduling task %s on worker %s",
                               args=(t.key, w.name)))
        else:
            actions.append(Log(level=DEBUG, msg="Scheduling task %s (requires %s) on worker %s",
                               args=(t.key, t.resources, w.name)))
        if t.deps:
            who_has = {d.key: tuple(d.who_has or ()) for d in t.deps}
            nbytes = {d.key: d.nbytes for d in t.deps}
            actions.append(Execute(key=t.key, worker=w.address, spec=t.spec,
                                   resources=t.resources, priority=t.priority,
                                   who_has=who_has, nbytes=nbytes))
        else:
            actions.append(Execute(key=t.key, worker=w.address, spec=t.spec,
                                   resources=t.resources, priority=t.priority,
                                   who_has=NO_INPUTS, nbytes=NO_INPUTS))

    def _release_slot(self, w: WorkerInfo, t: Task) -> None:
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
                    other.started = self.now
                    w.prefetched -= 1
                    break
        t.processing_on = None
        self.index.update(w, bool(resources))
        w.version += 1
        self._dirty_workers[w.address] = w

    def _stop_on_worker(self, t: Task) -> None:
        """Nobody needs ``t`` any more: stop it where it runs. It keeps its thread and
        resources there until the worker confirms (or reports its end)."""
        w = self.workers[t.processing_on]
        del w.processing[t.key]
        w.stopping[t.key] = t
        t.processing_on = None
        w.version += 1
        self._actions.append(CancelTask(key=t.key, worker=w.address))

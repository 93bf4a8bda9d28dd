"""The placer: which queued task starts on which worker, now.

A task goes to a worker only when that worker can start it now: the one rule, ``startable``,
is the fit's (``fit.py``), which also keeps what each worker has free. Among the workers that
can, the search (``choice.py``) takes the one holding most of its input bytes (without inputs,
where its dependent's other inputs are: ``groups.py``, which may also put a task just behind
the head first), then the best fit for GPU demands (least free GPU that still fits, so whole
multi-GPU workers stay free), else the least loaded. A pass looks only at queue heads whose
queue changed and at workers whose load dropped, so a decision costs the same at 10 or 10,000
workers; EASY backfill (``backfill.py``) keeps the first waiting large task from starving,
and ``reasons.py`` says why a queue cannot run anywhere. The placer owns the ready queue, the
worker index and the learned durations, hands its parts only what each reads, and books each
placement on them. It sends each placement's ``SendExecute``; the job attempts it placed it
returns (``take_placed_jobs``), and the state hands them to the job book.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from .actions import DEBUG, NO_INPUTS, SendStopTask, SendExecute, LogLine
from .backfill import Backfill
from .choice import WorkerChoice
from .fit import Fit, Shape
from .groups import Groups
from .outbox import Outbox
from .queue import ReadyQueue, ShapeQueue
from .reasons import Reasons
from .task import Task
from .worker import WorkerIndex, WorkerInfo


class Placer:
    """``workers``: the membership's connected workers (read here, never changed);
    ``duration_weight``: the weight of the newest duration in each per-prefix average."""

    def __init__(self, workers: dict[str, WorkerInfo], out: Outbox, *, prefetch: int,
                 duration_weight: float):
        self.workers = workers
        self.out = out
        self.duration_weight = duration_weight
        self.queue = ReadyQueue()
        self.index = WorkerIndex(prefetch)
        self.durations: dict[str, float] = {}
        self.fit = Fit(prefetch, self.queue.ahead_for)
        self.backfill = Backfill(workers, self.index, self.durations, out)
        self.choice = WorkerChoice(workers, self.index, self.fit, self.backfill)
        self.groups = Groups(self.queue, self.fit, self.backfill)
        self.reasons = Reasons(self.queue, self.index, workers, out)
        #: Workers whose load dropped since the last pass: room for queues not dirty.
        self._dirty: dict[str, WorkerInfo] = {}
        #: Job attempts placed and not yet taken by the state (``take_placed_jobs``).
        self.placed_jobs: list[tuple[Task, WorkerInfo]] = []
        #: Workers holding prefetched tasks (sent ahead, waiting there for a thread).
        self.prefetching: dict[str, WorkerInfo] = {}
        #: How many of those tasks wait, by priority: a task with resources is sent ahead only
        #: to wait behind one of lower priority, so while there is none no worker is searched.
        self.ahead: dict[int, int] = {}

    # -- workers coming and going -----------------------------------------------------------

    def add_worker(self, w: WorkerInfo) -> None:
        self.index.add(w)
        self._dirty[w.address] = w

    def room_grew(self, w: WorkerInfo) -> None:
        """``w`` has more room than its tasks' ends said (less memory used by others on its
        devices): the next pass looks at it."""
        w.version += 1
        self._dirty[w.address] = w

    def room_shrank(self, w: WorkerInfo) -> None:
        """``w`` has less room than its tasks say (more memory used by others on a device, a
        device fenced): what was estimated from its load (a reservation's devices) is stale."""
        w.version += 1

    def withdraw_worker(self, w: WorkerInfo) -> None:
        """``w`` is draining: nothing may start there any more."""
        self.index.withdraw(w)
        self._dirty.pop(w.address, None)
        self.backfill.forget_worker(w)

    def remove_worker(self, w: WorkerInfo) -> None:
        self.index.remove(w)
        if self.prefetching.pop(w.address, None) is not None:
            for h in w.sent_ahead():
                self._count_ahead(h.priority, -1)
        self._dirty.pop(w.address, None)
        self.backfill.forget_worker(w)

    # -- the queue ---------------------------------------------------------------------------

    def enqueue(self, t: Task) -> None:
        """Queue ``t``; its clients hear at once when its shape cannot run anywhere."""
        t.move("queue")
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
        choice = self.choice
        startable = self.fit.startable
        x = xq = None
        i = xi = 0
        # heads is sorted; a placement replaces heads[i] by a later entry, so stay at i
        while i < len(heads) and (dirty_queues or roomy) and index.open_slots:
            _, qid, q = heads[i]
            if q.reason is not None:
                dirty_queues.discard(qid)
                i += 1
                continue
            t = q.heap[0][1]
            if qid in dirty_queues:
                w = choice.find(t, q, x, xq)
            elif len(roomy) == 1:  # the usual case: a look at the index entry first
                w = roomy[0]
                room = (w.slot_key if q.empty
                        else w.free_keys.get(q.primary, 0) >= q.primary_units)
                if not (room and startable(t, q, w)) or (
                        x is not None and backfill.blocks(t, q, w, x, xq)):
                    w = None
            elif roomy:
                w = choice.find_among(t, q, roomy, x, xq)
            else:
                w = None
            if w is None and self.prefetching and not q.empty and t.job is None and any(
                    p < t.priority for p in self.ahead):
                # it waits for a thread where a task of lower priority waits too: it goes there
                w = choice.best_of(t, q, list(self.prefetching.values()), x, xq)
            if w is None:
                dirty_queues.discard(qid)
                if x is None and not q.empty:  # the first that must wait reserves
                    x, xq, xi = t, q, i
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
            elif x is not None and xq.devices and q.devices and (
                    backfill.reservation is not None and backfill.reservation.worker is w):
                # Beside a reserved device task: its device at its start may now be another,
                # which lets heads passed over since it start beside it: look at them again.
                i = xi + 1
                if w not in roomy:
                    roomy.append(w)
        dirty_queues.clear()
        dirty_workers.clear()

    # -- booking -----------------------------------------------------------------------------

    def adopt(self, t: Task, w: WorkerInfo, gpus: tuple[int, ...] = ()) -> bool:
        """``w`` reconnected still running ``t`` (a task, not a job attempt) on the devices
        ``gpus``, which was queued to run again: book it there, on those devices, if ``w``
        can start it on a thread free now (the worker ignores the SendExecute)."""
        q = t.queue
        if q is None or not self.fit.startable_now(t, q, w, gpus):
            return False
        self.dequeue(t)
        self.place(t, w, q, gpus)
        return True

    def book(self, t: Task, w: WorkerInfo, gpus: tuple[int, ...] = ()) -> bool:
        """Book ``t``, already running on ``w`` on the devices ``gpus`` (a job attempt found
        on a worker that came back), if ``w`` can start it on a thread free now, on those
        devices; sends nothing."""
        q = Shape(t.resources, t.restrict, self.index.offered)
        if not self.fit.startable_now(t, q, w, gpus):
            return False
        self._book(t, w, q, gpus)
        return True

    def take_placed_jobs(self) -> list[tuple[Task, WorkerInfo]]:
        """The job attempts placed since the last call, each with its worker, in order."""
        placed, self.placed_jobs = self.placed_jobs, []
        return placed

    def place(self, t: Task, w: WorkerInfo, q: ShapeQueue, gpus: tuple[int, ...] = ()) -> None:
        self._book(t, w, q, gpus)
        out = self.out
        out.counters["placed"] += 1
        actions = out.actions
        if q.empty:
            actions.append(LogLine(level=DEBUG, msg="Scheduling task %s on worker %s",
                               args=(t.key, w.name)))
        else:
            actions.append(LogLine(level=DEBUG, msg="Scheduling task %s (requires %s) on worker %s",
                               args=(t.key, t.resources, w.name)))
        if t.job is not None:
            self.placed_jobs.append((t, w))
            actions.append(SendExecute(key=t.key, worker=w.address, spec=t.spec,
                                   resources=t.resources, priority=t.priority,
                                   job=t.job.payload(), gpus=t.gpus))
        elif t.deps:
            who_has = {d.key: tuple(d.who_has or ()) for d in t.deps}
            out.counters["fetched"] += sum(w.address not in held for held in who_has.values())
            nbytes = {d.key: d.nbytes for d in t.deps}
            actions.append(SendExecute(key=t.key, worker=w.address, spec=t.spec,
                                   resources=t.resources, priority=t.priority,
                                   who_has=who_has, nbytes=nbytes, gpus=t.gpus))
        else:
            actions.append(SendExecute(key=t.key, worker=w.address, spec=t.spec,
                                   resources=t.resources, priority=t.priority,
                                   who_has=NO_INPUTS, nbytes=NO_INPUTS, gpus=t.gpus))

    def _book(self, t: Task, w: WorkerInfo, q: Shape, gpus: tuple[int, ...] = ()) -> None:
        t.move("start")
        t.processing_on = w.address
        t.started = self.out.now
        if len(w.processing) + len(w.stopping) >= w.nthreads:
            t.prefetched = True
            w.prefetched += 1
            self.prefetching[w.address] = w
            self._count_ahead(t.priority, 1)
        w.processing[t.key] = t
        self.index.update(w, self.fit.take(t, q, w, gpus))
        w.version += 1

    def release_slot(self, w: WorkerInfo, t: Task) -> None:
        """``t`` left ``w`` (ended, stopped or moved): give back its thread and resources."""
        changed = self.fit.give(t, w)
        stopped_ahead = w.stopped_ahead
        if t.key in stopped_ahead:  # stopped before it started here: it held no thread
            stopped_ahead.discard(t.key)
            w.prefetched -= 1
            self._count_ahead(t.priority, -1)
        elif t.prefetched:
            t.prefetched = False
            w.prefetched -= 1
            self._count_ahead(t.priority, -1)
        elif w.prefetched:  # the worker starts the first of the highest priority it holds
            first = max(w.sent_ahead(), key=lambda h: h.priority)  # the first of equals
            if first.key in stopped_ahead and w.stopping.get(first.key) is first:
                stopped_ahead.discard(first.key)
            else:
                first.prefetched = False
                first.started = self.out.now
            w.prefetched -= 1
            self._count_ahead(first.priority, -1)
        if not w.prefetched:
            self.prefetching.pop(w.address, None)
        t.processing_on = None
        self.index.update(w, changed)
        w.version += 1
        self._dirty[w.address] = w

    def _count_ahead(self, priority: int, n: int) -> None:
        ahead = self.ahead
        left = ahead.get(priority, 0) + n
        if left:
            ahead[priority] = left
        else:
            del ahead[priority]

    def stop(self, t: Task) -> None:
        """Nobody needs ``t`` any more: stop it where it runs. It keeps its thread and
        resources there until the worker confirms (or reports its end), but backfill now
        expects them back at once, which may let a blocked task start: ``w`` is looked at."""
        w = self.workers[t.processing_on]
        w.stopping[t.key] = w.processing.pop(t.key)
        if t.prefetched:  # the flag is the Task's, which may be placed elsewhere meanwhile:
            t.prefetched = False  # here, that it waits unstarted is kept by key
            w.stopped_ahead.add(t.key)
        t.processing_on = None
        w.version += 1
        self._dirty[w.address] = w
        self.out.actions.append(SendStopTask(key=t.key, worker=w.address))

    def tick(self) -> None:
        """Time passed: estimates drift; the reserved task looks for its best worker again."""
        freed = self.backfill.drop()
        if freed is not None:
            self._dirty[freed.address] = freed

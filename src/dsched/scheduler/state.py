"""SchedulerState: every decision of the scheduler, mutated only by ``handle(event)``.

It holds the workers, the tasks and their graph, which worker holds which result, which
clients want which results, and the ready queue; ``handle`` returns the actions the async
shell must carry out. The placement rules live in ``policy.py`` and the placement pass in
``placement.py``, the task lifecycle in ``lifecycle.py``, workers joining, draining and
leaving in ``membership.py``, the invariants in ``invariants.py``.

Pure: no I/O, no clock (time arrives inside events).
"""

from __future__ import annotations

from typing import Callable

from collections import Counter

from ..resources import Resources
from . import events as ev
from .actions import (
    INFO, WARNING, CloseWorker, FreeResults, Log, ReportWaiting, RetireWorker,
)
from .lifecycle import Lifecycle
from .membership import Membership
from .placement import Placement
from .policy import Policy
from .queue import ReadyQueue, ShapeQueue
from .task import ACTIVE, MEMORY, WAITING, Task
from .worker import FreeArithmetic, WorkerIndex, WorkerInfo

#: Submission order fits below this; priority is scaled above it in ``Task.order``.
_ORDER_SHIFT = 48
#: Seconds a task a worker refused waits before it is queued again; doubles each refusal.
REJECTION_BACKOFF = 0.5


class SchedulerState(Membership, Lifecycle, Placement):
    """The scheduler's state and decisions.

    ``allowed_failures``: how many workers may die while a task runs before it fails (it
    fails on the ``allowed_failures + 1``-th). ``no_worker_timeout``: seconds a task may wait
    with no connected worker able to run it before it fails (None: forever).
    ``heartbeat_timeout``: seconds without a heartbeat after which a worker is removed on a
    Tick (None: never). ``prefetch``: extra resource-free tasks a worker may hold beyond its
    threads. ``duration_weight``: weight of the newest duration in the per-prefix average.
    ``max_rejections``: times workers may refuse a task (each refusal waits longer before the
    next try) before it fails with the last worker's reason.

    ``counters`` counts, since start: ``placed`` tasks, worker ``deaths`` counted against
    tasks, ``rejected`` refusals, ``recomputed`` lost results, ``replicated`` results copied
    off draining workers.
    """

    def __init__(
        self, *, allowed_failures: int = 3, no_worker_timeout: float | None = None,
        heartbeat_timeout: float | None = None, prefetch: int = 0,
        duration_weight: float = 0.5, max_rejections: int = 5,
    ):
        if allowed_failures < 0 or prefetch < 0 or max_rejections < 0:
            raise ValueError("allowed_failures, prefetch and max_rejections must not be negative")
        self.allowed_failures = allowed_failures
        self.max_rejections = max_rejections
        self.no_worker_timeout = no_worker_timeout
        self.heartbeat_timeout = heartbeat_timeout
        self.prefetch = prefetch
        self.duration_weight = duration_weight
        self.tasks: dict[str, Task] = {}
        self.workers: dict[str, WorkerInfo] = {}
        self.clients: dict[str, dict[str, None]] = {}
        self.durations: dict[str, float] = {}
        self.now = 0.0
        self.queue = ReadyQueue()
        self.index = WorkerIndex(prefetch)
        self._arithmetic = FreeArithmetic()
        self.policy = Policy(self)
        self._actions: list = []
        self._dirty_workers: dict[str, WorkerInfo] = {}
        self._to_free: dict[str, list[str]] = {}
        self._unrunnable: dict[int, ShapeQueue] = {}
        self._release_work: list[Task] = []
        self._shapes: dict[frozenset, Resources] = {}
        self._waiting_reports: dict[tuple[str, str | None], list[str]] = {}
        self._seq = 0
        self.counters: Counter[str] = Counter(
            placed=0, deaths=0, rejected=0, recomputed=0, replicated=0)
        #: Tasks a worker refused, waiting until their ``retry_at`` to be queued again.
        self.retrying: dict[Task, None] = {}
        self._draining: dict[str, WorkerInfo] = {}
        #: Worker name -> the tasks its process was running when it died unexpectedly.
        self._crashed: dict[str, tuple[str, ...]] = {}

    # -- the one mutator ----------------------------------------------------------------------

    def handle(self, event: ev.Event) -> list:
        """Apply ``event``; return the actions for the shell, in order."""
        handler = self._HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"SchedulerState cannot handle {event!r}")
        if event.now > self.now:
            self.now = event.now
        self._actions = actions = []
        handler(self, event)
        if self._release_work:
            self._drain_releases()
        self._schedule()
        if self._to_free:
            for address, keys in self._to_free.items():
                actions.append(FreeResults(worker=address, keys=tuple(keys)))
            self._to_free = {}
        if self._waiting_reports:  # one report per client and reason, not one per task
            for (client, reason), keys in self._waiting_reports.items():
                actions.append(ReportWaiting(client=client, keys=tuple(keys), reason=reason))
            self._waiting_reports = {}
        if self._draining:
            for w in self._draining.values():
                if not (w.retired or w.processing or w.stopping or w.evacuating):
                    w.retired = True
                    actions.append(RetireWorker(worker=w.address))
        return actions

    def validate(self) -> None:
        """Check every invariant; raises AssertionError naming the first one broken."""
        from .invariants import check

        check(self)

    # -- what workers report about tasks ---------------------------------------------------------

    def _ended_on(self, address: str, key: str,
                  holds_result: bool) -> tuple[WorkerInfo, Task] | None:
        """``key`` ended on the worker at ``address``: free its slot there and return both,
        or None for a report to ignore (a worker we gave up on, or a task moved elsewhere)."""
        w = self.workers.get(address)
        if w is None:
            return None  # its work was rescheduled when we gave up on it
        t = w.processing.pop(key, None)
        if t is None:
            self._stray(w, key, holds_result)
            return None
        self._release_slot(w, t)
        return w, t

    def _on_finished(self, e: ev.TaskFinished) -> None:
        ended = self._ended_on(e.worker, e.key, holds_result=True)
        if ended is None:
            return
        w, t = ended
        key = e.key
        duration = e.duration if e.duration is not None else e.stop - e.start
        if duration >= 0:
            old = self.durations.get(t.prefix)
            self.durations[t.prefix] = (
                duration if old is None else old + self.duration_weight * (duration - old)
            )
        t.state = MEMORY
        t.nbytes = e.nbytes
        t.who_has = {w.address: None}
        w.has_what[key] = None
        self._report_end(t)
        self._dependency_done(t)
        if w.draining:
            self._evacuate(w, [key])

    def _on_erred(self, e: ev.TaskErred) -> None:
        ended = self._ended_on(e.worker, e.key, holds_result=False)
        if ended is None:
            return
        w, t = ended
        t.exceptions += 1
        if t.retries > 0:
            t.retries -= 1
            self._log(INFO, "Task %s raised on %s; retrying (%d retries left): %s",
                      t.key, w.name, t.retries, e.text)
            self._compute(t)
        else:
            self._fail(t, "exception", e.text, e.exception)

    def _on_cancel_confirmed(self, e: ev.CancelConfirmed) -> None:
        w = self.workers.get(e.worker)
        if w is not None:
            t = w.stopping.pop(e.key, None)
            if t is not None:
                self._release_slot(w, t)

    def _on_rejected(self, e: ev.TaskRejected) -> None:
        ended = self._ended_on(e.worker, e.key, holds_result=False)
        if ended is None:
            return
        w, t = ended
        if w.draining:  # not the task's fault: it goes elsewhere at once
            self._compute(t)
            return
        t.rejections += 1
        self.counters["rejected"] += 1
        if t.rejections > self.max_rejections:
            self._fail(t, "rejected", f"workers refused this task {t.rejections} times; the "
                       f"last, {w.name}, said: {e.reason}")
            return
        delay = REJECTION_BACKOFF * 2 ** (t.rejections - 1)
        self._log(WARNING, "Worker %s refused task %s (%s); trying again in %g s",
                  w.name, t.key, e.reason, delay)
        if not all(d.state is MEMORY for d in t.deps):
            self._compute(t)  # an input was lost meanwhile: computing it is the wait
            return
        t.state = WAITING
        t.waiting_on = None
        t.end_reason = e.reason
        t.retry_at = self.now + delay
        self.retrying[t] = None

    def _on_missing_data(self, e: ev.MissingData) -> None:
        if e.permanent:  # the input exists but cannot travel: computing it again won't help
            ended = self._ended_on(e.worker, e.key, holds_result=False)
            if ended is not None:
                self._fail(ended[1], "unfetchable", f"its input {e.dependency} cannot be sent "
                           f"to the worker that would run it: {e.reason}")
            return
        d = self.tasks.get(e.dependency)
        if d is not None and d.who_has:
            for address in e.tried:
                if address in d.who_has:
                    del d.who_has[address]
                    holder = self.workers.get(address)
                    if holder is not None:
                        holder.has_what.pop(d.key, None)
            if not d.who_has:
                d.losses += 1
                self._lose(d)
                if d.losses > self.allowed_failures and d.state in ACTIVE:
                    # Computed again and again, yet no worker could ever hand it over (a
                    # result that cannot be pickled, say): stop the loop with a reason.
                    cause = e.reason or "a result that cannot be pickled does this"
                    self._fail(d, "unfetchable", (
                        f"no worker could send the result of {d.key} to the workers that "
                        f"needed it, {d.losses} times (the last tried: {', '.join(e.tried)}): "
                        f"{cause}"))
        ended = self._ended_on(e.worker, e.key, holds_result=False)
        if ended is not None:
            self._compute(ended[1])

    def _stray(self, w: WorkerInfo, key: str, holds_result: bool) -> None:
        """A report about ``key`` from ``w``, where it is not processing: a task we told it to
        stop that ended (free its thread) or one we moved elsewhere (ignore)."""
        t = w.stopping.pop(key, None)
        if t is not None:
            self._release_slot(w, t)
        if holds_result and key not in w.has_what:
            self._to_free.setdefault(w.address, []).append(key)

    # -- clients ------------------------------------------------------------------------------

    def _on_submitted(self, e: ev.TasksSubmitted) -> None:
        self._submit(e.client, e.tasks)

    def _on_cancel_requested(self, e: ev.CancelRequested) -> None:
        tasks = self.tasks
        self._cancel_for(e.client, [tasks[key] for key in e.keys if key in tasks])

    def _on_released(self, e: ev.KeysReleased) -> None:
        for key in e.keys:
            self._unwant(key, e.client)

    def _on_client_disconnected(self, e: ev.ClientDisconnected) -> None:
        for key in list(self.clients.get(e.client, ())):
            self._unwant(key, e.client)
        self.clients.pop(e.client, None)

    # -- the clock ----------------------------------------------------------------------------

    def _on_tick(self, e: ev.Tick) -> None:
        now = self.now
        timeout = self.heartbeat_timeout
        if timeout is not None:
            for w in list(self.workers.values()):
                if now - w.last_seen > timeout:
                    reason = f"no heartbeat for {now - w.last_seen:g} s (timeout {timeout:g} s)"
                    self._actions.append(CloseWorker(worker=w.address, reason=reason))
                    self._remove_worker(w, reason)
        if self.no_worker_timeout is not None:
            self._expire_unrunnable()
        if self.retrying:
            for t in [t for t in self.retrying if t.retry_at <= now]:
                del self.retrying[t]
                t.retry_at = None
                self._enqueue(t)
        r = self.policy.reservation
        if r is not None:  # estimates drift as time passes: look for the best worker again
            self.policy.reservation = None
            if self.workers.get(r.worker.address) is r.worker:
                self._dirty_workers[r.worker.address] = r.worker

    def _expire_unrunnable(self) -> None:
        timeout = self.no_worker_timeout
        assert timeout is not None
        for qid, q in list(self._unrunnable.items()):
            if self.queue.by_id.get(qid) is not q or q.fifo is None:
                del self._unrunnable[qid]
                continue
            fifo = q.fifo
            while fifo:
                t = fifo[0]
                if t.queue is not q:
                    fifo.popleft()
                    continue
                if max(t.queued_at, q.unrunnable_since) + timeout > self.now:
                    break
                fifo.popleft()
                text = f"no worker could run this task for {timeout:g} s: {q.reason}"
                self._fail(t, "no_worker", text)

    def _log(self, level: int, msg: str, *args) -> None:
        self._actions.append(Log(level=level, msg=msg, args=args))

    def _next_order(self, priority: int) -> int:
        self._seq += 1
        return (-priority << _ORDER_SHIFT) + self._seq

    _HANDLERS: dict[type, Callable] = {
        ev.WorkerJoined: Membership._on_worker_joined,
        ev.WorkerHeartbeat: Membership._on_heartbeat,
        ev.WorkerDraining: Membership._on_worker_draining,
        ev.WorkerLeft: Membership._on_worker_left,
        ev.TaskFinished: _on_finished,
        ev.TaskErred: _on_erred,
        ev.CancelConfirmed: _on_cancel_confirmed,
        ev.TaskRejected: _on_rejected,
        ev.MissingData: _on_missing_data,
        ev.ResultReplicated: Membership._on_replicated,
        ev.ReplicateFailed: Membership._on_replicate_failed,
        ev.TasksSubmitted: _on_submitted,
        ev.CancelRequested: _on_cancel_requested,
        ev.KeysReleased: _on_released,
        ev.ClientDisconnected: _on_client_disconnected,
        ev.Tick: _on_tick,
    }


"""SchedulerState: every decision of the scheduler, mutated only by ``handle(event)``.

It holds the workers, the tasks and their graph, which worker holds which result, which
clients want which results, and the ready queue; ``handle`` returns the actions the async
shell must carry out. The placement rules live in ``policy.py`` and the placement pass in
``placement.py``, the task lifecycle in ``lifecycle.py``, the invariants in ``invariants.py``.

Pure: no I/O, no clock (time arrives inside events).
"""

from __future__ import annotations

from typing import Callable

from ..resources import Resources
from . import events as ev
from .actions import INFO, WARNING, CancelTask, CloseWorker, FreeResults, Log, ReportWaiting
from .lifecycle import Lifecycle
from .placement import Placement
from .policy import Policy
from .queue import ReadyQueue, ShapeQueue
from .task import ACTIVE, MEMORY, QUEUED, Task
from .worker import FreeArithmetic, WorkerIndex, WorkerInfo

#: Submission order fits below this; priority is scaled above it in ``Task.order``.
_ORDER_SHIFT = 48


class SchedulerState(Lifecycle, Placement):
    """The scheduler's state and decisions.

    ``allowed_failures``: how many workers may die while a task runs before it fails (it
    fails on the ``allowed_failures + 1``-th). ``no_worker_timeout``: seconds a task may wait
    with no connected worker able to run it before it fails (None: forever).
    ``heartbeat_timeout``: seconds without a heartbeat after which a worker is removed on a
    Tick (None: never). ``prefetch``: extra resource-free tasks a worker may hold beyond its
    threads. ``duration_weight``: weight of the newest duration in the per-prefix average.
    """

    def __init__(
        self, *, allowed_failures: int = 3, no_worker_timeout: float | None = None,
        heartbeat_timeout: float | None = None, prefetch: int = 0,
        duration_weight: float = 0.5,
    ):
        if allowed_failures < 0 or prefetch < 0:
            raise ValueError("allowed_failures and prefetch must not be negative")
        self.allowed_failures = allowed_failures
        self.no_worker_timeout = no_worker_timeout
        self.heartbeat_timeout = heartbeat_timeout
        self.prefetch = prefetch
        self.duration_weight = duration_weight
        self.tasks: dict[str, Task] = {}
        self.workers: dict[str, WorkerInfo] = {}
        self.clients: dict[str, dict[str, None]] = {}
        self.durations: dict[str, float] = {}
        self.now = 0.0
        self.decisions = 0
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
        return actions

    def validate(self) -> None:
        """Check every invariant; raises AssertionError naming the first one broken."""
        from .invariants import check

        check(self)

    # -- workers ------------------------------------------------------------------------------

    def _on_worker_joined(self, e: ev.WorkerJoined) -> None:
        old = self.workers.get(e.address)
        if old is not None:
            self._remove_worker(old, "it registered again")
        other = self.index.by_name.get(e.name)
        if other is not None:
            reason = f"a worker named {e.name!r} is already connected from {other}"
            self._actions.append(CloseWorker(worker=e.address, reason=reason))
            self._log(WARNING, "Refused worker %s at %s: %s", e.name, e.address, reason)
            return
        if e.nthreads < 1:
            reason = f"a worker needs at least one thread, not {e.nthreads}"
            self._actions.append(CloseWorker(worker=e.address, reason=reason))
            return
        w = WorkerInfo(e.address, e.name, e.nthreads, e.resources, tuple(e.gpus), self.now)
        self.workers[e.address] = w
        self.index.add(w)
        self._dirty_workers[e.address] = w
        self._log(INFO, "Worker %s joined from %s: %d threads, resources %s",
                  e.name, e.address, e.nthreads, e.resources)
        if e.held or e.running:
            self._reconcile(w, e.held, e.running)
        self._refresh_reasons()

    def _reconcile(self, w: WorkerInfo, held: tuple[tuple[str, int], ...],
                   running: tuple[str, ...]) -> None:
        """Adopt what a reconnecting worker kept that is still needed; drop the rest there.

        A result still needed and not yet recomputed ends its task here; a result already
        in memory elsewhere becomes one more copy. A task it still runs is adopted when it is
        queued to run again and fits this worker now (the worker ignores the repeated
        Execute); any other running task is cancelled there.
        """
        for key, nbytes in held:
            t = self.tasks.get(key)
            if t is not None and t.state is MEMORY and t.who_has is not None:
                t.who_has[w.address] = None
                w.has_what[key] = None
            elif t is not None and t.state is QUEUED and t.queue is not None:
                self.queue.remove(t)
                t.state = MEMORY
                t.nbytes = nbytes
                t.who_has = {w.address: None}
                w.has_what[key] = None
                self._log(INFO, "Worker %s kept the result of task %s; not computing it again",
                          w.name, key)
                self._report_end(t)
                self._dependency_done(t)
            else:
                self._to_free.setdefault(w.address, []).append(key)
        for key in running:
            t = self.tasks.get(key)
            q = t.queue if t is not None and t.state is QUEUED else None
            if (q is not None and w.assigned < w.nthreads and t.resources.fits(w.free)
                    and (t.restrict is None or not t.restrict.isdisjoint((w.name, w.address)))):
                self.queue.remove(t)
                self._place(t, w, q)
            else:
                self._actions.append(CancelTask(key=key, worker=w.address))

    def _on_heartbeat(self, e: ev.WorkerHeartbeat) -> None:
        w = self.workers.get(e.address)
        if w is not None:
            w.last_seen = self.now
            if e.metrics is not None:
                w.metrics = e.metrics

    def _on_worker_left(self, e: ev.WorkerLeft) -> None:
        w = self.workers.get(e.address)
        if w is not None:
            self._remove_worker(w, e.reason, level=INFO if e.expected else WARNING)

    def _remove_worker(self, w: WorkerInfo, reason: str, level: int = WARNING) -> None:
        address = w.address
        del self.workers[address]
        self.index.remove(w)
        self._dirty_workers.pop(address, None)
        r = self.policy.reservation
        if r is not None and r.worker is w:
            self.policy.reservation = None
        self._log(level, "Worker %s at %s removed: %s", w.name, address, reason)
        lost = []
        for key in w.has_what:
            t = self.tasks[key]
            del t.who_has[address]
            if not t.who_has:
                lost.append(t)
        w.has_what = {}
        for t in lost:
            self._lose(t)
        running, w.processing, w.stopping = list(w.processing.values()), {}, {}
        for t in running:
            t.processing_on = None
            if not t.prefetched:
                t.deaths += 1
            t.prefetched = False
            if t.deaths > self.allowed_failures:
                text = (
                    f"{t.deaths} worker(s) died while running this task "
                    f"(allowed_failures={self.allowed_failures}); the last was {w.name} at "
                    f"{address}: {reason}"
                )
                self._fail(t, "killed_worker", text)
            else:
                self._compute(t)
        self._refresh_reasons()

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
        self._log(WARNING, "Worker %s gave task %s back: %s", w.name, t.key, e.reason)
        self._compute(t)

    def _on_missing_data(self, e: ev.MissingData) -> None:
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
                    self._fail(d, "unfetchable", (
                        f"no worker could send the result of {d.key} to the workers that "
                        f"needed it, {d.losses} times (the last tried: {', '.join(e.tried)}); "
                        "a result that cannot be pickled does this"))
        ended = self._ended_on(e.worker, e.key, holds_result=False)
        if ended is not None:
            self._compute(ended[1])

    def _stray(self, w: WorkerInfo, key: str, holds_result: bool) -> None:
        """A report about ``key`` from ``w``, where it is not processing: a cancelled task
        that ended (it stopped: free its thread) or one we moved elsewhere (ignore)."""
        t = w.stopping.pop(key, None)
        if t is not None:
            self._release_slot(w, t)
        if holds_result and key not in w.has_what:
            self._to_free.setdefault(w.address, []).append(key)

    # -- clients ------------------------------------------------------------------------------

    def _on_submitted(self, e: ev.TasksSubmitted) -> None:
        self._submit(e.client, e.tasks)

    def _on_cancel_requested(self, e: ev.CancelRequested) -> None:
        for key in e.keys:
            t = self.tasks.get(key)
            if t is not None and t.state in ACTIVE:
                self._cancel(t, f"cancelled by client {e.client}")

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
        ev.WorkerJoined: _on_worker_joined,
        ev.WorkerHeartbeat: _on_heartbeat,
        ev.WorkerLeft: _on_worker_left,
        ev.TaskFinished: _on_finished,
        ev.TaskErred: _on_erred,
        ev.CancelConfirmed: _on_cancel_confirmed,
        ev.TaskRejected: _on_rejected,
        ev.MissingData: _on_missing_data,
        ev.TasksSubmitted: _on_submitted,
        ev.CancelRequested: _on_cancel_requested,
        ev.KeysReleased: _on_released,
        ev.ClientDisconnected: _on_client_disconnected,
        ev.Tick: _on_tick,
    }


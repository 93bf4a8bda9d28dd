"""EASY backfill (as in Slurm): the reservation of the first queued task that cannot start.

The first queued task in order that demands resources and cannot start anywhere reserves the
worker where it is estimated to start first (from the running tasks' start times and learned
durations). Later tasks may start there only on capacity that reservation does not need at
its start, or when their learned duration says they end before it; a task of unknown duration
does not backfill onto reserved capacity. For GPU devices, what is spare is read device by
device: the reservation keeps the worker's device book as it is expected to be at its start
(``Reservation.book``), and a device task may start beside it where the devices it would take
now leave the reserved task a device in that book. So a large task is never starved by a stream of
small ones, and small ones still use what it leaves idle. This module alone reads and writes
the reservation; whether a worker could ever start the task is the fit's (``fit.py``).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from ..devices import DeviceBook
from .fit import allowed_workers, could_host, holds
from .queue import ShapeQueue
from .task import QUEUED, Task
from .worker import WorkerIndex, WorkerInfo

if TYPE_CHECKING:
    from .outbox import Outbox

INF = float("inf")
#: A reservation is sought among at most this many workers (those with most free of the
#: task's primary resource), so that its cost stays bounded on a large cluster.
RESERVATION_SCAN = 8


class Reservation:
    """``task`` is expected to start on ``worker`` at ``start`` (INF: unknown); ``spare`` is
    what that worker will have left of the task's resource names then, beside it; ``book``,
    for a task that takes devices, the worker's devices as they are expected to be then (what
    is still running held; None otherwise)."""

    __slots__ = ("task", "worker", "start", "spare", "spare_threads", "version", "now", "book")

    def __init__(self, task, worker, start, spare, spare_threads, version, now, book=None):
        self.task: Task = task
        self.worker: WorkerInfo = worker
        self.start: float = start
        self.spare: dict[str, int] = spare
        self.spare_threads: int = spare_threads
        self.version: int = version
        self.now: float = now
        self.book: DeviceBook | None = book

    def __repr__(self) -> str:
        return f"<Reservation {self.task.key!r} on {self.worker.address} at {self.start}>"


class Backfill:
    """The one reservation of a placer, and whether a placement would delay it. It reads, and
    never changes, the connected ``workers``, their ``index``, the learned ``durations`` per
    prefix and the ``clock`` (the outbox, for ``now``)."""

    def __init__(self, workers: Mapping[str, WorkerInfo], index: WorkerIndex,
                 durations: Mapping[str, float], clock: Outbox):
        self.workers = workers
        self.index = index
        self.durations = durations
        self.clock = clock
        self.reservation: Reservation | None = None

    # -- keeping the reservation current ----------------------------------------------------

    def drop(self) -> WorkerInfo | None:
        """Forget the reservation; the worker it held, when still connected, is free for
        others again (returned so the placement pass looks at it)."""
        r = self.reservation
        if r is None:
            return None
        self.reservation = None
        w = r.worker
        return w if self.workers.get(w.address) is w else None

    def stale(self) -> bool:
        """Whether the reservation stands for nothing any more (its task is no longer a
        runnable queued task, or its worker is gone)."""
        r = self.reservation
        if r is None:
            return False
        t = r.task
        return not (t.state is QUEUED and t.queue is not None and t.queue.reason is None
                    and self.workers.get(r.worker.address) is r.worker)

    def forget_worker(self, w: WorkerInfo) -> None:
        r = self.reservation
        if r is not None and r.worker is w:
            self.reservation = None

    def forget_task(self, t: Task) -> WorkerInfo | None:
        """``t`` started or left the queue: if it held the reservation, release it."""
        r = self.reservation
        if r is not None and r.task is t:
            return self.drop()
        return None

    # -- the reservation and what it allows ---------------------------------------------------

    def blocks(self, t: Task, q: ShapeQueue, w: WorkerInfo, x: Task, xq: ShapeQueue) -> bool:
        """True when starting ``t`` on ``w`` now could delay the reserved start of ``x``."""
        if t.order < x.order or t is x:
            return False
        r = self.reservation
        if r is not None and r.task is x and r.worker is not w and (
                self.workers.get(r.worker.address) is r.worker):
            return False  # reserved elsewhere
        if not could_host(xq, w):
            return False
        r = self.reserve(x, xq)
        if r is None or r.worker is not w:
            return False
        if r.spare_threads >= 1 and self._leaves_room(t, q, w, r, xq):
            return False
        duration = self.durations.get(t.prefix)
        return duration is None or self.clock.now + duration > r.start

    @staticmethod
    def _leaves_room(t: Task, q: ShapeQueue, w: WorkerInfo, r: Reservation,
                     xq: ShapeQueue) -> bool:
        """Whether ``t``, started on ``w`` now and still running at ``r``'s start, leaves the
        reserved task what it needs there: its resources within what is spare then and, where
        both take devices, a device for it beside the ones ``t`` would take now."""
        demand = q.resources
        for name, units in r.spare.items():
            if demand.get(name, 0) > units:
                return False
        if not (xq.devices and q.devices):
            return True
        devices = w.room.devices.choose(demand) if r.book is not None else None
        if devices is None:
            return False
        then = r.book.copy()
        return then.take(t.key, demand, devices) and then.choose(xq.resources) is not None

    def reserve(self, x: Task, xq: ShapeQueue) -> Reservation | None:
        """The reservation of ``x``: kept while its worker's load stands (a Tick looks for
        the best worker again), re-estimated on the same worker when that load changes."""
        r = self.reservation
        if r is not None and r.task is x and self.workers.get(r.worker.address) is r.worker:
            if r.version != r.worker.version:
                r = self.reservation = self.estimate(x, xq, r.worker)
            return r
        best = None
        for w in self._hosts(xq):
            e = self.estimate(x, xq, w)
            if best is None or e.start < best.start:
                best = e
        self.reservation = best
        return best

    def _hosts(self, xq: ShapeQueue) -> list[WorkerInfo]:
        """Workers that could ever start ``xq``'s tasks; on a large cluster only the first
        RESERVATION_SCAN of them, those with most of its primary resource free first."""
        workers = self.workers
        index = self.index
        if xq.restrict is not None:
            return [w for w in allowed_workers(xq.restrict, workers, index.by_name)
                    if could_host(xq, w)]
        fitting_totals = [a for total, a in index.totals.items() if holds(xq, total)]
        if xq.devices:  # the same totals may stand for devices of other sizes
            fitting_totals = [[a for a in addresses if could_host(xq, workers[a])]
                              for addresses in fitting_totals]
        if sum(len(a) for a in fitting_totals) <= RESERVATION_SCAN:
            return [workers[a] for addresses in fitting_totals for a in addresses]
        hosts: dict[str, WorkerInfo] = {}
        buckets = index.free.get(xq.primary)
        if buckets is not None:
            for units in reversed(buckets.keys):
                for address in buckets.groups[units]:
                    w = workers[address]
                    if could_host(xq, w):
                        hosts[address] = w
                        if len(hosts) == RESERVATION_SCAN:
                            return list(hosts.values())
        for addresses in fitting_totals:
            for address in addresses:
                hosts[address] = workers[address]
                if len(hosts) == RESERVATION_SCAN:
                    return list(hosts.values())
        return list(hosts.values())

    def estimate(self, x: Task, xq: ShapeQueue, w: WorkerInfo) -> Reservation:
        """When ``x`` could start on ``w`` if nothing else started there, and what is spare."""
        now = self.clock.now
        demand = xq.resources
        names = xq.names
        free_units = w.room.units
        free = {n: free_units.get(n, 0) for n in names}
        threads = w.nthreads - len(w.processing) - len(w.stopping)
        # Its devices too: a copy of the worker's book, given back what each task holds
        book = w.room.devices.copy() if xq.devices and w.room.devices is not None else None
        start = now
        if threads < 1 or any(free[n] < demand[n] for n in names) or (
                book is not None and book.choose(demand) is None):
            durations = self.durations
            ends = []
            for t in w.processing.values():
                d = durations.get(t.prefix)
                ends.append((INF if d is None else max(t.started + d, now), t.order, t))
            for t in w.stopping.values():
                ends.append((now, t.order, t))
            ends.sort()  # orders are unique: tasks are never compared
            start = INF
            for end, _, t in ends:
                threads += 1
                res = t.resources
                if res:
                    for n in names:
                        free[n] += res.get(n, 0)
                if book is not None:
                    book.give(t.key)
                if threads >= 1 and all(free[n] >= demand[n] for n in names) and (
                        book is None or book.choose(demand) is not None):
                    start = end
                    break
        spare = {n: free[n] - demand[n] for n in names}
        return Reservation(x, w, start, spare, threads - 1, w.version, now, book)

"""Placement policy: which worker starts a queued task, EASY backfill, unrunnable reasons.

A task goes to a worker only when that worker can start it now: a free thread (a resource-
free task may also take one of ``prefetch`` extra slots) and its resources free. Among the
workers that can, the one holding most of its input bytes wins, then the best fit for GPU
demands (least free GPU that still fits, so whole multi-GPU workers stay free), else the
least loaded (most free slots, or most free units of the demanded resource).

EASY backfill (as in Slurm): the first queued task in order that demands resources and
cannot start reserves the worker where it is estimated to start first (from running tasks'
start times and learned durations). Later tasks may start there only on capacity that
reservation does not need at its start, or when their learned duration says they end
before it; a task of unknown duration does not backfill onto reserved capacity.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, Iterable

from ..resources import demand_error, format_units
from .queue import ShapeQueue
from .task import Task
from .worker import WorkerInfo

if TYPE_CHECKING:
    from .state import SchedulerState

INF = float("inf")
#: A reservation is sought among at most this many workers (those with most free of the
#: task's primary resource), so that its cost stays bounded on a large cluster.
RESERVATION_SCAN = 8


class Reservation:
    """``task`` is expected to start on ``worker`` at ``start`` (INF: unknown); ``spare`` is
    what that worker will have left of the task's resource names then, beside it."""

    __slots__ = ("task", "worker", "start", "spare", "spare_threads", "version", "now")

    def __init__(self, task, worker, start, spare, spare_threads, version, now):
        self.task: Task = task
        self.worker: WorkerInfo = worker
        self.start: float = start
        self.spare: dict[str, int] = spare
        self.spare_threads: int = spare_threads
        self.version: int = version
        self.now: float = now

    def __repr__(self) -> str:
        return f"<Reservation {self.task.key!r} on {self.worker.address} at {self.start}>"


class Policy:
    """The placement decisions of one SchedulerState (which it reads, never changes)."""

    def __init__(self, state: SchedulerState):
        self.state = state
        self.workers = state.workers
        self.index = state.index
        self.durations = state.durations
        self.prefetch = state.prefetch
        self.reservation: Reservation | None = None

    # -- can a worker start a task now ------------------------------------------------------

    def can_start(self, t: Task, q: ShapeQueue, w: WorkerInfo) -> bool:
        if w.draining:
            return False
        restrict = q.restrict
        if restrict is not None and w.name not in restrict and w.address not in restrict:
            return False
        assigned = len(w.processing) + len(w.stopping)
        if q.empty:
            if assigned >= w.nthreads + self.prefetch:
                return False
        elif assigned >= w.nthreads or not q.resources.fits(w.free_units):
            return False
        return not (w.stopping and t.key in w.stopping)

    def blocks(self, t: Task, q: ShapeQueue, w: WorkerInfo, x: Task, xq: ShapeQueue) -> bool:
        """True when starting ``t`` on ``w`` now could delay the reserved start of ``x``."""
        if t.order < x.order or t is x:
            return False
        r = self.reservation
        if r is not None and r.task is x and r.worker is not w and (
                self.workers.get(r.worker.address) is r.worker):
            return False  # reserved elsewhere
        restrict = xq.restrict
        if restrict is not None and w.name not in restrict and w.address not in restrict:
            return False
        if not xq.resources.fits(w.total_units):
            return False
        r = self.reserve(x, xq)
        if r is None or r.worker is not w:
            return False
        if r.spare_threads >= 1:
            demand = q.resources
            for name, units in r.spare.items():
                if demand.get(name, 0) > units:
                    break
            else:
                return False
        duration = self.durations.get(t.prefix)
        return duration is None or self.state.now + duration > r.start

    # -- choosing a worker ----------------------------------------------------------------------

    def find(
        self, t: Task, q: ShapeQueue, candidates: Iterable[WorkerInfo] | None,
        x: Task | None, xq: ShapeQueue | None,
    ) -> WorkerInfo | None:
        """The worker to start ``t`` on now, among ``candidates`` (None: all), or None."""
        if candidates is not None:
            return self._best_of(t, q, candidates, x, xq)
        if t.deps:
            w = self._by_locality(t, q, x, xq)
            if w is not None:
                return w
        if q.restrict is not None:
            return self._best_of(t, q, self.restricted(q.restrict), x, xq)
        workers = self.workers
        key = t.key
        if q.empty:
            buckets = self.index.slots
            groups = buckets.groups
            for slots in reversed(buckets.keys):
                for address in groups[slots]:
                    w = workers[address]
                    if w.stopping and key in w.stopping:
                        continue
                    if x is not None and self.blocks(t, q, w, x, xq):
                        continue
                    return w
            return None
        buckets = self.index.free.get(q.primary)
        if buckets is None:
            return None
        keys = buckets.keys
        groups = buckets.groups
        first = bisect_left(keys, q.primary_units)
        span = range(first, len(keys)) if q.best_fit else range(len(keys) - 1, first - 1, -1)
        multi = q.multi
        demand = q.resources
        for i in span:
            for address in groups[keys[i]]:
                w = workers[address]
                if multi and not demand.fits(w.free_units):
                    continue
                if w.stopping and key in w.stopping:
                    continue
                if x is not None and self.blocks(t, q, w, x, xq):
                    continue
                return w
        return None

    def find_among(self, t, q, candidates, x, xq) -> WorkerInfo | None:
        """``find`` among a few ``candidates`` (the workers whose load just dropped), with the
        capacity test first because it usually fails."""
        fitting = []
        if q.empty:
            for w in candidates:
                if w.slot_key:
                    fitting.append(w)
        else:
            primary = q.primary
            units = q.primary_units
            multi = q.multi
            demand = q.resources
            for w in candidates:
                # free_keys holds a worker's free units only while it has a free thread
                if w.free_keys.get(primary, 0) >= units and (
                        not multi or demand.fits(w.free_units)):
                    fitting.append(w)
        if len(fitting) == 1:
            w = fitting[0]
            restrict = q.restrict
            if restrict is not None and w.name not in restrict and w.address not in restrict:
                return None
            if w.stopping and t.key in w.stopping:
                return None
            if x is not None and self.blocks(t, q, w, x, xq):
                return None
            return w
        if not fitting:
            return None
        return self._best_of(t, q, fitting, x, xq)

    def _best_of(self, t, q, candidates, x, xq) -> WorkerInfo | None:
        best = None
        best_rank = None
        for w in candidates:
            if not self.can_start(t, q, w):
                continue
            if x is not None and self.blocks(t, q, w, x, xq):
                continue
            rank = self.rank(t, q, w)
            if best is None or rank > best_rank:
                best, best_rank = w, rank
        return best

    def rank(self, t: Task, q: ShapeQueue, w: WorkerInfo) -> tuple[int, int]:
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

    def _by_locality(self, t, q, x, xq) -> WorkerInfo | None:
        held: dict[str, int] = {}
        for d in t.deps:
            if d.who_has and d.nbytes:
                for address in d.who_has:
                    held[address] = held.get(address, 0) + d.nbytes
        if not held:
            return None
        workers = self.workers
        return self._best_of(t, q, [workers[a] for a in held if a in workers], x, xq)

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

    # -- EASY reservation -------------------------------------------------------------------

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
        demand = xq.resources
        if xq.restrict is not None:
            return [w for w in self.restricted(xq.restrict) if demand.fits(w.total_units)]
        workers = self.workers
        fitting_totals = [a for total, a in self.index.totals.items() if demand.fits(total)]
        if sum(len(a) for a in fitting_totals) <= RESERVATION_SCAN:
            return [workers[a] for addresses in fitting_totals for a in addresses]
        hosts: dict[str, WorkerInfo] = {}
        buckets = self.index.free.get(xq.primary)
        if buckets is not None:
            for units in reversed(buckets.keys):
                for address in buckets.groups[units]:
                    w = workers[address]
                    if demand.fits(w.total_units):
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
        now = self.state.now
        demand = xq.resources
        names = xq.names
        free_units = w.free_units
        free = {n: free_units.get(n, 0) for n in names}
        threads = w.nthreads - len(w.processing) - len(w.stopping)
        start = now
        if threads < 1 or any(free[n] < demand[n] for n in names):
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
                if threads >= 1 and all(free[n] >= demand[n] for n in names):
                    start = end
                    break
        spare = {n: free[n] - demand[n] for n in names}
        return Reservation(x, w, start, spare, threads - 1, w.version, now)

    # -- why a shape cannot run anywhere ----------------------------------------------------------

    def unrunnable_reason(self, q: ShapeQueue) -> str | None:
        demand = q.resources
        error = demand_error(demand)
        if error:
            return error
        if not self.index.by_name:
            return "no workers connected yet"
        if not self.index.totals:
            return "every connected worker is draining"
        where = ""
        if q.restrict is not None:
            allowed = self.restricted(q.restrict)
            if not allowed:
                names = ", ".join(sorted(q.restrict))
                by_name = self.index.by_name
                if any(by_name.get(n, n) in self.workers for n in q.restrict):
                    return f"restricted to workers {names}, which are draining"
                return f"restricted to workers {names}, and none of them is connected"
            totals = [w.resources for w in allowed]
            where = " among the allowed workers"
        else:
            totals = list(self.index.totals)
        if q.empty or any(demand.fits(total) for total in totals):
            return None
        offered = set().union(*(total.names() for total in totals))
        missing = demand.missing_names(offered)
        if missing:
            s = "s" if len(missing) > 1 else ""
            return f"no worker{where} offers resource{s} {', '.join(missing)}"
        too_large = []
        for n in q.names:
            largest = max(total.get(n, 0) for total in totals)
            if demand[n] > largest:
                too_large.append(
                    f"{n}={format_units(demand[n])} but the largest worker{where} offers "
                    f"{n}={format_units(largest)}"
                )
        if too_large:
            return "needs " + "; ".join(too_large)
        return f"needs {demand} but no single worker{where} offers all of it"

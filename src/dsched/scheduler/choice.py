"""Choosing a worker for a queued task, among those that can start it now (the fit's
``startable``) without delaying the reservation (backfill's ``blocks``): near its inputs (or
its group's: ``groups.py``), else the best fit for GPU demands, else the least loaded;
restricted tasks among the workers they name. The placer holds one and asks it; it changes
nothing.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Iterable, Mapping

from .backfill import Backfill
from .fit import Fit, allowed_workers
from .groups import group_workers
from .queue import ShapeQueue
from .task import Task
from .worker import WorkerIndex, WorkerInfo


class WorkerChoice:
    """The placer's search: ``find`` and what it calls. It reads the connected ``workers``,
    their ``index``, the ``fit`` and the ``backfill`` reservation."""

    def __init__(self, workers: Mapping[str, WorkerInfo], index: WorkerIndex, fit: Fit,
                 backfill: Backfill):
        self.workers = workers
        self.index = index
        self.fit = fit
        self.backfill = backfill

    def find(self, t: Task, q: ShapeQueue, x: Task | None = None,
             xq: ShapeQueue | None = None) -> WorkerInfo | None:
        """The worker to start ``t`` on now, or None. ``x`` (of ``xq``): the task holding the
        reservation this pass, which a placement must not delay."""
        if t.deps or t.dependents:  # near its inputs, or its group's
            w = (self._by_locality if t.deps else self._by_group)(t, q, x, xq)
            if w is not None:
                return w
        workers = self.workers
        if q.restrict is not None:
            return self.best_of(t, q, allowed_workers(q.restrict, workers, self.index.by_name),
                                x, xq)
        startable = self.fit.startable
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
            if self.fit.startable(t, q, w) and not (x is not None
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
        startable = self.fit.startable
        blocks = self.backfill.blocks
        for w in candidates:
            if not startable(t, q, w):
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
        units = w.room.units.get(q.primary, 0)
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

    def _by_group(self, t: Task, q: ShapeQueue, x: Task | None,
                  xq: ShapeQueue | None) -> WorkerInfo | None:
        """The best of the workers where ``t``'s group is that can start it now, or None."""
        workers = self.workers
        found = [workers[a] for a in group_workers(t) or () if a in workers]
        if not found:
            return None
        return self.best_of(t, q, found, x, xq)

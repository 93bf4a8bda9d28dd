"""The ready queue, indexed by shape: one heap per (resources, worker restriction).

Tasks of one shape are interchangeable for placement, so the scheduler looks only at the
head of each heap; the cost of a decision does not grow with the number of queued tasks of
other shapes. Heaps are keyed by ``Task.order`` (higher priority first, then submission
order). Removal is lazy: an entry whose task no longer points at the queue is skipped.
(Backfill looks at heads only too: a short task behind a long one of its own shape waits.)

Pure: no I/O, no clock.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque
from heapq import heappop, heappush
from typing import Iterator

from ..resources import EMPTY, Resources
from .fit import Shape, could_host
from .task import Task

ShapeKey = tuple  # (Resources, frozenset[str] | None)


class ShapeQueue(Shape):
    """Queued tasks of one shape (what they demand: ``Shape``), and what the scheduler knows
    about that shape: ``reason`` says why no connected worker can ever run them (None: some
    worker can).
    """

    __slots__ = (
        "qid", "key", "heap", "live", "jobs", "reason", "reason_kind", "unrunnable_since",
        "fifo", "head_order", "passed_head", "passed",
    )

    def __init__(self, qid: int, key: ShapeKey, offered: dict[str, int]):
        resources, restrict = key
        super().__init__(resources, restrict, offered)
        self.qid = qid
        self.key = key
        self.heap: list[tuple[int, Task]] = []
        self.live = 0
        self.jobs = 0  # of ``live``, the job attempts (not counted among tasks in views)
        self.reason: str | None = None
        self.reason_kind: str | None = None  # see ``reasons.REASON_KINDS``
        self.unrunnable_since = 0.0
        self.fifo: deque[Task] | None = None
        self.head_order: int | None = None
        #: The head another task was placed in front of, and how many times (``groups.py``).
        self.passed_head: Task | None = None
        self.passed = 0

    def tasks(self) -> list[Task]:
        """The live tasks, in queue order."""
        seen: dict[Task, None] = {}
        for _, t in sorted(self.heap, key=lambda e: e[0]):
            if t.queue is self:
                seen[t] = None
        return list(seen)

    def __repr__(self) -> str:
        return f"<ShapeQueue {self.resources} {self.restrict} {self.live}>"


class ReadyQueue:
    """All queued tasks. ``heads`` is the sorted list of (head order, qid, queue) of every
    non-empty queue; ``dirty`` holds the qids whose head changed since the last pass."""

    def __init__(self) -> None:
        self.queues: dict[ShapeKey, ShapeQueue] = {}
        self.by_id: dict[int, ShapeQueue] = {}
        self.heads: list[tuple[int, int, ShapeQueue]] = []
        self.dirty: set[int] = set()
        #: The queues of resource-free shapes, whose heads ``ahead_for`` may hold back: dirty
        #: again whenever a head of a queue with resources moves (``_moved``).
        self.resource_free: set[int] = set()
        self.size = 0
        self._next_qid = 0
        self._shapes: dict[frozenset, Resources] = {}

    def shape(self, resources: Resources | None) -> Resources:
        """One Resources object per distinct demand: the queue index then hits on identity
        instead of comparing equal vectors (and an empty demand is always EMPTY)."""
        if resources is None:
            return EMPTY
        key = frozenset(resources.to_wire().items())
        shape = self._shapes.get(key)
        if shape is None:
            if len(self._shapes) > 10_000:
                self._shapes.clear()
            shape = self._shapes[key] = EMPTY if resources.is_empty() else resources
        return shape

    def ahead_for(self, order: int, w) -> bool:
        """Whether the head of a queue ahead of ``order`` demands resources and may run on
        worker ``w`` once a thread is free there: a task sent ahead to ``w`` (prefetched)
        would take that thread first, overtaking it."""
        for head_order, _, q in self.heads:
            if head_order >= order:
                return False
            if q.empty or q.reason is not None:
                continue
            if could_host(q, w):
                return True
        return False

    def push(self, t: Task, offered: dict[str, int]) -> tuple[ShapeQueue, bool]:
        """Queue ``t``; returns its queue and whether that queue is new."""
        key = (t.resources, t.restrict)
        q = self.queues.get(key)
        created = q is None
        if q is None:
            self._next_qid += 1
            q = ShapeQueue(self._next_qid, key, offered)
            self.queues[key] = q
            self.by_id[q.qid] = q
            if q.empty:
                self.resource_free.add(q.qid)
        heappush(q.heap, (t.order, t))
        t.queue = q
        q.live += 1
        if t.job is not None:
            q.jobs += 1
        self.size += 1
        if q.head_order is None or t.order < q.head_order:
            self._set_head(q, t.order)
        if q.fifo is not None:
            q.fifo.append(t)
        return q, created

    def head(self, q: ShapeQueue) -> Task | None:
        heap = q.heap
        while heap:
            t = heap[0][1]
            if t.queue is q:
                return t
            heappop(heap)
        return None

    def following(self, q: ShapeQueue, limit: int) -> Iterator[Task]:
        """Up to ``limit`` live tasks of ``q`` after its head, in queue order, each once: a
        walk down the top of the heap, not a sort of it. It passes at most ``4 * limit``
        entries, so fewer come back when many removed ones lie near the top."""
        heap = q.heap
        n = len(heap)
        head = heap[0][1] if heap else None
        seen = {head}  # a task queued again has an older entry too
        frontier = sorted((heap[i][0], i) for i in (1, 2) if i < n)
        steps = 4 * limit
        while frontier and limit and steps:
            steps -= 1
            _, i = heappop(frontier)
            t = heap[i][1]
            if t.queue is q and t not in seen:
                seen.add(t)
                limit -= 1
                yield t
            for child in (2 * i + 1, 2 * i + 2):
                if child < n:
                    heappush(frontier, (heap[child][0], child))

    def pop(self, q: ShapeQueue) -> Task:
        """Take the head of ``q`` (to place it)."""
        heap = q.heap
        t = heappop(heap)[1]
        t.queue = None
        q.live -= 1
        if t.job is not None:
            q.jobs -= 1
        self.size -= 1
        while heap and heap[0][1].queue is not q:
            heappop(heap)
        if heap:  # the usual case, inlined: the next task becomes the head
            heads = self.heads
            del heads[bisect_left(heads, (q.head_order, q.qid))]
            q.head_order = order = heap[0][0]
            insort(heads, (order, q.qid, q))
            self.dirty.add(q.qid)
            self.moved(q)
        else:
            self._head_changed(q)
        return t

    def take(self, t: Task, q: ShapeQueue) -> None:
        """Take ``t`` out of ``q`` to place it: the head, or a task behind it (``groups.py``),
        when the head stays."""
        if t is q.heap[0][1]:
            self.pop(q)
        else:
            self.remove(t)

    def remove(self, t: Task) -> None:
        """Take ``t`` out of its queue wherever it stands (cancel, timeout, lost input)."""
        q = t.queue
        assert q is not None
        t.queue = None
        q.live -= 1
        if t.job is not None:
            q.jobs -= 1
        self.size -= 1
        if q.heap[0][1] is t:
            self._head_changed(q)

    def _head_changed(self, q: ShapeQueue) -> None:
        t = self.head(q)
        if t is None:
            if q.head_order is not None:
                del self.heads[bisect_left(self.heads, (q.head_order, q.qid))]
            del self.queues[q.key]
            del self.by_id[q.qid]
            self.dirty.discard(q.qid)
            self.resource_free.discard(q.qid)
            self.moved(q)
            q.head_order = None
            q.heap.clear()
        else:
            self._set_head(q, t.order)

    def _set_head(self, q: ShapeQueue, order: int) -> None:
        heads = self.heads
        if q.head_order is not None:
            del heads[bisect_left(heads, (q.head_order, q.qid))]
        q.head_order = order
        insort(heads, (order, q.qid, q))
        self.dirty.add(q.qid)
        self.moved(q)

    def moved(self, q: ShapeQueue) -> None:
        """The head of ``q`` changed, left, or became unrunnable: if it demands resources, the
        resource-free heads it held back from being sent ahead (``ahead_for``) may go now."""
        if not q.empty and self.resource_free:
            self.dirty |= self.resource_free

    def __len__(self) -> int:
        return self.size

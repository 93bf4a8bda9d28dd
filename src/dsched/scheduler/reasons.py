"""Why queued tasks cannot run on any connected worker: the one place that says so.

The reasons are distinct, each in words a user can act on: a request no worker could ever
grant (a GPU fraction above one); no workers yet; every worker draining; a restriction to
workers that are not connected (or are draining); a resource name no worker offers; more of
a resource than the largest worker offers; or a combination no single worker offers. A shape
queue carries its reason while it has one; its clients are told when it changes, and
``no_worker_timeout`` fails the tasks that waited with a reason for too long. Each reason
also has a kind, one short fixed name (``REASON_KINDS``), kept on the queue beside the words,
for job reasons, metrics labels and filters. Whether a worker could ever start a task is the
fit's (``fit.py``); this module says why none can.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import deque
from typing import Mapping

from ..devices import shortfall
from ..resources import demand_error, format_units
from .actions import INFO
from .fit import allowed_workers, could_host, holds
from .outbox import Outbox
from .queue import ReadyQueue, ShapeQueue
from .task import Task
from .worker import WorkerIndex, WorkerInfo


#: The kinds of reason, in the order ``Reasons.of`` looks for them.
REASON_KINDS = ("invalid_request", "no_workers", "all_draining", "restricted",
                "missing_resource", "too_large", "no_single_worker")


class Reasons:
    """The reasons of the queues of the ready ``queue`` (it sets them there, and marks the
    queues that can run again). ``unrunnable`` holds the queues that have one. It reads the
    connected ``workers`` and their ``index``; it tells clients and logs through ``out``."""

    def __init__(self, queue: ReadyQueue, index: WorkerIndex,
                 workers: Mapping[str, WorkerInfo], out: Outbox):
        self.queue = queue
        self.index = index
        self.workers = workers
        self.out = out
        self.unrunnable: dict[int, ShapeQueue] = {}

    def of(self, q: ShapeQueue) -> tuple[str, str] | None:
        """Why no connected worker can ever start the tasks of ``q`` (its kind, one of
        ``REASON_KINDS``, and the words), or None if one can."""
        demand = q.resources
        error = demand_error(demand)
        if error:
            return "invalid_request", error
        index = self.index
        if not index.by_name:
            return "no_workers", "no workers connected yet"
        if not index.totals:
            return "all_draining", "every connected worker is draining"
        where = ""
        if q.restrict is not None:
            allowed = allowed_workers(q.restrict, self.workers, index.by_name)
            if not allowed:
                names = ", ".join(sorted(q.restrict))
                if any(index.by_name.get(n, n) in self.workers for n in q.restrict):
                    return "restricted", f"restricted to workers {names}, which are draining"
                return "restricted", (f"restricted to workers {names}, and none of them is "
                                      "connected")
            totals = [w.resources for w in allowed]
            where = " among the allowed workers"
        else:
            totals = list(index.totals)
            allowed = None
        if q.empty or any(holds(q, total) for total in totals):
            if not q.memory:  # with no memory asked, the totals say as much as the devices
                return None
            if allowed is None:
                allowed = [self.workers[a] for total in totals for a in index.totals[total]]
            if any(could_host(q, w) for w in allowed):
                return None
            books = [w.room.devices for w in allowed if w.room.devices is not None]
            return "too_large", shortfall(demand, books, free=False)
        offered = set().union(*(total.names() for total in totals))
        missing = demand.missing_names(offered)
        if missing:
            s = "s" if len(missing) > 1 else ""
            return "missing_resource", f"no worker{where} offers resource{s} {', '.join(missing)}"
        too_large = []
        for n in q.names:
            largest = max(total.get(n, 0) for total in totals)
            if demand[n] > largest:
                too_large.append(
                    f"{n}={format_units(demand[n])} but the largest worker{where} offers "
                    f"{n}={format_units(largest)}"
                )
        if too_large:
            return "too_large", "needs " + "; ".join(too_large)
        return "no_single_worker", f"needs {demand} but no single worker{where} offers all of it"

    def refresh(self) -> None:
        """The workers changed: look at every queue's reason again."""
        for q in list(self.queue.queues.values()):
            self.set(q, self.of(q))

    def set(self, q: ShapeQueue, judged: tuple[str, str] | None) -> None:
        """Give ``q`` its reason (``of``; None: it can run now) and tell the clients of its
        tasks."""
        old = q.reason
        reason = judged[1] if judged is not None else None
        if reason == old:
            return
        q.reason = reason
        q.reason_kind = judged[0] if judged is not None else None
        if reason is None:
            q.fifo = None
            self.unrunnable.pop(q.qid, None)
            self.queue.dirty.add(q.qid)
            self.out.log(INFO, "Tasks needing %s can run again", q.resources or "nothing")
        else:
            self.queue.moved(q)  # it holds nothing back from being sent ahead now
            if old is None:
                q.unrunnable_since = self.out.now
                q.fifo = deque(sorted(q.tasks(), key=lambda t: t.queued_at))
                self.unrunnable[q.qid] = q
            self.out.log(INFO, "Tasks needing %s cannot run: %s", q.resources or "nothing",
                         reason)
        tell = self.out.tell_waiting
        for t in q.tasks():
            for client in t.wanted_by:
                tell(client, reason, t.key)

    def expired(self, timeout: float) -> list[tuple[Task, str]]:
        """The tasks that waited with a reason for ``timeout`` seconds, and what to say."""
        now = self.out.now
        by_id = self.queue.by_id
        ended = []
        for qid, q in list(self.unrunnable.items()):
            if by_id.get(qid) is not q or q.fifo is None:
                del self.unrunnable[qid]
                continue
            fifo = q.fifo
            while fifo:
                t = fifo[0]
                if t.queue is not q:
                    fifo.popleft()
                    continue
                if max(t.queued_at, q.unrunnable_since) + timeout > now:
                    break
                fifo.popleft()
                ended.append((t, f"no worker could run this task for {timeout:g} s: {q.reason}"))
        return ended

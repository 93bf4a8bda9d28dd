"""The task lifecycle of SchedulerState: submit, wait, queue, end, release, recompute.

A mixin that SchedulerState is built from, split out to keep each file readable; it holds
no state of its own. Tasks move waiting -> queued -> processing -> memory (-> released), or
end erred; every end is reported once per task (incarnation). A result is kept while a
client wants it or a dependent still has to run; a task's record is kept while dependents
exist, so that a lost result can be recomputed from its inputs. Nothing here cancels a task:
a client's cancel drops that client's interest, and a task that no client wants and nothing
waits on goes back to released (stopped where it runs), to be forgotten once nothing refers
to it, or computed again if something comes to need it.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Iterable

from ..resources import EMPTY, Resources
from .actions import DEBUG, INFO, ReportCancelled, ReportErred, ReportFinished, ReportMoved
from .events import TaskSpec
from .queue import ShapeQueue
from .task import (
    ACTIVE, ERRED, MEMORY, PROCESSING, QUEUED, RELEASED, WAITING, Task, default_prefix,
)

if TYPE_CHECKING:
    from .state import SchedulerState

    _Base = SchedulerState
else:
    _Base = object


class Lifecycle(_Base):
    _release_work: list[Task]
    _shapes: dict[frozenset, Resources]
    _waiting_reports: dict[tuple[str, str | None], list[str]]

    # -- submission -----------------------------------------------------------------------------

    def _submit(self, client: str, specs: Iterable[TaskSpec]) -> None:
        tasks = self.tasks
        new: dict[Task, TaskSpec] = {}
        seen: set[str] = set()
        for spec in specs:
            key = spec.key
            if key in seen:
                continue
            seen.add(key)
            old = tasks.get(key)
            if old is not None and old.state is not ERRED:
                if spec.wanted:
                    self._want(old, client)
                continue
            resources = self._shape_of(spec.resources)
            restrict = frozenset(spec.workers) if spec.workers else None
            t = Task(
                key, spec.spec, resources, spec.priority, self._next_order(spec.priority),
                max(0, spec.retries), restrict, spec.prefix or default_prefix(key),
            )
            if old is not None:  # an erred or cancelled key submitted again runs afresh
                t.wanted_by = old.wanted_by
                for d in old.deps:
                    d.dependents.pop(old, None)
                    self._release_work.append(d)
            tasks[key] = t
            new[t] = spec
        if not any(spec.dependencies for spec in new.values()):
            for t, spec in new.items():  # the usual batch: independent tasks
                if spec.wanted and client not in t.wanted_by:
                    t.wanted_by += (client,)
                    self.clients.setdefault(client, {})[t.key] = None
                self._enqueue(t)
                if not t.wanted_by:
                    self._release_work.append(t)
            return
        unknown: dict[Task, str] = {}
        for t, spec in new.items():
            deps: dict[Task, None] = {}
            for dep_key in spec.dependencies:
                d = tasks.get(dep_key)
                if d is None:
                    unknown.setdefault(t, dep_key)
                elif d is not t:
                    deps[d] = None
                else:
                    unknown.setdefault(t, "")  # depends on itself: a cycle
            t.deps = tuple(deps)
            for d in deps:
                d.dependents[t] = None
            if spec.wanted and client not in t.wanted_by:
                t.wanted_by += (client,)
                self.clients.setdefault(client, {})[t.key] = None
        # Kahn's order within the batch, so inputs are computed before their dependents.
        pending = {t: sum(1 for d in t.deps if d in new) for t in new}
        ordered = [t for t, n in pending.items() if n == 0]
        for t in ordered:
            for dd in t.dependents:
                if dd in pending:
                    pending[dd] -= 1
                    if pending[dd] == 0:
                        ordered.append(dd)
        for t in ordered:
            if t in unknown and unknown[t]:
                self._fail(t, "unknown_dependency", f"unknown dependency {unknown[t]!r}")
            elif t in unknown:
                self._fail(t, "cycle", "the task depends on itself")
            else:
                self._compute(t)
        for t, n in pending.items():
            if n > 0:
                self._fail(t, "cycle", "the task is part of (or depends on) a dependency cycle")
        for t in new:
            if not t.wanted_by:
                self._release_work.append(t)

    def _shape_of(self, resources) -> Resources:
        """One Resources object per distinct demand: the queue index then hits on identity
        instead of comparing equal vectors (and an empty demand is always EMPTY)."""
        if resources is None:
            return EMPTY
        units = resources.to_wire()
        key = frozenset(units.items())
        shape = self._shapes.get(key)
        if shape is None:
            if len(self._shapes) > 10_000:
                self._shapes.clear()
            shape = self._shapes[key] = EMPTY if resources.is_empty() else resources
        return shape

    def _want(self, t: Task, client: str) -> None:
        if client in t.wanted_by:
            return
        t.wanted_by += (client,)
        self.clients.setdefault(client, {})[t.key] = None
        if t.state is MEMORY:
            self._actions.append(ReportFinished(
                key=t.key, clients=(client,), nbytes=t.nbytes, who_has=tuple(t.who_has or ())))
        elif t.state is RELEASED:
            t.reported = False
            self._compute(t)
        elif t.state is QUEUED and t.queue is not None and t.queue.reason is not None:
            self._waiting_reports.setdefault((client, t.queue.reason), []).append(t.key)

    def _unwant(self, key: str, client: str) -> None:
        keys = self.clients.get(client)
        if keys is not None:
            keys.pop(key, None)
            if not keys:
                del self.clients[client]
        t = self.tasks.get(key)
        if t is None or client not in t.wanted_by:
            return
        t.wanted_by = tuple(c for c in t.wanted_by if c != client)
        self._release_work.append(t)

    # -- becoming ready -------------------------------------------------------------------------

    def _compute(self, root: Task) -> None:
        """(Re)start ``root``: wait for its inputs (recomputing released ones) or queue it."""
        stack = [root]
        while stack:
            t = stack.pop()
            t.state = WAITING
            t.waiting_on = None
            failed = next((d for d in t.deps if d.state is ERRED), None)
            if failed is not None:
                self._fail(t, "dependency", f"dependency {failed.key} failed: "
                           f"{failed.end_reason}", failed.exception)
                continue
            waiting = None
            for d in t.deps:
                d.waiters[t] = None
                state = d.state
                if state is MEMORY:
                    continue
                if state is RELEASED:
                    d.state = WAITING  # claimed here, computed when popped
                    stack.append(d)
                if waiting is None:
                    waiting = {}
                waiting[d] = None
            if waiting is not None:
                t.waiting_on = waiting
            else:
                self._enqueue(t)

    def _enqueue(self, t: Task) -> None:
        t.state = QUEUED
        t.queued_at = self.now
        q, created = self.queue.push(t, self.index.offered)
        if created:
            reason = self.policy.unrunnable_reason(q)
            if reason is not None:
                self._set_reason(q, reason)
                return
        reason = q.reason
        if reason is not None:
            for client in t.wanted_by:
                self._waiting_reports.setdefault((client, reason), []).append(t.key)

    def _dependency_done(self, t: Task) -> None:
        """``t`` is in memory: its waiting dependents may be ready; its inputs may go."""
        for d in t.deps:
            d.waiters.pop(t, None)
            self._release_work.append(d)
        for dd in t.waiters:
            waiting_on = dd.waiting_on
            if dd.state is WAITING and waiting_on and t in waiting_on:
                del waiting_on[t]
                if not waiting_on:
                    dd.waiting_on = None
                    self._enqueue(dd)
        if not t.wanted_by and not t.waiters:
            self._release_work.append(t)

    # -- unrunnable reasons ---------------------------------------------------------------------

    def _refresh_reasons(self) -> None:
        for q in list(self.queue.queues.values()):
            self._set_reason(q, self.policy.unrunnable_reason(q))
        r = self.policy.reservation
        if r is not None and (r.task.queue is None or r.task.queue.reason is not None):
            self.policy.reservation = None

    def _set_reason(self, q: ShapeQueue, reason: str | None) -> None:
        old = q.reason
        if reason == old:
            return
        q.reason = reason
        if reason is None:
            q.fifo = None
            self._unrunnable.pop(q.qid, None)
            self.queue.dirty.add(q.qid)
            self._log(INFO, "Tasks needing %s can run again", q.resources or "nothing")
        else:
            if old is None:
                q.unrunnable_since = self.now
                q.fifo = deque(sorted(q.tasks(), key=lambda t: t.queued_at))
                self._unrunnable[q.qid] = q
            self._log(INFO, "Tasks needing %s cannot run: %s", q.resources or "nothing", reason)
        reports = self._waiting_reports
        for t in q.tasks():
            for client in t.wanted_by:
                reports.setdefault((client, reason), []).append(t.key)

    # -- ends -------------------------------------------------------------------------------------

    def _leave_active(self, t: Task) -> None:
        if t.state is QUEUED and t.queue is not None:
            self.queue.remove(t)
        elif t.state is PROCESSING and t.processing_on is not None:
            self._stop_on_worker(t)
        elif t.retry_at is not None:
            t.retry_at = None
            del self.retrying[t]
        t.waiting_on = None
        for d in t.deps:
            d.waiters.pop(t, None)
            self._release_work.append(d)
        self._release_work.append(t)

    def _fail(self, root: Task, error: str, text: str, exception: bytes = b"") -> None:
        """End ``root`` erred, and every dependent still to run with it."""
        stack = [(root, error, text)]
        while stack:
            t, error, text = stack.pop()
            if t.state not in ACTIVE:
                continue
            self._leave_active(t)
            t.state = ERRED
            t.error = error
            t.end_reason = text
            t.exception = exception
            self._report_end(t)
            for dd in t.waiters:
                if dd.state is WAITING or dd.state is QUEUED:
                    stack.append((dd, "dependency", f"dependency {t.key} failed: {text}"))

    def _cancel_for(self, client: str, roots: Iterable[Task]) -> None:
        """``client`` cancels ``roots``: it stops wanting them and the tasks it wants that
        depend on them (its futures of those end cancelled). What nobody wants any more then
        stops, through the releases; what other clients still want runs on for them."""
        stack = [(t, f"cancelled by client {client}") for t in roots]
        seen: set[Task] = set()
        while stack:
            t, reason = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            if client in t.wanted_by:
                if t.state in ACTIVE and not t.reported:  # not one already told finished
                    self._actions.append(ReportCancelled(key=t.key, clients=(client,),
                                                         reason=reason))
                self._unwant(t.key, client)
            for dd in t.waiters:
                stack.append((dd, f"dependency {t.key} was cancelled"))

    def _report_end(self, t: Task) -> None:
        if t.reported:
            if t.state is MEMORY and t.wanted_by:  # recomputed after a loss: say where now
                self._actions.append(ReportMoved(key=t.key, clients=t.wanted_by,
                                                 who_has=tuple(t.who_has or ())))
            return
        t.reported = True
        state = t.state
        if state is MEMORY:
            self._actions.append(ReportFinished(
                key=t.key, clients=t.wanted_by, nbytes=t.nbytes, who_has=tuple(t.who_has or ())))
        else:
            self._actions.append(ReportErred(
                key=t.key, clients=t.wanted_by, error=t.error or "exception",
                text=t.end_reason or "", exception=t.exception))
            self._log(INFO, "Task %s erred (%s): %s", t.key, t.error, t.end_reason)

    # -- releasing and forgetting -----------------------------------------------------------------

    def _drain_releases(self) -> None:
        """Free results nothing needs, stop tasks nothing wants, forget what is done."""
        work = self._release_work
        tasks = self.tasks
        while work:
            t = work.pop()
            if t.wanted_by or tasks.get(t.key) is not t:
                continue
            state = t.state
            if state in ACTIVE:
                if t.waiters:
                    continue
                self._leave_active(t)  # stopped where it runs; computed again if needed
                t.state = RELEASED
            elif state is MEMORY:
                if t.waiters:
                    continue
                for address in t.who_has or ():
                    self._to_free.setdefault(address, []).append(t.key)
                    self.workers[address].has_what.pop(t.key, None)
                t.who_has = None
                t.state = RELEASED
            if t.dependents:
                continue
            del tasks[t.key]
            for d in t.deps:
                d.dependents.pop(t, None)
                d.waiters.pop(t, None)
                work.append(d)

    def _lose(self, t: Task) -> None:
        """No worker holds the result of ``t`` any more: compute it again when a client wants
        it or a dependent still has to start. Dependents already running have their copy (or
        report the input missing, which brings them back here)."""
        t.who_has = None
        if t.state is not MEMORY:
            return
        t.state = RELEASED
        if not t.wanted_by and all(dd.state is PROCESSING for dd in t.waiters):
            self._release_work.append(t)
            return
        self.counters["recomputed"] += 1
        for dd in t.waiters:
            if dd.state is QUEUED:
                self.queue.remove(dd)
                dd.state = WAITING
                dd.waiting_on = {t: None}
            elif dd.state is WAITING:
                if dd.retry_at is not None:  # refused by a worker; now it needs its input
                    dd.retry_at = None
                    del self.retrying[dd]
                if dd.waiting_on is None:
                    dd.waiting_on = {}
                dd.waiting_on[t] = None
        self._log(DEBUG, "The result of task %s was lost; computing it again", t.key)
        self._compute(t)

"""The task graph and the lifecycle of its tasks: submit, wait, queue, end, release, recompute.

Tasks move waiting -> queued -> processing -> memory (-> released), or end erred; every end is
reported once per task (incarnation) to the clients that want it. A result is kept while a
client wants it or a dependent still has to run; a task's record is kept while dependents
exist, so that a lost result can be recomputed from its inputs, through any depth of lost
ancestors. Nothing here cancels a task: a client's cancel drops that client's interest, and a
task that no client wants and nothing waits on goes back to released (stopped where it runs),
to be forgotten once nothing refers to it, or computed again if something comes to need it.
A failed attempt, of a task or of a job, is charged to the budget of its kind of failure
(``budget.py``), and runs again at once, after a back-off, or fails (``attempt_failed``).
Where a queued task runs is the placer's business; this graph only hands tasks to it.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Iterable

from ..resources import Resources
from .actions import DEBUG, TellCancelled, TellErred, TellFinished, TellMoved
from .budget import BUDGETS, LOST, Failure, FailureBudget
from .events import TaskSpec
from .outbox import Outbox
from .placer import Placer
from .submission import submit
from .task import ACTIVE, ERRED, MEMORY, PROCESSING, QUEUED, RELEASED, WAITING, Task
from .worker import WorkerInfo

#: Submission order fits below this; priority is scaled above it in ``Task.order``.
_ORDER_SHIFT = 48
#: The spec of a task the worker does not run as a function (a job's attempt).
_NO_SPEC = (b"", b"")


class TaskGraph:
    """``tasks`` by key; ``clients``: the keys each client wants; ``retrying``: tasks a
    worker refused (or the next attempts of jobs), waiting until their ``retry_at`` to be
    queued again. ``workers`` is the membership's dict (read here to free results).
    ``allowed_failures`` and ``max_rejections`` are settings of the budget (``budget.py``)."""

    def __init__(self, workers: dict[str, WorkerInfo], placer: Placer, out: Outbox, *,
                 allowed_failures: int, max_rejections: int):
        self.workers = workers
        self.placer = placer
        self.out = out
        self.budget = FailureBudget(out, allowed_failures=allowed_failures,
                                    max_rejections=max_rejections)
        self.tasks: dict[str, Task] = {}
        self.clients: dict[str, dict[str, None]] = {}
        self.retrying: dict[Task, None] = {}
        #: Tasks that may have become releasable; ``drain_releases`` looks at each.
        self.release_work: list[Task] = []
        self._seq = 0

    # -- submission -----------------------------------------------------------------------------

    def submit(self, client: str, specs: Iterable[TaskSpec]) -> None:
        """A client's batch of tasks (``submission.py``)."""
        submit(self, client, specs)

    def add(self, key: str, resources: Resources, priority: int, client: str,
            prefix: str, order: int | None = None) -> Task:
        """A task without inputs or dependents, wanted by ``client``, not yet queued: the
        attempt of a job (the job book queues or books it). ``order``: its place in the
        queue, when it takes the place of an earlier attempt; else a new one, the last."""
        t = Task(key, _NO_SPEC, self.placer.queue.shape(resources), priority,
                 self.next_order(priority) if order is None else order, 0, None, prefix)
        t.wanted_by = (client,)
        self.clients.setdefault(client, {})[key] = None
        self.tasks[key] = t
        return t

    def drop(self, t: Task) -> None:
        """Forget ``t`` (made by ``add``): out of the queue, or stopped where it runs (unless
        that worker is gone, or has said it ended)."""
        if t.state is QUEUED or t.retry_at is not None or t.processing_on in self.workers:
            self.leave_active(t)
        if t.state is not RELEASED:  # else stopped already, and now its worker is gone
            t.move("release")
        if self.tasks.get(t.key) is t:
            del self.tasks[t.key]
        for client in t.wanted_by:
            keys = self.clients[client]
            del keys[t.key]
            if not keys:
                del self.clients[client]
        t.wanted_by = ()

    def want(self, t: Task, client: str) -> None:
        if client in t.wanted_by:
            return
        t.wanted_by += (client,)
        self.clients.setdefault(client, {})[t.key] = None
        if t.state is MEMORY:
            self.out.actions.append(TellFinished(
                key=t.key, clients=(client,), nbytes=t.nbytes, who_has=tuple(t.who_has or ())))
        elif t.state is RELEASED:
            t.reported = False
            self.compute(t)
        elif t.state is QUEUED and t.queue is not None and t.queue.reason is not None:
            self.out.tell_waiting(client, t.queue.reason, t.key)

    def unwant(self, key: str, client: str) -> None:
        keys = self.clients.get(client)
        if keys is not None:
            keys.pop(key, None)
            if not keys:
                del self.clients[client]
        t = self.tasks.get(key)
        if t is None or client not in t.wanted_by:
            return
        t.wanted_by = tuple(c for c in t.wanted_by if c != client)
        self.release_work.append(t)

    # -- becoming ready -------------------------------------------------------------------------

    def compute(self, root: Task) -> None:
        """(Re)start ``root``: wait for its inputs (recomputing released ones) or queue it."""
        stack = [root]
        while stack:
            t = stack.pop()
            if t.state is not WAITING:
                t.move("wait")
            t.waiting_on = None
            failed = next((d for d in t.deps if d.state is ERRED), None)
            if failed is not None:
                self.fail(t, "dependency", f"dependency {failed.key} failed: "
                           f"{failed.end_reason}", failed.exception)
                continue
            waiting = None
            for d in t.deps:
                d.waiters[t] = None
                state = d.state
                if state is MEMORY:
                    continue
                if state is RELEASED:
                    d.move("wait")  # claimed here, computed when popped
                    stack.append(d)
                if waiting is None:
                    waiting = {}
                waiting[d] = None
            if waiting is not None:
                t.waiting_on = waiting
            else:
                self.placer.enqueue(t)

    def dependency_done(self, t: Task) -> None:
        """``t`` is in memory: its waiting dependents may be ready; its inputs may go."""
        for d in t.deps:
            d.waiters.pop(t, None)
            self.release_work.append(d)
        for dd in t.waiters:
            waiting_on = dd.waiting_on
            if dd.state is WAITING and waiting_on and t in waiting_on:
                del waiting_on[t]
                if not waiting_on:
                    dd.waiting_on = None
                    self.placer.enqueue(dd)
        if not t.wanted_by and not t.waiters:
            self.release_work.append(t)

    # -- ends -------------------------------------------------------------------------------------

    def leave_active(self, t: Task) -> None:
        if t.state is QUEUED and t.queue is not None:
            self.placer.dequeue(t)
        elif t.state is PROCESSING and t.processing_on is not None:
            self.placer.stop(t)
        elif t.retry_at is not None:
            t.retry_at = None
            del self.retrying[t]
        t.waiting_on = None
        for d in t.deps:
            d.waiters.pop(t, None)
            self.release_work.append(d)
        self.release_work.append(t)

    def fail(self, root: Task, error: str, text: str, exception: bytes = b"") -> None:
        """End ``root`` erred, and every dependent still to run with it."""
        stack = [(root, error, text)]
        while stack:
            t, error, text = stack.pop()
            if t.state not in ACTIVE:
                continue
            self.leave_active(t)
            t.move("fail")
            t.error = error
            t.end_reason = text
            t.exception = exception
            self.report_end(t)
            for dd in t.waiters:
                if dd.state is WAITING or dd.state is QUEUED:
                    stack.append((dd, "dependency", f"dependency {t.key} failed: {text}"))

    def cancel_for(self, client: str, roots: Iterable[Task]) -> None:
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
                    self.out.actions.append(TellCancelled(key=t.key, clients=(client,),
                                                         reason=reason))
                self.unwant(t.key, client)
            for dd in t.waiters:
                stack.append((dd, f"dependency {t.key} was cancelled"))

    def report_end(self, t: Task) -> None:
        if t.reported:
            if t.state is MEMORY and t.wanted_by:  # recomputed after a loss: say where now
                self.out.actions.append(TellMoved(key=t.key, clients=t.wanted_by,
                                                 who_has=tuple(t.who_has or ())))
            return
        t.reported = True
        state = t.state
        if state is MEMORY:
            self.out.actions.append(TellFinished(
                key=t.key, clients=t.wanted_by, nbytes=t.nbytes, who_has=tuple(t.who_has or ())))
        else:
            self.out.actions.append(TellErred(
                key=t.key, clients=t.wanted_by, error=t.error or "exception",
                text=t.end_reason or "", exception=t.exception))
            self.out.log_failure(t.prefix, t.end_reason or "", "Task %s erred (%s)", t.key,
                                 t.error)

    # -- releasing and forgetting -----------------------------------------------------------------

    def drain_releases(self) -> None:
        """Free results nothing needs, stop tasks nothing wants, forget what is done."""
        work = self.release_work
        tasks = self.tasks
        while work:
            t = work.pop()
            if t.wanted_by or tasks.get(t.key) is not t:
                continue
            state = t.state
            if state in ACTIVE:
                if t.waiters:
                    continue
                self.leave_active(t)  # stopped where it runs; computed again if needed
                t.move("release")
            elif state is MEMORY:
                if t.waiters:
                    continue
                for address in t.who_has or ():
                    self.out.free(address, t.key)
                    self.workers[address].has_what.pop(t.key, None)
                t.who_has = None
                t.move("release")
            if t.dependents:
                continue
            del tasks[t.key]
            for d in t.deps:
                d.dependents.pop(t, None)
                d.waiters.pop(t, None)
                work.append(d)

    def lose(self, t: Task) -> None:
        """No worker holds the result of ``t`` any more: compute it again when a client wants
        it or a dependent still has to start. Dependents already running have their copy (or
        report the input missing, which brings them back here)."""
        t.who_has = None
        if t.state is not MEMORY:
            return
        t.move("lose")
        if not t.wanted_by and all(dd.state is PROCESSING for dd in t.waiters):
            self.release_work.append(t)
            return
        self.out.counters["recomputed"] += 1
        if t.reported and t.wanted_by:  # its clients wait again: for the result, or its error
            self.out.actions.append(TellMoved(key=t.key, clients=t.wanted_by, who_has=()))
            t.reported = False
        for dd in t.waiters:
            if dd.state is QUEUED:
                self.placer.dequeue(dd)
                dd.move("wait")
                dd.waiting_on = {t: None}
            elif dd.state is WAITING:
                if dd.retry_at is not None:  # refused by a worker; now it needs its input
                    dd.retry_at = None
                    del self.retrying[dd]
                if dd.waiting_on is None:
                    dd.waiting_on = {}
                dd.waiting_on[t] = None
        self.out.log(DEBUG, "The result of task %s was lost; computing it again", t.key)
        self.compute(t)

    # -- results and failed attempts -------------------------------------------------------

    def finished(self, t: Task, w: WorkerInfo, nbytes: int) -> None:
        """``t`` ran on ``w``, which holds its result now."""
        t.move("finish")
        t.nbytes = nbytes
        t.who_has = {w.address: None}
        w.has_what[t.key] = None
        self.report_end(t)
        self.dependency_done(t)

    def attempt_failed(self, t: Task, failure: Failure, text: str, worker: str = "", *,
                       counted: bool = True, exception: bytes = b"") -> tuple[float | None, str]:
        """An attempt of ``t`` failed (``failure``; ``text``: how; on ``worker``): charged to
        its budget (``budget.py``) unless not ``counted``, ``t`` runs again at once, after a
        back-off, or, out of budget, fails with its budget's error kind. Returns the seconds
        before the next try (None: out of budget) and the words of the end: a job's attempt
        is only charged to its job, and the job book acts on them (``JobBook.refused``)."""
        if failure is LOST:  # computed again where still needed, whatever follows
            self.lose(t)
        delay, words = self.budget.charge(t, failure, text, worker) if counted else (0.0, "")
        if t.job is None:
            if delay is None:
                self.fail(t, BUDGETS[failure].error, words, exception)
            elif delay:
                self.retry_later(t, text, self.out.now + delay)
            elif failure is not LOST:
                self.compute(t)
        return delay, words

    def retry_later(self, t: Task, reason: str, at: float) -> None:
        """A worker refused ``t`` (``reason``): it waits until ``at`` before it is queued
        again, unless an input was lost meanwhile (computing that input is the wait)."""
        if not all(d.state is MEMORY for d in t.deps):
            self.compute(t)
            return
        if t.state is not WAITING:  # else a job's next attempt, not yet queued
            t.move("back_off")
        t.waiting_on = None
        t.end_reason = reason
        t.retry_at = at
        self.retrying[t] = None

    def retry_due(self, now: float) -> None:
        for t in [t for t in self.retrying if t.retry_at <= now]:
            del self.retrying[t]
            t.retry_at = None
            self.placer.enqueue(t)

    def next_order(self, priority: int) -> int:
        self._seq += 1
        return (-priority << _ORDER_SHIFT) + self._seq

    def reserve_orders(self, priority: int, n: int) -> int:
        """Places for ``n`` tasks, one after another, after every task queued so far (an
        array's elements): the first of them."""
        first = self.next_order(priority)
        self._seq += n - 1
        return first

"""Jobs while their worker is away, when it returns, and after a restart of the scheduler.

A worker that goes away keeps its jobs: they stay assigned or running ("in limbo") until it
registers again, when reconciliation (``reconcile.py``) settles each one, or until its job
lease plus a margin has passed. A worker cut off for its lease kills its jobs itself, so once
that deadline is past no attempt can still run there and the job book may give the attempt up
(``JobBook.attempt_lost``) without two attempts of a job ever overlapping.

After a restart the book is loaded from the journal. Jobs that were on workers go to limbo,
their deadline counted from the load, and the scheduler recovers: it accepts submissions but
dispatches no job until every worker that held jobs has registered, or the recovery timeout
passes.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from ..jobstates import Reason
from ..protocol import ops
from . import attemptrows, reconcile as rc
from .actions import INFO, WARNING, SendAttemptAck, SendStopTask
from .job import ON_WORKER, QUEUED, Job
from .jobbook import CANCELLED, JOBS_CLIENT, JobBook
from .outbox import Outbox
from .task import Task
from .worker import WorkerInfo


class JobRecovery:
    """``lease_margin``: seconds past a vanished worker's lease before its jobs are given up;
    ``recovery_timeout``: the longest a restarted scheduler waits for the workers that held
    jobs. ``awaited``: while recovering, the names of the workers not yet back."""

    def __init__(self, book: JobBook, out: Outbox, *, lease_margin: float,
                 recovery_timeout: float):
        self.book = book
        self.out = out
        self.lease_margin = lease_margin
        self.recovery_timeout = recovery_timeout
        self.awaited: dict[str, None] = {}
        self.deadline: float | None = None

    # -- a worker goes -------------------------------------------------------------------------

    def worker_gone(self, w: WorkerInfo, tasks: Iterable[Task]) -> None:
        """``w`` is gone; ``tasks`` are the job attempts it had (running, or being stopped)."""
        book = self.book
        until = self.out.now
        for t in tasks:
            job = t.job
            book.graph.drop(t)
            job.task = None
            if job.state in ON_WORKER and job.worker == w.name and job.key == t.key:
                wait = job.lease + self.lease_margin
                job.deadline = until + wait
                job.detail = (f"worker {w.name} is unreachable; given up after {wait:g} s "
                              "unless it returns")
                book.limbo[job.id] = job

    # -- a worker comes back ------------------------------------------------------------------

    def worker_joined(self, w: WorkerInfo, attempts: Iterable[Mapping],
                      machine_restarted: bool = False) -> None:
        """``w`` registered, listing the attempts it knows (all it was sent and started,
        unless its ``machine_restarted``): settle the jobs on it."""
        book, out = self.book, self.out
        reports = []
        for wire in attempts:
            try:
                report = ops.decode(wire)
            except ops.BadOp as error:
                out.log(WARNING, "Worker %s reported a malformed attempt: %s", w.name, error)
                continue
            if type(report) in (ops.AttemptStarted, ops.AttemptEnded):
                reports.append(report)
        expected = list(book.on_worker.get(w.name, ()))
        acks = []
        for d in rc.reconcile(book.jobs, w.name, reports, expected, machine_restarted):
            kind = type(d)
            if kind is rc.Kill:
                out.log(WARNING, "Stopping %s on worker %s: %s", d.key, w.name, d.why)
                out.actions.append(SendStopTask(key=d.key, worker=w.address))
                continue
            if kind is rc.Ack:
                acks.append(d.key)
                continue
            job = book.jobs[d.job]
            out.journal(job, "reconcile")
            book.limbo.pop(job.id, None)
            job.deadline = None
            job.address = w.address
            if kind is rc.Adopt:
                self._adopt(job, w, d.report)
            elif kind is rc.Record:
                out.attempt(attemptrows.ended(job, d.report, w))
                book.attempt_ended(job, d.report)
                acks.append(d.report.key)
            elif kind is rc.PutBack:
                if job.cancelling:
                    book.end(job, CANCELLED, detail=job.detail)
                else:
                    book.requeue(job, f"attempt {job.attempt} never started on {w.name}; "
                                      "queued again")
            else:
                why = f"worker {w.name} came back without it" + (
                    " (its machine had restarted)" if machine_restarted else "")
                out.attempt(attemptrows.lost(job, why, w))
                book.attempt_lost(job, why)
        if acks:
            out.actions.append(SendAttemptAck(worker=w.address, keys=tuple(acks)))
        if w.name in self.awaited:
            del self.awaited[w.name]
            if not self.awaited:
                self._end("every worker that held jobs is back")

    def _adopt(self, job: Job, w: WorkerInfo, report: ops.AttemptStarted) -> None:
        """``job``'s current attempt runs on ``w``, back: book it there (or stop it)."""
        book = self.book
        t = book.graph.add(job.key, job.spec.resources, job.spec.priority, JOBS_CLIENT,
                           prefix="job")
        t.job = job
        if not book.placer.book(t, w, tuple(report.gpus)):
            book.graph.drop(t)
            self.out.actions.append(SendStopTask(key=job.key, worker=w.address))
            why = f"worker {w.name} came back without room for it"
            self.out.attempt(attemptrows.lost(job, why, w))
            book.attempt_lost(job, why)
            return
        job.task = t
        if not job.started or job.pid != report.pid:
            book.mark_running(job, report)
            self.out.journal(job, "start")
        job.detail = job.detail if job.cancelling else ""
        if job.cancelling:
            book.graph.drop(t)
            job.task = None

    # -- the clock ------------------------------------------------------------------------------

    def tick(self) -> None:
        now = self.out.now
        if self.deadline is not None and now >= self.deadline:
            self._end(f"the recovery timeout passed; still away: {', '.join(self.awaited)}")
        book = self.book
        if book.limbo:
            for job in [j for j in book.limbo.values() if j.deadline <= now]:
                why = (f"worker {job.worker} did not return within its job lease "
                       f"({job.lease:g} s) and the margin")
                self.out.attempt(attemptrows.lost(job, why))
                book.attempt_lost(job, why)

    # -- a restart ------------------------------------------------------------------------------

    def load(self, rows: Iterable[Mapping], next_id: int = 1) -> None:
        """Rebuild the book from the journal's rows, and recover if jobs were on workers. New
        jobs are numbered from ``next_id`` or above the highest loaded, whichever is higher:
        a number is never given twice."""
        book = self.book
        jobs = book.jobs
        shapes: dict = {}
        elements = []
        for row in rows:
            job = Job.from_row(row, shapes)
            jobs[job.id] = job
            book.by_submission[job.spec.submission] = job.id
            if job.spec.array is not None:
                size = job.spec.array.size
                book.arrays.add(job, book.graph.reserve_orders(job.spec.priority, size))
                next_id = max(next_id, job.id + 1 + size)
            elif "parent" in row:
                job.position = row["position"]
                elements.append((job, row["parent"]))
            elif not job.ended:  # its place in the queue, in submission order with the arrays'
                job.order = book.graph.next_order(job.spec.priority)
        for job, parent in elements:  # an element's row follows its array's
            book.arrays.adopt(job, jobs[parent])
        book.next_id = max(max(jobs, default=0) + 1, next_id)
        now = self.out.now
        for job in list(jobs.values()):
            for dep in dict.fromkeys((*job.spec.after_ok, *job.spec.after_any)):
                book.dependents.setdefault(dep, []).append(job.id)
                named = book.named(dep)  # an element not yet made is made
                if named is not None and not named.ended:
                    job.deps_left[dep] = None
            if job.state in ON_WORKER:
                book.on_worker.setdefault(job.worker, {})[job.id] = None
                job.deadline = now + job.lease + self.lease_margin
                book.limbo[job.id] = job
                self.awaited[job.worker] = None
        if self.awaited:
            self.deadline = now + self.recovery_timeout
            book.recovering = True
            self.out.log(INFO, "Recovering %d job(s) on %d worker(s): no job is dispatched "
                         "until they are back, or for up to %g s", len(book.limbo),
                         len(self.awaited), self.recovery_timeout)
        # An element a dependency named above waits for its array to feed it; an array's
        # admission makes its next element, not in this list either.
        for job in [job for job in jobs.values() if job.state is QUEUED and not (
                job.parent is not None and job.position in job.parent.array.waiting)]:
            book.admit(job)

    def _end(self, why: str) -> None:
        self.deadline = None
        self.awaited.clear()
        book = self.book
        book.recovering = False  # the jobs it held back are queued, in order
        held_back, book.held_back = book.held_back, []
        for job in held_back:
            if job.state is QUEUED and job.wait is Reason.recovering:
                book.admit(job)
        resumed = len(held_back)
        self.out.log(INFO, "Recovery over (%s): %d queued job(s) may be dispatched", why,
                     resumed)

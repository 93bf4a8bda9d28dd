"""The job book: every shell-command job, and every rule of how a job moves.

A job is submitted (once per submission id: a retried submit names the same job), waits
(held, for its dependencies, or while the scheduler recovers), is queued, and runs as
attempts: each attempt is a task of the graph, keyed ``job-<id>.<attempt>``, wanted by the
book, so jobs and Python tasks share workers under one placer and one set of rules. A
placement commits "attempt N assigned to W" to the journal before the worker hears of it;
the worker says when the attempt starts and how it ended, and the end is acknowledged only
once recorded. An attempt number is never reused: a report about an older attempt is
ignored, and a running older attempt is killed.

An attempt that ends without an outcome of its command (its worker lost it) leaves a job
``lost`` if it may have started, unless the job asked to be queued again (``--requeue``);
one that surely never started is always queued again. What happens to jobs while their worker
is away, when it returns, and after a restart is ``jobrecovery.py``'s business.

Each change is journaled (``Outbox.journal``), and committed before any action of its call.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Iterable

from ..jobs import JobSpec, job_key, parse_job_key
from ..jobstates import JobState, Reason
from ..protocol import ops
from ..resources import demand_error
from .actions import INFO, WARNING, SendAttemptAck, TellJobEnded, JobsReply, SendStopTask
from . import attemptrows, oomretry
from .budget import RAISED, next_try
from .graph import TaskGraph
from .job import ASSIGNED, HELD, ON_WORKER, QUEUED, RUNNING, Job
from .jobarray import Arrays
from .outbox import Outbox
from .placer import Placer
from .task import Task
from .worker import WorkerInfo

#: The client that wants the tasks of job attempts (no connection is named like this).
JOBS_CLIENT = "@jobs"

COMPLETED, FAILED, CANCELLED = JobState.completed, JobState.failed, JobState.cancelled
TIMEOUT, LOST = JobState.timeout, JobState.lost


class JobBook:
    """``jobs`` by id. ``on_worker``: worker name -> the jobs assigned or running there (or
    believed to be, while it is unreachable); ``limbo``: those of them whose worker is gone,
    each with its ``deadline`` (kept by ``JobRecovery``)."""

    def __init__(self, workers: dict[str, WorkerInfo], placer: Placer, graph: TaskGraph,
                 out: Outbox):
        self.workers = workers
        self.placer = placer
        self.graph = graph
        self.out = out
        self.jobs: dict[int, Job] = {}
        self.by_submission: dict[str, int] = {}
        self.dependents: dict[int, list[int]] = {}
        self.on_worker: dict[str, dict[int, None]] = {}
        self.limbo: dict[int, Job] = {}
        self.watchers: dict[int, dict[str, None]] = {}
        self.watching: dict[str, dict[int, None]] = {}
        #: While recovering after a restart, queued jobs wait in ``held_back``.
        self.recovering = False
        self.held_back: list[Job] = []
        self.next_id = 1
        self.arrays = Arrays(self)

    # -- what clients ask ---------------------------------------------------------------------

    def submit(self, client: str, request: int, specs: Iterable[JobSpec], at: float,
               watch: bool = False) -> None:
        """Queue ``specs`` and answer ``request`` with their ids, in order (all or none);
        ``watch``: then tell ``client`` when each ends."""
        specs = list(specs)
        for spec in specs:
            error = demand_error(spec.resources)
            unknown = [d for d in (*spec.after_ok, *spec.after_any)
                       if d not in self.jobs and self.arrays.containing(d) is None]
            if error or unknown:
                what = f"job {spec.name!r}" if spec.name else "a job"
                reason = (f"{what} asks for {spec.resources}: {error}" if error else
                          f"{what} depends on unknown job {unknown[0]}")
                self.out.actions.append(JobsReply(client=client, request=request,
                                                  error=f"nothing queued: {reason}"))
                return
        ids = []
        for spec in specs:
            known = self.by_submission.get(spec.submission)
            if known is not None:  # submitted before; the reply was lost
                ids.append(known)
                continue
            job = Job(self.next_id, spec, at)
            self.next_id += 1
            self.jobs[job.id] = job
            self.by_submission[spec.submission] = job.id
            if spec.array is not None:  # its elements' numbers follow its own
                self.next_id += spec.array.size
                base = self.graph.reserve_orders(spec.priority, spec.array.size)
                self.arrays.add(job, base)
            for dep in dict.fromkeys((*spec.after_ok, *spec.after_any)):
                self.dependents.setdefault(dep, []).append(job.id)
                if not self.named(dep).ended:
                    job.deps_left[dep] = None
            if spec.hold:
                job.state, job.wait = HELD, Reason.held
                job.detail = "held at submission: sched release to let it run"
            else:
                self.admit(job)
            self.out.journal(job, "submit")
            ids.append(job.id)
        self.out.actions.append(JobsReply(client=client, request=request, value=ids))
        if watch:
            self.watch(client, ids)

    def cancel(self, client: str, request: int, ids: Iterable[int]) -> None:
        answers = {}
        for job_id in ids:
            job = self.named(job_id)
            if job is None:
                answers[str(job_id)] = "unknown job"
            elif job.ended:
                answers[str(job_id)] = f"already {job.state.value}"
            elif job.array is not None:
                answers[str(job_id)] = (
                    "cancelling" if job.cancelling else self.arrays.cancel(job.array, client))
            else:
                answers[str(job_id)] = self.cancel_one(job, client)
        self.out.actions.append(JobsReply(client=client, request=request, value=answers))

    def cancel_one(self, job: Job, client: str) -> str:
        """Cancel ``job`` (not ended, not an array): what became of it."""
        if job.state in ON_WORKER:
            if not job.cancelling:
                job.cancelling = True
                job.detail = f"cancelled by {client}"  # the view says where it stops
                self.out.journal(job, "cancel")
                if job.task is not None:
                    self.graph.drop(job.task)  # stopped there; its end settles the job
                    job.task = None
            return "cancelling"
        if job.task is not None:
            self.graph.drop(job.task)
            job.task = None
        self.end(job, CANCELLED, detail=f"cancelled by {client}")
        return "cancelled"

    def named(self, job_id: int) -> Job | None:
        """The job ``job_id`` as a user names it (an array's element not yet made is made)."""
        job = self.jobs.get(job_id)
        return job if job is not None else self.arrays.named(job_id)

    def release(self, client: str, request: int, ids: Iterable[int]) -> None:
        answers = {}
        for job_id in ids:
            job = self.named(job_id)
            if job is None:
                answers[str(job_id)] = "unknown job"
            elif job.parent is not None and job.parent.state is HELD:
                answers[str(job_id)] = f"not held itself: release its array, {job.parent.id}"
            elif job.state is not HELD:
                answers[str(job_id)] = f"not held ({job.state.value})"
            else:
                job.state, job.wait, job.detail = QUEUED, None, ""
                self.admit(job)
                self.out.journal(job, "release")
                answers[str(job_id)] = "released"
        self.out.actions.append(JobsReply(client=client, request=request, value=answers))

    def watch(self, client: str, ids: Iterable[int]) -> None:
        """Tell ``client`` when each job ends (at once for those that have)."""
        for job_id in ids:
            job = self.named(job_id)
            if job is None:
                self.out.actions.append(TellJobEnded(clients=(client,), job={
                    "id": job_id, "state": None, "detail": "unknown job"}))
            elif job.ended:
                self.out.actions.append(TellJobEnded(clients=(client,), job=job.view()))
            else:
                self.watchers.setdefault(job_id, {})[client] = None
                self.watching.setdefault(client, {})[job_id] = None

    def forget_client(self, client: str) -> None:
        for job_id in self.watching.pop(client, ()):
            watchers = self.watchers.get(job_id)
            if watchers is not None:
                watchers.pop(client, None)
                if not watchers:
                    del self.watchers[job_id]

    # -- the queue ------------------------------------------------------------------------------

    def admit(self, job: Job, delay: float = 0.0) -> None:
        """``job`` is queued and not held: put an attempt in the queue (after ``delay``
        seconds: a back-off), or say what it waits for."""
        never = [d for d in job.spec.after_ok
                 if self.jobs[d].ended and self.jobs[d].state is not COMPLETED]
        if never:
            dep = self.jobs[never[0]]
            job.wait = Reason.dependency_never_satisfied
            job.detail = (f"job {dep.id} ended {dep.state.value}, and this job runs only after "
                          f"it completes: cancel it")
        elif job.deps_left:
            job.wait = Reason.dependency
            s = "s" if len(job.deps_left) > 1 else ""
            job.detail = f"waiting for job{s} {', '.join(map(str, job.deps_left))} to end"
        elif self.recovering:  # the view words it, from ``recovering``, while it lasts
            job.wait = Reason.recovering
            self.held_back.append(job)
        elif job.array is not None:  # its elements are queued, one after another
            job.wait = None
            self.arrays.feed(job.array)
        else:
            job.wait = None
            job.attempt += 1
            job.started = False
            # A job queued again keeps its place: ahead of later jobs of its priority.
            t = self.graph.add(job_key(job.id, job.attempt), job.spec.resources,
                               job.spec.priority, JOBS_CLIENT, prefix="job", order=job.order)
            t.job, job.task, job.order = job, t, t.order
            if delay:
                self.graph.retry_later(t, job.detail, self.out.now + delay)
            else:
                self.placer.enqueue(t)

    def requeue(self, job: Job, detail: str, delay: float = 0.0) -> None:
        """The job's attempt is over without an end of the job: queue another (after
        ``delay`` seconds)."""
        self._off_worker(job)
        job.state, job.detail = QUEUED, detail
        job.pid, job.gpus, job.start_time, job.end_time, job.exit_code = None, (), None, None, None
        job.log = ""  # the log is the attempt's: the next attempt writes its own
        self.admit(job, delay)  # says what it waits for, if it does
        self.out.journal(job, "requeue")

    def placed(self, t: Task, w: WorkerInfo) -> None:
        """The placer sent the attempt ``t`` to ``w`` in this call: record that (the journal
        holds it before the SendExecute goes out)."""
        job = t.job
        job.state, job.worker, job.address, job.lease = ASSIGNED, w.name, w.address, w.job_lease
        job.detail = ""
        self.on_worker.setdefault(w.name, {})[job.id] = None
        self.out.journal(job, "dispatch")
        if job.parent is not None:
            self.arrays.placed(job)

    # -- what workers report ----------------------------------------------------------------

    def _current(self, key: str, worker: WorkerInfo | None) -> Job | None:
        """The job whose current attempt ``key`` is, on ``worker``; None when it is not."""
        parsed = parse_job_key(key)
        job = self.jobs.get(parsed[0]) if parsed is not None else None
        if (job is None or worker is None or job.attempt != parsed[1]
                or job.state not in ON_WORKER or job.worker != worker.name):
            return None
        return job

    def started(self, address: str, e: ops.AttemptStarted) -> None:
        w = self.workers.get(address)
        job = self._current(e.key, w)
        if job is None:
            if w is not None:
                self.out.log(WARNING, "Worker %s started %s, which is not a current attempt; "
                             "stopping it", w.name, e.key)
                self.out.actions.append(SendStopTask(key=e.key, worker=address))
            return
        # Running with no pid: adopted from a registration that listed it as being started.
        if job.state is ASSIGNED or not job.pid:
            self.mark_running(job, e)
            self.out.journal(job, "start")

    def mark_running(self, job: Job, e: ops.AttemptStarted) -> None:
        job.state, job.started, job.wait = RUNNING, True, None
        job.pid, job.log, job.gpus, job.start_time = e.pid, e.log, tuple(e.gpus), e.started

    def ended(self, address: str, e: ops.AttemptEnded) -> None:
        """The attempt ``e.key`` ended on the worker at ``address`` (its slot is free now)."""
        w = self.workers.get(address)
        job = self._current(e.key, w)
        if job is not None:
            if job.task is not None:
                self.graph.drop(job.task)
                job.task = None
            self.out.attempt(attemptrows.ended(job, e, w))
            self.attempt_ended(job, e)
            self.out.journal(job, "result")
        self.out.actions.append(SendAttemptAck(worker=address, keys=(e.key,)))

    def attempt_ended(self, job: Job, e: ops.AttemptEnded) -> None:
        if e.started is not None:
            job.started = True
            job.start_time = job.start_time or e.started
        job.log = e.log or job.log
        job.exit_code, job.error, job.end_time = e.exit_code, e.error, e.ended
        outcome = e.outcome
        if outcome == "completed":
            self.end(job, COMPLETED)
        elif job.cancelling:
            self.end(job, CANCELLED, detail=job.detail or "cancelled")
        elif outcome == "failed":
            if oomretry.retried(self, job, e):  # out of GPU memory: once more, larger
                return
            # Its --retries are the budget of exits (``budget.py``); one that never started
            # (command not found) would fail the same way again.
            n = job.spec.retries - job.retries_left + 1
            delay = next_try(RAISED, n, job.spec.retries) if job.started else None
            if delay is None:
                self.end(job, FAILED, detail=e.error)
            else:
                job.retries_left -= 1
                self.out.log(INFO, "Job %d attempt %d failed (%s); retrying (%d retries left)",
                             job.id, job.attempt, e.error or "no reason given",
                             job.retries_left)
                self.requeue(job, f"attempt {job.attempt} failed ({e.error}); retrying", delay)
        elif outcome == "timeout":
            self.end(job, TIMEOUT, detail=e.error)
        elif outcome == "idle":  # its worker found it holding its GPUs idle, and stopped it
            self.end(job, CANCELLED, wait=Reason.idle, detail=e.error)
        elif outcome == "cancelled":  # stopped by its worker, not by a user: a draining worker
            self.attempt_lost(job, e.error or f"worker {job.worker} stopped it")
        else:  # "lost", or an outcome this scheduler does not know
            self.attempt_lost(job, e.error or f"{outcome} on worker {job.worker}")

    def stopped(self, address: str, key: str) -> None:
        """The worker dropped the attempt ``key`` before it started (a cancel, or a drain)."""
        job = self._current(key, self.workers.get(address))
        if job is None:
            return
        job.task = None  # the state freed its slot
        if job.cancelling:
            self.end(job, CANCELLED, detail=job.detail)
        else:
            self.requeue(job, f"attempt {job.attempt} was handed back unstarted by "
                               f"{job.worker}; queued again")

    def refused(self, t: Task, w: WorkerInfo, reason: str, delay: float | None,
                words: str) -> None:
        """``w`` refused the attempt ``t`` (it never started), and the graph charged that to
        the job's budget (``TaskGraph.attempt_failed``): another attempt after ``delay``
        seconds (0: at once), or, out of budget (None), the job fails with ``words``."""
        job = t.job
        self.graph.drop(t)
        job.task = None
        if job.cancelling:
            self.end(job, CANCELLED, detail=job.detail)
        elif delay is None:
            self.end(job, FAILED, detail=words)
        else:
            if delay:
                self.out.log(WARNING, "Worker %s refused job %d attempt %d (%s); trying again "
                             "in %g s", w.name, job.id, job.attempt, reason, delay)
            self.requeue(job, f"worker {w.name} refused attempt {job.attempt}: {reason}", delay)

    def attempt_lost(self, job: Job, why: str) -> None:
        """The job's attempt is gone without an outcome of its command, and may have run:
        the job is lost, unless it asked to be queued again (or was being cancelled)."""
        if job.cancelling:
            self.end(job, CANCELLED, detail=job.detail)
        elif not job.spec.requeue:
            maybe = "" if job.started else " (it may have started)"
            self.end(job, LOST, wait=Reason.worker_lost,
                     detail=f"{why}{maybe}; not queued again (submit with --requeue for that)")
        else:
            self.out.log(INFO, "Job %d attempt %d lost (%s); queued again", job.id,
                         job.attempt, why)
            self.requeue(job, f"attempt {job.attempt} lost ({why}); queued again")

    # -- ends -------------------------------------------------------------------------------------

    def _off_worker(self, job: Job) -> None:
        on = self.on_worker.get(job.worker)
        if on is not None:
            on.pop(job.id, None)
            if not on:
                del self.on_worker[job.worker]
        self.limbo.pop(job.id, None)
        job.deadline = None
        job.cancelling = False

    def end(self, job: Job, state: JobState, wait: Reason | None = None,
             detail: str = "") -> None:
        self._off_worker(job)
        job.state, job.wait, job.detail = state, wait, detail
        self.out.journal(job, "end")
        watchers = self.watchers.pop(job.id, None)
        if watchers:
            for client in watchers:
                self.watching[client].pop(job.id, None)
            self.out.actions.append(TellJobEnded(clients=tuple(watchers), job=job.view()))
        for dep_id in self.dependents.get(job.id, ()):
            dep = self.jobs[dep_id]
            dep.deps_left.pop(job.id, None)
            if dep.state is QUEUED and dep.task is None and dep.wait in (
                    Reason.dependency, Reason.dependency_never_satisfied):
                self.admit(dep)
        if job.parent is not None:
            self.arrays.ended(job)

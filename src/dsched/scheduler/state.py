"""SchedulerState: every decision of the scheduler, mutated only by ``handle(event)``.

It holds the parts and wires them together: the task graph and its lifecycle
(``graph.py``), the placer that decides where queued tasks start (``placer.py``, with
``backfill.py`` and ``reasons.py``), the job book of shell-command jobs, whose attempts are
tasks of the graph (``jobbook.py``), and the membership of workers (``membership.py``); they
share one ``Outbox`` in which a call's actions gather. This module turns each event into calls
on those parts: what clients ask, what workers report about tasks, and what the clock says.
The invariants are in ``invariants.py``.

Pure: no I/O, no clock (time arrives inside events).
"""

from __future__ import annotations

from typing import Callable

from ..policy import SchedulerPolicy
from . import events as ev
from .actions import WARNING, JobsReply, Refused
from .budget import LOST, RAISED, REFUSED
from .graph import TaskGraph
from .jobbook import JobBook
from .jobrecovery import JobRecovery
from .membership import Membership
from .oomretry import task_retried
from .outbox import Outbox
from .placer import Placer
from .task import Task
from .worker import WorkerInfo

#: The weight of the newest duration in each per-prefix average.
DURATION_WEIGHT = 0.5


#: Why a draining scheduler refuses a submission.
DRAINING = "the scheduler is draining and takes no work"


class SchedulerState:
    """The scheduler's state and decisions, by ``policy`` (the scheduler's settings that
    decide: allowed failures, refusals, timeouts, prefetch, job leases' margin; the defaults
    are the daemon's)."""

    def __init__(self, policy: SchedulerPolicy = SchedulerPolicy()):
        self.policy = policy
        self.out = Outbox()
        self.workers: dict[str, WorkerInfo] = {}
        self.placer = Placer(self.workers, self.out, prefetch=policy.prefetch,
                             duration_weight=DURATION_WEIGHT)
        self.graph = TaskGraph(self.workers, self.placer, self.out,
                               allowed_failures=policy.allowed_failures,
                               max_rejections=policy.max_rejections)
        self.jobs = JobBook(self.workers, self.placer, self.graph, self.out)
        self.recovery = JobRecovery(self.jobs, self.out, lease_margin=policy.lease_margin,
                                    recovery_timeout=policy.recovery_timeout)
        self.membership = Membership(self.workers, self.placer, self.graph, self.recovery,
                                     self.out, heartbeat_timeout=policy.heartbeat_timeout)
        # Read by the shell, the views and the tests.
        self.tasks = self.graph.tasks
        self.clients = self.graph.clients
        self.queue = self.placer.queue
        self.counters = self.out.counters
        #: Set by SchedulerDraining: new tasks and jobs are refused, the rest goes on.
        self.draining = False

    @property
    def now(self) -> float:
        return self.out.now

    # -- the one mutator ----------------------------------------------------------------------

    def handle(self, event: ev.Event) -> list:
        """Apply ``event``; return the actions for the shell, in order."""
        handler = self._HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"SchedulerState cannot handle {event!r}")
        out = self.out
        if event.now > out.now:
            out.now = event.now
        try:
            handler(self, event)
            if self.graph.release_work:
                self.graph.drain_releases()
            self.placer.schedule()
            while self.placer.placed_jobs:  # the job book records the attempts placed
                for t, w in self.placer.take_placed_jobs():
                    self.jobs.placed(t, w)
                # An array queues its next element when one is placed: place it too.
                self.placer.schedule()
            if self.membership.draining:
                self.membership.retire_idle()
            if self.membership.watchers:
                self.membership.tell_count()
        except BaseException:
            # A bug: nothing of this event is carried out, and the state is no longer to be
            # trusted (the shell stops; the journal makes a restart safe).
            out.discard()
            self.placer.take_placed_jobs()
            raise
        return out.take()

    def validate(self) -> None:
        """Check every invariant; raises AssertionError naming the first one broken."""
        from .invariants import check

        check(self)

    # -- what workers report about tasks ---------------------------------------------------------

    def _ended_on(self, address: str, key: str, holds_result: bool,
                  job: bool = False) -> tuple[WorkerInfo, Task] | None:
        """``key`` ended on the worker at ``address``: free its slot there and return both,
        or None for a report to ignore (a worker we gave up on, or a task moved elsewhere,
        or a job attempt said to end as a task does: ``job`` says it may be one)."""
        w = self.workers.get(address)
        if w is None:
            return None  # its work was rescheduled when we gave up on it
        t = w.processing.pop(key, None)
        if t is not None and t.job is not None and not job:
            w.processing[key] = t  # a job's end comes as AttemptEnded
            self.out.log(WARNING, "Worker %s reported job attempt %s as a task; ignored",
                         w.name, key)
            return None
        if t is None:
            # A task we told it to stop that ended (free its thread), or one moved elsewhere.
            t = w.stopping.pop(key, None)
            if t is not None:
                self.placer.release_slot(w, t)
            if holds_result and key not in w.has_what:
                self.out.free(w.address, key)
            return None
        self.placer.release_slot(w, t)
        return w, t

    def _on_finished(self, e: ev.WorkerTaskFinished) -> None:
        ended = self._ended_on(e.worker, e.key, holds_result=True)
        if ended is None:
            return
        w, t = ended
        self.placer.learn(t.prefix, e.duration if e.duration is not None else e.stop - e.start)
        self.graph.finished(t, w, e.nbytes)
        if w.draining:
            self.membership.evacuate(w, [e.key])

    def _on_erred(self, e: ev.WorkerTaskErred) -> None:
        w = self.workers.get(e.worker)
        running = w.processing.get(e.key) if e.oom and w is not None else None
        gpus = running.gpus if running is not None else ()  # given back with its slot, next
        ended = self._ended_on(e.worker, e.key, holds_result=False)
        if ended is None:
            return
        w, t = ended
        if task_retried(self.graph, t, e, w, gpus):  # out of GPU memory: once more, larger
            return
        text = e.text if t.oom_retried is None else f"{t.oom_retried}; it failed again:\n{e.text}"
        self.graph.attempt_failed(t, RAISED, text, w.name, exception=e.exception)

    def _on_cancel_confirmed(self, e: ev.WorkerTaskStopped) -> None:
        w = self.workers.get(e.worker)
        if w is not None:
            t = w.stopping.pop(e.key, None)
            if t is not None:
                self.placer.release_slot(w, t)
                if t.job is not None:
                    self.jobs.stopped(e.worker, e.key)

    def _on_attempt_ended(self, e: ev.WorkerAttemptEnded) -> None:
        w = self.workers.get(e.worker)
        key = e.report.key
        if w is not None:
            t = w.processing.pop(key, None) or w.stopping.pop(key, None)
            if t is not None:
                self.placer.release_slot(w, t)
        self.jobs.ended(e.worker, e.report)

    def _on_rejected(self, e: ev.WorkerTaskRejected) -> None:
        ended = self._ended_on(e.worker, e.key, holds_result=False, job=True)
        if ended is None:  # a job's attempt, stopped while still unstarted, ends so too
            self.jobs.stopped(e.worker, e.key)
            return
        w, t = ended
        # A draining worker's refusal is not the task's fault: it goes elsewhere at once.
        delay, words = self.graph.attempt_failed(t, REFUSED, e.reason, w.name,
                                                 counted=not w.draining)
        if t.job is not None:
            self.jobs.refused(t, w, e.reason, delay, words)

    def _on_missing_data(self, e: ev.WorkerMissingData) -> None:
        graph = self.graph
        if e.permanent:  # the input exists but cannot travel: computing it again won't help
            ended = self._ended_on(e.worker, e.key, holds_result=False)
            if ended is not None:
                graph.fail(ended[1], "unfetchable", f"its input {e.dependency} cannot be sent "
                           f"to the worker that would run it: {e.reason}")
            return
        d = self.tasks.get(e.dependency)
        if d is not None and d.who_has:
            for address in e.tried:
                if address in d.who_has:
                    del d.who_has[address]
                    holder = self.workers.get(address)
                    if holder is not None:
                        holder.has_what.pop(d.key, None)
            if not d.who_has:
                # Computed again, unless no worker could ever hand it over (the holder
                # vanished each time): its budget stops the loop with a reason.
                graph.attempt_failed(d, LOST, e.reason or "the workers holding it were gone",
                                     ", ".join(e.tried))
        ended = self._ended_on(e.worker, e.key, holds_result=False)
        if ended is not None:
            graph.compute(ended[1])

    # -- clients ------------------------------------------------------------------------------

    def _on_submitted(self, e: ev.TasksSubmitted) -> None:
        if self.draining:
            self.out.actions.append(Refused(client=e.client, request=e.request, reason=DRAINING,
                                            keys=tuple(spec.key for spec in e.tasks)))
            return
        self.graph.submit(e.client, e.tasks)

    def _on_jobs_submitted(self, e: ev.JobsSubmitted) -> None:
        if self.draining:
            self.out.actions.append(JobsReply(client=e.client, request=e.request,
                                              error=DRAINING))
            return
        self.jobs.submit(e.client, e.request, e.jobs, e.at, e.watch)

    def _on_draining(self, e: ev.SchedulerDraining) -> None:
        self.draining = True

    def _on_cancel_requested(self, e: ev.CancelRequested) -> None:
        tasks = self.tasks
        self.graph.cancel_for(e.client, [tasks[key] for key in e.keys if key in tasks])

    def _on_released(self, e: ev.KeysReleased) -> None:
        for key in e.keys:
            self.graph.unwant(key, e.client)

    def _on_client_disconnected(self, e: ev.ClientDisconnected) -> None:
        for key in list(self.clients.get(e.client, ())):
            self.graph.unwant(key, e.client)
        self.clients.pop(e.client, None)
        self.jobs.forget_client(e.client)
        self.membership.watchers.pop(e.client, None)

    # -- the clock ----------------------------------------------------------------------------

    def _on_tick(self, e: ev.Tick) -> None:
        self.membership.check_heartbeats()
        timeout = self.policy.no_worker_timeout
        if timeout is not None:
            for t, text in self.placer.reasons.expired(timeout):
                if t.job is None:  # a job waits for a worker that may join, as long as it takes
                    self.graph.fail(t, "no_worker", text)
        if self.graph.retrying:
            self.graph.retry_due(self.now)
        self.recovery.tick()
        self.placer.tick()

    _HANDLERS: dict[type, Callable] = {
        ev.WorkerJoined: lambda s, e: s.membership.joined(e),
        ev.WorkerHeartbeat: lambda s, e: s.membership.heartbeat(e),
        ev.WorkerDraining: lambda s, e: s.membership.start_draining(e),
        ev.WorkerLeft: lambda s, e: s.membership.left(e),
        ev.WorkerTaskFinished: _on_finished,
        ev.WorkerTaskErred: _on_erred,
        ev.WorkerTaskStopped: _on_cancel_confirmed,
        ev.WorkerTaskRejected: _on_rejected,
        ev.WorkerMissingData: _on_missing_data,
        ev.WorkerReplicated: lambda s, e: s.membership.replicated(e),
        ev.WorkerReplicateFailed: lambda s, e: s.membership.replicate_failed(e),
        ev.WorkerAttemptStarted: lambda s, e: s.jobs.started(e.worker, e.report),
        ev.WorkerAttemptEnded: _on_attempt_ended,
        ev.JobsSubmitted: _on_jobs_submitted,
        ev.SchedulerDraining: _on_draining,
        ev.JobsCancelled: lambda s, e: s.jobs.cancel(e.client, e.request, e.jobs),
        ev.JobsReleased: lambda s, e: s.jobs.release(e.client, e.request, e.jobs),
        ev.JobsWatched: lambda s, e: s.jobs.watch(e.client, e.jobs),
        ev.WorkersWatched: lambda s, e: s.membership.watch(e.client),
        ev.WorkerGpuFenced: lambda s, e: s.membership.gpu_fenced(e),
        ev.WorkerGpuReleased: lambda s, e: s.membership.gpu_released(e),
        ev.GpuReleaseRequested: lambda s, e: s.membership.release_gpu(e),
        ev.JobsLoaded: lambda s, e: s.recovery.load(e.rows, e.next_id),
        ev.TasksSubmitted: _on_submitted,
        ev.CancelRequested: _on_cancel_requested,
        ev.KeysReleased: _on_released,
        ev.ClientDisconnected: _on_client_disconnected,
        ev.Tick: _on_tick,
    }

"""WorkerState: every decision a worker makes, in one object changed only by ``handle``.

It holds the tasks the scheduler sent and where each stands, from their inputs to their
outcome. Its ``Slots`` count what it can run at once (threads, resources, GPU devices, and the
queue of tasks waiting for them; a faulted device is fenced by ``gpufaults.py``), its
``Holdings`` the results held here and the inputs on their way. The async shell turns messages
and outcomes into events (``events.py``) and carries out the actions ``handle`` returns.

It trusts the scheduler with nothing it can check: it never runs more tasks than ``nthreads``
or than its resources allow. A shell-command job's attempt takes a thread and its resources
and waits in the same queue as a task; what else it decides about jobs (start only while
registered and within the job lease, never twice, keep outcomes until acknowledged) it keeps in
an ``AttemptBook``. The shell hands each event over with its monotonic clock (the lease's).

Pure: no I/O, no clock, no asyncio, no NVML.
"""

from __future__ import annotations

from functools import partial
from typing import Iterable

from ..policy import WorkerPolicy
from ..protocol import ops
from ..resources import EMPTY, Resources
from . import draining, events as ev, gpufaults
from .actions import (
    CANCEL, GPU_PROCESS, SHUTDOWN, THREAD, Action, EndUnstartedJob, KillJob, KillTask,
    ReleaseResult, RunningTask, StartJob, StartTask, WorkerSnapshot,
)
from .attempts import AttemptBook, job_error
from .holdings import Holdings
from .slots import Slots
from .task import RUNNING, WorkerTaskState, WorkerTask


#: ``stopped_for`` of a task being stopped that the scheduler sent again: its end is a run's.
AGAIN = "again"


class WorkerState:
    """One worker's books; see the module docstring. Change it only through ``handle``."""

    def __init__(
        self,
        nthreads: int,
        resources: Resources = EMPTY,
        gpus: Iterable[int] | None = None,
        address: str = "",
        policy: WorkerPolicy = WorkerPolicy(),
    ):
        """``gpus``: the NVML indices behind the ``GPU`` resource; ``None`` maps an abstract
        ``GPU=N`` to ``0..N-1``. ``address``: this worker's own, never fetched from.
        ``policy``: the worker's settings that decide (the job lease: seconds jobs may run
        after the scheduler was last heard); the defaults are the daemon's."""
        self.policy = policy
        self.slots = Slots(nthreads, resources, gpus)
        self.holdings = Holdings(address)
        self.closing = False
        self.tasks: dict[str, WorkerTask] = {}
        self._seq = 0
        self.attempts = AttemptBook(policy.job_lease)
        self._handlers = {
            ops.Execute: self._execute,
            ev.DependencyFetched: self._fetched,
            ev.DependencyFetchFailed: self._fetch_failed,
            ev.RunFinished: self._completed,
            ev.RunErred: self._failed,
            ev.RunStopped: self._stopped,
            ops.StopTask: self._cancel,
            ops.Free: self.holdings.free,
            ev.DrainRequested: self._drain,
            ops.Replicate: self._replicate,
            ev.SessionOpened: self._session_opened,
            ev.SessionLost: self._session_lost,
            ops.Lease: self.attempts.leased,
            ops.AttemptStarted: self.attempts.heard_started,
            ops.AttemptEnded: self._attempt_ended,
            ops.AttemptAck: self.attempts.acknowledged,
            ops.Proceed: self.attempts.proceed,
            ev.AttemptsRecovered: self.attempts.recovered,
            ev.DrainTimedOut: partial(draining.timed_out, self),
            ev.GpuFaulted: partial(gpufaults.faulted, self),
            ops.UnfenceGpu: partial(gpufaults.unfence, self),
        }

    # -- the one mutator ------------------------------------------------------------------

    def handle(self, event: ev.Event, now: float) -> list[Action]:
        """``now``: the worker's ``time.monotonic()`` as the event is handed over."""
        handler = self._handlers.get(type(event))
        if handler is None:
            raise TypeError(f"WorkerState cannot handle {event!r}")
        actions = handler(event)
        return actions + self._start_ready(now)

    # -- queries --------------------------------------------------------------------------

    # What the slots count and what is held, read here by the shell and the tests.
    nthreads = property(lambda self: self.slots.nthreads)
    total = property(lambda self: self.slots.total)
    used = property(lambda self: self.slots.used)
    free_threads = property(lambda self: self.slots.free_threads)
    available = property(lambda self: self.slots.available)
    ledger = property(lambda self: self.slots.ledger)
    ready = property(lambda self: self.slots.ready)
    address = property(lambda self: self.holdings.address)
    results = property(lambda self: self.holdings.results)
    fetches = property(lambda self: self.holdings.fetches)
    needed_by = property(lambda self: self.holdings.needed_by)

    def state_of(self, key: str) -> WorkerTaskState | None:
        task = self.tasks.get(key)
        if task is not None:
            return task.state
        held = self.holdings.results.get(key)
        return WorkerTaskState.DONE if held is not None and held.owned else None

    def snapshot(self) -> WorkerSnapshot:
        tasks = sorted((t for t in self.tasks.values() if t.job is None), key=lambda t: t.seq)
        return WorkerSnapshot(
            running=tuple(RunningTask(t.key, t.state.value, t.resources, t.gpus)
                          for t in tasks if t.state in RUNNING),
            waiting=tuple(t.key for t in tasks if t.state not in RUNNING),
            results={key: held.nbytes for key, held in self.holdings.results.items()
                     if held.owned},
            attempts=self.attempts.registration(),
        )

    def running_jobs(self) -> list[str]:
        """The job attempts that hold a thread here (started, not yet ended)."""
        return list(self.attempts.running)

    def is_idle(self) -> bool:
        """Nothing running, waiting or being fetched, and nothing held for a task."""
        return (not self.tasks and not self.holdings.fetches and not self.holdings.needed_by
                and self.slots.all_free())

    # -- handlers -------------------------------------------------------------------------

    def _execute(self, event: ops.Execute) -> list[Action]:
        key = event.key
        if event.job is not None:
            known = self.attempts.known(key)
            if known is not None:
                return known
        task = self.tasks.get(key)
        if task is not None:  # sent again (a reconnect): the copy here stands and will report
            if task.state is WorkerTaskState.CANCELLING and task.stopped_for == CANCEL:
                task.stopped_for = AGAIN  # wanted after all: its end is the run asked for
            elif task.state not in RUNNING:  # on the devices granted now
                task.granted = event.gpus
            return []
        held = self.holdings.results.get(key)
        if held is not None and held.report is not None:
            if isinstance(held.report, ops.Replicated):  # a copy, held here: done, untimed
                return [ops.TaskFinished(key, held.nbytes, 0.0, 0.0, -1.0)]
            return [held.report]
        if held is not None or key in self.holdings.fetches:
            return [ops.TaskRejected(key, f"{key} is an input held or being fetched here")]
        if self.closing:
            return [ops.TaskRejected(key, "the worker is closing")]
        reason = self.slots.never_fits(event.resources) or gpufaults.fenced(self, event.gpus)
        if event.job is not None:
            return self._execute_job(event, reason)
        if reason:
            return [ops.TaskRejected(key, reason)]
        dependencies = tuple(dep for dep in event.who_has if dep != key)
        results, fetches = self.holdings.results, self.holdings.fetches
        # Find a source for every missing input before taking the task on, so that a task
        # that cannot be fed leaves nothing behind.
        sources: dict[str, list[str]] = {}
        for dep in dependencies:
            if dep in results or dep in self.tasks or dep in fetches:
                continue
            workers = self.holdings.sources(event.who_has[dep])
            if not workers:
                return [ops.MissingData(key, dep, tuple(event.who_has[dep]))]
            sources[dep] = workers
        self._seq += 1
        task = WorkerTask(
            key, event.spec, event.resources, event.priority, self._seq, dependencies,
            missing={dep for dep in dependencies if dep not in results}, granted=event.gpus,
        )
        self.tasks[key] = task
        actions: list[Action] = []
        if dependencies:
            self.holdings.need(key, dependencies)
            for dep, workers in sources.items():
                actions.append(self.holdings.fetch(dep, workers, event.nbytes.get(dep, 0)))
        if not task.missing:
            self.slots.queue(task)
        return actions

    def _execute_job(self, event: ops.Execute, never_fits: str) -> list[Action]:
        error = job_error(event.key, event.job)
        if error or never_fits:
            return [ops.TaskRejected(event.key, f"a malformed job: {error}" if error
                                     else never_fits)]
        self._seq += 1
        task = WorkerTask(event.key, event.spec, event.resources, event.priority, self._seq, (),
                          set(), granted=event.gpus, job=dict(event.job))
        self.tasks[task.key] = task
        if event.hold:
            self.attempts.held.add(task.key)
        self.slots.queue(task)
        return []

    def _fetched(self, event: ev.DependencyFetched) -> list[Action]:
        actions, arrived = self.holdings.fetched(event, event.key in self.tasks)
        if arrived:
            self._input_arrived(event.key)
        return actions

    def _fetch_failed(self, event: ev.DependencyFetchFailed) -> list[Action]:
        actions, given_up = self.holdings.fetch_failed(event)
        if given_up is None:
            return actions
        return actions + self._lose_input(event.key, tuple(given_up.tried), event.reason,
                                          event.permanent)

    def _completed(self, event: ev.RunFinished) -> list[Action]:
        task = self.tasks.get(event.key)
        if task is None or task.state not in RUNNING:
            # Not started here: the stored copy belongs to nobody.
            return [] if event.key in self.holdings.results else [ReleaseResult(event.key)]
        self.slots.free(task)
        if task.state is WorkerTaskState.CANCELLING and task.stopped_for != AGAIN:
            return [ReleaseResult(task.key), self.stop_report(task),
                    *self.end_without_result(task)]
        duration = event.stop - event.start if event.duration is None else event.duration
        report = ops.TaskFinished(
            task.key, event.nbytes, event.start, event.stop, duration, event.peak_memory, task.gpus
        )
        self.holdings.computed(report)
        actions: list[Action] = [report, *self.forget(task)]
        self._input_arrived(task.key)
        return actions

    def _failed(self, event: ev.RunErred) -> list[Action]:
        task = self.tasks.get(event.key)
        if task is None or task.state not in RUNNING:
            return []
        self.slots.free(task)
        if task.state is WorkerTaskState.CANCELLING and task.stopped_for != AGAIN:
            report: Action = self.stop_report(task)
        else:
            report = ops.TaskErred(**vars(event))  # the same fields (``ev.RunErred``)
        return [report] + self.end_without_result(task)

    def _stopped(self, event: ev.RunStopped) -> list[Action]:
        task = self.tasks.get(event.key)
        if task is None or task.state not in RUNNING:
            return []
        self.slots.free(task)
        if task.stopped_for == AGAIN:  # stopped, then asked for again: run it anew
            task.stopped_for = CANCEL
            self.slots.queue(task)
            return []
        if task.state is WorkerTaskState.CANCELLING:
            report: Action = self.stop_report(task)
        else:
            # Stopped without being cancelled (its process died): the task failed.
            text = f"the task's process was stopped: {event.reason or 'no reason given'}"
            report = ops.TaskErred(task.key, b"", text)
        return [report] + self.end_without_result(task)

    def _cancel(self, event: ops.StopTask) -> list[Action]:
        task = self.tasks.get(event.key)
        if task is None or task.state is WorkerTaskState.CANCELLING:
            return []
        if task.state is WorkerTaskState.EXECUTING:
            task.state = WorkerTaskState.CANCELLING
            return [KillJob(task.key, CANCEL) if task.job is not None else KillTask(task.key)]
        if task.job is not None:
            self.attempts.ending_unstarted.add(task.key)
            return [*self.forget(task),
                    EndUnstartedJob(task.key, "cancelled", "cancelled before it started")]
        return [ops.TaskStopped(task.key)] + self.end_without_result(task)

    def _drain(self, event: ev.DrainRequested) -> list[Action]:
        if self.closing:
            return []
        self.closing = True
        actions: list[Action] = [ops.Draining()]
        for task in sorted(self.tasks.values(), key=lambda t: t.seq):
            if task.state not in RUNNING:
                actions.append(ops.TaskRejected(task.key, "the worker is closing"))
                actions += self.forget(task)
        return actions

    def _replicate(self, event: ops.Replicate) -> list[Action]:
        refusal = ("the worker is closing" if self.closing else
                   f"{event.key} is computed here" if event.key in self.tasks else "")
        return self.holdings.replicate(event, refusal)

    # -- jobs -------------------------------------------------------------------------------

    def _session_opened(self, event: ev.SessionOpened) -> list[Action]:  # fences, said again
        return self.attempts.opened(event) + gpufaults.announce(self)

    def _session_lost(self, event: ev.SessionLost) -> list[Action]:
        # A job not yet started is dropped unreported: the scheduler, which lost the session
        # too, puts it back itself; so is one held for a Proceed (its supervisor is told).
        # Started ones run on under their lease.
        self.attempts.registered = False
        actions: list[Action] = []
        for task in sorted(self.tasks.values(), key=lambda t: t.seq):
            if task.job is not None and task.state in RUNNING and task.key in self.attempts.held:
                self.slots.free(task)
                actions += [self.attempts.dropped(task.key), *self.forget(task)]
            elif task.job is not None and task.state not in RUNNING:
                actions += self.forget(task)
        return actions

    def _attempt_ended(self, event: ops.AttemptEnded) -> list[Action]:
        task = self.tasks.get(event.key)
        if task is not None and task.job is not None and task.state in RUNNING:
            self.slots.free(task)
            self.forget(task)
        return self.attempts.heard_ended(event)

    @staticmethod
    def stop_report(task: WorkerTask) -> Action:
        """What the scheduler hears of a task stopped here before it ended by itself."""
        if task.stopped_for == SHUTDOWN:
            return ops.TaskRejected(task.key, "the worker is closing")
        if task.stopped_for == gpufaults.FAULT:
            return ops.TaskRejected(task.key, task.stop_reason)
        return ops.TaskStopped(task.key)

    # -- bookkeeping ----------------------------------------------------------------------

    def _start_ready(self, now: float) -> list[Action]:
        slots = self.slots
        if not slots.ready or not slots.free_threads:  # after most events: nothing to start
            return []
        # A job starts only while registered and within its lease: its start is reported.
        started = slots.start_ready(self.tasks, self.attempts.may_start(now))
        actions: list[Action] = []
        for task in started:
            if task.job is not None:
                self.attempts.started(task.key, task.gpus)
                actions.append(StartJob(task.key, task.job, task.gpus, task.resources,
                                        self.attempts.lease_until, task.key in self.attempts.held))
            else:
                actions.append(StartTask(task.key, task.spec, task.gpus,
                                         GPU_PROCESS if task.gpus else THREAD,
                                         task.dependencies, task.resources))
        return actions

    def forget(self, task: WorkerTask) -> list[Action]:
        """Drop a task that holds no resources; release fetched inputs nobody needs now."""
        del self.tasks[task.key]
        self.attempts.held.discard(task.key)
        if task.state is WorkerTaskState.READY:
            self.slots.unqueue(task)
        return self.holdings.release(task.key, task.dependencies) if task.dependencies else []

    def end_without_result(self, task: WorkerTask) -> list[Action]:
        return self.forget(task) + self._lose_input(task.key, ())

    def _lose_input(self, dep: str, tried: tuple[str, ...], reason: str = "",
                    permanent: bool = False) -> list[Action]:
        """``dep`` will not arrive: the tasks here waiting for it are handed back."""
        actions: list[Action] = []
        for key in sorted(self.holdings.needed_by.get(dep, ()), key=lambda k: self.tasks[k].seq):
            task = self.tasks.get(key)
            if task is None:
                continue  # handed back already, as a dependent of an earlier one
            actions.append(ops.MissingData(key, dep, tried, reason, permanent))
            actions += self.end_without_result(task)
        return actions

    def _input_arrived(self, dep: str) -> None:
        for key in sorted(self.holdings.needed_by.get(dep, ()), key=lambda k: self.tasks[k].seq):
            task = self.tasks[key]
            task.missing.discard(dep)
            if not task.missing and task.state is WorkerTaskState.FETCHING:
                self.slots.queue(task)

    # -- checks ---------------------------------------------------------------------------

    def validate(self) -> None:
        """Raise AssertionError when any of the worker's books do not balance (for tests)."""
        from .invariants import check

        check(self)

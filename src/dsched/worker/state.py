"""WorkerState: every decision a worker makes, in one object changed only by ``handle``.

It holds the tasks the scheduler sent and where each stands, the threads and resources in use,
the GPU ledger, the inputs being fetched from peer workers and the results held here. The
async shell turns messages and executor outcomes into events (``events.py``) and carries out
the actions (``actions.py``) that ``handle`` returns, in order.

It trusts the scheduler with nothing it can check: it never runs more tasks than ``nthreads``
or than its resources allow. Tasks over that wait in a ready queue, scanned in priority order,
where a task that does not fit now does not hold back the ones behind it. Inputs fetched from
peers are held only while a task here needs them; results computed here are held until the
scheduler frees them. A shell-command job's attempt takes a thread and its resources and waits
in the same queue as a task; what else it decides about jobs (start only while registered,
never twice, keep outcomes until acknowledged, the lease) it keeps in an ``AttemptBook``.

Pure: no I/O, no clock, no asyncio, no NVML.
"""

from __future__ import annotations

import bisect
from typing import Iterable

from ..protocol import ops
from ..resources import EMPTY, Resources, demand_error, format_units, named_devices
from . import events as ev
from .actions import (
    CANCEL, GPU_PROCESS, SHUTDOWN, THREAD, Action, EndUnstartedJob, FetchDependency, KillJob,
    KillTask, ReleaseResult, RunningTask, StartJob, StartTask, WorkerSnapshot,
)
from .attempts import AttemptBook, job_error
from .ledger import GPU, GpuLedger
from .task import RUNNING, Fetch, HeldResult, TaskState, WorkerTask


class WorkerState:
    """One worker's books; see the module docstring. Change it only through ``handle``."""

    def __init__(
        self,
        nthreads: int,
        resources: Resources = EMPTY,
        gpus: Iterable[int] | None = None,
        address: str = "",
        job_lease: float = 1800.0,
    ):
        """``gpus``: the NVML indices behind the ``GPU`` resource; ``None`` maps an abstract
        ``GPU=N`` to ``0..N-1``. ``address``: this worker's own, never fetched from.
        ``job_lease``: seconds jobs may run after the scheduler was last heard."""
        if nthreads < 1:
            raise ValueError(f"a worker needs at least one thread, not {nthreads}")
        units = resources.get(GPU)
        if gpus is None:
            self.ledger = GpuLedger.abstract(units)
        else:
            self.ledger = GpuLedger(gpus)
            if self.ledger.capacity != units:
                raise ValueError(
                    f"the worker offers GPU={format_units(units)} but was given devices "
                    f"{self.ledger.devices}: the two must agree"
                )
        self.nthreads = nthreads
        self.total = resources
        self.address = address
        self.used: Resources = EMPTY
        self.free_threads = nthreads
        self.closing = False
        self.tasks: dict[str, WorkerTask] = {}
        self.results: dict[str, HeldResult] = {}
        self.fetches: dict[str, Fetch] = {}
        # input key -> the tasks here that need it (missing or not).
        self.needed_by: dict[str, set[str]] = {}
        self.ready: list[tuple[int, int, str]] = []  # sorted queue entries of READY tasks
        self._seq = 0
        self.attempts = AttemptBook(job_lease)
        self._handlers = {
            ops.Execute: self._execute,
            ev.DependencyFetched: self._fetched,
            ev.DependencyFetchFailed: self._fetch_failed,
            ops.TaskFinished: self._completed,
            ops.TaskErred: self._failed,
            ops.TaskStopped: self._stopped,
            ops.StopTask: self._cancel,
            ops.Free: self._free_keys,
            ev.DrainRequested: self._drain,
            ops.Replicate: self._replicate,
            ev.SessionOpened: self.attempts.opened,
            ev.SessionLost: self._session_lost,
            ops.Lease: self.attempts.leased,
            ops.AttemptStarted: self.attempts.heard_started,
            ops.AttemptEnded: self._attempt_ended,
            ops.AttemptAck: self.attempts.acknowledged,
            ev.AttemptsRecovered: self.attempts.recovered,
            ev.DrainTimedOut: self._drain_timed_out,
        }

    # -- the one mutator ------------------------------------------------------------------

    def handle(self, event: ev.Event) -> list[Action]:
        handler = self._handlers.get(type(event))
        if handler is None:
            raise TypeError(f"WorkerState cannot handle {event!r}")
        actions = handler(event)
        return actions + self._start_ready()

    # -- queries --------------------------------------------------------------------------

    @property
    def available(self) -> Resources:
        return self.total - self.used

    def state_of(self, key: str) -> TaskState | None:
        task = self.tasks.get(key)
        if task is not None:
            return task.state
        held = self.results.get(key)
        return TaskState.DONE if held is not None and held.owned else None

    def snapshot(self) -> WorkerSnapshot:
        tasks = sorted((t for t in self.tasks.values() if t.job is None), key=lambda t: t.seq)
        return WorkerSnapshot(
            running=tuple(
                RunningTask(t.key, t.state.value, t.resources, t.gpus)
                for t in tasks if t.state in RUNNING
            ),
            waiting=tuple(t.key for t in tasks if t.state not in RUNNING),
            results={key: held.nbytes for key, held in self.results.items() if held.owned},
            attempts=self.attempts.registration(),
        )

    def running_jobs(self) -> list[str]:
        """The job attempts that hold a thread here (started, not yet ended)."""
        return list(self.attempts.running)

    def is_idle(self) -> bool:
        """Nothing running, waiting or being fetched, and nothing held for a task."""
        return (
            not self.tasks and not self.fetches and not self.needed_by
            and self.free_threads == self.nthreads and self.used.is_empty()
            and self.ledger.in_use() == 0
        )

    # -- handlers -------------------------------------------------------------------------

    def _execute(self, event: ops.Execute) -> list[Action]:
        key = event.key
        if event.job is not None:
            known = self.attempts.known(key)
            if known is not None:
                return known
        if key in self.tasks:
            return []  # sent again (a reconnect): the copy here stands and will report
        held = self.results.get(key)
        if held is not None and held.report is not None:
            if isinstance(held.report, ops.Replicated):  # a copy, held here: done, untimed
                return [ops.TaskFinished(key, held.nbytes, 0.0, 0.0, -1.0)]
            return [held.report]
        if held is not None or key in self.fetches:
            return [ops.TaskRejected(key, f"{key} is an input held or being fetched here")]
        if self.closing:
            return [ops.TaskRejected(key, "the worker is closing")]
        reason = self._never_fits(event.resources)
        if event.job is not None:
            return self._execute_job(event, reason)
        if reason:
            return [ops.TaskRejected(key, reason)]
        dependencies = tuple(dep for dep in event.who_has if dep != key)
        # Find a source for every missing input before taking the task on, so that a task
        # that cannot be fed leaves nothing behind.
        sources: dict[str, list[str]] = {}
        for dep in dependencies:
            if dep in self.results or dep in self.tasks or dep in self.fetches:
                continue
            workers = [w for w in event.who_has[dep] if w != self.address]
            if not workers:
                return [ops.MissingData(key, dep, tuple(event.who_has[dep]))]
            sources[dep] = workers
        self._seq += 1
        task = WorkerTask(
            key, event.spec, event.resources, event.priority, self._seq, dependencies,
            missing={dep for dep in dependencies if dep not in self.results},
        )
        self.tasks[key] = task
        for dep in dependencies:
            self.needed_by.setdefault(dep, set()).add(key)
        actions: list[Action] = []
        for dep, workers in sources.items():
            fetch = self.fetches[dep] = Fetch(workers[0], workers[1:], [], event.nbytes.get(dep, 0))
            actions.append(FetchDependency(dep, fetch.worker, fetch.nbytes))
        if not task.missing:
            self._make_ready(task)
        return actions

    def _execute_job(self, event: ops.Execute, never_fits: str) -> list[Action]:
        error = job_error(event.key, event.job)
        if error or never_fits:
            return [ops.TaskRejected(event.key, f"a malformed job: {error}" if error
                                     else never_fits)]
        self._seq += 1
        task = WorkerTask(event.key, event.spec, event.resources, event.priority, self._seq, (),
                          set(), job=dict(event.job))
        self.tasks[task.key] = task
        self._make_ready(task)
        return []

    def _fetched(self, event: ev.DependencyFetched) -> list[Action]:
        key = event.key
        fetch = self.fetches.pop(key, None)
        if fetch is None:
            # Not asked for: drop the copy, unless it is data this worker tracks.
            return [] if key in self.results or key in self.tasks else [ReleaseResult(key)]
        if fetch.replicate:
            report = ops.Replicated(key, event.nbytes)
            self.results[key] = HeldResult(event.nbytes, owned=True, report=report)
            self._input_arrived(key)
            return [report]
        waiting = self.needed_by.get(key)
        if not waiting:
            return [ReleaseResult(key)]  # the tasks that wanted it have gone
        self.results[key] = HeldResult(event.nbytes, owned=False)
        self._input_arrived(key)
        return []

    def _fetch_failed(self, event: ev.DependencyFetchFailed) -> list[Action]:
        fetch = self.fetches.get(event.key)
        if fetch is None or fetch.worker != event.worker:
            return []  # a late answer to a fetch already settled
        fetch.tried.append(event.worker)
        if (fetch.replicate or self.needed_by.get(event.key)) and fetch.untried \
                and not event.permanent:
            fetch.worker = fetch.untried.pop(0)
            return [FetchDependency(event.key, fetch.worker, fetch.nbytes)]
        del self.fetches[event.key]
        actions: list[Action] = []
        if fetch.replicate:
            actions.append(ops.ReplicateFailed(event.key, event.reason or "fetch failed"))
        return actions + self._lose_input(event.key, tuple(fetch.tried), event.reason,
                                          event.permanent)

    def _completed(self, event: ops.TaskFinished) -> list[Action]:
        task = self.tasks.get(event.key)
        if task is None or task.state not in RUNNING:
            # Not started here: the stored copy belongs to nobody.
            return [] if event.key in self.results else [ReleaseResult(event.key)]
        self._free(task)
        if task.state is TaskState.CANCELLING:
            return [ReleaseResult(task.key), ops.TaskStopped(task.key),
                    *self._end_without_result(task)]
        duration = event.stop - event.start if event.duration is None else event.duration
        report = ops.TaskFinished(
            task.key, event.nbytes, event.start, event.stop, duration, event.peak_memory, task.gpus
        )
        self.results[task.key] = HeldResult(event.nbytes, owned=True, report=report)
        actions: list[Action] = [report, *self._forget(task)]
        self._input_arrived(task.key)
        return actions

    def _failed(self, event: ops.TaskErred) -> list[Action]:
        task = self.tasks.get(event.key)
        if task is None or task.state not in RUNNING:
            return []
        self._free(task)
        if task.state is TaskState.CANCELLING:
            report: Action = ops.TaskStopped(task.key)
        else:
            report = ops.TaskErred(task.key, event.exception, event.text, event.start, event.stop)
        return [report] + self._end_without_result(task)

    def _stopped(self, event: ops.TaskStopped) -> list[Action]:
        task = self.tasks.get(event.key)
        if task is None or task.state not in RUNNING:
            return []
        self._free(task)
        if task.state is TaskState.CANCELLING:
            report: Action = ops.TaskStopped(task.key)
        else:
            # Stopped without being cancelled (its process died): the task failed.
            text = f"the task's process was stopped: {event.reason or 'no reason given'}"
            report = ops.TaskErred(task.key, b"", text)
        return [report] + self._end_without_result(task)

    def _cancel(self, event: ops.StopTask) -> list[Action]:
        task = self.tasks.get(event.key)
        if task is None or task.state is TaskState.CANCELLING:
            return []
        if task.state is TaskState.EXECUTING:
            task.state = TaskState.CANCELLING
            return [KillJob(task.key, CANCEL) if task.job is not None else KillTask(task.key)]
        if task.job is not None:
            self.attempts.ending_unstarted.add(task.key)
            return [*self._forget(task),
                    EndUnstartedJob(task.key, "cancelled", "cancelled before it started")]
        return [ops.TaskStopped(task.key)] + self._end_without_result(task)

    def _free_keys(self, event: ops.Free) -> list[Action]:
        actions: list[Action] = []
        for key in event.keys:
            held = self.results.get(key)
            if held is None or not held.owned:
                continue  # fetched copies go when the tasks that need them do
            if key in self.needed_by:
                # Still an input of a task here: keep it as long as that task needs it.
                self.results[key] = HeldResult(held.nbytes, owned=False)
            else:
                del self.results[key]
                actions.append(ReleaseResult(key))
        return actions

    def _drain(self, event: ev.DrainRequested) -> list[Action]:
        if self.closing:
            return []
        self.closing = True
        actions: list[Action] = [ops.Draining()]
        for task in sorted(self.tasks.values(), key=lambda t: t.seq):
            if task.state not in RUNNING:
                actions.append(ops.TaskRejected(task.key, "the worker is closing"))
                actions += self._forget(task)
        return actions

    def _replicate(self, event: ops.Replicate) -> list[Action]:
        key = event.key
        held = self.results.get(key)
        if held is not None:
            if not held.owned:  # an input fetched for a task here: keep it for the scheduler
                report = ops.Replicated(key, held.nbytes)
                self.results[key] = HeldResult(held.nbytes, owned=True, report=report)
                return [report]
            return [ops.Replicated(key, held.nbytes)]
        fetch = self.fetches.get(key)
        if fetch is not None:  # already on its way (an input of a task here, or asked twice)
            fetch.replicate = True
            return []
        if self.closing or key in self.tasks:
            reason = "the worker is closing" if self.closing else f"{key} is computed here"
            return [ops.ReplicateFailed(key, reason)]
        sources = [w for w in event.who_has if w != self.address]
        if not sources:
            return [ops.ReplicateFailed(key, "no other worker holds it")]
        fetch = self.fetches[key] = Fetch(sources[0], sources[1:], [], event.nbytes,
                                          replicate=True)
        return [FetchDependency(key, fetch.worker, fetch.nbytes)]

    # -- jobs -------------------------------------------------------------------------------

    def _session_lost(self, event: ev.SessionLost) -> list[Action]:
        # A job not yet started is dropped unreported: the scheduler, which lost the session
        # too, puts it back itself. Started ones run on under their lease.
        self.attempts.registered = False
        actions: list[Action] = []
        for task in sorted(self.tasks.values(), key=lambda t: t.seq):
            if task.job is not None and task.state not in RUNNING:
                actions += self._forget(task)
        return actions

    def _attempt_ended(self, event: ops.AttemptEnded) -> list[Action]:
        task = self.tasks.get(event.key)
        if task is not None and task.job is not None and task.state in RUNNING:
            self._free(task)
            self._forget(task)
        return self.attempts.heard_ended(event)

    def _drain_timed_out(self, event: ev.DrainTimedOut) -> list[Action]:
        actions: list[Action] = []
        for task in sorted(self.tasks.values(), key=lambda t: t.seq):
            if task.job is not None and task.state is TaskState.EXECUTING:
                task.state = TaskState.CANCELLING
                actions.append(KillJob(task.key, SHUTDOWN))
        return actions

    # -- bookkeeping ----------------------------------------------------------------------

    def _never_fits(self, resources: Resources) -> str:
        """Why a task with these resources can never run here; "" when it can."""
        error = demand_error(resources)
        if error:
            return error
        if resources.fits(self.total):
            return ""
        absent = resources.missing_names(self.total.names())
        if absent:
            return f"this worker has no {', '.join(absent)} (it offers {self.total or 'nothing'})"
        return f"the task needs {resources} but this worker offers only {self.total}"

    def _make_ready(self, task: WorkerTask) -> None:
        task.state = TaskState.READY
        bisect.insort(self.ready, task.queue_entry)

    def _start_ready(self) -> list[Action]:
        if not self.ready or not self.free_threads:
            return []
        actions: list[Action] = []
        available = self.available
        waiting = []
        for entry in self.ready:
            task = self.tasks[entry[2]]
            gpus = None
            # A job starts only while registered: its start is reported, and its lease runs.
            if self.free_threads and task.resources.fits(available) \
                    and (task.job is None or self.attempts.registered):
                gpus = self.ledger.allocate(task.key, task.resources.get(GPU))
            if gpus is None:
                waiting.append(entry)  # does not fit now; later tasks may
                continue
            available = available - task.resources
            self.used = self.used + task.resources
            self.free_threads -= 1
            # gpu<N> resources stand for device N: pinned like the ledger's grant.
            gpus = tuple(sorted({*gpus, *named_devices(task.resources)}))
            task.state, task.gpus = TaskState.EXECUTING, gpus
            if task.job is not None:
                self.attempts.started(task.key, gpus)
                actions.append(StartJob(task.key, task.job, gpus, task.resources,
                                        self.attempts.lease_until))
                continue
            actions.append(StartTask(
                task.key, task.spec, gpus, GPU_PROCESS if gpus else THREAD,
                task.dependencies, task.resources,
            ))
        self.ready = waiting
        return actions

    def _free(self, task: WorkerTask) -> None:
        self.used = self.used - task.resources
        self.free_threads += 1
        self.ledger.release(task.key)

    def _forget(self, task: WorkerTask) -> list[Action]:
        """Drop a task that holds no resources; release fetched inputs nobody needs now."""
        del self.tasks[task.key]
        if task.state is TaskState.READY:
            self.ready.remove(task.queue_entry)
        actions: list[Action] = []
        for dep in task.dependencies:
            needers = self.needed_by[dep]
            needers.discard(task.key)
            if needers:
                continue
            del self.needed_by[dep]
            held = self.results.get(dep)
            if held is not None and not held.owned:
                del self.results[dep]
                actions.append(ReleaseResult(dep))
        return actions

    def _end_without_result(self, task: WorkerTask) -> list[Action]:
        return self._forget(task) + self._lose_input(task.key, ())

    def _lose_input(self, dep: str, tried: tuple[str, ...], reason: str = "",
                    permanent: bool = False) -> list[Action]:
        """``dep`` will not arrive: the tasks here waiting for it are handed back."""
        actions: list[Action] = []
        for key in sorted(self.needed_by.get(dep, ()), key=lambda k: self.tasks[k].seq):
            task = self.tasks.get(key)
            if task is None:
                continue  # handed back already, as a dependent of an earlier one
            actions.append(ops.MissingData(key, dep, tried, reason, permanent))
            actions += self._end_without_result(task)
        return actions

    def _input_arrived(self, dep: str) -> None:
        for key in sorted(self.needed_by.get(dep, ()), key=lambda k: self.tasks[k].seq):
            task = self.tasks[key]
            task.missing.discard(dep)
            if not task.missing and task.state is TaskState.FETCHING:
                self._make_ready(task)

    # -- checks ---------------------------------------------------------------------------

    def validate(self) -> None:
        """Raise AssertionError when any of the worker's books do not balance (for tests)."""
        from .invariants import check

        check(self)

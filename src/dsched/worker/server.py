"""The worker daemon's async shell: ops in, ``WorkerState`` decides, actions carried out.

A ``Worker`` holds the pure ``WorkerState``, the session with the scheduler (``session.py``),
the results it holds and the data port that serves them and its jobs' logs (``data.py``), the
executor that runs tasks (``executor.py``: a thread pool, and pinned child processes for GPU
tasks), the runner of shell-command jobs (``jobrunner.py``: a supervisor process each) and
the reports of what attempts do with their GPUs (``gpureports.py``: sampled at each
heartbeat, told with each attempt's end). Ops from the scheduler go to the state through a
table; the state's actions come back out through another. Every background activity runs in
one task group, so a failure in any of them is seen: the worker stops, logs why
(``failure``), and its process exits non-zero, so that its nanny starts it again.

It never changes ``os.environ``: what its tasks are told (no GPU of their own, the worker's
name, its scratch directory) goes to its child processes in the environment they are started
with (``task_env``), and to the process that runs its thread tasks through
``task_variables()``, which only the program that owns the process applies (``main.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Coroutine

import psutil

from .. import serialize
from ..activities import Activities
from ..comm import listen
from ..comm.addresses import WILDCARD_HOSTS, parse_address
from ..environ import (CUDA_VISIBLE_DEVICES_ENV, LOCAL_DIRECTORY_ENV, TASK_GPUS_ENV,
                       WORKER_NAME_ENV)
from ..peers import PeerPool
from ..policy import WorkerPolicy
from ..protocol import ops
from ..resources import Resources
from ..settings import CommConfig, WorkerConfig
from . import actions as act
from . import events as ev
from .containment import SUBREAPER, Containment, settle
from .data import ResultStore
from .executor import GpuProcessPool, Outcome, TaskKilled, ThreadRunner
from .gpureports import GpuReports
from .gpus import GpuDevice
from .gpuwatch import GpuWatch, on_loop
from .jobrecords import default_directory
from .jobrunner import JobRunner
from .session import SchedulerSession
from .state import WorkerState

logger = logging.getLogger("dsched.worker")

#: The ops the scheduler sends that the state takes as they are.
_TO_STATE = frozenset((ops.Execute, ops.StopTask, ops.Free, ops.Replicate, ops.Lease,
                       ops.AttemptAck, ops.UnfenceGpu, ops.Proceed))


@dataclass(frozen=True)
class WorkerSetup:
    """What one worker process runs with beyond its settings, found or resolved at start: the
    token and TLS contexts, its threads, what it offers (the GPUs found included) and the
    devices behind its ``GPU`` resource (None: abstract ``GPU=N``, devices ``0..N-1``), its
    memory limit in bytes, and how its previous process ended (from its nanny)."""

    token: str
    nthreads: int
    resources: Resources
    gpus: tuple[GpuDevice, ...] = ()
    ledger_indices: tuple[int, ...] | None = None
    memory_limit: int | None = None
    ssl_client: Any = None
    ssl_server: Any = None
    previous_exit: str | None = None


class Worker:
    """One worker process: ``await start()``, then it serves until ``stopped`` is set (by a
    drain, a refusal or a failure); ``await close()`` releases everything."""

    def __init__(self, config: WorkerConfig, comm: CommConfig, setup: WorkerSetup):
        self.config, self.comm_config, self.setup = config, comm, setup
        s = setup
        devices = None if s.ledger_indices is None else {
            index: next((g.memory_total for g in s.gpus if g.index == index), 0)
            for index in s.ledger_indices}
        self.state = WorkerState(s.nthreads, s.resources, gpus=devices,
                                 policy=WorkerPolicy.from_config(config))
        self.threads = ThreadRunner(s.nthreads)
        self.name = config.name or ""
        self.local_directory = ""
        # A task granted no GPU sees none; one granted some is told its own on top of this.
        self._told = {CUDA_VISIBLE_DEVICES_ENV: "", TASK_GPUS_ENV: ""}
        #: The environment the worker's child processes start from: the one it was given, and
        #: what every task is told (``task_variables``; complete once started).
        self.task_env = {**os.environ, **self._told}
        self.gpu_children = GpuProcessPool(base_env=self.task_env)
        self.address = ""
        self.stopped = asyncio.Event()
        self.draining = False
        peers = PeerPool(limits=comm.limits(), role="worker", name=self.name or "worker",
                         token=s.token, ssl=s.ssl_client, timeout=comm.connect_timeout)
        self.data = ResultStore(peers, comm, logs=self._log)
        self.session = SchedulerSession(
            config.scheduler_address, token=s.token, ssl=s.ssl_client, limits=comm.limits(),
            name=lambda: self.name or "worker", register=self._register, on_op=self._on_op,
            heartbeat=self._heartbeat, heartbeat_interval=config.heartbeat_interval,
            reconnect_min=config.reconnect_backoff_min, reconnect_max=config.reconnect_backoff_max,
            connect_timeout=comm.connect_timeout, death_timeout=config.death_timeout,
            stopped=self.stopped, opened=self._session_opened,
            lost=lambda: self._handle(ev.SessionLost()))
        self.jobs: JobRunner | None = None  # once started: its name decides the job directory
        self.containment = Containment(SUBREAPER)  # decided at start, with the job directory
        self._register_sent = 0.0
        self._previous_exit = s.previous_exit  # told to the first scheduler only
        self._retired = asyncio.Event()  # the scheduler says a draining worker may leave
        self._changed = asyncio.Event()  # set after each event: a drain waits on it, not a timer
        self._process = psutil.Process()
        #: The session, its heartbeats and what the worker runs, from ``start`` until
        #: ``stopped``: one that raises stops the worker; at the stop the rest are cancelled.
        self.activities = Activities("worker", self.stopped, lambda _, error: self._failed(error))
        self.gpu_watch: GpuWatch | None = None
        #: What each attempt holding GPUs does with them: sampled at each heartbeat, told with
        #: its end.
        self.gpu_reports = GpuReports(
            self.state, s.gpus, job_pid=lambda key: self.jobs and self.jobs.pid_of(key),
            task_pid=self.gpu_children.pid_of,
            kill_idle=lambda key, reason: self.jobs.kill(key, act.IDLE, reason),
            idle_timeout=config.gpu_idle_timeout, idle_action=config.gpu_idle_action,
            heartbeat_interval=config.heartbeat_interval)
        #: Why the worker stopped when a background activity (or a drain) failed: its process
        #: then exits non-zero.
        self.failure: str | None = None

    @property
    def refusal(self) -> str | None:
        return self.session.refusal

    def task_variables(self) -> dict[str, str]:
        """What every task is told, beyond the environment the worker was given: no GPU of its
        own (unless granted some), and, once started, the worker's name and scratch directory.
        The process that runs the thread tasks must carry these too (see ``main.py``)."""
        return dict(self._told)

    def _tell_tasks(self, **variables: str) -> None:
        self._told.update(variables)
        self.task_env.update(variables)
        for name, value in variables.items():
            self.gpu_children.set_env(name, value)

    # -- lifetime ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Make the scratch directory, listen on the data port, take the job directory and
        read what an earlier process left there (OSError if any of that cannot be done), then
        start talking to the scheduler."""
        config, comm = self.config, self.comm_config
        self.gpu_reports.loop = asyncio.get_running_loop()
        # A private scratch directory per worker process, removed when the worker stops.
        if config.local_directory:
            os.makedirs(config.local_directory, exist_ok=True)
        self.local_directory = tempfile.mkdtemp(prefix="sched-worker-", dir=config.local_directory)
        self.listener = await listen(config.host, config.port, self.data.serve,
                                     token=self.setup.token, ssl=self.setup.ssl_server,
                                     role="worker", name=self.name or "worker",
                                     accept_roles={"worker", "client"},
                                     handshake_timeout=comm.handshake_timeout, **comm.limits())
        host = config.host
        if host in WILDCARD_HOSTS:
            host = local_ip_towards(config.scheduler_address)
        self.address = f"{host}:{self.listener.port}"
        self.name = self.name or self.address
        # Tasks may read which worker runs them, and where its scratch space is.
        self._tell_tasks(**{WORKER_NAME_ENV: self.name, LOCAL_DIRECTORY_ENV: self.local_directory})
        directory = config.job_directory or default_directory(config.local_directory, self.name)
        self.jobs = JobRunner(os.path.abspath(directory), self.name, config.job_kill_grace,
                              self._job_report, env=self.task_env, slots=self.setup.nthreads)
        opened = await self.jobs.open(f"worker {self.name} at {self.address}")
        self.containment = await asyncio.to_thread(settle, config.containment, self.name,
                                                   self.jobs.directory)
        self.jobs.contain(self.containment)
        self.gpu_children.containment = self.containment
        await self.activities.start()
        self._handle(ev.AttemptsRecovered(tuple(opened)))
        self.gpu_watch = GpuWatch([gpu.index for gpu in self.setup.gpus], config.gpu_fault_xids,
                                  on_loop(asyncio.get_running_loop(), self._gpu_faulted))
        self.gpu_watch.start()
        self._spawn(self.session.run(), "the session with the scheduler")
        self._spawn(self.session.heartbeats(), "the heartbeats")

    def _gpu_faulted(self, index: int, reason: str) -> None:
        logger.warning("GPU %d fenced: %s; its work is stopped, and it takes none until "
                       "released (sched gpu release %s %d)", index, reason, self.name, index)
        self._handle(ev.GpuFaulted(index, reason))

    def _stopping(self) -> bool:
        """From ``stop`` on (or a failed activity), as the tasks of the group are cancelled."""
        return self.activities.stopping

    def _spawn(self, coroutine: Coroutine, what: str) -> None:
        """Run ``coroutine`` as an activity, cancelled when the worker stops; closed unrun
        once it is stopping."""
        self.activities.spawn(coroutine, what, until_stop=True)

    def _failed(self, error: BaseException) -> None:
        """Stop the worker because ``error`` escaped a background activity; say which."""
        while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
            error = error.exceptions[0]
        self.failure = f"{type(error).__name__}: {error}"
        logger.error("The worker failed (%s); stopping", self.failure, exc_info=error)
        self.stopped.set()

    async def wait_registered(self, timeout: float | None = None) -> None:
        await asyncio.wait_for(self.session.registered.wait(), timeout)

    async def close(self, reason: str = "worker closing", *, unregister: bool = False) -> None:
        """Stop every activity, then close the session (saying goodbye first when
        ``unregister``: the scheduler then expects us gone), the data port and the children."""
        self.stopped.set()
        if self.gpu_watch is not None:
            await asyncio.to_thread(self.gpu_watch.stop)
        await self.activities.ended()
        await self.session.close(reason,
                                 last=ops.Unregister(reason=reason) if unregister else None)
        await self.listener.close(reason)
        await self.data.peers.close()
        await self.gpu_children.close()
        if self.jobs is not None:
            await self.jobs.close()
        self.threads.close()
        shutil.rmtree(self.local_directory, ignore_errors=True)

    async def drain(self) -> None:
        """Stop taking work, let running tasks finish within the deadline (then stop them),
        and leave once the scheduler has had the results only this worker holds copied away
        (or at the deadline, or at once when no scheduler is connected). A drain that fails
        stops the worker as a failed background activity does."""
        if self.draining:
            return
        self.draining = True
        try:
            await self._drain()
        except Exception as error:
            self._failed(error)

    async def _drain(self) -> None:
        logger.info("Draining: no new tasks; waiting up to %.0fs for running ones",
                    self.config.drain_timeout)
        self._handle(ev.DrainRequested())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.drain_timeout

        def done() -> bool:
            return self.state.is_idle() and (self._retired.is_set()
                                             or not self.session.connected)

        await self._until(done, deadline)
        if not self.state.is_idle():
            logger.warning("Drain deadline passed; stopping the tasks and jobs still running")
            self._handle(ev.DrainTimedOut())
            # Jobs get SIGTERM and their grace period, GPU task processes are killed; their
            # ends go out before we leave.
            await self._until(self.state.is_idle, loop.time() + self.config.job_kill_grace + 5)
        elif not done():
            logger.warning("Drain deadline passed before the results only this worker holds "
                           "were copied to other workers; they are computed again if needed")
        await self.close("worker drained", unregister=True)

    # -- the scheduler session ----------------------------------------------------------------

    def _register(self) -> ops.Register:
        """The register op for a (re)connection: who this worker is and what it holds."""
        self._register_sent = time.monotonic()  # sent next: the lease runs from here
        s = self.setup
        snapshot = self.state.snapshot()
        previous_exit, self._previous_exit = self._previous_exit, None
        return ops.Register(
            name=self.name, address=self.address, nthreads=s.nthreads, resources=s.resources,
            gpus=tuple(vars(gpu) for gpu in s.gpus), pid=os.getpid(), host=socket.gethostname(),
            memory_limit=s.memory_limit, held=dict(snapshot.results),
            running=tuple(task.key for task in snapshot.running), previous_exit=previous_exit,
            running_gpus={task.key: list(task.gpus) for task in snapshot.running if task.gpus},
            attempts=tuple(attempt.to_wire() for attempt in snapshot.attempts),
            job_lease=self.state.policy.job_lease, containment=self.containment.mode,
            devices=self.state.ledger.devices, machine_restarted=self.jobs.machine_restarted)

    def _session_opened(self) -> None:
        self.jobs.restart_heard()  # the scheduler has settled what may be missing
        self._handle(ev.SessionOpened(self._register_sent))

    def _on_op(self, op: Any) -> None:
        kind = type(op)
        if kind in _TO_STATE:
            if kind is ops.UnfenceGpu and self.gpu_watch is not None:
                self.gpu_watch.rearm(op.index)
            self._handle(op)
        elif kind is ops.Retire:
            self._retired.set()
            self._changed.set()
        else:
            raise ops.BadOp(f"{op.OP} is not an op the scheduler sends a worker")

    def _heartbeat(self) -> ops.Heartbeat:
        """The heartbeat, made on a thread of its own (``gpu_reports`` reads the devices
        here, and folds what attempts did with them on the loop, beside the state)."""
        usage = self.gpu_reports.read(self._process.pid)
        return ops.Heartbeat(
            cpu=self._process.cpu_percent(), memory=self._process.memory_info().rss,
            memory_limit=self.setup.memory_limit, gpus=tuple(vars(u) for u in usage),
            executing=self.setup.nthreads - self.state.free_threads, sent=time.monotonic())

    # -- decisions and actions --------------------------------------------------------------

    def _handle(self, event: Any) -> None:
        for action in self.state.handle(event, time.monotonic()):
            kind = type(action)
            if kind is act.StartTask:
                if action.where == act.THREAD:
                    self._start_on_thread(action)
                else:
                    self._spawn(self._run_in_child(action), "running a task in a child")
            elif kind is act.FetchDependency:
                self._spawn(self._fetch(action), "fetching a dependency")
            elif kind is act.KillTask:
                if not self.gpu_children.kill(action.key):
                    logger.info("Task %s runs on a thread and cannot be stopped; it will finish",
                                action.key)
            elif kind is act.ReleaseResult:
                self.data.values.pop(action.key, None)
            elif kind is act.StartJob:
                self._spawn(self.jobs.run(action), "running a job attempt")
            elif kind is act.ExtendLease:
                self.jobs.extend(action.until)
            elif kind is act.KillJob:
                self.jobs.kill(action.key, action.why, action.reason)
            elif kind is act.ForgetAttempt:
                self.jobs.forget(action.key)
            elif kind is act.ProceedJob:
                self.jobs.proceed(action.key)
            elif kind is act.DropJob:
                self.jobs.drop(action.key)
            elif kind is act.EndUnstartedJob:
                # Stamped here, where there is a clock; handled after this batch of actions.
                ended = ops.AttemptEnded(action.key, action.outcome, None, action.error,
                                         started=None, ended=time.time())
                self._spawn(self._handle_soon(ended), "saying an attempt ended")
            else:  # a report: an op for the scheduler
                self.session.send(action)
        self._changed.set()

    async def _until(self, done: Any, deadline: float) -> None:
        """Until ``done()`` (a question to the core, asked after each event) or ``deadline``
        (the loop's time)."""
        loop = asyncio.get_running_loop()
        while not done() and loop.time() < deadline:
            self._changed.clear()
            try:
                async with asyncio.timeout_at(deadline):
                    await self._changed.wait()
            except TimeoutError:
                return

    async def _handle_soon(self, event: Any) -> None:
        self._handle(event)

    def _start_on_thread(self, start: act.StartTask) -> None:
        """Hand a task to the thread pool; ``_ended`` takes its outcome on the loop."""
        if self._stopping():  # nothing new starts
            return
        try:
            function_bytes, argument_bytes = start.spec
            args, kwargs = serialize.substitute(serialize.loads(argument_bytes),
                                                self.data.values)
        except Exception as error:  # arguments that cannot be unpickled here, say
            payload, text = serialize.dumps_exception(error)
            self._spawn(self._handle_soon(ev.RunErred(start.key, payload, text)),
                        "saying a task erred")
            return
        self.threads.submit(function_bytes, args, kwargs,
                            lambda outcome: self._ended(start.key, outcome))

    async def _run_in_child(self, start: act.StartTask) -> None:
        logger.debug("Running task %s on GPUs %s", start.key, ",".join(map(str, start.gpus)))
        try:
            function_bytes, argument_bytes = start.spec
            if start.dependencies:
                arguments = serialize.substitute(serialize.loads(argument_bytes),
                                                 self.data.values)
                argument_bytes = serialize.dumps(arguments)
            outcome = await self.gpu_children.run(start.key, start.gpus, function_bytes,
                                                  argument_bytes)
        except TaskKilled as killed:
            self._handle(ev.RunStopped(start.key, str(killed)))
            return
        except Exception as error:  # arguments that cannot be unpickled here, say
            payload, text = serialize.dumps_exception(error)
            self._handle(ev.RunErred(start.key, payload, text))
            return
        self._ended(start.key, outcome)

    def _ended(self, key: str, outcome: Outcome) -> None:
        """A task's outcome, from a thread or a child, as the event for the state; a failure
        with what it did with its GPUs, and whether it ran out of their memory
        (``gpureports``)."""
        if self._stopping():  # the session is closing: nothing is reported
            return
        try:
            if outcome.ok:
                self.data.values[key] = outcome.value
                self._handle(ev.RunFinished(key, serialize.sizeof(outcome.value),
                                              outcome.start, outcome.stop,
                                              peak_memory=outcome.peak_memory))
            else:
                gpu, oom = self.gpu_reports.task_failed(key, outcome.traceback)
                self._handle(ev.RunErred(key, outcome.exception, outcome.traceback,
                                           outcome.start, outcome.stop, gpu, oom))
        except Exception as error:  # a bug here stops the worker, as in any activity
            self._failed(error)

    def _job_report(self, report: Any) -> None:
        """What a job's supervisor says, to the state; an attempt's end with what it did with
        its GPUs (``gpureports``)."""
        self._handle(self.gpu_reports.job_ended(report))

    async def _log(self, request: ops.GetLog) -> ops.Log:
        if self.jobs is None:
            return ops.Log(request.id, error="the worker is starting")
        return await self.jobs.log(request, request.key in self.state.running_jobs())

    async def _fetch(self, fetch: act.FetchDependency) -> None:
        self._handle(await self.data.fetch(fetch.key, fetch.worker, fetch.nbytes))


def local_ip_towards(address: str) -> str:
    """The local IP this host uses to reach ``address`` (a UDP connect sends nothing)."""
    host, port = parse_address(address)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))
            return probe.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())

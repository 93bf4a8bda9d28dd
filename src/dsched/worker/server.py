"""The worker daemon's async shell: messages in, ``WorkerState`` decides, actions carried out.

It keeps one connection to the scheduler (reconnecting with back-off, keeping running tasks and
held results, and re-registering them), serves results to peer workers and clients on its own
port, fetches inputs from peers, runs tasks through the executor, and sends heartbeats. Every
decision is ``WorkerState``'s; this module only moves bytes and runs code.

Ops from the scheduler: ``execute``, ``cancel``, ``free``, ``drain``, ``replicate``,
``retire``. Ops to it: ``register``, ``heartbeat``, ``task-finished``, ``task-erred``,
``task-cancelled``, ``task-rejected``, ``missing-data``, ``draining``, ``replicated``,
``replicate-failed``, ``unregister``. Ops served to peers: ``get-data`` -> ``data``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass, field
from typing import Any

import psutil

from .. import serialize
from ..comm import Comm, connect, listen
from ..errors import (
    AuthenticationError, CommClosedError, LocalProtocolError, SchedError, VersionMismatchError,
)
from ..gpu_ids import TASK_GPUS_ENV
from ..peers import PeerPool
from ..protocol.messages import Payload
from ..resources import Resources
from . import actions as act
from . import events as ev
from .executor import GpuProcessPool, TaskKilled, ThreadRunner
from .gpus import GpuDevice, gpu_usage
from .state import WorkerState

logger = logging.getLogger("dsched.worker")

#: Names the worker a task runs on, inside the task's process.
WORKER_NAME_ENV = "SCHED_WORKER_NAME"
#: The worker's scratch directory (under --local-directory), inside the task's process.
LOCAL_DIRECTORY_ENV = "SCHED_LOCAL_DIRECTORY"


@dataclass
class WorkerSettings:
    """What one worker process runs with (already validated by config and the CLI)."""

    scheduler_address: str
    token: str
    nthreads: int
    resources: Resources
    gpus: tuple[GpuDevice, ...] = ()
    ledger_indices: tuple[int, ...] | None = None
    name: str | None = None
    host: str = ""
    port: int = 0
    memory_limit: int | None = None
    local_directory: str | None = None
    heartbeat_interval: float = 2.0
    reconnect_min: float = 0.5
    reconnect_max: float = 30.0
    drain_timeout: float = 60.0
    death_timeout: float | None = None
    connect_timeout: float = 10.0
    comm_limits: dict = field(default_factory=dict)  # max_frame/message_size, outbox_limit
    ssl_client: Any = None
    ssl_server: Any = None
    previous_exit: str | None = None  # how this worker's last process ended (from its nanny)
    extra: dict = field(default_factory=dict)


class Worker:
    def __init__(self, settings: WorkerSettings):
        self.settings = settings
        self.state = WorkerState(settings.nthreads, settings.resources,
                                 gpus=settings.ledger_indices)
        self.data: dict[str, Any] = {}
        self.threads = ThreadRunner(settings.nthreads)
        # GPU children start from the environment the worker was given; the worker process
        # itself (and so its thread tasks) sees no GPU.
        self.gpu_children = GpuProcessPool(base_env=dict(os.environ))
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        os.environ[TASK_GPUS_ENV] = ""
        self.scheduler: Comm | None = None
        self.unsent: list[dict] = []
        self.address = ""
        self.name = settings.name or ""
        self.peers: PeerPool | None = None
        self.stopped = asyncio.Event()
        self.draining = False
        self._tasks: set[asyncio.Task] = set()
        self._registered = asyncio.Event()
        self._retired = asyncio.Event()  # the scheduler says a draining worker may leave
        self.refusal: str | None = None  # why the scheduler refused this worker, if it did
        self._previous_exit = settings.previous_exit  # told to the first scheduler only

    # -- lifetime ---------------------------------------------------------------------------

    async def start(self) -> None:
        s = self.settings
        # A private scratch directory per worker process, removed when the worker stops.
        if s.local_directory:
            os.makedirs(s.local_directory, exist_ok=True)
        self.local_directory = tempfile.mkdtemp(prefix="sched-worker-", dir=s.local_directory)
        os.environ[LOCAL_DIRECTORY_ENV] = self.local_directory
        self.gpu_children.set_env(LOCAL_DIRECTORY_ENV, self.local_directory)
        self.listener = await listen(s.host or "0.0.0.0", s.port, self._serve_peer, token=s.token,
                                     ssl=s.ssl_server, role="worker", name=self.name or "worker",
                                     accept_roles={"worker", "client"}, **s.comm_limits)
        host = s.host if s.host not in ("", "0.0.0.0", "::") else None
        self._advertise_host = host
        self.port = self.listener.port
        self.peers = PeerPool(limits=s.comm_limits, role="worker", name=self.name or "worker",
                              token=s.token, ssl=s.ssl_client, timeout=s.connect_timeout)
        self._spawn(self._scheduler_loop(), "scheduler connection")
        self._spawn(self._heartbeats(), "heartbeats")

    async def wait_registered(self, timeout: float | None = None) -> None:
        await asyncio.wait_for(self._registered.wait(), timeout)

    async def close(self, reason: str = "worker closing") -> None:
        self.stopped.set()
        for task in list(self._tasks):
            task.cancel()
        if self.scheduler is not None and not self.scheduler.closed:
            await self.scheduler.close(reason)
        await self.listener.close(reason)
        if self.peers is not None:
            await self.peers.close()
        await self.gpu_children.close()
        self.threads.close()
        shutil.rmtree(self.local_directory, ignore_errors=True)

    async def drain(self) -> None:
        """Stop taking work, let running tasks finish within the deadline (then stop them),
        and leave once the scheduler has had the results only this worker holds copied away
        (or at the deadline, or at once when no scheduler is connected)."""
        if self.draining:
            return
        self.draining = True
        logger.info("Draining: no new tasks; waiting up to %.0fs for running ones",
                    self.settings.drain_timeout)
        self._handle(ev.DrainRequested())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.drain_timeout

        def done() -> bool:
            return self.state.is_idle() and (self._retired.is_set() or self.scheduler is None)

        while not done() and loop.time() < deadline:
            await asyncio.sleep(0.05)
        if not self.state.is_idle():
            logger.warning("Drain deadline passed; stopping the tasks still running")
            for task in self.state.snapshot().running:
                self.gpu_children.kill(task.key)
        elif not done():
            logger.warning("Drain deadline passed before the results only this worker holds "
                           "were copied to other workers; they are computed again if needed")
        if self.scheduler is not None and not self.scheduler.closed:
            self.scheduler.write_nowait({"op": "unregister", "reason": "worker drained"})
        await self.close("worker drained")

    def _spawn(self, coroutine, what: str) -> asyncio.Task:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)

        def done(task: asyncio.Task) -> None:
            self._tasks.discard(task)
            if not task.cancelled() and task.exception() is not None:
                logger.error("Worker %s failed", what, exc_info=task.exception())

        task.add_done_callback(done)
        return task

    # -- the scheduler connection -----------------------------------------------------------

    async def _scheduler_loop(self) -> None:
        s = self.settings
        backoff = s.reconnect_min
        lost_at: float | None = None
        loop = asyncio.get_running_loop()

        def refused(reason: str) -> None:
            # Trying again would be refused again: stop, and exit with a status that says so.
            self.refusal = reason
            logger.error("The scheduler at %s refused this worker: %s", s.scheduler_address,
                         reason)
            self.stopped.set()

        while not self.stopped.is_set():
            try:
                comm = await connect(s.scheduler_address, role="worker", name=self.name or "worker",
                                     token=s.token, ssl=s.ssl_client, timeout=s.connect_timeout,
                                     **s.comm_limits)
            except (OSError, TimeoutError, SchedError) as error:
                if isinstance(error, (AuthenticationError, VersionMismatchError)):
                    return refused(str(error))
                if lost_at is None:
                    lost_at = loop.time()
                if s.death_timeout is not None and loop.time() - lost_at > s.death_timeout:
                    logger.error("No scheduler for %.0fs (death timeout); stopping", s.death_timeout)
                    self.stopped.set()
                    return
                logger.info("Cannot reach the scheduler at %s (%s); retrying in %.1fs",
                            s.scheduler_address, error, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, s.reconnect_max)
                continue
            try:
                await self._session(comm)
            except CommClosedError as error:
                if self.stopped.is_set():
                    return
                if (error.reason or "").startswith("refused"):
                    return refused(error.reason.removeprefix("refused").lstrip(": "))
                logger.warning("Lost the scheduler (%s); reconnecting", error.reason)
            except Exception:  # a bug in one session must not end the reconnecting
                logger.exception("The scheduler session failed; reconnecting")
                comm.abort("worker error")
            finally:
                registered = self._registered.is_set()
                self.scheduler = None
                self._registered.clear()
            if registered:  # back-off starts again only after a session that got going
                backoff, lost_at = s.reconnect_min, None
            else:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, s.reconnect_max)

    async def _session(self, comm: Comm) -> None:
        if not self.address:
            host = self._advertise_host or local_ip_towards(self.settings.scheduler_address)
            self.address = f"{host}:{self.port}"
            self.name = self.name or self.address
            # Tasks may read which worker runs them (the examples print it).
            os.environ[WORKER_NAME_ENV] = self.name
            self.gpu_children.set_env(WORKER_NAME_ENV, self.name)
        snapshot = self.state.snapshot()
        register = {
            "op": "register", "name": self.name, "address": self.address,
            "nthreads": self.settings.nthreads, "resources": self.settings.resources.to_wire(),
            "gpus": [vars(gpu) for gpu in self.settings.gpus], "pid": os.getpid(),
            "host": socket.gethostname(), "memory_limit": self.settings.memory_limit,
            "held": dict(snapshot.results),
            "running": [task.key for task in snapshot.running],
        }
        if self._previous_exit:
            register["previous_exit"] = self._previous_exit
        await comm.send(register)
        reply = await comm.recv()
        if not reply or reply[0].get("op") != "registered":
            raise CommClosedError(f"refused: unexpected reply {reply!r:.200}")
        self.scheduler = comm
        self._registered.set()
        self._previous_exit = None  # a scheduler met after a reconnect has nothing to learn
        logger.info("Registered with the scheduler at %s as %s (resources: %s, threads: %d)",
                    self.settings.scheduler_address, self.name,
                    self.settings.resources or "none", self.settings.nthreads)
        unsent, self.unsent = self.unsent, []
        for op in unsent:
            comm.write_nowait(op)
        for op in reply[1:]:
            self._on_scheduler_op(op)
        async for op in comm:
            self._on_scheduler_op(op)
        raise CommClosedError(comm.close_reason or "scheduler closed the connection")

    def _on_scheduler_op(self, op: dict) -> None:
        kind = op.get("op")
        try:
            if kind == "execute":
                self._handle(ev.ExecuteRequested(
                    key=op["key"], spec=op["spec"], resources=Resources.from_wire(op["resources"]),
                    priority=op.get("priority", 0),
                    who_has={k: tuple(v) for k, v in op.get("who_has", {}).items()},
                    nbytes=op.get("nbytes", {}),
                ))
            elif kind == "cancel":
                self._handle(ev.CancelRequested(op["key"]))
            elif kind == "free":
                self._handle(ev.FreeKeys(tuple(op["keys"])))
            elif kind == "drain":
                self._spawn(self.drain(), "drain")
            elif kind == "replicate":
                self._handle(ev.ReplicateRequested(op["key"], tuple(op["who_has"]),
                                                   int(op.get("nbytes") or 0)))
            elif kind == "retire":
                self._retired.set()
            else:
                logger.warning("Ignoring unknown op from the scheduler: %r", kind)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            logger.error("Ignoring malformed %r op from the scheduler: %s", kind, error)

    def _to_scheduler(self, op: dict) -> None:
        comm = self.scheduler
        if comm is None or comm.closed:
            self.unsent.append(op)
        else:
            comm.write_nowait(op)

    async def _heartbeats(self) -> None:
        process = psutil.Process()
        process.cpu_percent()
        indices = tuple(gpu.index for gpu in self.settings.gpus)
        while not self.stopped.is_set():
            await asyncio.sleep(self.settings.heartbeat_interval)
            if self.scheduler is None or self.scheduler.closed:
                continue
            usage = await asyncio.get_running_loop().run_in_executor(None, gpu_usage, indices)
            comm = self.scheduler  # read again: the connection may have changed meanwhile
            if comm is None or comm.closed:
                continue
            comm.write_nowait({
                "op": "heartbeat", "cpu": process.cpu_percent(),
                "memory": process.memory_info().rss, "memory_limit": self.settings.memory_limit,
                "gpus": [vars(u) for u in usage],
                "executing": self.settings.nthreads - self.state.free_threads,
            })

    # -- decisions and actions --------------------------------------------------------------

    def _handle(self, event: Any) -> None:
        for action in self.state.handle(event):
            self._carry_out(action)

    def _carry_out(self, action: Any) -> None:
        kind = type(action)
        if kind is act.StartTask:
            self._spawn(self._run(action), f"task {action.key}")
        elif kind is act.FetchDependency:
            self._spawn(self._fetch(action), f"fetch of {action.key}")
        elif kind is act.StopTask:
            if not self.gpu_children.kill(action.key):
                logger.info("Task %s runs on a thread and cannot be stopped; it will finish",
                            action.key)
        elif kind is act.ReleaseResult:
            self.data.pop(action.key, None)
        elif kind is act.ReportDone:
            self._to_scheduler({"op": "task-finished", "key": action.key, "nbytes": action.nbytes,
                                "start": action.start, "stop": action.stop,
                                "duration": action.duration, "peak_memory": action.peak_memory,
                                "gpus": list(action.gpus)})
        elif kind is act.ReportFailed:
            self._to_scheduler({"op": "task-erred", "key": action.key,
                                "exception": action.exception, "traceback": action.text,
                                "start": action.start, "stop": action.stop})
        elif kind is act.ReportCancelled:
            self._to_scheduler({"op": "task-cancelled", "key": action.key})
        elif kind is act.ReportRejected:
            self._to_scheduler({"op": "task-rejected", "key": action.key, "reason": action.reason})
        elif kind is act.ReportMissingData:
            self._to_scheduler({"op": "missing-data", "key": action.key,
                                "dependency": action.dependency, "tried": list(action.tried),
                                "reason": action.reason, "permanent": action.permanent})
        elif kind is act.ReportDraining:
            self._to_scheduler({"op": "draining"})
        elif kind is act.ReportReplicated:
            self._to_scheduler({"op": "replicated", "key": action.key, "nbytes": action.nbytes})
        elif kind is act.ReportReplicateFailed:
            self._to_scheduler({"op": "replicate-failed", "key": action.key,
                                "reason": action.reason})
        else:
            raise TypeError(f"unknown worker action {action!r}")

    async def _run(self, start: act.StartTask) -> None:
        if start.gpus:
            logger.debug("Running task %s on GPUs %s", start.key, ",".join(map(str, start.gpus)))
        try:
            function_bytes, argument_bytes = start.spec
            if start.where == act.THREAD:
                args, kwargs = serialize.substitute(serialize.loads(argument_bytes), self.data)
                outcome = await self.threads.run(function_bytes, args, kwargs)
            else:
                if start.dependencies:
                    arguments = serialize.substitute(serialize.loads(argument_bytes), self.data)
                    argument_bytes = serialize.dumps(arguments)
                outcome = await self.gpu_children.run(start.key, start.gpus, function_bytes,
                                                      argument_bytes)
        except TaskKilled as killed:
            self._handle(ev.TaskStopped(start.key, str(killed)))
            return
        except Exception as error:  # arguments that cannot be unpickled here, say
            payload, text = serialize.dumps_exception(error)
            self._handle(ev.TaskFailed(start.key, payload, text))
            return
        if outcome.ok:
            self.data[start.key] = outcome.value
            self._handle(ev.TaskCompleted(start.key, serialize.sizeof(outcome.value),
                                          outcome.start, outcome.stop, outcome.peak_memory))
        else:
            self._handle(ev.TaskFailed(start.key, outcome.exception, outcome.traceback,
                                       outcome.start, outcome.stop))

    async def _fetch(self, fetch: act.FetchDependency) -> None:
        assert self.peers is not None
        try:
            reply = await self.peers.request(fetch.worker, {"op": "get-data", "keys": [fetch.key]},
                                             timeout=transfer_timeout(fetch.nbytes))
        except Exception as error:  # the peer is gone or slow: try another holder
            self._handle(ev.DependencyFetchFailed(fetch.key, fetch.worker, str(error)))
            return
        payload = reply.get("data", {}).get(fetch.key)
        cannot_send = reply.get("errors", {}).get(fetch.key)
        if payload is None:
            self._handle(ev.DependencyFetchFailed(
                fetch.key, fetch.worker, cannot_send or f"{fetch.worker} does not hold it",
                permanent=bool(cannot_send)))
            return
        try:
            value = serialize.loads(payload)
        except Exception as error:  # it will not unpickle here, whoever sends it
            self._handle(ev.DependencyFetchFailed(
                fetch.key, fetch.worker, f"cannot unpickle it here: {error!r}", permanent=True))
            return
        self.data[fetch.key] = value
        self._handle(ev.DependencyFetched(fetch.key, serialize.sizeof(value), fetch.worker))

    # -- serving peers ----------------------------------------------------------------------

    async def _serve_peer(self, comm: Comm) -> None:
        async for op in comm:
            if op.get("op") != "get-data":
                await comm.close(f"unknown op {op.get('op')!r} for a worker's data port")
                return
            data, missing, errors = {}, [], {}
            for key in op.get("keys", ()):
                if key not in self.data:
                    missing.append(key)
                    continue
                try:
                    data[key] = Payload(serialize.dumps(self.data[key]))
                except Exception as error:  # a result that cannot be pickled: say so
                    errors[key] = f"cannot send the result of {key}: {type(error).__name__}: {error}"
            # Awaited, not queued: the next request is served once the peer has taken this
            # reply, so large replies never pile up in the outbox.
            await self._send_data(comm, op.get("id"), data, missing, errors)

    async def _send_data(self, comm: Comm, request_id: Any, data: dict, missing: list,
                         errors: dict, more: bool = False) -> None:
        """One get-data reply; results that together outgrow one message go in several (all
        but the last marked ``more``), and one that alone does gets an error naming the limit."""
        reply = {"op": "data", "id": request_id, "data": data, "missing": missing,
                 "errors": errors}
        if more:
            reply["more"] = True
        try:
            await comm.send(reply)  # encodes first: nothing is written when it raises
            return
        except LocalProtocolError as error:
            if len(data) <= 1:
                errors.update({key: f"cannot send the result of {key}: {error}" for key in data})
                await comm.send({**reply, "data": {}, "errors": errors})
                return
        keys = list(data)
        half = len(keys) // 2
        await self._send_data(comm, request_id, {key: data[key] for key in keys[:half]}, [], {},
                              more=True)
        await self._send_data(comm, request_id, {key: data[key] for key in keys[half:]}, missing,
                              errors, more)


def transfer_timeout(nbytes: int) -> float:
    """How long a fetch of ``nbytes`` may take: a minute, plus time at a slow 10 MB/s."""
    return 60.0 + nbytes / 10e6


def local_ip_towards(address: str) -> str:
    """The local IP this host uses to reach ``address`` (a UDP connect sends nothing)."""
    from ..comm import parse_address

    host, port = parse_address(address)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))
            return probe.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())

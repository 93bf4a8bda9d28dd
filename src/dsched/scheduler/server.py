"""The scheduler daemon's async shell: messages become events, actions become messages.

Every decision is ``SchedulerState``'s; this module accepts connections, turns each op into an
event stamped with the loop's monotonic clock, hands it to ``state.handle`` and carries out the
returned actions in order. It logs, ticks the clock for timeouts, and drains on SIGTERM.

Ops from workers: ``register`` (first), ``heartbeat``, ``task-finished``, ``task-erred``,
``task-cancelled``, ``task-rejected``, ``missing-data``, ``draining``, ``replicated``,
``replicate-failed``, ``unregister``. Ops to workers: ``execute``, ``cancel``, ``free``,
``replicate``, ``retire``.
Ops from clients: ``submit``, ``cancel``, ``release``; ``info`` and ``who-has`` are requests
answered by ``id``.
Ops to clients: ``task-finished``, ``task-erred``, ``task-cancelled``, ``task-waiting``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import sys
from typing import Any

from ..comm import Comm, Listener, listen
from ..comm.addresses import reachable_host
from ..errors import CommClosedError, ConfigError, ResourceSpecError
from ..protocol import Payload
from ..protocol.messages import any_out_of_band
from ..resources import Resources
from . import actions as act
from . import events as ev
from .state import SchedulerState
from .views import processing_count, task_counts, waiting, who_has, worker_info

logger = logging.getLogger("dsched.scheduler")

TICK_INTERVAL = 0.5


class Scheduler:
    def __init__(self, *, host: str = "127.0.0.1", port: int = 8786, token: str,
                 ssl: Any = None, allowed_failures: int = 3,
                 no_worker_timeout: float | None = None, heartbeat_timeout: float = 60.0,
                 prefetch: int = 2, max_frame_size: int | None = None,
                 max_message_size: int | None = None, outbox_limit: int | None = None,
                 handshake_timeout: float | None = None):
        self.host, self.requested_port, self.token, self.ssl = host, port, token, ssl
        self.state = SchedulerState(allowed_failures=allowed_failures,
                                    no_worker_timeout=no_worker_timeout,
                                    heartbeat_timeout=heartbeat_timeout, prefetch=prefetch)
        self.limits = {k: v for k, v in (("max_frame_size", max_frame_size),
                                         ("max_message_size", max_message_size),
                                         ("outbox_limit", outbox_limit),
                                         ("handshake_timeout", handshake_timeout)) if v}
        self.workers: dict[str, Comm] = {}
        self.clients: dict[str, Comm] = {}
        self.listener: Listener | None = None
        self._address: str | None = None
        self.draining = False
        self._client_ids = itertools.count(1)
        self._ticker: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def address(self) -> str:
        """Where workers and clients reach this scheduler (not 0.0.0.0: nobody can)."""
        assert self.listener is not None
        if self._address is None:
            self._address = f"{reachable_host(self.listener.host)}:{self.listener.port}"
        return self._address

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.listener = await listen(self.host, self.requested_port, self._serve, token=self.token,
                                     ssl=self.ssl, role="scheduler", name="scheduler",
                                     accept_roles={"worker", "client"}, **self.limits)
        self._ticker = asyncio.ensure_future(self._tick())
        logger.info("Scheduler listening at %s", self.address)

    async def close(self, reason: str = "scheduler shutting down") -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        if self.listener is not None:
            await self.listener.close(reason)

    async def drain(self, deadline: float) -> None:
        """Stop taking work, wait up to ``deadline`` seconds for running tasks, then close."""
        self.draining = True
        logger.info("Draining: no new submissions; waiting up to %.0fs for running tasks", deadline)
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline
        while processing_count(self.state) and loop.time() < end:
            await asyncio.sleep(0.05)
        await self.close("scheduler drained")

    def now(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    # -- connections --------------------------------------------------------------------------

    async def _serve(self, comm: Comm) -> None:
        if comm.peer.role == "worker":
            await self._serve_worker(comm)
        else:
            await self._serve_client(comm)

    async def _serve_worker(self, comm: Comm) -> None:
        try:
            batch = await asyncio.wait_for(comm.recv(), 30)
        except (CommClosedError, asyncio.TimeoutError):
            await comm.close("expected a register op")
            return
        first = batch[0] if batch else {}
        try:
            joined = self._joined_event(first)
        except (KeyError, TypeError, ValueError, ResourceSpecError) as error:
            await comm.close(f"refused: invalid register op: {error}")
            return
        address = joined.address
        if any(w.name == joined.name and w.address != address
               for w in self.state.workers.values()):
            await comm.close(f"refused: a worker named {joined.name!r} is already registered")
            return
        old = self.workers.pop(address, None)
        if old is not None:
            # The same worker again (it reconnected before we saw its old connection close):
            # the new registration replaces the old one, and the state reconciles the two.
            old.abort("the worker registered again")
        self.workers[address] = comm
        reason, expected = "connection closed", False
        try:
            comm.write_nowait({"op": "registered", "address": address})
            self._handle(joined)
            for op in batch[1:]:
                self._worker_op(address, op)
            async for op in comm:
                if op.get("op") == "unregister":
                    reason, expected = str(op.get("reason", "worker unregistered")), True
                    break
                self._worker_op(address, op)
        except CommClosedError as error:
            reason = error.reason
        finally:
            if self.workers.get(address) is comm:
                del self.workers[address]
                self._handle(ev.WorkerLeft(address=address, reason=reason, expected=expected,
                                           now=self.now()))
            if not comm.closed:
                await comm.close("goodbye")

    def _joined_event(self, op: dict) -> ev.WorkerJoined:
        if op.get("op") != "register":
            raise ValueError(f"the first op must be register, not {op.get('op')!r}")
        nthreads = op["nthreads"]
        if not isinstance(nthreads, int) or nthreads < 1:
            raise ValueError(f"nthreads must be a positive integer, not {nthreads!r}")
        return ev.WorkerJoined(
            address=str(op["address"]), name=str(op.get("name") or op["address"]),
            nthreads=nthreads, resources=Resources.from_wire(op.get("resources") or {}),
            gpus=tuple(op.get("gpus") or ()),
            held=tuple((str(k), int(n)) for k, n in (op.get("held") or {}).items()),
            running=tuple(str(k) for k in op.get("running") or ()),
            previous_exit=str(op["previous_exit"]) if op.get("previous_exit") else None,
            now=self.now(),
        )

    def _worker_op(self, address: str, op: dict) -> None:
        kind = op.get("op")
        now = self.now()
        try:
            if kind == "task-finished":
                event: Any = ev.TaskFinished(key=op["key"], worker=address, nbytes=op["nbytes"],
                                             start=op["start"], stop=op["stop"],
                                             duration=op.get("duration"), now=now)
            elif kind == "heartbeat":
                event = ev.WorkerHeartbeat(address=address, metrics=op, now=now)
            elif kind == "task-erred":
                event = ev.TaskErred(key=op["key"], worker=address, exception=op["exception"],
                                     text=op["traceback"], now=now)
            elif kind == "task-cancelled":
                event = ev.CancelConfirmed(key=op["key"], worker=address, now=now)
            elif kind == "task-rejected":
                event = ev.TaskRejected(key=op["key"], worker=address,
                                        reason=op.get("reason", ""), now=now)
            elif kind == "missing-data":
                event = ev.MissingData(key=op["key"], worker=address, dependency=op["dependency"],
                                       tried=tuple(op.get("tried", ())),
                                       reason=str(op.get("reason") or ""),
                                       permanent=bool(op.get("permanent")), now=now)
            elif kind == "draining":
                event = ev.WorkerDraining(address=address, now=now)
            elif kind == "replicated":
                event = ev.ResultReplicated(key=op["key"], worker=address,
                                            nbytes=int(op.get("nbytes") or 0), now=now)
            elif kind == "replicate-failed":
                event = ev.ReplicateFailed(key=op["key"], worker=address,
                                           reason=str(op.get("reason") or ""), now=now)
            else:
                logger.warning("Ignoring unknown op %r from worker %s", kind, address)
                return
        except (KeyError, TypeError) as error:
            logger.warning("Ignoring malformed %r op from worker %s: %s", kind, address, error)
            return
        self._handle(event)

    async def _serve_client(self, comm: Comm) -> None:
        client = f"{comm.peer.name}-{next(self._client_ids)}"
        self.clients[client] = comm
        comm.write_nowait({"op": "welcome", "client": client})
        try:
            async for op in comm:
                self._client_op(client, comm, op)
        except CommClosedError:
            pass
        finally:
            del self.clients[client]
            self._handle(ev.ClientDisconnected(client=client, now=self.now()))

    def _client_op(self, client: str, comm: Comm, op: dict) -> None:
        kind = op.get("op")
        now = self.now()
        try:
            if kind == "submit":
                if self.draining:
                    keys = [task.get("key") for task in op.get("tasks", ()) if isinstance(task, dict)]
                    comm.write_nowait({"op": "error", "id": op.get("id"), "keys": keys,
                                       "reason": "the scheduler is draining and takes no work"})
                    return
                tasks = tuple(_task_spec(task) for task in op["tasks"])
                self._handle(ev.TasksSubmitted(client=client, tasks=tasks, now=now))
            elif kind == "release":
                self._handle(ev.KeysReleased(client=client, keys=tuple(op["keys"]), now=now))
            elif kind == "cancel":
                self._handle(ev.CancelRequested(client=client, keys=tuple(op["keys"]), now=now))
            elif kind == "info":
                comm.write_nowait({"op": "info", "id": op.get("id"), **self.info()})
            elif kind == "who-has":
                comm.write_nowait({"op": "who-has", "id": op.get("id"),
                                   "who_has": who_has(self.state, op["keys"])})
            else:
                comm.write_nowait({"op": "error", "id": op.get("id"),
                                   "reason": f"unknown op {kind!r}"})
        except (KeyError, TypeError, ValueError, ResourceSpecError) as error:
            comm.write_nowait({"op": "error", "id": op.get("id"),
                               "reason": f"malformed {kind!r} op: {error}"})

    def info(self) -> dict:
        return {"address": self.address, "workers": worker_info(self.state),
                "tasks": task_counts(self.state), "waiting": waiting(self.state),
                "counters": dict(self.state.counters)}

    # -- the state and its actions ----------------------------------------------------------

    def _handle(self, event: Any) -> None:
        for action in self.state.handle(event):
            self._carry_out(action)

    def _carry_out(self, action: Any) -> None:
        kind = type(action)
        if kind is act.Execute:
            # Large specs are bulk: held here until the task ends anyway, and at most as many
            # as the worker can start, so not held to the outbox limit.
            self._to_worker(action.worker, {
                "op": "execute", "key": action.key, "spec": action.spec,
                "resources": action.resources.to_wire(), "priority": action.priority,
                "who_has": {k: list(v) for k, v in action.who_has.items()},
                "nbytes": dict(action.nbytes)}, bulk=any_out_of_band(action.spec))
        elif kind is act.ReportFinished:
            self._to_clients(action.clients, {"op": "task-finished", "key": action.key,
                                              "nbytes": action.nbytes,
                                              "who_has": list(action.who_has)})
        elif kind is act.ReportMoved:
            self._to_clients(action.clients, {"op": "task-finished", "key": action.key,
                                              "who_has": list(action.who_has)})
        elif kind is act.Log:
            logger.log(action.level, action.msg, *action.args)
        elif kind is act.FreeResults:
            self._to_worker(action.worker, {"op": "free", "keys": list(action.keys)})
        elif kind is act.ReportErred:
            self._to_clients(action.clients, {"op": "task-erred", "key": action.key,
                                              "error": action.error, "text": action.text,
                                              "exception": action.exception})
        elif kind is act.ReportCancelled:
            self._to_clients(action.clients, {"op": "task-cancelled", "key": action.key,
                                              "reason": action.reason})
        elif kind is act.ReportWaiting:
            self._to_clients((action.client,), {"op": "task-waiting", "keys": list(action.keys),
                                                "reason": action.reason})
        elif kind is act.CancelTask:
            self._to_worker(action.worker, {"op": "cancel", "key": action.key})
        elif kind is act.Replicate:
            self._to_worker(action.worker, {"op": "replicate", "key": action.key,
                                            "who_has": [action.source], "nbytes": action.nbytes})
        elif kind is act.RetireWorker:
            self._to_worker(action.worker, {"op": "retire"})
        elif kind is act.CloseWorker:
            comm = self.workers.get(action.worker)
            if comm is not None:
                comm.abort(action.reason)
        else:
            raise TypeError(f"unknown scheduler action {action!r}")

    def _to_worker(self, address: str, op: dict, bulk: bool = False) -> None:
        comm = self.workers.get(address)
        if comm is None or comm.closed:
            return  # its WorkerLeft is on the way and will reschedule the work
        comm.write_nowait(op, bulk=bulk)

    def _to_clients(self, clients: tuple[str, ...], op: dict) -> None:
        for client in clients:
            comm = self.clients.get(client)
            if comm is not None and not comm.closed:
                comm.write_nowait(op)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_INTERVAL)
            try:
                self._handle(ev.Tick(now=self.now()))
            except Exception:  # a bug in one tick must not stop the clock
                logger.exception("Scheduler tick failed")


def _task_spec(task: dict) -> ev.TaskSpec:
    workers = task.get("workers")
    return ev.TaskSpec(
        key=str(task["key"]), spec=_payloads(task["spec"]),
        dependencies=tuple(task.get("dependencies") or ()),
        resources=Resources.from_wire(task.get("resources") or {}),
        priority=int(task.get("priority") or 0), retries=int(task.get("retries") or 0),
        workers=tuple(workers) if workers else None, prefix=str(task.get("prefix") or ""),
        wanted=bool(task.get("wanted", True)),
    )


def _payloads(spec: Any) -> tuple[Payload, ...]:
    """A task's function and arguments, as payloads: forwarded out of band when large."""
    if not isinstance(spec, list) or not all(isinstance(p, (bytes, memoryview)) for p in spec):
        raise TypeError(f"a task's spec must be a list of bytes, not {spec!r:.60}")
    return tuple(Payload(part) for part in spec)


def notify_systemd(message: bytes = b"READY=1") -> bool:
    """Tell systemd (Type=notify) we are ready, when ``NOTIFY_SOCKET`` is set."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    if path.startswith("@"):
        path = "\0" + path[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(path)
        sock.sendall(message)
    return True


def prepare_state_dir(path: str) -> None:
    """Create the state directory (mode 0700) or say in one line why it cannot be used."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        writable = os.access(path, os.W_OK | os.X_OK)
    except OSError as error:
        raise ConfigError(f"cannot create the state directory {path}: "
                          f"{error.strerror or error}; choose another with --state-dir or "
                          "scheduler.state_dir") from None
    if not writable:
        raise ConfigError(f"the state directory {path} is not writable by this user; choose "
                          "another with --state-dir or scheduler.state_dir")


def run_scheduler(cfg: dict) -> int:
    """Run the scheduler daemon from a loaded config until it is drained; the exit status."""
    from ..auth import ensure_token
    from ..daemon import install_signal_handlers, setup_logging, ssl_contexts

    s, c = cfg["scheduler"], cfg["comm"]
    setup_logging(s["log_level"])
    try:
        prepare_state_dir(s["state_dir"])
        token = ensure_token(token_file=s["token_file"])
        ssl = ssl_contexts(s["tls"], server=True)
    except ConfigError as error:
        print(f"sched-scheduler: error: {error}", file=sys.stderr)
        return 2

    async def main() -> int:
        scheduler = Scheduler(
            host=s["host"], port=s["port"], token=token, ssl=ssl,
            allowed_failures=s["allowed_failures"], no_worker_timeout=s["no_worker_timeout"],
            heartbeat_timeout=s["heartbeat_timeout"], prefetch=s["prefetch"],
            max_frame_size=c["max_frame_size"], max_message_size=c["max_message_size"],
            outbox_limit=c["outbox_limit"],
            handshake_timeout=c["handshake_timeout"],
        )
        try:
            await scheduler.start()
        except OSError as error:
            logger.error("Cannot listen on %s:%s: %s", s["host"], s["port"], error.strerror or error)
            return 1
        stopped = asyncio.Event()

        async def drain() -> None:
            try:
                await scheduler.drain(s["drain_timeout"])
            finally:
                stopped.set()

        install_signal_handlers(drain)
        notify_systemd()
        # A line on stdout for whoever started us (tests, LocalCluster): where we listen.
        print(f"sched-scheduler listening at {scheduler.address}", flush=True)
        await stopped.wait()
        return 0

    return asyncio.run(main())

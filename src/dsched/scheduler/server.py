"""The scheduler daemon's async shell: ops become events, actions become ops.

Every decision is ``SchedulerState``'s. This module accepts connections, decodes each op a
worker or client sends (``protocol.ops``: a malformed one closes that connection, with the
reason), turns it into an event stamped with the loop's monotonic clock through a table,
hands it to ``state.handle`` and carries out the returned actions in order, through another
table, behind the journal commit they wait for (``commits.py``). It also ticks the clock for
timeouts and drains on request.

The ticker, the journal's commits and one handler per connection run in one task group, which
the scheduler owns from ``start`` to ``close``. A connection that ends, however its peer ended
it (closed, vanished, sent a bad op), ends its handler only; an exception that escapes any of
them is a bug and stops the scheduler with the reason (``fatal``; the program exits 1), as the
worker stops, and the group cancels the rest.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Callable

from ..activities import Activities
from ..comm import Comm, Listener, listen
from ..comm.addresses import reachable_host
from ..errors import CommClosedError, RemoteProtocolError
from ..jobs import JobSpec, JobSpecError
from ..policy import SchedulerPolicy
from ..protocol import ops
from ..protocol.messages import any_out_of_band
from ..resources import ResourceSpecError
from ..settings import CommConfig, SchedulerConfig
from . import actions as act
from . import events as ev
from . import history
from .commits import GroupCommit
from .jobviews import jobs_view
from .journal import Journal
from .optables import CLIENT_OPS, TO_CLIENTS, TO_WORKER, WORKER_OPS, joined
from .pacedlog import PacedLog
from .state import SchedulerState
from .workerlinks import WorkerLinks
from .views import processing_count, task_counts, waiting, who_has, worker_info

logger = logging.getLogger("dsched.scheduler")

class Scheduler:
    """The daemon around one ``SchedulerState``: ``start()``, then serve until ``drain()`` or
    ``close()``."""

    def __init__(self, config: SchedulerConfig, comm: CommConfig, *, token: str,
                 ssl: Any = None, journal: Journal | None = None):
        self.config, self.comm_config, self.token, self.ssl = config, comm, token, ssl
        self.state = SchedulerState(SchedulerPolicy.from_config(config))
        self.journal = journal
        #: Each worker's connection, and what may go on it (``workerlinks.py``).
        self.links = WorkerLinks()
        self.commits = GroupCommit(
            journal, self._carry_out, self._fail, self._committed,
            spawn=lambda commit: self.activities.spawn(commit, "carrying out a journal commit"),
            flush=self.links.flush)
        self._log = PacedLog(logger)
        #: Where history queries run, one after another, off the event loop.
        self._history_thread = ThreadPoolExecutor(1, thread_name_prefix="sched-history")
        #: Set, with the reason, when the scheduler cannot go on (the journal failed).
        self.fatal: asyncio.Future | None = None
        self.core_failed = ""  # set when the core raised: nothing more is decided
        self.workers = self.links.workers  # each registered worker's connection, by address
        self.clients: dict[str, Comm] = {}
        self.listener: Listener | None = None
        self._address: str | None = None
        self.draining = False
        self._client_ids = itertools.count(1)
        self._ticker: asyncio.Task | None = None
        self._stop = asyncio.Event()  # set by close: the group ends
        #: The ticker, the commits and the connections' handlers, from ``start`` to ``close``:
        #: one that raises stops the scheduler; at close, a commit still in flight may end,
        #: for up to the close timeout.
        self.activities = Activities("scheduler", self._stop, self._activity_failed,
                                     grace=self.comm_config.close_timeout)
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Why the scheduler takes no work now, by who says so ("starting" until it listens,
        #: "draining" once it drains; other parts may add theirs): readyz answers 503 meanwhile.
        self.not_ready: dict[str, str] = {"starting": "not listening yet"}
        #: Called with each event and the actions it gave, when set (the dashboard's metrics).
        self.observe: Callable[[Any, list], None] | None = None
        #: Called with the seconds each journal commit took and its rows, when set (likewise).
        self.on_commit: Callable[[float, int], None] | None = None

    @property
    def ready(self) -> bool:
        return not self.not_ready

    @property
    def address(self) -> str:
        """Where workers and clients reach this scheduler (not 0.0.0.0: nobody can)."""
        assert self.listener is not None
        if self._address is None:
            self._address = f"{reachable_host(self.listener.host)}:{self.listener.port}"
        return self._address

    def load_jobs(self) -> int:
        """Load the journal's jobs into the state (before ``start``); how many."""
        if self.journal is None:
            return 0
        # Many small objects at once: the cyclic collector would scan the growing heap again
        # and again. Off while loading; after, what was loaded is left out of its scans.
        gc.disable()
        try:
            rows = self.journal.load()
            self._handle(ev.JobsLoaded(rows=tuple(rows), now=self.now(),
                                       next_id=self.journal.next_id))
        finally:
            gc.enable()
            gc.freeze()
        self._note_recovery()
        return len(rows)

    def _note_recovery(self) -> None:
        """Not ready while recovering: jobs are not dispatched yet."""
        if self.state.jobs.recovering:
            self.not_ready["recovering"] = ("recovering after a restart: no job is dispatched "
                                            "until the workers that held jobs are back")
        else:
            self.not_ready.pop("recovering", None)

    async def start(self) -> None:
        """Start the task group and the ticker, then listen (OSError when it cannot: nothing
        is left running then)."""
        loop = self._loop = asyncio.get_running_loop()
        self.fatal = loop.create_future()
        await self.activities.start()
        self._ticker = self.activities.spawn(self._tick(), "the scheduler's tick", until_stop=True)
        config, comm = self.config, self.comm_config
        try:
            self.listener = await listen(
                config.host, config.port, self._serve, token=self.token, ssl=self.ssl,
                role="scheduler", name="scheduler", accept_roles={"worker", "client"},
                handshake_timeout=comm.handshake_timeout, **comm.limits(),
                spawn=lambda handler: self.activities.spawn(handler, "serving a connection"))
        except BaseException:
            await self._end_group()
            raise
        self.not_ready.pop("starting", None)
        logger.info("Scheduler listening at %s", self.address)

    async def close(self, reason: str = "scheduler shutting down") -> None:
        """Stop ticking, close every connection with ``reason`` (their handlers end, or are
        cancelled after the close timeout), let a journal commit in flight end, and return
        once no task of the scheduler is left."""
        if self._ticker is not None:
            self._ticker.cancel()
        self._log.tick(self.now(), stopping=True)
        if self.listener is not None:
            await self.listener.close(reason, timeout=self.comm_config.close_timeout)
        await self._end_group()
        self.commits.close()
        self._history_thread.shutdown(wait=False)

    async def _end_group(self) -> None:
        self._stop.set()
        if await self.activities.ended():
            logger.warning("A journal commit had not ended %g s after closing; cancelled",
                           self.comm_config.close_timeout)

    def _activity_failed(self, what: str, error: BaseException) -> None:
        """An activity raised: a bug; the scheduler stops with the reason (nothing more is
        carried out), then the group cancels the rest."""
        self._fail(f"{what} failed: {type(error).__name__}: {error}", error)

    async def drain(self, deadline: float) -> None:
        """Stop taking work, wait up to ``deadline`` seconds for running tasks, then close."""
        self.draining = True
        self._handle(ev.SchedulerDraining(now=self.now()))
        self.not_ready["draining"] = "draining: it takes no new work"
        logger.info("Draining: new tasks and jobs are refused; waiting up to %g s for the "
                    "running tasks to end", deadline)
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline
        while processing_count(self.state) and loop.time() < end:
            await asyncio.sleep(0.05)
        running = processing_count(self.state)
        how = (f" with {running} task(s) still running, after draining for {deadline:g} s"
               if running else ", drained: no task was left running")
        if running:  # their clients lose them
            logger.warning("Stopping%s", how)
        await self.close(f"the scheduler stopped{how}")

    def now(self) -> float:
        return (self._loop or asyncio.get_running_loop()).time()

    # -- connections --------------------------------------------------------------------------

    async def _serve(self, comm: Comm) -> None:
        if comm.peer.role == "worker":
            await self._serve_worker(comm)
        else:
            await self._serve_client(comm)

    async def _serve_worker(self, comm: Comm) -> None:
        try:
            batch = await asyncio.wait_for(comm.recv(), self.config.register_timeout)
            first = ops.decode(batch[0])
            if type(first) is not ops.Register:
                raise ops.BadOp(f"a worker's first op must be register, not {first.OP}")
        except (CommClosedError, asyncio.TimeoutError):
            await comm.close("expected a register op")
            return
        except RemoteProtocolError as error:
            comm.protocol_error(error)
            return
        address = first.address
        old = self.links.register(address, comm)
        if old is not None:
            # The same worker again (it reconnected before we saw its old connection close):
            # the new registration replaces the old one, and the state reconciles the two.
            old.abort("the worker registered again")
        reason, expected = "connection closed", False
        try:
            self._handle(joined(first, self.now()))  # accepted: it hears so first
            for d in batch[1:]:
                self._worker_op(address, ops.decode(d))
            async for d in comm:
                op = ops.decode(d)
                if type(op) is ops.Unregister:
                    reason, expected = op.reason, True
                    break
                self._worker_op(address, op)
        except CommClosedError as error:
            reason = error.reason
        except RemoteProtocolError as error:  # a malformed op: that worker goes, we go on
            reason = f"protocol error: {error}"
            comm.protocol_error(error)
        finally:
            if self.links.ended(address, comm):
                self._handle(ev.WorkerLeft(address=address, reason=reason, expected=expected,
                                           now=self.now()))
            if not comm.closed:
                await comm.close("goodbye")

    def _worker_op(self, address: str, op: Any) -> None:
        make = WORKER_OPS.get(type(op))
        if make is None:
            raise ops.BadOp(f"{op.OP} is not an op a registered worker sends")
        self._handle(make(op, address, self.now()))

    async def _serve_client(self, comm: Comm) -> None:
        client = f"{comm.peer.name}-{next(self._client_ids)}"
        self.clients[client] = comm
        comm.write_nowait(ops.Welcome(client=client).to_wire())
        try:
            async for d in comm:
                self._client_op(client, comm, ops.decode(d))
        except CommClosedError:
            pass
        except RemoteProtocolError as error:  # a malformed op: that client goes, we go on
            comm.protocol_error(error)
        finally:
            del self.clients[client]
            self._handle(ev.ClientDisconnected(client=client, now=self.now()))

    def _client_op(self, client: str, comm: Comm, op: Any) -> None:
        kind = type(op)
        make = CLIENT_OPS.get(kind)
        if make is not None:
            self._handle(make(op, client, self.now()))
        elif kind is ops.SubmitJobs:
            self._submit_jobs(client, comm, op)
        elif kind is ops.QueryJobs:
            view = jobs_view(self.state, op.jobs, op.states, op.offset, op.limit,
                             op.expand)
            comm.write_nowait(ops.Reply(id=op.id, value=view).to_wire())
        elif kind is ops.Info:
            comm.write_nowait(ops.Reply(id=op.id, value=self.info()).to_wire())
        elif kind is ops.WhoHas:
            comm.write_nowait(ops.Reply(id=op.id, value=who_has(self.state, op.keys)).to_wire())
        elif kind is ops.QueryHistory:
            self.activities.spawn(self._history(comm, op), "answering a history query")
        else:
            raise ops.BadOp(f"{op.OP} is not an op a client sends")

    async def _history(self, comm: Comm, op: ops.QueryHistory) -> None:
        """Answer a history query from the journal, on the history thread: over millions of
        attempts a query may take a good part of a second, and the loop goes on meanwhile."""
        if self.journal is None:
            answer = ops.Error(reason="this scheduler keeps no journal, so it has no history "
                               "of jobs", id=op.id)
        else:
            ask = partial(history.query, self.journal.path, op.jobs, op.states, op.name,
                          op.since, op.until, op.limit)
            try:
                attempts = await asyncio.get_running_loop().run_in_executor(
                    self._history_thread, ask)
                answer = ops.Reply(id=op.id, value={"attempts": attempts})
            except (sqlite3.Error, ValueError, OverflowError) as error:
                answer = ops.Error(reason=f"cannot read the history in the journal "
                                   f"{self.journal.path}: {error}", id=op.id)
        if not comm.closed:
            comm.write_nowait(answer.to_wire())

    def _submit_jobs(self, client: str, comm: Comm, op: ops.SubmitJobs) -> None:
        """Jobs that cannot be read are refused, with the reason, and nothing is queued."""
        if self.journal is None:
            comm.write_nowait(ops.Error(reason="this scheduler keeps no journal, so it takes "
                                        "no jobs", id=op.id).to_wire())
            return
        try:
            specs = tuple(JobSpec.from_wire(job) for job in op.jobs)
        except (JobSpecError, ResourceSpecError) as error:
            comm.write_nowait(ops.Error(reason=f"nothing queued: {error}", id=op.id).to_wire())
            return
        self._handle(ev.JobsSubmitted(client=client, request=op.id, jobs=specs, at=time.time(),
                                      watch=op.watch, now=self.now()))

    def info(self) -> dict:
        return {"address": self.address, "workers": worker_info(self.state),
                "tasks": task_counts(self.state), "waiting": waiting(self.state),
                "counters": dict(self.state.counters),
                "jobs": jobs_view(self.state, limit=0)["counts"]}

    # -- the state and its actions ----------------------------------------------------------

    def _handle(self, event: Any) -> None:
        self.commits.carry_out_all(self._decide(event))

    def _decide(self, event: Any) -> list:
        """The core's actions for ``event``. A core that raises has a bug: the scheduler stops
        (crash-only, as the worker does), and from then on decides and carries out nothing,
        the half-made decision included; the journal makes its restart safe."""
        if self.core_failed:
            return []
        try:
            actions = self.state.handle(event)
        except Exception as error:
            self.core_failed = (f"a bug in the scheduler's core, handling "
                                f"{type(event).__name__}: {type(error).__name__}: {error}")
            logger.error("The core failed", exc_info=error)
            self._fail(self.core_failed)
            return []
        if self.observe is not None:
            self.observe(event, actions)
        return actions

    def _committed(self, seconds: float, rows: int) -> None:
        if self.on_commit is not None:
            self.on_commit(seconds, rows)

    def _fail(self, reason: str, error: BaseException | None = None) -> None:
        """Stop with ``reason`` (the first one given stands): nothing more is carried out."""
        self.commits.stop()
        if self.fatal is None or not self.fatal.done():
            logger.critical("Stopping: %s", reason, exc_info=error)
        if self.fatal is not None and not self.fatal.done():
            self.fatal.set_result(reason)

    def _carry_out(self, action: Any) -> None:
        kind = type(action)
        make = TO_WORKER.get(kind)
        if make is not None:
            # A large spec is bulk: held here until the task ends anyway, and sent for at most
            # as many tasks as the worker can start, so not held to the outbox limit.
            self.links.send(action.worker, make(action).to_wire(),
                            accepted=kind is act.WorkerAccepted,
                            bulk=kind is act.SendExecute and any_out_of_band(action.spec))
            return
        make = TO_CLIENTS.get(kind)
        if make is not None:
            wire = make(action).to_wire()
            clients = action.clients if kind is not act.TellWaiting else (action.client,)
            for client in clients:
                comm = self.clients.get(client)
                if comm is not None and not comm.closed:
                    comm.write_nowait(wire)
        elif kind is act.Refused:
            comm = self.clients.get(action.client)
            if comm is not None and not comm.closed:
                comm.write_nowait(ops.Error(reason=action.reason, id=action.request,
                                            keys=action.keys).to_wire())
        elif kind is act.JobsReply:
            comm = self.clients.get(action.client)
            if comm is not None and not comm.closed:
                reply = (ops.Error(reason=action.error, id=action.request) if action.error else
                         ops.Reply(id=action.request, value=action.value))
                comm.write_nowait(reply.to_wire())
        elif kind is act.LogLine:
            self._log.write(action, self.now())
        elif kind is act.CloseWorker:
            if action.refused:
                self.links.refuse(action.worker, action.reason)
            else:
                self.links.cut(action.worker, action.reason)
        else:
            raise TypeError(f"unknown scheduler action {action!r}")

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.config.tick_interval)
            self._handle(ev.Tick(now=self.now()))
            self._log.tick(self.now())
            if "recovering" in self.not_ready:
                self._note_recovery()

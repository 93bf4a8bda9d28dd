"""AsyncClient: submit Python functions with resource demands, get futures back.

It holds one connection to the scheduler (submissions out, task reports in) and fetches
results straight from the workers that hold them. ``submit`` and ``map`` are ordinary methods
that may be called from any thread: they pickle in the caller's thread and queue the message
for the client's loop; everything else happens on that loop. :class:`~dsched.Client` is the
same API for blocking code, running an AsyncClient on a loop thread of its own.

Ops the client sends go through one queue, in the order they were made (a release is never
sent before the submit of the same key), and leave as one frame per loop iteration.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import logging
import threading
from typing import Any, Callable, Iterable

from .. import config, serialize
from ..comm import Comm, connect
from ..errors import (
    AuthenticationError, CommClosedError, RemoteProtocolError, SchedError, SchedulerLostError,
)
from ..peers import PeerPool
from ..protocol import ops
from ..settings import TlsConfig, build
from .future import PENDING, Future, FutureState, FutureStatus
from .joblogs import JobLog, job_view, log_attempt, read_log
from .jobs import JobDesk, JobFuture, _Submitting, job_spec
from .jobwait import wait_for_jobs
from .reports import TASK_REPORTS, apply_task_report
from .results import MISSING, fetch_results, substitute_present, wait_all
from .settings import comm_config, resolve_token
from .submission import KeyMaker, TaskBuilder, is_bulk, map_keys, task_options, task_size
from .workerview import workers_view

logger = logging.getLogger("dsched.client")

FINISHED = FutureStatus.finished


def _is_future(value: Any) -> bool:
    return type(value) is Future


def check_cluster_kwargs(address: Any, cluster_kwargs: dict[str, Any]) -> None:
    """Keyword arguments a Client passes on to the LocalCluster it starts: refused when it
    starts none (an address was given) or when LocalCluster takes no such argument, so that a
    misspelt option is an error rather than silently ignored."""
    if not cluster_kwargs:
        return
    import inspect

    from .cluster import LocalCluster

    names = ", ".join(sorted(cluster_kwargs))
    if address is not None:
        raise TypeError(f"Client() got unexpected keyword argument(s) {names}: options for a "
                        "LocalCluster apply only when no address is given")
    known = set(inspect.signature(LocalCluster).parameters)
    unknown = sorted(set(cluster_kwargs) - known)
    if unknown:
        raise TypeError(f"Client() got unexpected keyword argument(s) {', '.join(unknown)}; it "
                        f"takes its own options and those of LocalCluster: {', '.join(sorted(known))}")


class AsyncClient:
    """A client on an asyncio loop: ``client = await AsyncClient(address)`` or ``async with``.

    ``address`` is ``"host:port"``, a :class:`~dsched.LocalCluster`, or None for the configured
    ``client.scheduler_address`` or else a new LocalCluster (``cluster_kwargs`` go to it).
    """

    asynchronous = True

    def __init__(self, address: Any = None, *, token: str | None = None,
                 token_file: str | None = None, ssl: Any = None, name: str = "client",
                 timeout: float | None = None, **cluster_kwargs: Any):
        check_cluster_kwargs(address, cluster_kwargs)
        self.address = address
        self.cluster: Any = None
        self._owns_cluster = False
        self._cluster_kwargs = cluster_kwargs
        self._token, self._token_file, self._ssl, self.name = token, token_file, ssl, name
        self._timeout = timeout if timeout is not None else config.get("client.connect_timeout")
        self._states: dict[str, FutureState] = {}
        self._lock = threading.Lock()
        self._keys = KeyMaker()
        self._outgoing: collections.deque = collections.deque()
        self._flush_scheduled = False
        self._requests: dict[int, asyncio.Future] = {}
        self._ids = itertools.count(1)  # request ids, from any thread
        self._jobs = JobDesk(self)
        self.comm: Comm | None = None
        self._comm = comm_config()
        self._limits = self._comm.limits()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._reader: asyncio.Task | None = None
        self._peers: PeerPool | None = None
        self._lost_reason = ""
        self.id = ""
        self.status = "created"

    # -- lifetime ---------------------------------------------------------------------------

    def __await__(self):
        return self.start().__await__()

    async def __aenter__(self) -> "AsyncClient":
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> "AsyncClient":
        if self.status != "created":
            return self
        self.loop = asyncio.get_running_loop()
        self.status = "connecting"
        try:
            await self._connect()
        except BaseException:
            self.status = "closed"
            await self._close_cluster()
            raise
        self._peers = PeerPool(limits=self._limits, role="client", name=self.name,
                               token=self._token, ssl=self._ssl, timeout=self._timeout)
        self._reader = asyncio.ensure_future(self._read())
        self.status = "running"
        return self

    async def _connect(self) -> None:
        from .cluster import LocalCluster

        address = self.address
        if address is None:
            address = config.get("client.scheduler_address")
        if address is None:
            kwargs = self._cluster_kwargs
            address = await self.loop.run_in_executor(None, lambda: LocalCluster(**kwargs))
            self._owns_cluster = True
        if isinstance(address, LocalCluster):
            self.cluster, self._token, address = address, address.token, address.address
        self.address = address
        self._token = resolve_token(self._token, self._token_file)
        if self._ssl is None:
            from ..daemon import ssl_contexts

            self._ssl = ssl_contexts(build(TlsConfig, config.get("client.tls")), server=False)
        try:
            self.comm = await connect(address, role="client", name=self.name, token=self._token,
                                      ssl=self._ssl, timeout=self._timeout, **self._limits)
            welcome = await self.comm.recv()
        except AuthenticationError as error:
            raise AuthenticationError(
                f"the scheduler at {address} refused this client's token ({error}); use the "
                f"scheduler's token (SCHED_TOKEN, token=, or the token file)") from None
        except (OSError, TimeoutError, CommClosedError) as error:
            raise OSError(f"cannot connect to the scheduler at {address}: {error}") from None
        first = ops.decode(welcome[0])
        if type(first) is not ops.Welcome:
            raise ops.BadOp(f"the scheduler's first op was {first.OP}, not welcome")
        self.id = first.client

    async def close(self) -> None:
        """Cancel what is pending, disconnect (the scheduler forgets this client's tasks) and
        stop the LocalCluster this client started, if any."""
        if self.status in ("closing", "closed"):
            return
        reconnecting = self.status == "disconnected"
        self.status = "closing"
        for state in list(self._states.values()):
            state.finish(FutureStatus.cancelled, reason="the client was closed")
        self._jobs.lost(SchedError("the client was closed before the job ended"))
        if self.comm is not None:
            await self.comm.close("client closing")
        if self._reader is not None:
            if reconnecting:  # it may be waiting to try again
                self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._peers is not None:
            await self._peers.close()
        await self._close_cluster()
        self.status = "closed"

    async def _close_cluster(self) -> None:
        if self._owns_cluster and self.cluster is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.cluster.close)

    def _on_own_loop(self) -> bool:
        """Whether the caller runs on this client's loop (where it must not block)."""
        if self.loop is None or asyncio._get_running_loop() is not self.loop:
            return False
        if not self.asynchronous:
            raise RuntimeError("a blocking call on the client's own event loop would hang it "
                               "(in a done-callback?); use the future's add_done_callback")
        return True

    def _check_running(self) -> None:
        if self.status == "running":
            return
        if self.status == "disconnected":
            raise SchedulerLostError(f"lost the scheduler at {self.address}: {self._lost_reason}")
        raise SchedError(f"the client is {self.status}")

    # -- futures and references -------------------------------------------------------------

    def _future(self, key: str) -> tuple[Future, bool]:
        """A new Future of ``key``, and whether the key must be (re)submitted."""
        with self._lock:
            state = self._states.get(key)
            submit = state is None
            if submit:
                state = self._states[key] = FutureState(key)
            elif state.status is FutureStatus.cancelled or state.status is FutureStatus.lost:
                state.reset()
                submit = True
            state.refs += 1
        return Future(key, self, state), submit

    def _release_later(self, state: FutureState) -> None:
        """A Future of ``state`` is gone (any thread, no locks: it may be the GC)."""
        if self.status in ("running", "disconnected"):
            self._enqueue(state)

    def _enqueue(self, item: Any) -> None:
        self._outgoing.append(item)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop = self.loop
            if asyncio._get_running_loop() is loop:
                loop.call_soon(self._flush)
            else:
                loop.call_soon_threadsafe(self._flush)

    def _flush(self) -> None:
        """On the loop: send queued ops in order; count released references."""
        self._flush_scheduled = False  # before draining, so a later append schedules again
        outgoing = self._outgoing
        released: list[str] = []
        while outgoing:
            item = outgoing.popleft()
            if type(item) is FutureState:
                with self._lock:
                    item.refs -= 1
                    if item.refs > 0 or self._states.get(item.key) is not item:
                        continue
                    del self._states[item.key]
                released.append(item.key)
            else:
                if released:
                    self._send(ops.Release(keys=tuple(released)))
                    released = []
                self._send(self._jobs.sent(item) if type(item) is _Submitting else item)
        if released:
            self._send(ops.Release(keys=tuple(released)))

    def _send(self, op: Any) -> None:
        if self.comm is not None and not self.comm.closed:
            # A submit with a large function or arguments is bulk: the user's own data, not
            # counted toward the outbox limit, which is there to catch a stuck scheduler.
            self.comm.write_nowait(op.to_wire(), bulk=is_bulk(op))

    # -- submitting -------------------------------------------------------------------------

    def submit(self, fn: Callable, *args: Any, key: str | None = None, resources: Any = None,
               priority: int | None = None, retries: int | None = None,
               workers: Iterable[str] | str | None = None, pure: bool = True,
               **kwargs: Any) -> Future:
        """Run ``fn(*args, **kwargs)`` on a worker that has ``resources`` free.

        ``priority``: higher runs first. ``retries``: times to rerun it if it raises.
        ``workers``: names or addresses of the workers it may run on. ``pure=False``: a new
        task even for a call already submitted. Futures in the arguments are replaced by
        their results on the worker.
        """
        self._check_running()
        builder = TaskBuilder(fn, task_options(resources, priority, retries, workers),
                              _is_future, self._keys)
        task = builder.build(args, kwargs, key, pure)
        task_size(task, self._limits["max_message_size"])
        future, submit = self._future(task["key"])
        if submit:
            self._enqueue(ops.Submit(tasks=(task,)))
        return future

    def map(self, fn: Callable, *iterables: Iterable, key: str | Iterable[str] | None = None,
            resources: Any = None, priority: int | None = None, retries: int | None = None,
            workers: Iterable[str] | str | None = None, pure: bool = True,
            **kwargs: Any) -> list[Future]:
        """``submit(fn, *items, **kwargs)`` for each tuple of items from ``iterables``, sent
        as one message. ``key``: a list of keys, or a str to start every key with."""
        self._check_running()
        if not iterables:
            raise TypeError("map() needs at least one iterable")
        calls = list(zip(*iterables))
        keys = map_keys(key, len(calls))
        prefix = keys if isinstance(keys, str) else None
        builder = TaskBuilder(fn, task_options(resources, priority, retries, workers),
                              _is_future, self._keys, prefix=prefix)
        explicit = keys if isinstance(keys, list) else None
        tasks, futures, size = [], [], 0
        budget = self._limits["max_frame_size"] // 4
        for index, args in enumerate(calls):
            task = builder.build(args, kwargs, explicit[index] if explicit else None, pure)
            nbytes = task_size(task, self._limits["max_message_size"])
            future, submit = self._future(task["key"])
            futures.append(future)
            if submit:
                if tasks and size + nbytes > budget:  # keep each message well in a frame
                    self._enqueue(ops.Submit(tasks=tuple(tasks)))
                    tasks, size = [], 0
                tasks.append(task)
                size += nbytes
        if tasks:
            self._enqueue(ops.Submit(tasks=tuple(tasks)))
        return futures

    def _submit_graph(self, tasks: list[dict], wanted: set[str]) -> dict[str, Future]:
        """Submit built tasks, each after its dependencies, in as few ops as fit in a frame;
        a future of each ``wanted`` key. Other tasks go with ``"wanted": False`` (the
        scheduler keeps them while a dependent needs them); one whose dependents follow in a
        later op is held by a future until they are queued. Tasks behind keys this client
        already holds are not sent again."""
        self._check_running()
        limit = self._limits["max_frame_size"]
        sizes = {task["key"]: task_size(task, self._limits["max_message_size"]) for task in tasks}

        def known(key: str) -> bool:
            state = self._states.get(key)
            return state is not None and state.status not in (FutureStatus.cancelled,
                                                              FutureStatus.lost)

        needed = {key for key in wanted if not known(key)}
        for task in reversed(tasks):  # only what a wanted key not yet known depends on
            if task["key"] in needed:
                needed.update(d for d in task.get("dependencies", ()) if not known(d))
        unknown = sorted(key for key in needed if key not in sizes)
        if unknown:
            raise ValueError(f"the graph depends on {unknown[:3]}, which neither it nor a "
                             "future of this client holds")
        futures = {key: self._future(key)[0] for key in wanted}
        parts: list[list[dict]] = [[]]
        size, part_of, holds = 0, {}, []
        for task in (task for task in tasks if task["key"] in needed):
            if parts[-1] and size + sizes[task["key"]] > limit // 4:
                parts.append([])
                size = 0
            for dep in task.get("dependencies", ()):
                if part_of.get(dep, len(parts)) < len(parts) - 1 and dep not in futures:
                    futures[dep] = self._future(dep)[0]
                    holds.append(dep)
            part_of[task["key"]] = len(parts) - 1
            parts[-1].append(task)
            size += sizes[task["key"]]
        for part in parts:
            for task in part:
                task["wanted"] = task["key"] in futures
            if part:
                self._enqueue(ops.Submit(tasks=tuple(part)))
        for key in holds:  # queued after the submits: released once their dependents are in
            del futures[key]
        return futures

    def _cancel_now(self, futures: Iterable[Future] | Future) -> None:
        if isinstance(futures, Future):
            futures = [futures]
        states = [f._state for f in futures if f._state.status is PENDING]
        if not states or self.status != "running":
            return
        keys = [state.key for state in states]
        with self._lock:
            for state in states:
                if self._states.get(state.key) is state:
                    del self._states[state.key]
        # The scheduler cancels the tasks (and their dependents) and forgets them; the
        # futures say cancelled at once, and a later submit of the same call runs afresh.
        self._enqueue(ops.Cancel(keys=tuple(keys)))
        self._enqueue(ops.Release(keys=tuple(keys)))
        for state in states:
            state.finish(FutureStatus.cancelled, reason="cancelled by this client")

    async def cancel(self, futures: Iterable[Future] | Future) -> None:
        """Cancel tasks not yet ended, and the tasks depending on them."""
        self._cancel_now(futures)

    # -- shell-command jobs (docs/jobs.md) ---------------------------------------------------

    def submit_command(self, command: Any, **options: Any) -> JobFuture:
        """Queue a shell-command job: ``command`` (a list of arguments, or a string split as
        a shell would) runs on a worker with ``resources`` free, in a process group of its own.
        Options: ``resources``, ``name``, ``priority``, ``retries`` (reruns after a non-zero
        exit), ``after_ok``/``after_any`` (job numbers or JobFutures), ``time_limit``
        (seconds, or "2h"), ``hold``, ``env``, ``cwd`` (none: the worker's), ``requeue`` (run
        it again if its worker is lost while it runs). The future's result is a JobResult."""
        self._check_running()
        return self._jobs.submit(job_spec(command, **options))

    async def watch_jobs(self, jobs: Iterable[int]) -> list[JobFuture]:
        """Futures of jobs submitted before (by any client), by number."""
        self._check_running()
        self._flush()
        return [self._jobs.watch(job) for job in jobs]

    async def jobs(self, jobs: Iterable[int] = (), states: Iterable[str] = (), offset: int = 0,
                   limit: int = 1000) -> dict:
        """Jobs by number (none: all) and state (none: any), newest first: ``{"jobs": [each
        as ``sched status --json`` shows it], "total": n, "counts": {state: n}}``."""
        return await self._request(lambda i: ops.QueryJobs(
            id=i, jobs=tuple(jobs), states=tuple(states), offset=offset, limit=limit))

    async def cancel_jobs(self, jobs: Iterable[int]) -> dict:
        """Cancel jobs, queued or running; what became of each (by number, as text)."""
        return await self._request(lambda i: ops.CancelJobs(id=i, jobs=tuple(jobs)))

    async def release_jobs(self, jobs: Iterable[int]) -> dict:
        """Let held jobs run; what became of each (by number, as text)."""
        return await self._request(lambda i: ops.ReleaseJobs(id=i, jobs=tuple(jobs)))

    async def job_log(self, job: int, offset: int = 0, limit: int = 1 << 20) -> ops.Log:
        """Bytes of the log of a job's latest attempt from ``offset``, read from its worker:
        a Log with ``data``, ``size`` (the log's length now) and ``ended``."""
        view = await job_view(self, job)
        attempt = log_attempt(view)
        if attempt is None:
            raise SchedError(f"job {job} has no log yet: it is {view['state']}")
        return await read_log(self, job, attempt, view["address"], offset, limit)

    def read_job_log(self, job: int, follow: bool = False, interval: float = 0.5) -> JobLog:
        """The job's log chunk by chunk (``async for data in ...``); ``follow``: until the
        job ends, waiting for it to start and following its retries."""
        return JobLog(self, job, follow, interval)

    async def wait_for_jobs(self, jobs: Iterable[int],
                            on_update: Callable[[list[dict]], None] | None = None,
                            timeout: float | None = None, interval: float = 1.0) -> list[dict]:
        """Wait until all ``jobs`` (by number) have ended; their views. ``on_update(views)``
        is called as they change, and at least every ``interval`` seconds."""
        return await wait_for_jobs(self, jobs, on_update, timeout, interval)

    async def workers(self) -> list[dict]:
        """The connected workers with their resources (total, used, free), GPUs and who
        uses them, and their jobs, as ``sched workers`` shows them."""
        return await workers_view(self)

    # -- Dask collections (dsched.dask; needs the dask extra) -------------------------------

    def compute(self, collections: Any, **options: Any) -> Any:
        """Futures of the results of Dask collections; see ``docs/dask.md``."""
        from ..dask.compute import compute

        return compute(self, collections, **options)

    def persist(self, collections: Any, **options: Any) -> Any:
        """Dask collections backed by futures of their parts; see ``docs/dask.md``."""
        from ..dask.compute import persist

        return persist(self, collections, **options)

    async def get(self, dsk: Any, keys: Any, **options: Any) -> Any:
        """The values of ``keys`` of a Dask graph or expression (Dask's scheduler API)."""
        from ..dask.compute import get

        return await self.gather(get(self, dsk, keys, **options))

    # -- reports from the scheduler ---------------------------------------------------------

    async def _read(self) -> None:
        """Take what the scheduler says until the connection ends; then, while jobs are in
        flight, connect again (they outlive the scheduler's restarts) and go on."""
        while True:
            reason = await self._read_connection()
            if self.status not in ("closing", "closed"):
                self.status = "disconnected"
                self._lost_reason = reason
                logger.error("Lost the scheduler at %s: %s", self.address, reason)
            lost = SchedulerLostError(f"lost the scheduler at {self.address}: {reason}")
            for request in self._requests.values():
                if not request.done():
                    request.set_exception(lost)
            with self._lock:
                states = list(self._states.values())
            for state in states:
                state.finish(FutureStatus.lost, exception=lost, reason=reason)
            if not (self.status == "disconnected" and self._jobs.in_flight()
                    and await self._reconnect()):
                self._jobs.lost(lost)
                return
            self._jobs.resend()

    async def _read_connection(self) -> str:
        """Handle every op of the connection; why it ended."""
        assert self.comm is not None
        try:
            async for op in self.comm:
                self._on_op(op)
        except CommClosedError as error:
            return error.reason
        except RemoteProtocolError as error:  # the scheduler sent something malformed
            self.comm.protocol_error(error)
            return f"protocol error: {error}"
        except Exception as error:  # a bug here must not leave futures hanging
            logger.exception("Client failed handling a report")
            return f"client error: {error}"
        return "the scheduler closed the connection"

    async def _reconnect(self) -> bool:
        """Connect to the same address again, trying for up to the connect timeout; whether
        that worked (a refusal, such as a wrong token, ends the trying at once)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        delay = 0.1
        while self.status == "disconnected" and loop.time() < deadline:
            await asyncio.sleep(delay)
            delay = min(2 * delay, 1.0)
            try:
                await self._connect()
            except OSError:
                continue
            except SchedError as error:
                logger.error("Cannot connect to the scheduler at %s again: %s", self.address,
                             error)
                return False
            if self.status != "disconnected":  # closed meanwhile
                await self.comm.close("client closing")
                return False
            self.status = "running"
            logger.info("Connected to the scheduler at %s again; its jobs are followed on",
                        self.address)
            return True
        return False

    def _on_op(self, d: dict) -> None:
        op = ops.decode(d)
        kind = type(op)
        if kind in TASK_REPORTS:
            apply_task_report(self._states, op)
        elif kind is ops.JobEnded:
            self._jobs.on_ended(op)
        elif (kind is ops.Reply or (kind is ops.Error and op.id is not None)) \
                and self._jobs.on_reply(op):
            pass
        elif kind is ops.Reply or (kind is ops.Error and op.id is not None):
            request = self._requests.pop(op.id, None)
            if request is not None and not request.done():
                if kind is ops.Error:
                    request.set_exception(SchedError(op.reason))
                else:
                    request.set_result(op.value)
        elif kind is ops.Error:
            logger.error("The scheduler refused a message: %s", op.reason)
            refused = SchedError(f"the scheduler refused the task: {op.reason}")
            for key in op.keys:  # the keys of a refused submit
                state = self._states.get(key)
                if state is not None:
                    state.finish(FutureStatus.error, exception=refused, reason=op.reason)
        else:
            raise ops.BadOp(f"{op.OP} is not an op the scheduler sends a client")

    async def _request(self, make: Callable[[int], Any]) -> Any:
        """Send the request ``make(id)`` and return the value of its reply."""
        self._check_running()
        self._flush()  # after everything queued before it
        request_id = next(self._ids)
        waiter = self.loop.create_future()
        self._requests[request_id] = waiter
        self._send(make(request_id))
        try:
            return await asyncio.wait_for(waiter, self._timeout)
        finally:
            self._requests.pop(request_id, None)

    async def scheduler_info(self) -> dict:
        """Workers (resources total, used and free, threads, GPUs and their use) and task
        counts by state."""
        return await self._request(lambda request_id: ops.Info(id=request_id))

    async def wait_for_workers(self, n: int, timeout: float | None = None) -> None:
        """Wait until at least ``n`` workers are connected (TimeoutError after ``timeout``)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while len((await self.scheduler_info())["workers"]) < n:
            if deadline is not None and loop.time() > deadline:
                raise TimeoutError(f"fewer than {n} workers connected within {timeout} s")
            await asyncio.sleep(0.05)

    # -- results ----------------------------------------------------------------------------

    async def gather(self, futures: Any, errors: str = "raise") -> Any:
        """The results of futures, in the same structure (one future, or lists, tuples, sets
        and dicts of them). ``errors="skip"`` leaves failed ones out of lists."""
        if errors not in ("raise", "skip"):
            raise ValueError(f"errors must be 'raise' or 'skip', not {errors!r}")
        found: dict[str, Future] = {}

        def collect(value: Any) -> serialize.TaskRef | None:
            if type(value) is Future:
                found[value.key] = value
                return serialize.TaskRef(value.key)
            return None

        structure, _ = serialize.replace_futures(futures, collect)
        values = await self._gather_async(list(found.values()), errors)
        data = {key: value for key, value in zip(found, values) if value is not MISSING}
        return substitute_present(structure, data)

    async def _gather_async(self, futures: list[Future], errors: str = "raise") -> list[Any]:
        states = [future._state for future in futures]
        await wait_all(states, fail_fast=errors == "raise")
        if errors == "raise":
            for future in futures:
                future._raise_if_failed()
        values = await self._fetch([s for s in states if s.status is FINISHED])
        return [values.get(state.key, MISSING) for state in states]

    async def _fetch(self, states: list[FutureState]) -> dict[str, Any]:
        assert self._peers is not None
        rate = self._comm.transfer_rate
        return await fetch_results(self._peers, states,
                                   timeout_for=lambda nbytes: self._timeout + nbytes / rate,
                                   still_running=lambda: self.status == "running",
                                   request_bytes=self._limits["max_frame_size"] // 4)

    def _sync_result(self, future: Future, timeout: float | None) -> Any:
        """``Future.result`` from a thread other than the loop's: one trip to the loop."""
        if future._state.status is PENDING:
            if not future._state.wait(timeout):
                raise TimeoutError(f"task {future.key} did not finish within {timeout} seconds")
        future._raise_if_failed()
        return self._sync(self._gather_async([future]), timeout)[0]

    def _sync(self, coroutine: Any, timeout: float | None = None) -> Any:
        """Run ``coroutine`` on the client's loop from another thread, and wait."""
        loop = self.loop
        if loop is None or loop.is_closed() or self.status == "closed":
            coroutine.close()
            raise SchedError(f"the client is {self.status}")
        running = asyncio.run_coroutine_threadsafe(coroutine, loop)
        try:
            return running.result(timeout)
        except concurrent.futures.TimeoutError:
            running.cancel()
            raise TimeoutError(f"no answer within {timeout} seconds") from None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.address} ({self.status})>"

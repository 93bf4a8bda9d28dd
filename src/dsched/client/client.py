"""AsyncClient: submit Python functions with resource demands, get futures back.

It holds one connection to the scheduler (submissions out, task reports in) and fetches
results straight from the workers that hold them. ``submit`` and ``map`` are ordinary methods
that may be called from any thread: they pickle in the caller's thread and queue the message
for the client's loop; everything else happens on that loop. :class:`~dsched.Client` is the
same API for blocking code, running an AsyncClient on a loop thread of its own.

This module holds the client's lifetime (connect, lose the scheduler, close) and its public
API, composed of parts that each hold one idea: the outbox (ops out, in order, and the
references futures hold), the submitter (calls to Submit ops), the reports (ops in, each to
its handler, and requests awaiting replies), the results (gather, fetched from workers), and
the owner interface its futures and jobs use. No rule of those parts is written here.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Iterable

from .. import config
from ..comm import Comm, connect
from ..environ import TOKEN_ENV
from ..errors import AuthenticationError, CommClosedError, SchedError, SchedulerLostError
from ..peers import PeerPool
from ..protocol import ops
from ..settings import TlsConfig, build
from .future import Future, FutureStatus
from .jobclient import JobRequests
from .jobs import JobDesk
from .outbox import ClientOutbox
from .owner import ClientOwner
from .reports import Reports
from .results import Results
from .settings import comm_config, resolve_token
from .submitter import Submitter

logger = logging.getLogger("dsched.client")


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


class AsyncClient(JobRequests):
    """A client on an asyncio loop: ``client = await AsyncClient(address)`` or ``async with``.

    ``address`` is ``"host:port"``, a :class:`~dsched.LocalCluster`, or None for the configured
    ``client.scheduler_address`` or else a new LocalCluster (``cluster_kwargs`` go to it).
    """

    #: Whether its futures give coroutines on its loop. The one a blocking Client runs is of a
    #: subclass that says False: a blocking call on that loop raises instead of hanging it.
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
        self._comm = comm_config()
        self._limits = self._comm.limits()
        self._outbox = ClientOutbox(on_failure=self._broken)
        self._results = Results(self._timeout, self._comm.transfer_rate,
                                self._limits["max_frame_size"] // 4,
                                running=lambda: self.status == "running")
        self._owner = ClientOwner(self, self._outbox, self._results, self._cancel_now)
        self._submitter = Submitter(self._outbox, self._owner, self._limits)
        self._jobs = JobDesk(self._owner, self._outbox)
        self._reports = Reports(self._outbox, self._jobs)
        self._reader: asyncio.Task | None = None
        self._peers: PeerPool | None = None
        self._lost_reason = ""
        self.id = ""
        self.status = "created"

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop this client runs on, once started."""
        return self._outbox.loop

    @property
    def comm(self) -> Comm | None:
        """The connection to the scheduler, once connected."""
        return self._outbox.comm

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
        loop = asyncio.get_running_loop()
        self._outbox.attach(loop)
        self.status = "connecting"
        try:
            comm = await self._connect(loop)
        except BaseException:
            self.status = "closed"
            await self._close_cluster()
            raise
        self._outbox.attach(loop, comm)
        self._peers = self._results.peers = PeerPool(
            limits=self._limits, role="client", name=self.name, token=self._token,
            ssl=self._ssl, timeout=self._timeout)
        self._reader = loop.create_task(self._read(), name=f"dsched-client-{self.id}")
        self._reader.add_done_callback(self._reader_ended)
        self.status = "running"
        return self

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> Comm:
        address = self.address
        if address is None:
            address = config.get("client.scheduler_address")
        if not isinstance(address, str):  # LocalCluster loads a worker: only when one is used
            from .cluster import LocalCluster
        if address is None:
            kwargs = self._cluster_kwargs
            address = await loop.run_in_executor(None, lambda: LocalCluster(**kwargs))
            self._owns_cluster = True
        if not isinstance(address, str) and isinstance(address, LocalCluster):
            self.cluster, self._token, address = address, address.token, address.address
        self.address = address
        self._token = resolve_token(self._token, self._token_file)
        if self._ssl is None:
            from ..daemon import ssl_contexts

            self._ssl = ssl_contexts(build(TlsConfig, config.get("client.tls")), server=False)
        comm = None
        try:
            comm = await connect(address, role="client", name=self.name, token=self._token,
                                 ssl=self._ssl, timeout=self._timeout, **self._limits)
            first = ops.decode((await comm.recv())[0])
            if type(first) is not ops.Welcome:
                raise ops.BadOp(f"the scheduler's first op was {first.OP}, not welcome")
        except BaseException as error:
            if comm is not None:  # no connection is left open behind a failed connect
                comm.close_nowait(f"connecting failed: {error}")
            if isinstance(error, AuthenticationError):
                raise AuthenticationError(
                    f"the scheduler at {address} refused this client's token ({error}); use "
                    f"the scheduler's token ({TOKEN_ENV}, token=, or the token file)") from None
            if isinstance(error, (OSError, TimeoutError, CommClosedError)):
                raise OSError(f"cannot connect to the scheduler at {address}: {error}") from None
            raise
        self.id = first.client
        comm.on_unsendable = self._reports.unsendable
        return comm

    async def _read(self) -> None:
        """The client's one background task, from start to close: take what the scheduler
        says until the connection ends; then, while jobs are in flight, connect again (they
        outlive the scheduler's restarts) and go on."""
        while True:
            try:
                reason = await self._reports.read(self.comm)
            except Exception as error:  # a bug here must not leave futures hanging
                logger.exception("Client failed handling a report")
                reason = f"client error: {error}"
            self._lost(reason, jobs=False)
            if self.status == "disconnected" and self._jobs.in_flight():
                if await self._reconnect():
                    self._jobs.resend()
                    continue
                if self.status == "disconnected":  # not closed meanwhile: it gave up
                    reason = self._lost_reason = (f"{reason}; not back within "
                                                  f"{self._timeout:g} s")
            self._jobs.lost(SchedulerLostError(f"lost the scheduler at {self.address}: {reason}"))
            return

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
                comm = await self._connect(loop)
            except OSError:
                continue
            except SchedError as error:
                logger.error("Cannot connect to the scheduler at %s again: %s", self.address,
                             error)
                return False
            if self.status != "disconnected":  # closed meanwhile
                await comm.close("client closing")
                return False
            self._outbox.attach(loop, comm)
            self.status = "running"
            logger.info("Connected to the scheduler at %s again; its jobs are followed on",
                        self.address)
            return True
        return False

    async def connected_again(self) -> None:
        """Return once the client is connected to its scheduler again, after losing it: the
        reader connects again while jobs are in flight (submitted, or watched), for up to
        ``client.connect_timeout``. SchedulerLostError once it has given up, or when it does
        not try (no job in flight); a request that failed with the loss can then be sent
        again."""
        # Polled: the reader's reconnect loop is what decides; this only waits for its outcome.
        while (self.status == "disconnected" and self._reader is not None
               and not self._reader.done()):
            await asyncio.sleep(0.05)
        self._check_running()

    def _reader_ended(self, reader: asyncio.Task) -> None:
        """However the reader ended, nothing pending is left waiting for it: cancelled (its
        loop ended before the client was closed) or failed itself, everything pending fails
        with the reason, and a failure is logged."""
        if reader.cancelled():
            self._lost("the client's reader was cancelled before the client was closed")
        elif reader.exception() is not None:
            error = reader.exception()
            logger.error("The client's reader failed", exc_info=error)
            self._lost(f"client error: {error!r}")

    def _broken(self, reason: str) -> None:
        """Queued ops could not be sent: the scheduler may never hear of some, so end the
        connection (it forgets this client's tasks) and fail what is pending."""
        if self.comm is not None:
            self.comm.close_nowait(reason)
        self._lost(reason)

    def _lost(self, reason: str, jobs: bool = True) -> None:
        """The scheduler is gone (or unreachable for good): everything pending fails (job
        futures only with ``jobs``: the reader may still connect again for them)."""
        if self.status not in ("closing", "closed", "disconnected"):
            self.status = "disconnected"
            self._lost_reason = reason
            logger.error("Lost the scheduler at %s: %s", self.address, reason)
        lost = SchedulerLostError(f"lost the scheduler at {self.address}: {reason}")
        self._reports.lost(lost)
        for state in self._outbox.held():
            state.finish(FutureStatus.lost, exception=lost, reason=reason)
        if jobs:
            self._jobs.lost(lost)

    async def close(self) -> None:
        """Cancel what is pending, disconnect (the scheduler forgets this client's tasks) and
        stop the LocalCluster this client started, if any."""
        if self.status in ("closing", "closed"):
            return
        reconnecting = self.status == "disconnected"
        if not reconnecting and self.comm is not None:
            # Job submissions and cancels outlive the client: each sent is acknowledged
            # before the connection closes, so none is dropped unseen.
            self._outbox.flush()
            await self._jobs.settle(self._timeout)
        unsettled = self._jobs.unsettled()
        if unsettled:
            logger.warning("Closing without the scheduler's answer to %s: it may or may not "
                           "have been applied", ", ".join(unsettled))
        self.status = "closing"
        for state in self._outbox.held():
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

    def _check_running(self) -> None:
        if self.status == "running":
            return
        if self.status == "disconnected":
            raise SchedulerLostError(f"lost the scheduler at {self.address}: {self._lost_reason}")
        raise SchedError(f"the client is {self.status}")

    # -- submitting -------------------------------------------------------------------------

    def submit(self, fn: Callable, *args: Any, key: str | None = None, resources: Any = None,
               priority: int | None = None, retries: int | None = None,
               workers: Iterable[str] | str | None = None, pure: bool = True,
               gpu_memory_retry: bool | None = None, **kwargs: Any) -> Future:
        """Run ``fn(*args, **kwargs)`` on a worker that has ``resources`` free.

        ``priority``: higher runs first. ``retries``: times to rerun it if it raises.
        ``workers``: names or addresses of the workers it may run on. ``pure=False``: a new
        task even for a call already submitted. ``gpu_memory_retry=True``: if it fails for
        want of GPU memory, run it once more asking for more ``GPU_MEMORY``, without spending
        ``retries`` (off by default; docs/resources.md). Futures in the arguments are replaced
        by their results on the worker.
        """
        self._check_running()
        return self._submitter.submit(fn, args, kwargs, key, (resources, priority, retries,
                                                              workers, gpu_memory_retry), pure)

    def map(self, fn: Callable, *iterables: Iterable, key: str | Iterable[str] | None = None,
            resources: Any = None, priority: int | None = None, retries: int | None = None,
            workers: Iterable[str] | str | None = None, pure: bool = True,
            gpu_memory_retry: bool | None = None, **kwargs: Any) -> list[Future]:
        """``submit(fn, *items, **kwargs)`` for each tuple of items from ``iterables``, sent
        as one message. ``key``: a list of keys, or a str to start every key with."""
        self._check_running()
        return self._submitter.map(fn, iterables, kwargs, key, (resources, priority, retries,
                                                                workers, gpu_memory_retry), pure)

    def _submit_graph(self, tasks: list[dict], wanted: set[str]) -> dict[str, Future]:
        """The tasks of a Dask graph, built by ``dsched.dask``; see ``Submitter.graph``."""
        self._check_running()
        return self._submitter.graph(tasks, wanted)

    def _cancel_now(self, futures: Iterable[Future] | Future) -> None:
        if self.status == "running":
            self._submitter.cancel([futures] if isinstance(futures, Future) else futures)

    async def cancel(self, futures: Iterable[Future] | Future) -> None:
        """Cancel tasks not yet ended, and the tasks depending on them."""
        self._cancel_now(futures)

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

    # -- requests to the scheduler ----------------------------------------------------------

    async def _request(self, make: Callable[[int], Any]) -> Any:
        """Send the request ``make(id)`` and return the value of its reply."""
        self._check_running()
        return await self._reports.request(make, self._timeout)

    async def scheduler_info(self) -> dict:
        """Workers (resources total, used and free, threads, GPUs and their use) and task
        counts by state."""
        return await self._request(lambda request_id: ops.Info(id=request_id))

    async def wait_for_workers(self, n: int, timeout: float | None = None) -> None:
        """Wait until at least ``n`` workers are connected (TimeoutError after ``timeout``).
        The scheduler tells the number as it changes: nothing is asked again meanwhile."""
        self._check_running()
        try:
            async with asyncio.timeout(timeout):
                await self._reports.workers_at_least(n)
        except TimeoutError:
            raise TimeoutError(f"fewer than {n} workers connected within {timeout} s") from None

    # -- results ----------------------------------------------------------------------------

    async def gather(self, futures: Any, errors: str = "raise") -> Any:
        """The results of futures, in the same structure (one future, or lists, tuples, sets
        and dicts of them). ``errors="skip"`` leaves failed ones out of lists."""
        return await self._results.gather(futures, errors)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.address} ({self.status})>"


"""A job's log, read from the worker that holds it: once, or followed until the job ends.

The scheduler says where the log of a job's latest attempt is (the attempt's number, and its
worker's name and address, in the job's view); that worker serves it (``GetLog``). A worker
its nanny started again keeps its name and its files but listens on a new port, so the log is
asked of the connected worker of that name, and of the recorded address only when none is
connected (:func:`worker_address`). :class:`JobLog` reads it in chunks. Following, it asks
again at an interval for new bytes and for a new attempt (a retry, whose log starts empty):
the old attempt's log is read to its end before the new one's. Once the job has ended, the
log is read to the end once more, and that is the end. A follower outlives the restarts of
what it reads from: it watches the job, so that the client connects again to a scheduler that
restarts, and it waits (saying so once) for a worker that is away to come back, each for up
to the client's ``connect_timeout``.

Runs on the client's loop; it decides nothing about jobs, only where to read next.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..errors import SchedError
from ..jobs import ArraySpec, job_key
from ..jobstates import ENDED
from ..protocol import ops
from .jobwait import across_restarts

if TYPE_CHECKING:
    from .client import AsyncClient

_ENDED = frozenset(state.value for state in ENDED)
#: The longest pause, in seconds, between two tries to reach a worker that is away.
MAX_RETRY_DELAY = 2.0


class WorkerUnreachable(SchedError):
    """The worker that holds a log could not be reached (it may be coming back)."""


async def job_view(client: AsyncClient, job: int) -> Mapping[str, Any]:
    """The job's view (as ``sched status --json`` shows it); SchedError if there is none."""
    found = (await across_restarts(client, lambda: client.jobs([job])))["jobs"]
    if not found:
        raise SchedError(f"no job {job}")
    array = found[0].get("array")
    if array:  # each element has a log of its own
        first = ArraySpec.parse(array["indices"]).index(0) if array["indices"] else 0
        raise SchedError(f"job {job} is an array of {array['size']}: name one of its "
                         f"elements, as {job}_{first}")
    return found[0]


def log_attempt(view: Mapping[str, Any]) -> int | None:
    """The attempt whose log the job's view points to; None while it has none."""
    return view["attempt"] if view.get("log") and view.get("address") else None


async def worker_address(client: AsyncClient, worker: str, recorded: str) -> str:
    """Where the worker named ``worker`` serves its logs now: the address of the connected
    worker of that name, else ``recorded`` (the address the attempt was recorded with)."""
    if worker:
        info = await across_restarts(client, client.scheduler_info)
        for address, w in (info or {}).get("workers", {}).items():
            if w.get("name") == worker:
                return address
    return recorded


async def read_log(client: AsyncClient, job: int, attempt: int, address: str, offset: int,
                   limit: int) -> ops.Log:
    """Bytes of the log of ``job``'s ``attempt`` from its worker at ``address``;
    WorkerUnreachable when that worker cannot be reached, SchedError when it has no such log."""
    assert client._peers is not None
    try:
        log = await client._peers.get_log(address, job_key(job, attempt), offset, limit,
                                          client._timeout)
    except (OSError, asyncio.TimeoutError) as error:
        raise WorkerUnreachable(f"cannot read the log of job {job} from its worker at "
                                f"{address}: {error or type(error).__name__}") from None
    if log.error:
        raise SchedError(f"the log of job {job}: {log.error}")
    return log


async def read_latest(client: AsyncClient, job: int, offset: int, limit: int) -> ops.Log:
    """Bytes of the log of ``job``'s latest attempt from ``offset`` (``AsyncClient.job_log``)."""
    view = await job_view(client, job)
    attempt = log_attempt(view)
    if attempt is None:
        raise SchedError(f"job {job} has no log yet: it is {view['state']}")
    address = await worker_address(client, view.get("worker") or "", view["address"])
    return await read_log(client, job, attempt, address, offset, limit)


class JobLog:
    """The log of job ``job``: ``await next()`` gives its bytes chunk by chunk, None at the
    end. ``follow``: wait for more until the job ends (waiting, too, for a queued job to
    start), asking every ``interval`` seconds; ``on_wait(worker)`` is called once each time
    it starts waiting for the job's worker to come back."""

    def __init__(self, client: AsyncClient, job: int, follow: bool = False,
                 interval: float = 0.5, limit: int = 1 << 20,
                 on_wait: Callable[[str], None] | None = None):
        self.client, self.job, self.follow = client, job, follow
        self.interval, self.limit = interval, limit
        self.on_wait = on_wait
        self.attempt: int | None = None  # the attempt being read, at ``offset``
        self.worker = ""  # its worker's name, the address recorded, and where it is now
        self.recorded = ""
        self.address: str | None = None
        self.offset = 0
        self.done = False
        self._read_any = False
        self._watching = False

    def __aiter__(self) -> "JobLog":
        return self

    async def __anext__(self) -> bytes:
        data = await self.next()
        if data is None:
            raise StopAsyncIteration
        return data

    async def next(self) -> bytes | None:
        while not self.done:
            view = await job_view(self.client, self.job)
            if self.follow and not self._watching:
                # A job watched is in flight: the client connects again if it loses its
                # scheduler, where it would otherwise give up.
                await across_restarts(self.client, lambda: self.client.watch_jobs([self.job]))
                self._watching = True
            # Read before the log is: once the job has ended, its log is whole.
            ended = view["state"] in _ENDED
            attempt = log_attempt(view)
            if self.attempt is not None and attempt != self.attempt:
                data = await self._read()  # the rest of an attempt that is over
                if data:
                    return data
                self.attempt = None
            if attempt is not None:
                if self.attempt is None:
                    self.attempt, self.offset, self.address = attempt, 0, None
                where = (view.get("worker") or "", view["address"])
                if where != (self.worker, self.recorded):  # a worker that came back may move
                    (self.worker, self.recorded), self.address = where, None
                data = await self._read()
                if data:
                    return data
            elif not self.follow and not self._read_any:
                detail = f" ({view['detail']})" if view.get("detail") else ""
                raise SchedError(f"job {self.job} has no log yet: it is {view['state']}{detail}")
            if ended or not self.follow:
                self.done = True
                break
            await asyncio.sleep(self.interval)
        return None

    async def _read(self) -> bytes:
        log = await self._get()
        self.offset += len(log.data)
        self._read_any = True
        return log.data

    async def _get(self) -> ops.Log:
        """The next bytes of the attempt being read, from where its worker is now: found
        again after a failure (it may have moved), and, following, waited for while it is
        away, for up to the client's connect timeout."""
        loop = asyncio.get_running_loop()
        give_up: float | None = None
        delay = 0.1
        while True:
            if self.address is None:
                self.address = await worker_address(self.client, self.worker, self.recorded)
            asked = self.address
            try:
                return await read_log(self.client, self.job, self.attempt, asked, self.offset,
                                      self.limit)
            except SchedError as error:
                self.address = await worker_address(self.client, self.worker, self.recorded)
                if self.address != asked:  # it moved: ask it where it is now
                    continue
                if not (self.follow and isinstance(error, WorkerUnreachable)):
                    raise
                now = loop.time()
                if give_up is None:
                    give_up = now + self.client._timeout
                    if self.on_wait is not None:
                        self.on_wait(self.worker or asked)
                elif now >= give_up:
                    raise WorkerUnreachable(f"{error}; the worker was not back within "
                                            f"{self.client._timeout:g} s") from None
                self.address = None
                await asyncio.sleep(delay)
                delay = min(2 * delay, MAX_RETRY_DELAY)

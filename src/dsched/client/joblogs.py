"""A job's log, read from the worker that holds it: once, or followed until the job ends.

The scheduler says where the log of a job's latest attempt is (the attempt's number and its
worker's address, in the job's view); that worker serves it (``GetLog``). :class:`JobLog`
reads it in chunks. Following, it asks again at an interval for new bytes and for a new
attempt (a retry, whose log starts empty): the old attempt's log is read to its end before the
new one's. Once the job has ended, the log is read to the end once more, and that is the end.

Runs on the client's loop; it decides nothing about jobs, only where to read next.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import SchedError
from ..jobs import ENDED, job_key
from ..protocol import ops

if TYPE_CHECKING:
    from .client import AsyncClient

_ENDED = frozenset(state.value for state in ENDED)


async def job_view(client: AsyncClient, job: int) -> Mapping[str, Any]:
    """The job's view (as ``sched status --json`` shows it); SchedError if there is none."""
    found = (await client.jobs([job]))["jobs"]
    if not found:
        raise SchedError(f"no job {job}")
    return found[0]


def log_attempt(view: Mapping[str, Any]) -> int | None:
    """The attempt whose log the job's view points to; None while it has none."""
    return view["attempt"] if view.get("log") and view.get("address") else None


async def read_log(client: AsyncClient, job: int, attempt: int, address: str, offset: int,
                   limit: int) -> ops.Log:
    """Bytes of the log of ``job``'s ``attempt`` from its worker at ``address``."""
    assert client._peers is not None
    try:
        log = await client._peers.get_log(address, job_key(job, attempt), offset, limit,
                                          client._timeout)
    except (OSError, asyncio.TimeoutError) as error:
        raise SchedError(f"cannot read the log of job {job} from its worker at {address}: "
                         f"{error or type(error).__name__}") from None
    if log.error:
        raise SchedError(f"the log of job {job}: {log.error}")
    return log


class JobLog:
    """The log of job ``job``: ``await next()`` gives its bytes chunk by chunk, None at the
    end. ``follow``: wait for more until the job ends (waiting, too, for a queued job to
    start), asking every ``interval`` seconds."""

    def __init__(self, client: AsyncClient, job: int, follow: bool = False,
                 interval: float = 0.5, limit: int = 1 << 20):
        self.client, self.job, self.follow = client, job, follow
        self.interval, self.limit = interval, limit
        self.attempt: int | None = None  # the attempt being read, at ``offset`` on ``address``
        self.address = ""
        self.offset = 0
        self.done = False
        self._read_any = False

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
                    self.attempt, self.offset = attempt, 0
                self.address = view["address"]  # a worker that came back may have moved
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
        log = await read_log(self.client, self.job, self.attempt, self.address, self.offset,
                             self.limit)
        self.offset += len(log.data)
        self._read_any = True
        return log.data

"""Waiting for jobs to end, with what a display of their progress needs on the way.

:func:`wait_for_jobs` watches the jobs (the scheduler tells the client as each ends) and reads
their views whenever one ends, and at least every ``interval`` seconds, so that a count of
those running, waiting and ended stays current; it returns the views once every job has ended.
Jobs outlive a restart of their scheduler, and so does a wait: the client connects again while
it watches jobs, and a read cut off by the loss is made again once it has
(:func:`across_restarts`). Runs on the client's loop.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, TypeVar

from ..errors import SchedError, SchedulerLostError
from ..jobstates import ENDED

if TYPE_CHECKING:
    from .client import AsyncClient

Views = list[dict[str, Any]]
_ENDED = frozenset(state.value for state in ENDED)
T = TypeVar("T")


async def across_restarts(client: AsyncClient, call: Callable[[], Awaitable[T]]) -> T:
    """``await call()`` (a request to the scheduler), made again when the scheduler was lost
    under it, once the client has connected again; SchedulerLostError once the client gives
    up (see ``AsyncClient.connected_again``)."""
    while True:
        try:
            return await call()
        except SchedulerLostError:
            await client.connected_again()


async def job_views(client: AsyncClient, jobs: Iterable[int]) -> Views:
    """The views of ``jobs``, in that order; SchedError naming those the scheduler does not
    know."""
    ids = list(dict.fromkeys(jobs))
    found = {view["id"]: view for view in
             (await across_restarts(client, lambda: client.jobs(ids, limit=len(ids))))["jobs"]}
    unknown = [str(job) for job in ids if job not in found]
    if unknown:
        s = "s" if len(unknown) > 1 else ""
        raise SchedError(f"no job{s} {', '.join(unknown)}")
    return [found[job] for job in ids]


async def wait_for_jobs(client: AsyncClient, jobs: Iterable[int],
                        on_update: Callable[[Views], None] | None = None,
                        timeout: float | None = None, interval: float = 1.0) -> Views:
    """Wait until every one of ``jobs`` has ended; their last views. ``on_update(views)`` is
    called with the views as they are first read and each time they are read again.
    TimeoutError after ``timeout`` seconds (the jobs go on); SchedulerLostError when the
    scheduler was lost and the client did not get it back."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    ids = list(dict.fromkeys(jobs))
    changed = asyncio.Event()

    def wake(_: Any) -> None:
        loop.call_soon_threadsafe(changed.set)

    # Watched before the first read: jobs in flight are what the client reconnects for.
    for future in await client.watch_jobs(ids):
        if not future._ended.on_done(wake):
            changed.set()
    views = await job_views(client, ids)
    while True:
        if on_update is not None:
            on_update(views)
        left = [view["id"] for view in views if view["state"] not in _ENDED]
        if not left:
            return views
        wait = interval
        if deadline is not None:
            wait = min(interval, deadline - loop.time())
            if wait <= 0:
                raise TimeoutError(f"{len(left)} of {len(ids)} jobs had not ended within "
                                   f"{timeout:g} s")
        try:
            await asyncio.wait_for(changed.wait(), wait)
        except asyncio.TimeoutError:
            pass
        changed.clear()
        views = await job_views(client, ids)

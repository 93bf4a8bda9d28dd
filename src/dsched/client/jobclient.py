"""A client's requests about shell-command jobs (``docs/jobs.md``): submit, watch, query,
cancel, release, read logs, wait, their history, and the workers as ``sched workers`` shows
them.

``AsyncClient`` inherits them; they ask of it only its running check, its job desk, its outbox
and its request round trip (``_check_running``, ``_jobs``, ``_outbox``, ``_request``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from ..jobspec import arrays_to_ask, job_numbers, job_spec, query_jobs
from ..protocol import ops
from ..protocol.fields import checked_ids, checked_int
from .joblogs import JobLog, read_latest
from .jobs import JobFuture
from .jobwait import wait_for_jobs
from .workerview import workers_view


class JobRequests:
    """The job half of ``AsyncClient``."""

    def submit_command(self, command: Any, **options: Any) -> JobFuture:
        """Queue a shell-command job: ``command`` (a list of arguments, or a string split as
        a shell would) runs on a worker with ``resources`` free, in a process group of its own.
        Options: ``resources``, ``name``, ``priority``, ``retries`` (reruns after a non-zero
        exit), ``after_ok``/``after_any`` (job numbers or JobFutures), ``time_limit``
        (seconds, or "2h"), ``hold``, ``env``, ``cwd`` (none: the worker's), ``requeue`` (run
        it again if its worker is lost while it runs), ``array`` (one job per index or line,
        each with its value in place of ``{}``: ``"0-999%8"``, a range, or a list of strings;
        ``array_limit``: at most this many at once), ``gpu_memory_retry`` (after it fails
        for want of GPU memory, run it once more with a larger ``GPU_MEMORY``; None: so where
        it asks ``GPU_MEMORY``). The future's result is a JobResult; an
        array's is the array's, once every element has ended."""
        self._check_running()
        return self._jobs.submit(job_spec(command, **options))

    async def watch_jobs(self, jobs: Iterable[int]) -> list[JobFuture]:
        """Futures of jobs submitted before (by any client), by number."""
        self._check_running()
        jobs = checked_ids("a job number", await self.resolve_jobs(jobs))
        self._outbox.flush()
        return [self._jobs.watch(job) for job in jobs]

    async def jobs(self, jobs: Iterable[int | str] = (), states: Iterable[str] = (),
                   offset: int = 0, limit: int = 1000, expand: bool = False) -> dict:
        """Jobs by number (none: all) and state (none: any), newest first: ``{"jobs": [each
        as ``sched status --json`` shows it], "total": n, "counts": {state: n}}``; an array
        is one job, followed by its elements when ``expand``."""
        make = query_jobs(await self.resolve_jobs(jobs), states, offset, limit, expand)
        return await self._request(make)

    async def history(self, jobs: Iterable[int | str] = (), states: Iterable[str] = (),
                      name: str = "", since: float | None = None, until: float | None = None,
                      limit: int = 100) -> list[dict]:
        """Ended attempts of jobs, newest first, from the scheduler's journal (``sched
        history``): of ``jobs`` (an array: its elements'; ``"12_3"``: one element), in
        ``states`` (how each attempt ended), whose name the glob ``name`` matches, that ended
        at or after ``since`` and before ``until`` (wall-clock seconds, as ``time.time()``
        gives them); at most ``limit`` (100,000 at most). Each as ``sched history --json``
        prints it: the attempt, the GPUs it held and how it used them, its ``gpu_hours`` and
        ``efficiency`` (``docs/jobs.md``)."""
        jobs = tuple(checked_ids("a job number", await self.resolve_jobs(jobs)))
        limit = checked_int("limit", limit, 0)  # a plain int (numpy's is not sent as it is)
        reply = await self._request(lambda i: ops.QueryHistory(
            id=i, jobs=jobs, states=tuple(states), name=name, since=since, until=until,
            limit=limit))
        return reply["attempts"]

    async def resolve_jobs(self, jobs: Iterable[int | str]) -> list[int]:
        """Job numbers of jobs as users name them: ``12`` (or 12), and ``"12_3"``, the
        element of array 12 with index 3 (one question to the scheduler, for the arrays)."""
        refs, arrays = arrays_to_ask(jobs)
        if not arrays:
            return refs
        return job_numbers(refs, (await self._request(
            lambda i: ops.QueryJobs(id=i, jobs=arrays)))["jobs"])

    async def cancel_jobs(self, jobs: Iterable[int | str]) -> dict:
        """Cancel jobs, queued or running (an array: every element not ended); what became
        of each (by number, as text)."""
        jobs = checked_ids("a job number", await self.resolve_jobs(jobs))
        return await self._request(lambda i: ops.CancelJobs(id=i, jobs=jobs))

    async def release_jobs(self, jobs: Iterable[int | str]) -> dict:
        """Let held jobs (or arrays) run; what became of each (by number, as text)."""
        jobs = checked_ids("a job number", await self.resolve_jobs(jobs))
        return await self._request(lambda i: ops.ReleaseJobs(id=i, jobs=jobs))

    async def job_log(self, job: int, offset: int = 0, limit: int = 1 << 20) -> ops.Log:
        """Bytes of the log of a job's latest attempt from ``offset``, read from its worker:
        a Log with ``data``, ``size`` (the log's length now) and ``ended``. The worker is
        found by its name where it is connected (it may have moved since)."""
        return await read_latest(self, job, checked_int("offset", offset, 0),
                                 checked_int("limit", limit, 0))

    def read_job_log(self, job: int, follow: bool = False, interval: float = 0.5,
                     on_wait: Callable[[str], None] | None = None) -> JobLog:
        """The job's log chunk by chunk (``async for data in ...``); ``follow``: until the
        job ends, waiting for it to start, following its retries, and waiting out a restart
        of the scheduler or of the job's worker (``on_wait(worker)`` as it starts waiting
        for one) for up to the connect timeout each."""
        return JobLog(self, job, follow, interval, on_wait=on_wait)

    async def wait_for_jobs(self, jobs: Iterable[int],
                            on_update: Callable[[list[dict]], None] | None = None,
                            timeout: float | None = None, interval: float = 1.0) -> list[dict]:
        """Wait until all ``jobs`` (by number) have ended; their views. ``on_update(views)``
        is called as they change, and at least every ``interval`` seconds."""
        return await wait_for_jobs(self, await self.resolve_jobs(jobs), on_update, timeout,
                                   interval)

    async def release_gpu(self, worker: str, index: int) -> None:
        """Let the fenced GPU ``index`` (NVML's) of the worker named ``worker`` take work
        again (``sched gpu release``); SchedError saying why where it cannot be."""
        index = checked_int("a GPU index", index, 0)
        await self._request(lambda i: ops.ReleaseGpu(id=i, worker=worker, index=index))

    async def workers(self) -> list[dict]:
        """The connected workers with their resources (total, used, free), GPUs and who
        uses them, and their jobs, as ``sched workers`` shows them."""
        return await workers_view(self)

"""``Client``: the AsyncClient's API for ordinary, blocking code.

It runs an :class:`AsyncClient` on a private event loop in a daemon thread (the bridge's
:class:`~.bridge.LoopThread`). ``submit`` and ``map`` pickle in the caller's thread and return
at once; ``gather`` and ``result`` block only their caller. ``Client()`` with no address starts
a :class:`LocalCluster` and closes it again; ``Client(address, asynchronous=True)`` returns an
AsyncClient to ``await`` instead. Holds no client logic of its own: each method is the
AsyncClient's, run through the bridge.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from ..dask.default import set_as_default as become_dask_default, unset_default
from ..errors import SchedError
from .bridge import LoopThread
from .client import AsyncClient
from .settings import resolve_token
from .future import Future
from .jobs import JobFuture

if TYPE_CHECKING:  # loaded where one is started (by the AsyncClient): it loads a worker
    from .cluster import LocalCluster

__all__ = ["Client", "resolve_token"]


class LoopThreadClient(AsyncClient):
    """The AsyncClient inside a blocking Client, run on the Client's loop thread: code on that
    loop (a done-callback) that waits on a future would hang it, so it raises instead of
    getting a coroutine."""

    asynchronous = False


class Client:
    """Connect to a scheduler (``Client("host:8786")``) or start a local one (``Client()``).

    The token is ``token=``, else ``SCHED_TOKEN``, else ``token_file=`` or the configured token
    file. ``cluster_kwargs`` (``n_workers=``, ``threads_per_worker=``, ``resources=``) go to the
    LocalCluster that ``Client()`` starts. Where Dask is installed the client is Dask's
    scheduler until it closes, unless ``set_as_default=False`` (see ``docs/dask.md``).
    """

    asynchronous = False

    def __new__(cls, address: Any = None, *, asynchronous: bool = False, **kwargs: Any):
        if asynchronous:
            kwargs.pop("set_as_default", None)
            return AsyncClient(address, **kwargs)
        return super().__new__(cls)

    def __init__(self, address: str | LocalCluster | None = None, *, asynchronous: bool = False,
                 token: str | None = None, token_file: str | None = None, ssl: Any = None,
                 name: str = "client", timeout: float | None = None, set_as_default: bool = True,
                 **cluster_kwargs: Any):
        self._async = LoopThreadClient(address, token=token, token_file=token_file, ssl=ssl,
                                       name=name, timeout=timeout, **cluster_kwargs)
        self._thread = LoopThread("dsched-client")
        try:
            self._run(self._async.start())
        except BaseException:
            self._thread.stop()
            raise
        if set_as_default:
            become_dask_default(self)

    def _run(self, coroutine: Any, timeout: float | None = None) -> Any:
        if self._thread.closed:
            coroutine.close()
            raise SchedError("the client is closed")
        return self._thread.run(coroutine, timeout)

    # -- the API ----------------------------------------------------------------------------

    def submit(self, fn: Callable, *args: Any, **kwargs: Any) -> Future:
        """Run ``fn(*args, **kwargs)`` on the cluster; see :meth:`AsyncClient.submit`."""
        return self._async.submit(fn, *args, **kwargs)

    def map(self, fn: Callable, *iterables: Iterable, **kwargs: Any) -> list[Future]:
        """One task per tuple of items from ``iterables``; see :meth:`AsyncClient.map`."""
        return self._async.map(fn, *iterables, **kwargs)

    def gather(self, futures: Any, errors: str = "raise", timeout: float | None = None) -> Any:
        """The results of futures, in the same structure; raises the first task error."""
        return self._run(self._async.gather(futures, errors), timeout)

    def compute(self, collections: Any, sync: bool = False, **options: Any) -> Any:
        """Futures of the results of Dask collections (the results, with ``sync=True``)."""
        futures = self._async.compute(collections, **options)
        return self.gather(futures) if sync else futures

    def persist(self, collections: Any, **options: Any) -> Any:
        """Dask collections backed by futures of their parts; see ``docs/dask.md``."""
        return self._async.persist(collections, **options)

    def get(self, dsk: Any, keys: Any, **options: Any) -> Any:
        """The values of ``keys`` of a Dask graph or expression: ``dask.compute(x,
        scheduler=client)`` and ``dask.config.set(scheduler=client)`` call this."""
        from ..dask.compute import get

        return self.gather(get(self._async, dsk, keys, **options))

    def cancel(self, futures: Any) -> None:
        """Cancel tasks not yet ended, and the tasks depending on them."""
        self._async._cancel_now(futures)

    # -- shell-command jobs (docs/jobs.md) ---------------------------------------------------

    def submit_command(self, command: Any, **options: Any) -> JobFuture:
        """Queue a shell-command job; see :meth:`AsyncClient.submit_command`."""
        return self._async.submit_command(command, **options)

    def watch_jobs(self, jobs: Iterable[int]) -> list[JobFuture]:
        """Futures of jobs submitted before (by any client), by number."""
        return self._run(self._async.watch_jobs(jobs))

    def jobs(self, jobs: Iterable[int | str] = (), states: Iterable[str] = (), offset: int = 0,
             limit: int = 1000, expand: bool = False) -> dict:
        """Jobs by number and state, newest first; see :meth:`AsyncClient.jobs`."""
        return self._run(self._async.jobs(jobs, states, offset, limit, expand))

    def history(self, jobs: Iterable[int | str] = (), states: Iterable[str] = (),
                name: str = "", since: float | None = None, until: float | None = None,
                limit: int = 100) -> list[dict]:
        """Ended attempts of jobs, newest first; see :meth:`AsyncClient.history`."""
        return self._run(self._async.history(jobs, states, name, since, until, limit))

    def resolve_jobs(self, jobs: Iterable[int | str]) -> list[int]:
        """Job numbers of jobs as users name them (``"12_3"``: an array's element)."""
        return self._run(self._async.resolve_jobs(jobs))

    def cancel_jobs(self, jobs: Iterable[int | str]) -> dict:
        """Cancel jobs, queued or running; what became of each."""
        return self._run(self._async.cancel_jobs(jobs))

    def release_jobs(self, jobs: Iterable[int | str]) -> dict:
        """Let held jobs run; what became of each."""
        return self._run(self._async.release_jobs(jobs))

    def job_log(self, job: int, offset: int = 0, limit: int = 1 << 20) -> Any:
        """Bytes of a job's log from its worker; see :meth:`AsyncClient.job_log`."""
        return self._run(self._async.job_log(job, offset, limit))

    def read_job_log(self, job: int, follow: bool = False, interval: float = 0.5,
                     on_wait: Callable[[str], None] | None = None) -> Iterator[bytes]:
        """The job's log chunk by chunk; ``follow``: until the job ends (see
        :meth:`AsyncClient.read_job_log`; ``on_wait`` is called on the client's loop)."""
        log = self._async.read_job_log(job, follow, interval, on_wait)
        while (data := self._run(log.next())) is not None:
            yield data

    def wait_for_jobs(self, jobs: Iterable[int],
                      on_update: Callable[[list[dict]], None] | None = None,
                      timeout: float | None = None, interval: float = 1.0) -> list[dict]:
        """Block until all ``jobs`` have ended; their views. ``on_update`` is called on the
        client's loop thread; see :meth:`AsyncClient.wait_for_jobs`."""
        return self._run(self._async.wait_for_jobs(jobs, on_update, timeout, interval))

    def release_gpu(self, worker: str, index: int) -> None:
        """See :meth:`AsyncClient.release_gpu`."""
        return self._run(self._async.release_gpu(worker, index))

    def workers(self) -> list[dict]:
        """The connected workers as ``sched workers`` shows them."""
        return self._run(self._async.workers())

    def scheduler_info(self) -> dict:
        """Workers (resources total, used and free, threads, GPUs) and task counts by state."""
        return self._run(self._async.scheduler_info())

    def wait_for_workers(self, n: int, timeout: float | None = None) -> None:
        """Block until at least ``n`` workers are connected."""
        self._run(self._async.wait_for_workers(n, timeout))

    @property
    def status(self) -> str:
        return self._async.status

    @property
    def address(self) -> str:
        return self._async.address

    @property
    def cluster(self) -> LocalCluster | None:
        return self._async.cluster

    @property
    def id(self) -> str:
        return self._async.id

    # -- lifetime ---------------------------------------------------------------------------

    def close(self, timeout: float = 30.0) -> None:
        """Cancel pending tasks, disconnect, and stop the LocalCluster ``Client()`` started."""
        if self._thread.closed:
            return
        unset_default(self)
        try:
            if self._async.status != "closed":
                self._run(self._async.close(), timeout)
        finally:
            self._thread.stop()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Client {self.address} ({self.status})>"

"""The ops between a client and the scheduler: what a client asks (tasks, jobs, questions)
and what the scheduler answers. A part of the table of ops (``ops.py``, which names these too),
in a module of its own because a ``sched`` call sends and reads only these: it need not make
the classes of every op the daemons exchange (a few milliseconds of each call).

Pure: no I/O; payloads stay opaque bytes (nothing here unpickles).
"""

from __future__ import annotations

from .fields import Task, decode, op  # noqa: F401 - decode: for the sched command's replies

TYPE_CHECKING = False  # typing is for type checkers only (see ``ints.py``); the fields'
if TYPE_CHECKING:  # annotations are read as text (``fields._KINDS``)
    from typing import Any


@op("welcome")
class Welcome:
    client: str


@op("submit")
class Submit:
    """Tasks to run; dependencies may point inside the batch (checked field by field)."""

    tasks: tuple[Task, ...]
    id: int | None = None


@op("cancel")
class Cancel:
    keys: tuple[str, ...]


@op("release")
class Release:
    keys: tuple[str, ...]


@op("info")
class Info:
    """Ask for the scheduler's view of workers and tasks; answered by a Reply."""

    id: int


@op("who-has")
class WhoHas:
    id: int
    keys: tuple[str, ...]


@op("submit-jobs")
class SubmitJobs:
    """Queue shell-command jobs (``dsched.jobs.JobSpec`` as dicts); answered, once the
    journal holds them, by a Reply whose value lists their ids in order. ``watch``: and tell
    this client when each ends, as a WatchJobs of them would (one op, not two, a job)."""

    id: int
    jobs: tuple[dict, ...]
    watch: bool = False


@op("query-jobs")
class QueryJobs:
    """Jobs by id (``jobs``; none: all) and state (``states``; none: any), newest first, from
    ``offset``, at most ``limit``, each array followed by its elements if ``expand``; answered
    by a Reply: ``{"jobs": [...], "total": n}``."""

    id: int
    jobs: tuple[int, ...] = ()
    states: tuple[str, ...] = ()
    offset: int = 0
    limit: int = 1000
    expand: bool = False


@op("cancel-jobs")
class CancelJobs:
    """Answered by a Reply mapping each id (as text) to what became of it."""

    id: int
    jobs: tuple[int, ...]


@op("release-jobs")
class ReleaseJobs:
    """Let held jobs be dispatched; answered like CancelJobs."""

    id: int
    jobs: tuple[int, ...]


@op("watch-jobs")
class WatchJobs:
    """Tell this client (JobEnded) when each of ``jobs`` ends, or at once if it has."""

    jobs: tuple[int, ...]


@op("job-ended")
class JobEnded:
    """To a client: how a job ended (``job``: the job as ``sched status --json`` shows it)."""

    job: dict


@op("release-gpu")
class ReleaseGpu:
    """A fenced device (``index``) of the worker named ``worker`` takes work again; answered
    by a Reply ("" or why not)."""

    id: int
    worker: str
    index: int


@op("watch-workers")
class WatchWorkers:
    """Tell this client (WorkerCount) how many workers are connected, now and whenever that
    changes, for as long as it stays connected."""


@op("worker-count")
class WorkerCount:
    """To a client that watches the workers: how many are connected now (draining ones
    included, until they leave)."""

    count: int


@op("reply")
class Reply:
    """The answer to the request ``id``."""

    id: int
    value: Any = None


@op("error")
class Error:
    """A request (``id``) or a submit (``keys``) was refused, and why."""

    reason: str
    id: int | None = None
    keys: tuple[str, ...] = ()


@op("query-history")
class QueryHistory:
    """Ended job attempts, newest first (``sched history``): of ``jobs`` (an array: its
    elements'; none: any job), in ``states`` (none: any), whose name the glob ``name`` matches
    ("": any), that ended at or after ``since`` and before ``until`` (wall-clock seconds; None:
    no bound), at most ``limit``; answered, from the journal, by a Reply: ``{"attempts":
    [...]}`` (``scheduler/history.py``), or by an Error."""

    id: int
    jobs: tuple[int, ...] = ()
    states: tuple[str, ...] = ()
    name: str = ""
    since: float | None = None
    until: float | None = None
    limit: int = 100

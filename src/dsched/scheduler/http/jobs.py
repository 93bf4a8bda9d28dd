"""The jobs section of the dashboard: its part of the snapshot, its helpers, its API and a
job's own page.

The part (``jobs_part``) holds every job in a few words (``jobviews.job_table``: state, reason,
worker, times), the counts by state and reason, and what ``Observations`` saw of jobs and the
journal. Lists are cut from it: ``api/v1/jobs`` filtered by state, name and reason and paged,
and the panel on the page. One job's whole record (its command, log, pid, ...) is not in the
snapshot: ``record`` reads it with ``jobviews.job_view`` when asked, once per snapshot and job,
which costs that one job. Its log is read from the worker that ran it (``joblog.py``).

Nothing here changes the scheduler's state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Iterable, Mapping, Sequence

from ...jobstates import ENDED, JobState, Reason
from .. import jobviews
from .handlers import DEFAULT_LIMIT, MAX_LIMIT, DashboardHandler, Refusal
from .joblog import DEFAULT_BYTES, MAX_BYTES, LogUnavailable
from .page import HELPERS

if TYPE_CHECKING:
    from ..server import Scheduler
    from .observe import Observations
    from .snapshot import Snapshot

#: The position of each field in a row of the part's ``rows``.
FIELD = {name: i for i, name in enumerate(jobviews.JOB_ROW)}
#: The API's filters: query argument -> row field.
FILTERS = {"state": "state", "name": "name", "reason": "reason"}
#: The values the API's filters with a closed set of values may take.
CHOICES = {"state": tuple(s.value for s in JobState), "reason": tuple(r.value for r in Reason)}
#: The states a job does not leave, as the views name them.
FINAL = frozenset(s.value for s in ENDED)
#: Whole records of single jobs kept per snapshot (one per job asked about).
RECORDS_KEPT = 64
#: Selections of the list kept per snapshot (one per distinct filter).
SELECTIONS_KEPT = 32


def jobs_part(scheduler: "Scheduler", observed: "Observations") -> dict[str, Any]:
    table = jobviews.job_table(scheduler.state, observed.ended_job_rows)
    return {
        **table,
        "ended": dict(observed.jobs_ended),
        "failures": list(reversed(observed.job_failures)),  # newest first
        "queue_wait": observed.job_queue_wait.as_dict(),
        "run_time": observed.job_run_time.as_dict(),
        "commit_time": observed.commit_time.as_dict(),
        "rows_written": observed.rows_written,
    }


def select(part: Mapping[str, Any], wanted: Mapping[str, Sequence[str]]) -> list[tuple]:
    """The rows of ``part`` whose fields are among the values ``wanted`` (field -> values;
    an empty or missing field: any), newest first."""
    rows = part["rows"]
    for field, values in wanted.items():
        if values:
            i, allowed = FIELD[field], set(values)
            rows = [row for row in rows if row[i] in allowed]
    return rows


def items(rows: Iterable[tuple]) -> list[dict[str, Any]]:
    """Rows as the API and the templates show them: one dict each."""
    return [dict(zip(jobviews.JOB_ROW, row)) for row in rows]


def _selection(snapshot: "Snapshot", part: Mapping[str, Any],
               wanted: Mapping[str, Sequence[str]]) -> list[tuple]:
    """``select``, once per snapshot and filter (a walk of the rows)."""
    cache = snapshot.memo.setdefault("job selections", {})
    key = tuple(sorted((field, tuple(sorted(v))) for field, v in wanted.items() if v))
    rows = cache.get(key)
    if rows is None:
        rows = select(part, dict(key))
        if len(cache) < SELECTIONS_KEPT:
            cache[key] = rows
    return rows


def record(scheduler: "Scheduler", snapshot: "Snapshot", job_id: int) -> dict | None:
    """Job ``job_id`` as ``sched status --json`` shows it (None: no such job), read once per
    snapshot."""
    cache = snapshot.memo.setdefault("job records", {})
    if job_id in cache:
        return cache[job_id]
    state = scheduler.state
    job = state.jobs.jobs.get(job_id)
    found = jobviews.job_view(state, job) if job is not None else None
    if len(cache) < RECORDS_KEPT:
        cache[job_id] = found
    return found


#: What the jobs panel's template may call besides the page's helpers.
TEMPLATE_HELPERS = {"job_items": items, "select_jobs": select}


# -- the API and the page --------------------------------------------------------------------


class JobList(DashboardHandler):
    """``api/v1/jobs``: the jobs, newest first, filtered by ``state``, ``name`` and ``reason``
    and paged, with the counts by state and reason."""

    def get(self) -> None:
        args = self.arguments(("offset", "limit", *FILTERS))
        for name, allowed in CHOICES.items():
            self.known(args, name, allowed)
        offset = self.number(args, "offset", 0, 0, 10**9)
        limit = self.number(args, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        snapshot = self.dashboard.snapshots.current()
        part = snapshot.parts["jobs"]
        rows = _selection(snapshot, part, {FILTERS[name]: args.get(name, ()) for name in FILTERS})
        self.write_json({"items": items(rows[offset:offset + limit]), "total": len(rows),
                         "offset": offset, "limit": limit, "counts": part["counts"],
                         "waiting": part["waiting"], "recovering": part["recovering"]})


class JobHandler(DashboardHandler):
    """What the handlers of one job share: the job of the path's number, or 404."""

    def job(self, wanted: str) -> dict:
        found = None
        if wanted.isdigit() and len(wanted) < 19:
            found = record(self.dashboard.scheduler, self.dashboard.snapshots.current(),
                           int(wanted))
        if found is None:
            raise Refusal(404, f"no job {wanted[:40]!r}")
        return found

    def panel(self, job: dict) -> dict[str, Any]:
        """What the job's panel is rendered with."""
        return {"job": job, "final": job["state"] in FINAL, **HELPERS}

    async def log(self, reading: Awaitable[dict]) -> dict:
        """What ``reading`` (a read of a log) gives, or the refusal that says why not."""
        try:
            return await reading
        except LogUnavailable as error:
            raise Refusal(error.status, str(error)) from None


class JobItem(JobHandler):
    """``api/v1/jobs/ID``: one job as ``sched status --json`` shows it."""

    def get(self, wanted: str) -> None:
        self.arguments(())
        self.write_json(self.job(wanted))


class JobLogHandler(JobHandler):
    """``api/v1/jobs/ID/log?offset=&limit=``: a piece of the log of the job's latest attempt,
    read from its worker."""

    async def get(self, wanted: str) -> None:
        args = self.arguments(("offset", "limit"))
        offset = self.number(args, "offset", 0, 0, 2**53)
        limit = self.number(args, "limit", DEFAULT_BYTES, 1, MAX_BYTES)
        job = self.job(wanted)
        self.write_json(await self.log(self.dashboard.logs.read(job, offset, limit)))


class JobPanels(JobHandler):
    """``api/v1/jobs/ID/panels``: the job's panel as on its page, for the page's script."""

    def get(self, wanted: str) -> None:
        self.arguments(())
        snapshot = self.dashboard.snapshots.current()
        self.write_json({"taken": snapshot.wall,
                         "panels": {"job": self.render_string(
                             "job_panel.html", **self.panel(self.job(wanted))).decode()}})


class JobPage(JobHandler):
    """``jobs/ID``: one job's page: its record, updated in place, and the end of its log,
    followed as it grows."""

    api = False

    async def get(self, wanted: str) -> None:
        self.arguments(())
        job = self.job(wanted)
        try:
            log, problem = await self.dashboard.logs.tail(job), None
        except LogUnavailable as error:  # said in its place; the page's script tries again
            log, problem = None, str(error)
        self.render("job.html", root=self.root, log=log, problem=problem,
                    taken=self.dashboard.snapshots.current().wall,
                    static=self.dashboard.static_version, **self.panel(job))


ROUTES: tuple[tuple[str, type], ...] = (
    ("/api/v1/jobs", JobList),
    ("/api/v1/jobs/([^/]+)", JobItem),
    ("/api/v1/jobs/([^/]+)/log", JobLogHandler),
    ("/api/v1/jobs/([^/]+)/panels", JobPanels),
    ("/jobs/([^/]+)", JobPage),
)

"""What the dashboard learns as the scheduler runs, rather than from its state: how long tasks
and job attempts waited and ran (histograms), the recent failures of tasks and of jobs, the
jobs that ended by how, the journal's commits, and the event loop's lag.

The scheduler shell hands ``Observations`` each event with the actions it gave; that costs a
type test per action and, per placement, finished task or journaled job, a bucket increment or
two. It also says how long each journal commit took (``committed``). Nothing here changes the
state or sends anything, and all of it is bounded.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections import Counter, deque
from typing import Any, Callable, Sequence

from ...jobstates import ENDED, JobState
from .. import actions as act
from .. import events as ev

#: Upper bounds (seconds) of the histogram buckets: from a placement's few milliseconds to a
#: training run's day.
QUEUE_WAIT_BUCKETS = (0.001, 0.01, 0.1, 1.0, 10.0, 60.0, 600.0, 3600.0, 21600.0, 86400.0)
RUN_TIME_BUCKETS = (0.001, 0.01, 0.1, 1.0, 10.0, 60.0, 600.0, 3600.0, 21600.0, 86400.0)
LOOP_LAG_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)
#: A commit is an fsync or two of the WAL: a millisecond on an SSD, more on a busy disk.
COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
#: Failures kept for the page and the API, newest last.
FAILURES_KEPT = 100
#: Characters of a failure's text kept (its traceback, say).
TEXT_KEPT = 2000
#: Seconds between two looks at the event loop's lag.
LAG_INTERVAL = 0.5
#: How a job ends that is listed among the recent failures.
FAILED_JOB_STATES = frozenset(s.value for s in (JobState.failed, JobState.timeout,
                                                 JobState.lost))
_ENDED = frozenset(s.value for s in ENDED)


class Histogram:
    """Counts of observations per bucket (``bounds`` are the upper bounds, inclusive), their
    sum and number: what a Prometheus histogram exposes, without a lock or a label lookup
    (it is only touched on the event loop)."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: Sequence[float]):
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def as_dict(self) -> dict[str, Any]:
        """``buckets``: [upper bound, observations at or below it], ending with "+Inf"; and
        the ``sum`` and ``count`` of the observations (plain data, for JSON and metrics)."""
        buckets, running = [], 0
        for bound, n in zip((*map(repr, self.bounds), "+Inf"), self.counts):
            running += n
            buckets.append([bound, running])
        return {"buckets": buckets, "sum": self.sum, "count": self.count}


class Observations:
    """Fed by the scheduler shell (``__call__``) and by the lag probe (``probe_loop``).
    ``tasks`` and ``workers`` are the state's, read only: what a failure names comes from
    them."""

    def __init__(self, tasks: dict, workers: dict | None = None,
                 wall_clock: Callable[[], float] = time.time):
        self.tasks = tasks
        self.workers = workers if workers is not None else {}
        self.wall_clock = wall_clock
        #: The names of the workers tasks were sent to, by address: a task that fails with
        #: its worker's death fails once that worker has left the state.
        self._names: dict[str, str] = {}
        self.queue_wait = Histogram(QUEUE_WAIT_BUCKETS)
        self.run_time = Histogram(RUN_TIME_BUCKETS)
        self.loop_lag = Histogram(LOOP_LAG_BUCKETS)
        self.last_lag = 0.0
        #: Tasks that failed for good, by how (``TaskErred.error``), since start.
        self.failed: Counter = Counter()
        #: The latest failures, newest last; those failed with an input are left out (one
        #: root cause can fail thousands) but counted in ``failed``.
        self.failures: deque[dict[str, Any]] = deque(maxlen=FAILURES_KEPT)
        self.job_queue_wait = Histogram(QUEUE_WAIT_BUCKETS)
        self.job_run_time = Histogram(RUN_TIME_BUCKETS)
        #: Jobs that ended since start, by the state they ended in.
        self.jobs_ended: Counter = Counter()
        #: The latest jobs that ended failed, timed out or lost, newest last.
        self.job_failures: deque[dict[str, Any]] = deque(maxlen=FAILURES_KEPT)
        self.commit_time = Histogram(COMMIT_BUCKETS)
        self.rows_written = 0
        #: The jobs part's rows of ended jobs, by id, made once (``jobviews.job_table``): a
        #: snapshot then walks them without making them again.
        self.ended_job_rows: dict[int, tuple] = {}

    def __call__(self, event: Any, actions: list) -> None:
        if type(event) is ev.WorkerTaskFinished:
            duration = event.duration if event.duration is not None else event.stop - event.start
            if duration >= 0:
                self.run_time.observe(duration)
        tasks = self.tasks
        for action in actions:
            kind = type(action)
            if kind is act.SendExecute:
                t = tasks.get(action.key)
                if t is not None:  # a job's attempt waits minutes where a task waits ms
                    histogram = self.queue_wait if action.job is None else self.job_queue_wait
                    histogram.observe(t.started - t.queued_at)
                if action.worker not in self._names:
                    w = self.workers.get(action.worker)
                    if w is not None:
                        self._names[action.worker] = w.name
            elif kind is act.TellErred:
                self._failed(action, event)
            elif kind is act.JournalWrite:
                self._journaled(action, event)
        if type(event) is ev.WorkerLeft:  # after its tasks' failures named it
            self._names.pop(event.address, None)

    def worker_name(self, address: str | None) -> str | None:
        """The name of the worker at ``address``, as job failures name it (its address where
        it is not known)."""
        if address is None:
            return None
        w = self.workers.get(address)
        return w.name if w is not None else self._names.get(address, address)

    def _failed(self, action: act.TellErred, event: Any) -> None:
        self.failed[action.error] += 1
        if action.error == "dependency":
            return
        text = action.text or ""
        lines = [line for line in text.strip().splitlines() if line.strip()]
        self.failures.append({
            "time": self.wall_clock(),
            "key": action.key,
            "error": action.error,
            "message": (lines[-1].strip() if lines else action.error)[:300],
            "text": text[-TEXT_KEPT:],
            "worker": self.worker_name(getattr(event, "worker", None)
                                       or getattr(event, "address", None)),
        })

    def _journaled(self, write: act.JournalWrite, event: Any) -> None:
        # A job's row is journaled in an ended state once: in the change that ended it (an
        # ended job is not changed again), so each such row is one job that ended.
        for row in write.rows:
            state = row["state"]
            if state in _ENDED:
                self.jobs_ended[state] += 1
                if state in FAILED_JOB_STATES:
                    self.job_failures.append({
                        "time": self.wall_clock(), "id": row["id"],
                        "name": row["spec"].get("name", ""), "state": state,
                        "detail": (row.get("detail") or "")[:TEXT_KEPT],
                        "exit_code": row.get("exit_code"), "worker": row.get("worker", "")})
        # The book journals a "result" only for the current attempt of a job: a report of an
        # older attempt, or one repeated, is not timed twice.
        if type(event) is ev.WorkerAttemptEnded and "result" in write.causes:
            report = event.report
            if report.started is not None and report.ended >= report.started:
                self.job_run_time.observe(report.ended - report.started)

    def committed(self, seconds: float, rows: int) -> None:
        """The scheduler committed ``rows`` job rows to its journal in ``seconds``."""
        self.commit_time.observe(seconds)
        self.rows_written += rows

    async def probe_loop(self) -> None:
        """For ever: how late the event loop wakes a sleeper, every ``LAG_INTERVAL``."""
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            await asyncio.sleep(LAG_INTERVAL)
            self.last_lag = max(0.0, loop.time() - start - LAG_INTERVAL)
            self.loop_lag.observe(self.last_lag)

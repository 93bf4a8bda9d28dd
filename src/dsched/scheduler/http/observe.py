"""What the dashboard learns as the scheduler runs, rather than from its state: how long tasks
waited and ran (histograms), the recent failures, and the event loop's lag.

The scheduler shell hands ``Observations`` each event with the actions it gave; that costs a
type test per action and, per placement or finished task, one bucket increment. Nothing here
changes the state or sends anything, and all of it is bounded.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections import Counter, deque
from typing import Any, Callable, Sequence

from .. import actions as act
from .. import events as ev

#: Upper bounds (seconds) of the histogram buckets: from a placement's few milliseconds to a
#: training run's day.
QUEUE_WAIT_BUCKETS = (0.001, 0.01, 0.1, 1.0, 10.0, 60.0, 600.0, 3600.0, 21600.0, 86400.0)
RUN_TIME_BUCKETS = (0.001, 0.01, 0.1, 1.0, 10.0, 60.0, 600.0, 3600.0, 21600.0, 86400.0)
LOOP_LAG_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)
#: Failures kept for the page and the API, newest last.
FAILURES_KEPT = 100
#: Characters of a failure's text kept (its traceback, say).
TEXT_KEPT = 2000
#: Seconds between two looks at the event loop's lag.
LAG_INTERVAL = 0.5


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
    """Fed by the scheduler shell (``__call__``) and by the lag probe (``probe_loop``)."""

    def __init__(self, tasks: dict, wall_clock: Callable[[], float] = time.time):
        self.tasks = tasks
        self.wall_clock = wall_clock
        self.queue_wait = Histogram(QUEUE_WAIT_BUCKETS)
        self.run_time = Histogram(RUN_TIME_BUCKETS)
        self.loop_lag = Histogram(LOOP_LAG_BUCKETS)
        self.last_lag = 0.0
        #: Tasks that failed for good, by how (``TaskErred.error``), since start.
        self.failed: Counter = Counter()
        #: The latest failures, newest last; those failed with an input are left out (one
        #: root cause can fail thousands) but counted in ``failed``.
        self.failures: deque[dict[str, Any]] = deque(maxlen=FAILURES_KEPT)

    def __call__(self, event: Any, actions: list) -> None:
        if type(event) is ev.TaskFinished:
            duration = event.duration if event.duration is not None else event.stop - event.start
            if duration >= 0:
                self.run_time.observe(duration)
        tasks = self.tasks
        for action in actions:
            kind = type(action)
            if kind is act.Execute:
                t = tasks.get(action.key)
                if t is not None:
                    self.queue_wait.observe(t.started - t.queued_at)
            elif kind is act.TaskErred:
                self._failed(action, event)

    def _failed(self, action: act.TaskErred, event: Any) -> None:
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
            "worker": getattr(event, "worker", None) or getattr(event, "address", None),
        })

    async def probe_loop(self) -> None:
        """For ever: how late the event loop wakes a sleeper, every ``LAG_INTERVAL``."""
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            await asyncio.sleep(LAG_INTERVAL)
            self.last_lag = max(0.0, loop.time() - start - LAG_INTERVAL)
            self.loop_lag.observe(self.last_lag)

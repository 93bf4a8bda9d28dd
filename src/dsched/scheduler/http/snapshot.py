"""Snapshots: what the dashboard shows, read from the scheduler at most once a ``max_age``.

A snapshot holds one part per section (``sections.py``), each plain data built from the pure
views, the shell's own facts (clients, readiness) and the ``Observations``. Handlers read the
current snapshot and never the scheduler: a page load, an API call or a scrape costs the
scheduler at most one snapshot a second however many there are, and nothing while nobody
looks. A snapshot is never changed once built; what is derived from it (a rendered panel, the
metrics text) is kept in its ``memo``.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ... import __version__
from .. import views

if TYPE_CHECKING:
    from ..server import Scheduler
    from .observe import Observations

#: Seconds a snapshot is served before the next request builds a new one.
MAX_AGE = 1.0


@dataclass(frozen=True)
class Snapshot:
    """``parts`` by section name; ``taken``: the loop's clock when built; ``wall``: the time
    of day then (for people)."""

    parts: Mapping[str, Any]
    taken: float
    wall: float
    memo: dict = field(default_factory=dict, compare=False)


class Snapshots:
    """The current snapshot, built by ``build`` (section name -> part) when asked for and
    older than ``max_age`` seconds on ``clock``."""

    def __init__(self, build: Callable[[], dict[str, Any]], clock: Callable[[], float],
                 max_age: float = MAX_AGE, wall_clock: Callable[[], float] = time.time):
        self.build, self.clock, self.max_age, self.wall_clock = build, clock, max_age, wall_clock
        self._current: Snapshot | None = None
        self.builds = 0

    def current(self) -> Snapshot:
        now = self.clock()
        snapshot = self._current
        if snapshot is None or now - snapshot.taken >= self.max_age:
            snapshot = self._current = Snapshot(self.build(), now, self.wall_clock())
            self.builds += 1
        return snapshot


# -- the built-in sections' parts ----------------------------------------------------------


def cluster_part(scheduler: "Scheduler", observed: "Observations") -> dict[str, Any]:
    """The scheduler itself: where it listens, whether it is ready, who is connected."""
    return {
        "address": scheduler.address,
        "version": __version__,
        "python": platform.python_version(),
        "ready": scheduler.ready,
        "not_ready": dict(scheduler.not_ready),
        "draining": scheduler.draining,
        "clients": len(scheduler.clients),
        "loop_lag": observed.last_lag,
        "loop_lag_histogram": observed.loop_lag.as_dict(),
        "resources": views.resource_totals(scheduler.state),
    }


def workers_part(scheduler: "Scheduler", observed: "Observations") -> dict[str, Any]:
    items = views.workers(scheduler.state)
    draining = sum(1 for w in items if w["state"] == "draining")
    return {"items": items,
            "by_state": {"connected": len(items) - draining, "draining": draining},
            "threads": sum(w["nthreads"] for w in items),
            "threads_busy": sum(w["threads_busy"] for w in items)}


def tasks_part(scheduler: "Scheduler", observed: "Observations") -> dict[str, Any]:
    state = scheduler.state
    counts = views.tasks_by_state(state)
    return {
        "counts": counts,
        "pending": views.pending(state, counts),
        "counters": dict(state.counters),
        "failed": dict(sorted(observed.failed.items())),
        "failures": list(reversed(observed.failures)),  # newest first
        "queue_wait": observed.queue_wait.as_dict(),
        "run_time": observed.run_time.as_dict(),
    }

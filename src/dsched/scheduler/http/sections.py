"""The dashboard's sections: each one part of the snapshot, and how it is served and shown.

A section names what it reads from the scheduler (``build``, called once per snapshot), the
panel that shows it on the page (a template in ``templates/`` given ``part`` and the page's
``query``), the Prometheus families made from it (``metrics``) and its routes under the
dashboard's prefix (handlers from ``handlers.py``, or subclasses of its ``ListHandler`` and
``ItemHandler``), and any helpers of its own its template calls. ``SECTIONS`` is the
dashboard's list, in the page's order: a new kind of work joins by adding its section here, as
jobs did (``jobs.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from . import handlers as h
from . import jobs, metrics, snapshot

if TYPE_CHECKING:
    from ..server import Scheduler
    from .observe import Observations


@dataclass(frozen=True)
class Section:
    name: str
    build: Callable[["Scheduler", "Observations"], Any]
    panel: str | None = None
    metrics: Callable[[Any], Iterable[Any]] | None = None
    routes: tuple[tuple[str, type], ...] = ()
    #: What its panel's template may call besides the page's helpers, by name.
    helpers: Mapping[str, Callable] | None = None


SECTIONS: tuple[Section, ...] = (
    Section("cluster", snapshot.cluster_part, "cluster.html", metrics.cluster_metrics,
            (("/api/v1/cluster", h.ClusterHandler),)),
    Section("workers", snapshot.workers_part, "workers.html", metrics.worker_metrics,
            (("/api/v1/workers", h.WorkerList), ("/api/v1/workers/([^/]+)", h.WorkerItem))),
    Section("tasks", snapshot.tasks_part, "tasks.html", metrics.task_metrics,
            (("/api/v1/tasks", h.TasksSummary), ("/api/v1/tasks/pending", h.PendingList),
             ("/api/v1/tasks/failures", h.FailureList))),
    Section("jobs", jobs.jobs_part, "jobs.html", metrics.job_metrics, jobs.ROUTES,
            jobs.TEMPLATE_HELPERS),
)

#: Routes that belong to no section: the page itself, its login, icon and polling, health,
#: metrics.
ROUTES: tuple[tuple[str, type], ...] = (
    ("/?", h.PageHandler),
    ("/login", h.LoginHandler),
    ("/favicon.ico", h.FaviconHandler),
    ("/api/v1/panels", h.PanelsHandler),
    ("/healthz", h.HealthHandler),
    ("/readyz", h.ReadyHandler),
    ("/metrics", h.MetricsHandler),
)

"""The scheduler's HTTP side: a dashboard people read, a JSON API under ``api/v1/``,
``healthz``/``readyz`` and Prometheus ``metrics``, served by tornado on the scheduler's loop.

``service.Dashboard`` serves it; ``snapshot`` builds what every handler reads (at most once a
second, from the pure views); ``sections`` lists the parts of the dashboard, each with its
panel, API routes and metric families; ``observe`` takes what the scheduler shell hands it
(placements, finished and failed tasks) into histograms and a list of recent failures;
``auth`` says who may read it.

It must not change the scheduler's state, nor read it outside a snapshot's build.
"""

from .auth import dashboard_token
from .service import Dashboard

__all__ = ["Dashboard", "dashboard_token"]

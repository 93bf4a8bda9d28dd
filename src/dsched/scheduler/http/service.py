"""The dashboard server: a tornado application on the scheduler's own event loop.

``Dashboard`` binds the HTTP port, routes every section's handlers under the prefix, renders
the page's panels from a snapshot (once per snapshot and query), and feeds ``Observations``
from the scheduler shell and the loop-lag probe. It only reads the scheduler: anything that
would change the state goes through the scheduler's own protocol, never through here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from typing import TYPE_CHECKING, Any

from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from tornado.template import Loader
from tornado.web import Application, StaticFileHandler

from ...comm.addresses import reachable_host
from ...peers import PeerPool
from . import auth, metrics
from .handlers import StaticHandler, log_request
from .joblog import LogReader
from .observe import Observations
from .page import HELPERS
from .sections import ROUTES, SECTIONS, Section
from .snapshot import Snapshot, Snapshots

if TYPE_CHECKING:
    from ...settings import SchedulerConfig
    from ..server import Scheduler

logger = logging.getLogger("dsched.scheduler")

HERE = os.path.dirname(__file__)
TEMPLATES = os.path.join(HERE, "templates")
STATIC = os.path.join(HERE, "static")
#: Rendered panels kept per snapshot (one per distinct query of the page).
PANELS_KEPT = 32
#: Seconds open connections get to finish when the dashboard closes.
CLOSE_TIMEOUT = 2.0


class Dashboard:
    """The dashboard of ``scheduler``, served on ``config.dashboard_host``/``_port`` under
    ``config.dashboard_prefix``; ``token`` is the cluster token (the dashboard token is made
    from it where the host requires one)."""

    def __init__(self, scheduler: "Scheduler", config: "SchedulerConfig", token: str,
                 sections: tuple[Section, ...] = SECTIONS):
        self.scheduler = scheduler
        self.host = config.dashboard_host
        self.requested_port = config.dashboard_port or 0
        self.prefix = config.dashboard_prefix or ""
        self.token = auth.dashboard_token(token) if auth.token_required(self.host) else None
        self.sections = sections
        self.tls = config.tls
        self._cluster_token = token  # the workers' data ports ask for it: logs are read there
        self.logs = LogReader(self._log_peers, locate=self._worker_address)
        self.observations = Observations(scheduler.state.tasks, scheduler.state.workers)
        self.snapshots = Snapshots(self._build, clock=self._clock)
        self._metrics = {s.name: s.metrics for s in sections if s.metrics is not None}
        self.server: HTTPServer | None = None
        self.port: int | None = None
        self._probe: asyncio.Task | None = None
        self._versions: dict[str, str] = {}
        self._templates = Loader(TEMPLATES)

    # -- serving ------------------------------------------------------------------------------

    def application(self) -> Application:
        prefix = re.escape(self.prefix)
        routes: list[Any] = [(prefix + path, handler, {"dashboard": self})
                             for path, handler in ROUTES]
        for section in self.sections:
            routes += [(prefix + path, handler, {"dashboard": self})
                       for path, handler in section.routes]
        routes.append((prefix + "/static/(.*)", StaticHandler,
                       {"path": STATIC, "dashboard": self}))
        return Application(routes, template_path=TEMPLATES, log_function=log_request,
                           static_hash_cache=True, compiled_template_cache=True)

    async def start(self) -> None:
        """Listen (OSError when the port cannot be had) and start observing the scheduler."""
        sockets = bind_sockets(self.requested_port, self.host)
        self.server = HTTPServer(self.application(), max_header_size=64 * 1024,
                                 max_body_size=64 * 1024, idle_connection_timeout=60,
                                 body_timeout=10)
        self.server.add_sockets(sockets)
        self.port = sockets[0].getsockname()[1]
        self.scheduler.observe = self.observations
        self.scheduler.on_commit = self.observations.committed
        self._probe = asyncio.ensure_future(self.observations.probe_loop())
        self._probe.add_done_callback(_log_failure)
        logger.info("Dashboard at %s%s", self.url,
                    " (it asks for the dashboard token: sched-scheduler "
                    "--print-dashboard-token)" if self.token else "")

    @property
    def url(self) -> str:
        host = reachable_host(self.host)
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}{self.prefix}/"

    async def close(self) -> None:
        if self.scheduler.observe is self.observations:
            self.scheduler.observe = None
            self.scheduler.on_commit = None
        await self.logs.close()
        if self._probe is not None:
            self._probe.cancel()
        if self.server is not None:
            self.server.stop()
            try:
                await asyncio.wait_for(self.server.close_all_connections(), CLOSE_TIMEOUT)
            except asyncio.TimeoutError:
                pass

    def _log_peers(self) -> PeerPool:
        """Where job logs are read from: the workers' data ports, as a client reads them (TLS
        with the scheduler's CA, and its certificate where workers ask for one)."""
        from ...daemon import ssl_contexts

        comm = self.scheduler.comm_config
        return PeerPool(role="client", name="dashboard", token=self._cluster_token,
                        ssl=ssl_contexts(self.tls, server=False), timeout=comm.connect_timeout,
                        limits=comm.limits())

    def _worker_address(self, name: str) -> str | None:
        """The address of the connected worker ``name`` (where a log of it is read now)."""
        return next((w.address for w in self.scheduler.state.workers.values()
                     if w.name == name), None)

    # -- what handlers read -----------------------------------------------------------------

    def _clock(self) -> float:
        return asyncio.get_running_loop().time()

    def _build(self) -> dict[str, Any]:
        return {s.name: s.build(self.scheduler, self.observations) for s in self.sections}

    def render_panels(self, snapshot: Snapshot, query: dict[str, str]) -> dict[str, str]:
        """Each section's panel for ``query`` (the page's arguments), rendered once per
        snapshot and query."""
        key = ("panels", tuple(sorted(query.items())))
        panels = snapshot.memo.get(key)
        if panels is None:
            panels = {s.name: self._templates.load(s.panel).generate(
                          part=snapshot.parts[s.name], query=query, here="./",
                          snapshot=snapshot, **HELPERS, **(s.helpers or {})).decode()
                      for s in self.sections if s.panel is not None}
            if len(snapshot.memo) < PANELS_KEPT:
                snapshot.memo[key] = panels
        return panels

    def metrics_text(self, snapshot: Snapshot) -> bytes:
        """The metrics of ``snapshot`` as Prometheus reads them (safe on any thread)."""
        collector = metrics.Collector(lambda: snapshot.parts, self._metrics)
        return metrics.exposition(metrics.registry(collector))

    def static_version(self, name: str) -> str:
        """A hash of a static file, for its URL: browsers cache it until it changes."""
        version = self._versions.get(name)
        if version is None:
            version = self._versions[name] = StaticFileHandler.get_version(
                {"static_path": STATIC}, name) or ""
        return version


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("The dashboard's loop-lag probe failed", exc_info=task.exception())

"""The dashboard's HTTP handlers: the page, its login, the JSON API, health and metrics.

Every handler reads the current snapshot, never the scheduler itself (readyz aside, which
must answer for now), so serving costs the scheduler no more than one snapshot a second.
``DashboardHandler`` holds what they share: the token rule (a Bearer header or the login
cookie, where the dashboard requires the token; the ``Host`` rule where it does not), security
headers, JSON and one-line errors.
``ListHandler`` and ``ItemHandler`` serve a section's lists (paged with ``offset`` and
``limit``, filtered by the arguments it names) and their items; a section adds its own by
subclassing them. Every link and redirect is relative, so the dashboard works under any
prefix a reverse proxy adds.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Sequence

from tornado.ioloop import IOLoop
from tornado.web import HTTPError, RequestHandler, StaticFileHandler

from . import auth, metrics
from .page import HELPERS

if TYPE_CHECKING:
    from .service import Dashboard

logger = logging.getLogger("dsched.scheduler.dashboard")

#: The most items one API call returns.
MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self'; connect-src 'self'; form-action 'self'; "
                               "base-uri 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class Refusal(HTTPError):
    """A request we will not answer, and why in one line: the line goes in the JSON body, while
    the status line keeps its standard phrase (the line may quote what the client sent)."""

    def __init__(self, status: int, message: str):
        super().__init__(status)
        self.message = message


class DashboardHandler(RequestHandler):
    """What every handler shares. ``public``: served without the token (health checks)."""

    public = False
    api = True  # errors as JSON; a page handler says False and sends people to the login

    def initialize(self, dashboard: "Dashboard") -> None:
        self.dashboard = dashboard

    def set_default_headers(self) -> None:
        for name, value in SECURITY_HEADERS.items():
            self.set_header(name, value)
        self.set_header("Cache-Control", "no-store")

    def prepare(self) -> None:
        refusal = host_refusal(self, self.dashboard)
        if refusal is not None:
            raise refusal
        if self.public or self.authorized():
            return
        if self.api:
            raise Refusal(401, "the dashboard token is required (an Authorization: Bearer "
                               "header)")
        self.redirect(self.root + "login")

    def authorized(self) -> bool:
        expected = self.dashboard.token
        if expected is None:
            return True
        offered = auth.bearer(self.request.headers.get("Authorization"))
        return auth.matches(offered or self.get_cookie(auth.COOKIE), expected)

    @property
    def root(self) -> str:
        """The dashboard's root relative to this request's path ("./", "../", ...)."""
        rest = self.request.path[len(self.dashboard.prefix):]
        return "../" * max(0, rest.count("/") - 1) or "./"

    def part(self, name: str) -> Any:
        return self.dashboard.snapshots.current().parts[name]

    def write_json(self, value: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(json.dumps(value, separators=(",", ":")))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error = kwargs.get("exc_info", (None, None, None))[1]
        message = error.message if isinstance(error, Refusal) else self._reason
        if status_code == 401:  # set here: an error starts from fresh headers
            self.set_header("WWW-Authenticate", 'Bearer realm="dsched"')
        if self.api:
            self.write_json({"error": message}, status_code)
        else:
            self.set_header("Content-Type", "text/plain; charset=utf-8")
            self.finish(f"{status_code} {message}\n")

    def arguments(self, allowed: Sequence[str]) -> dict[str, list[str]]:
        """The query's arguments; 400 naming the first one not in ``allowed`` (a typo)."""
        args = {name: self.get_arguments(name) for name in self.request.query_arguments}
        for name in args:
            if name not in allowed:
                expected = ", ".join(allowed) if allowed else "none"
                raise Refusal(400, f"unknown argument {name[:40]!r} (expected: {expected})")
        return args

    def known(self, args: dict[str, list[str]], name: str, allowed: Sequence[str]) -> None:
        """400 naming the values ``name`` may take when one of its values is not among them: a
        filter on a value nothing can have is a typo, not an empty list."""
        for value in args.get(name, ()):
            if value not in allowed:
                raise Refusal(400, f"unknown {name} {value[:40]!r} (expected: "
                                   f"{', '.join(allowed)})")

    def number(self, args: dict[str, list[str]], name: str, default: int, low: int,
               high: int) -> int:
        values = args.get(name)
        if not values:
            return default
        text = values[-1]
        if not text.isdigit() or not low <= int(text) <= high:
            raise Refusal(400, f"{name} must be a whole number from {low} to {high}, "
                               f"not {text[:40]!r}")
        return int(text)


class ListHandler(DashboardHandler):
    """A list in a section's part, paged and filtered: ``section`` names the part, ``path`` the
    keys leading to the list in it, ``filters`` maps each query argument to the item field it
    filters on (several values of one argument: any of them), ``choices`` the arguments whose
    values are a closed set to that set. Answers ``{"items", "total", "offset", "limit"}``,
    ``total`` counting the items that pass the filters."""

    section = ""
    path: tuple[str, ...] = ("items",)
    filters: dict[str, str] = {}
    choices: dict[str, tuple[str, ...]] = {}

    def get(self) -> None:
        args = self.arguments(("offset", "limit", *self.filters))
        for name, allowed in self.choices.items():
            self.known(args, name, allowed)
        offset = self.number(args, "offset", 0, 0, 10**9)
        limit = self.number(args, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        items = self.part(self.section)
        for key in self.path:
            items = items[key]
        for name, field in self.filters.items():
            wanted = args.get(name)
            if wanted:
                items = [item for item in items if str(item.get(field)) in wanted]
        self.write_json({"items": items[offset:offset + limit], "total": len(items),
                         "offset": offset, "limit": limit})


class ItemHandler(DashboardHandler):
    """One item of a section's list, found by its ``id_field`` (the path's last part)."""

    section = ""
    path: tuple[str, ...] = ("items",)
    id_field = "name"
    noun = "item"

    def get(self, wanted: str) -> None:
        self.arguments(())
        items = self.part(self.section)
        for key in self.path:
            items = items[key]
        for item in items:
            if str(item.get(self.id_field)) == wanted:
                self.write_json(item)
                return
        raise Refusal(404, f"no {self.noun} {wanted[:100]!r}")


def host_refusal(handler: RequestHandler, dashboard: "Dashboard") -> Refusal | None:
    """Why ``handler``'s request is refused for its ``Host`` header, if it is: a dashboard
    that asks for no token answers only to loopback names (``auth.host_allowed``)."""
    if dashboard.token is None and not auth.host_allowed(handler.request.host, dashboard.host):
        return Refusal(403, f"host {handler.request.host[:100]!r} is not a loopback name: "
                            "without a token the dashboard answers only to localhost, "
                            "127.0.0.1 or [::1]")
    return None


class StaticHandler(StaticFileHandler):
    """The page's script and style sheet, under the same ``Host`` rule as the rest."""

    def initialize(self, path: str, dashboard: "Dashboard") -> None:  # type: ignore[override]
        super().initialize(path)
        self.dashboard = dashboard

    def prepare(self) -> None:
        refusal = host_refusal(self, self.dashboard)
        if refusal is not None:
            self.set_status(403)
            self.set_header("Content-Type", "text/plain; charset=utf-8")
            self.finish(f"403 {refusal.message}\n")


class FaviconHandler(DashboardHandler):
    """``favicon.ico``, which a browser asks for where a page names no icon (a JSON answer
    opened in a tab): no content, and kept for a day, so it is neither a 404 nor asked again.
    The pages name ``static/favicon.svg``."""

    public = True

    def get(self) -> None:
        self.set_header("Cache-Control", "max-age=86400")
        self.set_status(204)
        self.finish()


# -- the built-in API ---------------------------------------------------------------------


class ClusterHandler(DashboardHandler):
    def get(self) -> None:
        self.arguments(())
        self.write_json(self.part("cluster"))


class WorkerList(ListHandler):
    section = "workers"
    filters = {"state": "state"}
    choices = {"state": ("connected", "draining")}


class WorkerItem(ItemHandler):
    section = "workers"
    noun = "worker"


class TasksSummary(DashboardHandler):
    """Counts by state, pending work by kind of reason with its first groups, the failures
    by error with the latest ones, the counters and the two histograms."""

    FIRST = 10

    def get(self) -> None:
        self.arguments(())
        part = self.part("tasks")
        pending = part["pending"]
        self.write_json({
            "counts": part["counts"],
            "pending": {"by_reason": pending["by_reason"], "total": pending["total"],
                        "groups": pending["groups"][:self.FIRST],
                        "groups_total": pending["groups_total"]},
            "failed": part["failed"],
            "failures": part["failures"][:self.FIRST],
            "counters": part["counters"],
            "queue_wait": part["queue_wait"],
            "run_time": part["run_time"],
        })


class PendingList(ListHandler):
    section = "tasks"
    path = ("pending", "groups")
    filters = {"reason": "reason"}


class FailureList(ListHandler):
    section = "tasks"
    path = ("failures",)
    filters = {"error": "error"}


class PanelsHandler(DashboardHandler):
    """The page's panels, rendered as on the page for the same query: what its script polls."""

    def get(self) -> None:
        snapshot = self.dashboard.snapshots.current()
        query = {name: self.get_argument(name) for name in self.request.query_arguments}
        self.write_json({"taken": snapshot.wall,
                         "panels": self.dashboard.render_panels(snapshot, query)})


# -- health and metrics -------------------------------------------------------------------


class HealthHandler(DashboardHandler):
    """200 while the scheduler's event loop answers: nothing else is checked."""

    public = True

    def get(self) -> None:
        self.write_json({"status": "ok"})


class ReadyHandler(DashboardHandler):
    """200 while the scheduler takes work; 503 with the reasons while it does not (starting,
    draining, or whatever holds it: ``Scheduler.not_ready``)."""

    public = True

    def get(self) -> None:
        scheduler = self.dashboard.scheduler
        if scheduler.ready:
            self.write_json({"ready": True})
        else:
            self.write_json({"ready": False, "reasons": dict(scheduler.not_ready)}, 503)


class MetricsHandler(DashboardHandler):
    async def get(self) -> None:
        snapshot = self.dashboard.snapshots.current()
        text = snapshot.memo.get("metrics")
        if text is None:
            # Written on a thread: a snapshot never changes once built, and at a thousand
            # workers the text takes a tenth of a second the scheduler's loop should not wait.
            text = await IOLoop.current().run_in_executor(None, self.dashboard.metrics_text,
                                                          snapshot)
            snapshot.memo["metrics"] = text
        self.set_header("Content-Type", metrics.CONTENT_TYPE)
        self.finish(text)


# -- the page -----------------------------------------------------------------------------


class PageHandler(DashboardHandler):
    api = False

    def get(self) -> None:
        if self.request.path == self.dashboard.prefix:  # "/sched": relative links need "/sched/"
            self.redirect(self.request.path.rsplit("/", 1)[-1] + "/")
            return
        snapshot = self.dashboard.snapshots.current()
        query = {name: self.get_argument(name) for name in self.request.query_arguments}
        self.render("page.html", root=self.root, snapshot=snapshot,
                    panels=self.dashboard.render_panels(snapshot, query),
                    sections=self.dashboard.sections, static=self.dashboard.static_version,
                    **HELPERS)


class LoginHandler(DashboardHandler):
    """The form a person gives the dashboard token in; it is kept in a cookie (HttpOnly,
    SameSite=Strict, Secure over HTTPS) for the rest of the browser session."""

    public = True
    api = False

    def get(self, wrong: bool = False) -> None:
        if self.dashboard.token is None or self.authorized():
            self.redirect(self.root)
            return
        self.set_status(401 if wrong else 200)
        self.render("login.html", root=self.root, wrong=wrong,
                    static=self.dashboard.static_version)

    def post(self) -> None:
        token = self.get_body_argument("token", "")
        if self.dashboard.token is not None and not auth.matches(token,
                                                                 self.dashboard.token):
            self.get(wrong=True)
            return
        if self.dashboard.token is not None:
            self.set_cookie(auth.COOKIE, token.strip(), path=None, httponly=True,
                            samesite="Strict", secure=self.request.protocol == "https")
        self.redirect(self.root)


def log_request(handler: RequestHandler) -> None:
    """Tornado's access log, made quiet: one line per request only at DEBUG (a page polls
    every few seconds), failures of our own at WARNING."""
    status = handler.get_status()
    level = logging.WARNING if status >= 500 else logging.DEBUG
    if logger.isEnabledFor(level):
        request = handler.request
        logger.log(level, "%d %s %s (%s) %.1f ms", status, request.method, request.uri,
                   request.remote_ip, 1000 * request.request_time())

"""Who may read the dashboard, and where it is served: off 127.0.0.1 it asks for the
read-only dashboard token (127.0.0.2 stands for "another interface": it is loopback, so no
traffic leaves the machine), on it only requests to a loopback name are answered; behind a
prefix every path and link stays under it."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from dashboard_helpers import get_json, request
from dsched.scheduler.http import dashboard_token


def test_off_127_0_0_1_everything_but_health_needs_the_dashboard_token(daemons):
    daemons.scheduler("--dashboard-host", "127.0.0.2")
    url = daemons.dashboard
    assert url.startswith("http://127.0.0.2:")
    viewer = dashboard_token(daemons.token)
    for path in ("api/v1/workers", "api/v1/tasks", "api/v1/cluster", "metrics"):
        status, headers, body = request(url, path)
        assert status == 401 and headers["www-authenticate"].startswith("Bearer"), path
        assert b"dashboard token is required" in body
        for wrong in ("nope", daemons.token):  # the cluster token itself opens nothing here
            assert request(url, path, headers={"Authorization": f"Bearer {wrong}"})[0] == 401
        assert request(url, path, headers={"Authorization": f"Bearer {viewer}"})[0] == 200
    assert get_json(url, "healthz") == {"status": "ok"}  # probes carry no credentials
    assert request(url, "readyz")[0] == 200
    assert "dashboard token" in daemons.scheduler_log()  # the log says how to get it


def test_a_person_logs_in_once_and_the_cookie_opens_the_page(daemons):
    daemons.scheduler("--dashboard-host", "127.0.0.2")
    url = daemons.dashboard
    status, headers, _ = request(url)
    assert status == 302 and headers["location"] == "./login"
    status, _, body = request(url, "login")
    assert status == 200 and b'<form method="post" action="login">' in body
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    status, headers, body = request(url, "login", "POST", "token=guess", form)
    assert status == 401 and b"not this scheduler's dashboard token" in body
    assert "set-cookie" not in headers
    viewer = dashboard_token(daemons.token)
    status, headers, _ = request(url, "login", "POST", f"token={viewer}", form)
    assert status == 302 and headers["location"] == "./"
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    pair = cookie.split(";")[0]
    status, _, body = request(url, headers={"Cookie": pair})
    assert status == 200 and b"panel-workers" in body
    assert request(url, "api/v1/panels", headers={"Cookie": pair})[0] == 200


def test_the_cli_prints_the_dashboard_token_of_the_cluster_token(daemons):
    result = subprocess.run([sys.executable, "-m", "dsched.cli.scheduler",
                             "--print-dashboard-token"], env=daemons.env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == dashboard_token(daemons.token)
    assert daemons.token not in result.stdout


def test_on_127_0_0_1_no_token_is_asked(daemons):
    daemons.scheduler()
    assert request(daemons.dashboard)[0] == 200
    assert request(daemons.dashboard, "metrics")[0] == 200


def test_on_127_0_0_1_it_answers_only_to_loopback_host_names(daemons):
    daemons.scheduler()
    url = daemons.dashboard
    port = url.rsplit(":", 1)[1].strip("/")
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"127.0.0.9:{port}",
                 f"[::1]:{port}", "localhost"):
        assert request(url, headers={"Host": host})[0] == 200, host
    # A page whose own name was rebound to 127.0.0.1 sends that name: it reads nothing.
    for path in ("", "api/v1/jobs", "api/v1/panels", "metrics", "healthz", "login",
                 "favicon.ico", "static/dashboard.js"):
        status, _, body = request(url, path, headers={"Host": f"rebound.example:{port}"})
        assert status == 403, (path, status)
        assert b"'rebound.example:" in body and b"not a loopback name" in body, path
        assert body.count(b"\n") <= 1 and b"<" not in body, path  # one line, no page
    assert json.loads(request(url, "api/v1/cluster", headers={"Host": "evil"})[2])["error"] \
        .startswith("host 'evil' is not a loopback name")


def test_the_pages_have_an_icon_and_favicon_ico_is_no_404(daemons):
    daemons.scheduler()
    url = daemons.dashboard
    status, _, page = request(url)
    (icon,) = re.findall(rb'<link rel="icon" type="image/svg\+xml" href="([^"]+)">', page)
    status, headers, svg = request(url, icon.decode())
    assert status == 200 and headers["content-type"] == "image/svg+xml"
    assert svg.startswith(b"<svg ")
    status, headers, body = request(url, "favicon.ico")
    assert (status, body) == (204, b"") and headers["cache-control"] == "max-age=86400"


def test_behind_a_prefix_every_path_and_link_stays_under_it(daemons):
    daemons.scheduler("--dashboard-prefix", "/sched/")
    url = daemons.dashboard
    assert url.endswith("/sched/")
    root = url[:-len("sched/")]
    status, headers, _ = request(root, "sched")  # relative links need the slash
    assert status == 302 and headers["location"] == "sched/"
    status, _, page = request(url)
    assert status == 200
    links = re.findall(rb'(?:href|src|action)="([^"]*)"', page)
    assert links and not [link for link in links if link.startswith(b"/") or b"//" in link]
    assert re.search(rb'<base href="\./">', page)
    for path in ("api/v1/workers", "api/v1/panels", "healthz", "readyz", "metrics",
                 "static/dashboard.js", "static/dashboard.css"):
        assert request(url, path)[0] == 200, path
    assert request(root, "api/v1/workers")[0] == 404

"""``sched``'s fast path (``dsched.cli.quick``) and its click command read a command line the
same way: each argument list here is run through both, with the stand-in client of
test_sched_cli.py, and must make the same calls with the same config and print the same; what
the fast path does not take (help, other commands, bad values, --wait, ...) it hands to click
untouched, having connected to nothing."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from dsched.cli import quick, sched
from dsched.cli.options import parse
from test_sched_cli import StandIn, view

pytestmark = pytest.mark.usefixtures("home")

#: Command lines the fast path takes.
TAKEN = [
    ["submit", "--", "true"],
    ["submit", "true"],
    ["submit", "echo", "--name", "x"],
    ["-s", "h:1", "submit", "--hold", "--name", "sweep", "--", "python", "t.py", "--lr", "0.1"],
    ["-sh:2", "--token-file", "/tmp/t", "submit", "--name=a b", "--priority", "-5", "x"],
    ["--scheduler=h:3", "submit", "--retries", "3", "--time", "15m", "--cwd", "/w", "x"],
    ["submit", "--resources", "GPU=1 MEMORY=8e9", "--env", "A=1", "--env", "B=", "--", "x"],
    ["submit", "--after-ok", "3,4", "--after-any", "5", "--after-ok", "6", "--requeue", "x"],
    ["submit", "--after-ok", "12_3,4", "x"],
    ["submit", "--array", "0-9999", "--", "echo", "{}"],
    ["submit", "--array", "0-99%8", "--array-limit", "4", "echo", "{}"],
    ["submit", "--json", "--name", "--hold", "x"],
    ["submit", "--priority", "9223372036854775807", "--", "-"],
    ["-s", "h:1", "-s", "h:9", "submit", "--name", "a", "--name", "b", "x"],
    ["status"],
    ["status", "3", "--json", "4"],
    ["status", "--state", "held", "--state", "queued", "--expand"],
    ["status", "12_3", "--", "5"],
    ["--config", "/nonexistent.toml", "status"],
]

#: Command lines the fast path leaves to click.
LEFT = [
    [], ["--help"], ["-h"], ["submit"], ["submit", "--"], ["submit", "--help"],
    ["submit", "--wait", "x"], ["submit", "--bogus", "x"], ["submit", "-x", "x"],
    ["submit", "--hold=1", "x"], ["submit", "--priority", "x", "y"],
    ["submit", "--priority", "+5", "x"], ["submit", "--retries", "-1", "x"],
    ["submit", "--priority", "9223372036854775808", "x"], ["submit", "--time", "0", "x"],
    ["submit", "--time", "soon", "x"], ["submit", "--env", "NOVALUE", "x"],
    ["submit", "--resources", "GPU=-1", "x"], ["submit", "--after-ok", "0", "x"],
    ["submit", "--after-ok", "a,b", "x"], ["submit", "--array", "9-0", "x"],
    ["submit", "--array-file", "f", "x"], ["submit", "--array-limit", "2", "x"],
    ["submit", "--name"], ["status", "--state", "bogus"], ["status", "0"],
    ["status", "1__2"], ["status", "-1"], ["status", "--help"], ["status", "--json=1"],
    ["workers"], ["cancel", "3"], ["logs", "3"], ["wait", "3"], ["run-local", "f"],
    ["--", "status"], ["-s"], ["--version", "-s"], ["stat"], ["Status"],
]


def run_both(monkeypatch, argv: list[str], *views) -> tuple:
    """(calls, configs, output, exit status) of the click command, then of the fast path."""
    outcomes = []
    for path in ("click", "fast"):
        stand_in, configs = StandIn(*views), []

        def connect(cfg, stand_in=stand_in, configs=configs):
            configs.append(cfg)
            return stand_in

        monkeypatch.setattr(sched, "connect", connect)
        monkeypatch.setattr(quick, "connect", connect)
        if path == "click":
            result = CliRunner().invoke(sched.main, argv)
            output, status = result.output, result.exit_code
        else:
            lines: list[str] = []
            monkeypatch.setattr(quick, "_echo",
                                lambda text, err=False: lines.append(f"{text}\n"))
            status, output = quick.run(argv), "".join(lines)
        outcomes.append((stand_in.calls, configs, output, status))
    return tuple(outcomes)


@pytest.mark.parametrize("argv", TAKEN, ids=" ".join)
def test_the_fast_path_makes_the_calls_click_makes(monkeypatch, argv):
    assert parse(argv) is not None
    jobs = [view(3), view(4), view(5), view(7), view(16)]
    (calls, configs, output, status), fast = run_both(monkeypatch, argv, *jobs)
    if "/nonexistent.toml" in argv:  # a config file that is not there: both hand it to click
        assert fast[3] is None and status == 2
        return
    assert fast[3] == status, (fast, output)
    assert fast[0] == calls
    assert fast[1] == configs
    assert fast[2] == output or "SUBMITTED" in output  # a table shows the clock's time


@pytest.mark.parametrize("argv", LEFT, ids=" ".join)
def test_anything_else_is_left_to_click_untouched(monkeypatch, argv):
    _, (calls, configs, output, status) = run_both(monkeypatch, argv)
    assert (calls, configs, output, status) == ([], [], "", None)


def test_version():
    assert parse(["--version"]).command == "version"
    assert parse(["-s", "h:1", "--version", "status", "--bogus"]).command == "version"
    assert CliRunner().invoke(sched.main, ["-s", "h:1", "--version", "status"]).exit_code == 0


def test_a_job_whose_submission_failed_after_it_left_is_not_handed_to_click(monkeypatch):
    class Lost(StandIn):
        submitted = False

        def submit_command(self, command, **options):
            self.submitted = True
            raise OSError("connection reset")

    lines: list[str] = []
    monkeypatch.setattr(quick, "connect", lambda cfg: Lost())
    monkeypatch.setattr(quick, "_echo", lambda text, err=False: lines.append(text))
    assert quick.run(["submit", "true"]) == 1
    assert lines == ["sched: error: connection reset"]

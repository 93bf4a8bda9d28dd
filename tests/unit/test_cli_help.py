"""The click commands: every --help, and options turned into a checked config (exit 2 if bad).

Tests that look at the config built replace the library function a command calls with a
recorder (``sched``'s own commands are in test_sched_cli.py). HOME, XDG and /etc/sched are
moved under tmp_path and SCHED_* variables removed.
"""

from __future__ import annotations


import pytest
from click.testing import CliRunner

from dsched.cli import sched, scheduler, worker


# Every test here runs with no SCHED_* variables and a fresh home (the ``home`` fixture).
pytestmark = pytest.mark.usefixtures("home")


@pytest.fixture
def bad_config(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[scheduler]\nprot = 1\n")
    return path


def run(command, *args, env=None):
    return CliRunner().invoke(command, list(args), env=env)


def recorded(monkeypatch, module, name):
    """Replace module.name (a placeholder library function) by one that records its arguments."""
    calls = []
    monkeypatch.setattr(module, name, lambda *args: calls.append(args) or 0)
    return calls


HELP_CASES = [
    (scheduler.main, [], ["--host", "--port", "--dashboard-port", "--dashboard-host",
                          "--dashboard-prefix", "--no-dashboard", "--print-dashboard-token",
                          "--token-file", "--tls-cert",
                          "--tls-key", "--tls-ca", "--state-dir", "--config", "--log-level"]),
    (worker.main, [], ["SCHEDULER_ADDRESS", "--resources", "--nthreads", "--nworkers",
                       "--no-nanny", "--name",
                       "--gpus", "--memory-limit", "--local-directory", "--token-file",
                       "--tls-cert", "--tls-key", "--tls-ca", "--config", "--log-level"]),
    (sched.main, [], ["submit", "status", "workers", "cancel", "logs", "wait", "release",
                      "run-local", "--scheduler"]),
    (sched.main, ["submit"], ["--resources", "--name", "--priority", "--retries", "--after-ok",
                              "--after-any", "--time", "--hold", "--env", "--cwd", "--requeue",
                              "--wait", "--json", "COMMAND"]),
    (sched.main, ["status"], ["[JOB]...", "--json", "--state"]),
    (sched.main, ["workers"], ["workers [OPTIONS]", "--json"]),
    (sched.main, ["cancel"], ["JOB..."]),
    (sched.main, ["release"], ["JOB..."]),
    (sched.main, ["logs"], ["--follow", "JOB"]),
    (sched.main, ["wait"], ["--timeout", "JOB..."]),
    (sched.main, ["run-local"], ["--resources", "--nworkers", "JOBFILE"]),
]


@pytest.mark.parametrize("command, words, expected", HELP_CASES)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help(command, words, expected, flag):
    result = run(command, *words, flag)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Usage:")
    for text in expected:
        assert text in result.output


def test_every_sched_subcommand_has_a_one_line_help():
    result = run(sched.main, "--help")
    for name in ("submit", "status", "workers", "cancel", "logs", "wait", "release",
                 "run-local"):
        line = next(line for line in result.output.splitlines() if line.strip().startswith(name))
        assert not line.rstrip().endswith("..."), line  # short enough to show whole


def test_subcommand_help_works_with_a_broken_config(bad_config):
    result = run(sched.main, "submit", "--help", env={"SCHED_CONFIG": str(bad_config)})
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("spec, part", [("foo", "'foo'"), ("GPU=x", "'GPU=x'"),
                                        ("GPU=-1", "'GPU=-1'")])
def test_worker_invalid_resources_exit_2_naming_the_bad_part(spec, part):
    result = run(worker.main, "--resources", spec, "127.0.0.1:8786")
    assert result.exit_code == 2
    assert part in result.output and "NAME=VALUE" in result.output
    assert "Invalid value for '--resources'" in result.output


def test_submit_invalid_resources_exit_2():
    result = run(sched.main, "submit", "--resources", "foo", "--", "true")
    assert result.exit_code == 2
    assert "'foo'" in result.output and "NAME=VALUE" in result.output


@pytest.mark.parametrize("command, args", [
    (scheduler.main, []), (worker.main, ["127.0.0.1:8786"]), (sched.main, ["workers"])])
def test_invalid_config_file_exits_2_naming_file_and_key(command, args, bad_config):
    result = run(command, "--config", str(bad_config), *args)
    assert result.exit_code == 2, result.output
    error = result.output.strip().splitlines()[-1]
    assert error.startswith("Error: config file ") and str(bad_config) in error
    assert "unknown key 'scheduler.prot'" in error


def test_invalid_config_from_sched_config_and_environment_exit_2(bad_config):
    result = run(scheduler.main, env={"SCHED_CONFIG": str(bad_config)})
    assert result.exit_code == 2 and "scheduler.prot" in result.output
    result = run(scheduler.main, env={"SCHED_SCHEDULER__PORT": "abc"})
    assert result.exit_code == 2
    assert "SCHED_SCHEDULER__PORT: scheduler.port must be an integer" in result.output


def test_missing_config_file_exits_2(tmp_path):
    result = run(scheduler.main, "--config", str(tmp_path / "nope.toml"))
    assert result.exit_code == 2 and "nope.toml does not exist" in result.output


def test_worker_options_reach_the_config_over_environment(monkeypatch, tmp_path):
    calls = recorded(monkeypatch, worker, "run_worker")
    result = run(worker.main, "tcp://h:8786", "--resources", "GPU=2 MEMORY=100e9",
                 "--nthreads", "4", "--memory-limit", "none", "--gpus", "0,1",
                 "--tls-cert", "c.pem", "--tls-key", "k.pem", "--log-level", "DEBUG",
                 env={"SCHED_WORKER__NTHREADS": "8", "SCHED_WORKER__RESOURCES__X": "1"})
    assert result.exit_code == 0, result.output
    [(cfg,)] = calls
    settings = cfg["worker"]
    assert settings["scheduler_address"] == "tcp://h:8786"
    assert settings["resources"] == {"GPU": 2, "MEMORY": 100_000_000_000}  # replaced, not merged
    assert settings["nthreads"] == 4
    assert settings["memory_limit"] is None
    assert settings["gpus"] == [0, 1]
    assert settings["tls"] == {"cert": "c.pem", "key": "k.pem", "ca": None}
    assert settings["log_level"] == "debug"


def test_worker_address_may_come_from_the_config(monkeypatch):
    calls = recorded(monkeypatch, worker, "run_worker")
    result = run(worker.main, env={"SCHED_WORKER__SCHEDULER_ADDRESS": "h:1"})
    assert result.exit_code == 0 and calls[0][0]["worker"]["scheduler_address"] == "h:1"
    result = run(worker.main, env={"SCHED_WORKER__SCHEDULER_ADDRESS": None})
    assert result.exit_code == 2 and "missing SCHEDULER_ADDRESS" in result.output


def test_worker_runs_under_a_nanny_unless_told_otherwise(monkeypatch):
    calls = recorded(monkeypatch, worker, "run_worker")
    off = {"SCHED_WORKER__NANNY": "false"}
    for args, env in (([], None), (["--no-nanny"], None), ([], off), (["--nanny"], off)):
        assert run(worker.main, "h:1", *args, env=env).exit_code == 0
    assert [cfg["worker"]["nanny"] for (cfg,) in calls] == [True, False, False, True]


def test_worker_bad_option_value_exit_2():
    result = run(worker.main, "h:1", "--memory-limit", "lots")
    assert result.exit_code == 2
    assert "Invalid value for '--memory-limit'" in result.output


def test_scheduler_options_reach_the_config(monkeypatch, tmp_path):
    calls = recorded(monkeypatch, scheduler, "run_scheduler")
    result = run(scheduler.main, "--port", "9000", "--state-dir", str(tmp_path / "state"),
                 env={"SCHED_SCHEDULER__PORT": "1"})
    assert result.exit_code == 0, result.output
    [(cfg,)] = calls
    assert cfg["scheduler"]["port"] == 9000
    assert cfg["scheduler"]["token_file"] == str(tmp_path / "state" / "token")


def test_dashboard_options_reach_the_config(monkeypatch):
    calls = recorded(monkeypatch, scheduler, "run_scheduler")
    result = run(scheduler.main, "--dashboard-port", "0", "--dashboard-host", "0.0.0.0",
                 "--dashboard-prefix", "/sched/")
    assert result.exit_code == 0, result.output
    result = run(scheduler.main, "--no-dashboard")
    assert result.exit_code == 0, result.output
    [(on,), (off,)] = calls
    assert (on["scheduler"]["dashboard_port"], on["scheduler"]["dashboard_host"],
            on["scheduler"]["dashboard_prefix"]) == (0, "0.0.0.0", "/sched")
    assert off["scheduler"]["dashboard_port"] is None
    assert off["scheduler"]["dashboard_host"] == "127.0.0.1"


def test_dashboard_port_none_turns_the_dashboard_off_as_its_help_says(monkeypatch):
    calls = recorded(monkeypatch, scheduler, "run_scheduler")
    assert "none to turn them off" in " ".join(run(scheduler.main, "--help").output.split())
    for args in (["--dashboard-port", "none"], ["--dashboard-port", "none", "--no-dashboard"]):
        result = run(scheduler.main, *args, env={"SCHED_SCHEDULER__DASHBOARD_PORT": "9999"})
        assert result.exit_code == 0, result.output
    assert [cfg["scheduler"]["dashboard_port"] for (cfg,) in calls] == [None, None]
    result = run(scheduler.main, "--dashboard-port", "65536")
    assert result.exit_code == 2
    assert "must be an integer from 0 to 65535, or 'none', got 65536" in result.output


def test_nthreads_none_means_the_cpus_this_process_may_use_as_its_help_says(monkeypatch):
    calls = recorded(monkeypatch, worker, "run_worker")
    assert "none: the CPUs this process may use" in " ".join(
        run(worker.main, "--help").output.split())
    result = run(worker.main, "h:1", "--nthreads", "none",
                 env={"SCHED_WORKER__NTHREADS": "8"})
    assert result.exit_code == 0, result.output
    assert calls[0][0]["worker"]["nthreads"] is None  # the worker counts its CPUs
    result = run(worker.main, "h:1", "--nthreads", "0")
    assert result.exit_code == 2 and "must be an integer >= 1, or 'none', got 0" in result.output


def test_bad_dashboard_options_exit_2():
    result = run(scheduler.main, "--dashboard-prefix", "/a b")
    assert result.exit_code == 2 and "a URL path such as '/sched'" in result.output
    result = run(scheduler.main, "--no-dashboard", "--dashboard-port", "1")
    assert result.exit_code == 2 and "contradict" in result.output


def test_print_dashboard_token_prints_the_token_of_the_cluster_token(monkeypatch):
    from dsched.scheduler.http import dashboard_token

    result = run(scheduler.main, "--print-dashboard-token", env={"SCHED_TOKEN": "cluster"})
    assert result.exit_code == 0, result.output
    assert result.output == dashboard_token("cluster") + "\n"

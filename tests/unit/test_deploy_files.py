"""The files in deploy/ agree with the code: the example config and environment files load as
the daemons would load them, the units' timeouts cover the drains they wait for, and what the
units promise (exit statuses, ordering, the state directory) is what the daemons do.
systemd's own checks of the units are in tests/integration/test_systemd.py."""

import dataclasses
import re
import socket
from pathlib import Path

import psutil

from dsched import config
from dsched.comm.addresses import reachable_host
from dsched.daemon import EXIT_CONFIG
from dsched.settings import CommConfig, WorkerConfig

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
ENV_FILES = sorted((DEPLOY / "systemd").glob("*.env"))
#: Seconds between a job's SIGTERM and its SIGKILL: ``worker.job_kill_grace`` where the
#: setting exists, else the default announced for it.
JOB_KILL_GRACE = next((f.default for f in dataclasses.fields(WorkerConfig)
                       if f.name == "job_kill_grace"), 10.0)
#: The seconds beyond worker.drain_timeout that the nanny gives its processes to stop.
NANNY_MARGIN = 5
#: The exit status of a daemon given a setting that cannot work.
USAGE = 2


def unit(name: str) -> dict[str, list[str]]:
    """A unit file's settings, ``Section.Key`` -> values in order (comments left out)."""
    settings: dict[str, list[str]] = {}
    section = ""
    for line in (DEPLOY / "systemd" / name).read_text().splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif line and not line.startswith(("#", ";")):
            key, value = line.split("=", 1)
            settings.setdefault(f"{section}.{key}", []).append(value)
    return settings


def environment_file(path: Path) -> dict[str, str]:
    pairs = [line.split("=", 1) for line in path.read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    return {key: value for key, value in pairs}


def seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(s|min)?", value)
    assert match, f"{value!r}: write plain seconds or minutes"
    return int(match.group(1)) * (60 if match.group(2) == "min" else 1)


def deployed_config(env_file: Path | None = None) -> dict:
    env = environment_file(env_file) if env_file else {}
    return config.load(DEPLOY / "config.toml", env={"HOME": "/nonexistent", **env})


def test_the_example_config_and_environment_files_load_without_error():
    assert deployed_config()["scheduler"]["port"] == 8786
    assert len(ENV_FILES) == 2
    for path in ENV_FILES:
        assert deployed_config(path)["worker"]["scheduler_address"].endswith(":8786")


def test_the_environment_files_give_the_seed_cluster_resources():
    resources = {path.name: deployed_config(path)["worker"]["resources"] for path in ENV_FILES}
    assert resources == {"worker-gpu.env": {"GPU": 2}, "worker-mem.env": {"MEMORY": 100e9}}


def test_the_worker_unit_waits_longer_than_a_drain_and_a_job_kill_grace():
    worst = max(deployed_config(path)["worker"]["drain_timeout"] for path in ENV_FILES)
    (stop,) = unit("sched-worker@.service")["Service.TimeoutStopSec"]
    assert seconds(stop) > worst + JOB_KILL_GRACE + NANNY_MARGIN


def test_the_scheduler_unit_waits_longer_than_a_drain():
    cfg = deployed_config()
    (stop,) = unit("sched-scheduler.service")["Service.TimeoutStopSec"]
    assert seconds(stop) > cfg["scheduler"]["drain_timeout"] + CommConfig().close_timeout


def test_a_refused_or_misconfigured_daemon_is_not_restarted():
    for name in ("sched-worker@.service", "sched-scheduler.service"):
        settings = unit(name)
        assert settings["Service.Restart"] == ["on-failure"]
        assert settings["Service.RestartPreventExitStatus"] == [f"{USAGE} {EXIT_CONFIG}"]


def test_workers_start_after_the_scheduler_but_do_not_need_it():
    settings = unit("sched-worker@.service")
    assert "sched-scheduler.service" in settings["Unit.After"][0].split()
    assert "sched-scheduler.service" in settings["Unit.Wants"][0].split()
    assert not {"Unit.Requires", "Unit.BindsTo", "Unit.Requisite"} & settings.keys()


def test_the_worker_unit_runs_the_nanny_as_a_real_user_with_its_instance_settings():
    settings = unit("sched-worker@.service")
    assert settings["Service.Type"] == ["notify"]
    assert settings["Service.KillMode"] == ["mixed"]
    assert settings["Service.User"] == ["sched-worker"] and "Service.DynamicUser" not in settings
    assert settings["Service.EnvironmentFile"] == ["/etc/sched/worker-%i.env"]
    assert settings["Service.DevicePolicy"] == ["closed"]
    assert "--no-nanny" not in settings["Service.ExecStart"][0]


def test_the_scheduler_keeps_its_token_in_its_state_directory():
    settings = unit("sched-scheduler.service")
    assert settings["Service.StateDirectory"] == ["sched"]
    assert "--state-dir ${STATE_DIRECTORY}" in settings["Service.ExecStart"][0]
    assert settings["Service.Type"] == ["notify"] and settings["Service.WatchdogSec"]
    assert settings["Service.DynamicUser"] == ["yes"]


def test_every_unit_belongs_to_sched_target():
    for name in ("sched-worker@.service", "sched-scheduler.service"):
        settings = unit(name)
        assert settings["Unit.PartOf"] == ["sched.target"]
        assert settings["Install.WantedBy"] == ["sched.target"]


def test_the_readme_links_the_deployment_guide():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Deployment\n", 1)[1].split("\n## ", 1)[0]
    assert "(deploy/README.md)" in section and (DEPLOY / "README.md").is_file()


def test_a_scheduler_whose_sandbox_hides_the_interfaces_names_itself_by_host_name(monkeypatch):
    # The unit allows no netlink socket and no /proc/net, which psutil reads them from.
    def hidden():
        raise OSError(97, "Address family not supported by protocol")

    monkeypatch.setattr(psutil, "net_if_addrs", hidden)
    assert reachable_host("0.0.0.0") == socket.gethostname()
    assert reachable_host("10.0.0.5") == "10.0.0.5"

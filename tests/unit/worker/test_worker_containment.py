"""How a worker chooses its containment mode and says it: a mode asked for by name that this
machine cannot give stops the worker with the reason, ``auto`` falls back to subreaper; the
setting is checked; the mode travels in Register (left off the wire when unknown, so workers
and schedulers of either age understand each other) and ``sched workers`` shows it. (That
the walk of /proc finds a process's descendants wherever their sessions are needs processes:
tests/integration/test_containment.py.)"""

from __future__ import annotations

import sys

import pytest

from dsched import config
from dsched.cli.jobtext import worker_table
from dsched.config_kinds import Bad
from dsched.protocol import ops
from dsched.worker import containment

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux")


def no_cgroup():
    raise OSError("this process is in no cgroup v2 hierarchy")


@linux_only
def test_a_cgroup_asked_for_by_name_that_cannot_be_made_is_an_error_and_auto_falls_back(
        monkeypatch, tmp_path):
    monkeypatch.setattr(containment, "own_cgroup", no_cgroup)
    with pytest.raises(OSError, match="worker.containment is cgroup, but this process is in no "
                                      "cgroup v2 hierarchy"):
        containment.choose("cgroup", "w1", str(tmp_path))
    chosen = containment.choose("auto", "w1", str(tmp_path))
    assert chosen == containment.Containment(containment.SUBREAPER)
    assert chosen.cgroup_for("job-1.1") == "" and chosen.describe().startswith("subreaper (")
    assert containment.choose("subreaper", "w1", str(tmp_path)).mode == containment.SUBREAPER


def test_cgroups_are_named_after_the_worker_and_its_job_directory():
    one = containment.Containment(containment.CGROUP, "/sys/fs/cgroup/x", "dsched-w1-0a1b2c3d-")
    assert one.cgroup_for("job-12.3") == "/sys/fs/cgroup/x/dsched-w1-0a1b2c3d-job-12.3"
    assert one.describe().startswith("cgroup (") and "/sys/fs/cgroup/x" in one.describe()


def test_the_setting_takes_auto_cgroup_or_subreaper_only():
    assert config.check_value("worker.containment", " Cgroup ") == "cgroup"
    assert config.check_value("worker.containment", "subreaper") == "subreaper"
    with pytest.raises((Bad, config.ConfigError), match="one of auto, cgroup, subreaper"):
        config.check_value("worker.containment", "docker")
    with pytest.raises(ValueError, match="must be one of"):
        containment.choose("docker", "w1", "/tmp")


def test_register_carries_the_mode_and_leaves_it_off_when_unknown():
    register = ops.Register(name="w1", address="a:1", nthreads=1, job_lease=60.0,
                            containment="cgroup")
    assert ops.decode(register.to_wire()).containment == "cgroup"
    older = ops.Register(name="w1", address="a:1", nthreads=1, job_lease=60.0).to_wire()
    assert "containment" not in older and ops.decode(older).containment == ""


def test_sched_workers_shows_the_mode_before_the_jobs():
    header, row = worker_table([{"name": "w1", "address": "a:1", "nthreads": 2, "busy": 1,
                                 "draining": False, "resources": {}, "gpus": [],
                                 "containment": "subreaper", "jobs": [7]}])
    assert header.split()[-2:] == ["CONTAINMENT", "JOBS"]
    assert row.split()[-2:] == ["subreaper", "7"]

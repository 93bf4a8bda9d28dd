"""The policies the cores are built with: each field a setting, its default the setting's, so
that a core built without one decides as the daemon with no configuration does."""

from __future__ import annotations

import dataclasses

import pytest

from dsched.policy import SchedulerPolicy, WorkerPolicy
from dsched.scheduler import SchedulerState, actions as act, events as ev
from dsched.scheduler.server import Scheduler
from dsched.settings import CommConfig, SchedulerConfig, WorkerConfig, default_of
from dsched.worker import WorkerState

POLICIES = [(SchedulerPolicy, SchedulerConfig, "scheduler"), (WorkerPolicy, WorkerConfig, "worker")]


@pytest.mark.parametrize("policy, config, section", POLICIES)
def test_each_field_is_a_setting_of_its_section_with_its_default(policy, config, section):
    for f in dataclasses.fields(policy):
        assert f.metadata["setting"] == f"{section}.{f.name}"
        assert f.default == default_of(f.metadata["setting"]) == getattr(config(), f.name)


@pytest.mark.parametrize("policy, config, section", POLICIES)
def test_a_daemon_builds_its_policy_from_its_config(policy, config, section):
    changed = {f.name: getattr(config(), f.name) or 1 for f in dataclasses.fields(policy)}
    changed = {name: value * 2 if not isinstance(value, bool) else value
               for name, value in changed.items()}
    assert dataclasses.asdict(policy.from_config(config(**changed))) == changed


def test_the_cores_decide_by_the_daemons_defaults_unless_told_otherwise():
    assert SchedulerState().policy == SchedulerPolicy.from_config(SchedulerConfig())
    assert SchedulerState().placer.fit.prefetch == SchedulerConfig().prefetch
    assert WorkerState(1).policy == WorkerPolicy.from_config(WorkerConfig())
    assert WorkerState(1).attempts.job_lease == WorkerConfig().job_lease


@pytest.mark.parametrize("prefetch, sent", [(None, 3), (0, 1)])
def test_a_test_that_needs_another_policy_says_so(prefetch, sent):
    state = SchedulerState() if prefetch is None else SchedulerState(SchedulerPolicy(prefetch=0))
    state.handle(ev.WorkerJoined(address="tcp://w", name="w", nthreads=1, now=0.0))
    actions = state.handle(ev.TasksSubmitted(
        client="c", tasks=tuple(ev.TaskSpec(key=f"t{i}") for i in range(5)), now=0.0))
    assert sum(isinstance(a, act.SendExecute) for a in actions) == sent


def test_the_scheduler_daemon_runs_its_core_by_its_config():
    config = SchedulerConfig(prefetch=5, heartbeat_timeout=9.0, max_rejections=1)
    scheduler = Scheduler(config, CommConfig(), token="t")
    assert scheduler.state.policy == SchedulerPolicy(prefetch=5, heartbeat_timeout=9.0,
                                                     max_rejections=1)


@pytest.mark.parametrize("change, words", [
    ({"prefetch": -1}, "SchedulerPolicy.prefetch must be an integer >= 0, got -1"),
    ({"heartbeat_timeout": 0}, "heartbeat_timeout must be a positive number of seconds"),
    ({"no_worker_timeout": -5.0}, "no_worker_timeout must be a positive number"),
])
def test_a_policy_is_checked_by_the_kinds_of_its_settings(change, words):
    with pytest.raises(ValueError, match=words):
        SchedulerPolicy(**change)
    with pytest.raises(ValueError, match="WorkerPolicy.job_lease must be"):
        WorkerPolicy(job_lease="soon")

"""``gpu_memory_retry=True`` on ``submit``/``map`` or in an ``annotate`` block asks that a task
that runs out of GPU memory be run once more with more of it: it travels as a task field, off
(and left off the wire) by default, and the scheduler's task keeps it (no network)."""

import pytest

from dsched import annotate
from dsched.client.submission import task_options
from dsched.protocol import ops
from dsched.resources import Resources
from dsched.scheduler import SchedulerState
from dsched.scheduler.optables import CLIENT_OPS


def test_off_by_default_and_left_off_the_wire():
    assert "gpu_memory_retry" not in task_options(resources="GPU_MEMORY=18G")
    assert "gpu_memory_retry" not in task_options(gpu_memory_retry=False)


def test_asked_for_explicitly_or_by_an_annotation_and_the_explicit_value_wins():
    assert task_options(gpu_memory_retry=True)["gpu_memory_retry"] is True
    with annotate(gpu_memory_retry=True, retries=1):
        assert task_options()["gpu_memory_retry"] is True
        assert "gpu_memory_retry" not in task_options(gpu_memory_retry=False)


def test_anything_but_true_or_false_is_refused_before_anything_is_sent():
    with pytest.raises(TypeError, match="gpu_memory_retry must be True or False"):
        task_options(gpu_memory_retry="yes")


def test_the_scheduler_task_keeps_what_the_client_asked():
    task = {"key": "train-1", "spec": (b"fn", b"args"),
            "resources": Resources.parse("GPU_MEMORY=18G"), **task_options(gpu_memory_retry=True)}
    plain = {"key": "train-2", "spec": (b"fn", b"args")}
    op = ops.Submit.from_wire(ops.Submit(id=1, tasks=(task, plain)).to_wire())
    state = SchedulerState()
    state.handle(CLIENT_OPS[ops.Submit](op, "c", 0.0))
    assert state.tasks["train-1"].oom_retry is True
    assert state.tasks["train-2"].oom_retry is False


def test_a_bad_value_on_the_wire_is_refused():
    with pytest.raises(ops.BadOp, match="gpu_memory_retry"):
        ops.Submit.from_wire({"id": 1, "tasks": [{"key": "k", "spec": [b"f", b"a"],
                                                 "gpu_memory_retry": "yes"}]})

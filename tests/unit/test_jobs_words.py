"""The words of shell-command jobs (``dsched.jobs``): specs, durations, attempt keys."""

import pytest

from dsched.jobs import JobSpec, JobSpecError, job_key, parse_duration, parse_job_key
from dsched.protocol import ops
from dsched.resources import ResourceSpecError, Resources, named_devices


def test_a_spec_goes_over_the_wire_and_back():
    spec = JobSpec(submission="s-1", command=("python", "train.py", "--lr", "0.1"),
                   resources=Resources.parse("gpu0=1 MEMORY=4e9"), name="train", priority=3,
                   retries=2, after_ok=(4, 5), after_any=(6,), time_limit=90.0, hold=True,
                   env={"SEED": "1"}, cwd="/data", requeue=True)
    assert JobSpec.from_wire(spec.to_wire()) == spec


@pytest.mark.parametrize("wire, words", [
    ({"submission": "s", "command": []}, "needs a command"),
    ({"submission": "s", "command": ["true", 3]}, "needs a command"),
    ({"submission": "s", "command": ["", "x"]}, "not an empty word"),
    ({"submission": "s", "command": ["true"], "retries": -1}, "retries must be from 0 to"),
    ({"submission": "s", "command": ["true"], "time_limit": 0}, "must be positive"),
    ({"submission": "s", "command": ["true"], "env": {"A": 1}}, "maps names to strings"),
    ({"submission": "s", "command": ["true"], "priority": "high"}, "malformed job"),
    ({"command": ["true"]}, "malformed job"),
    ({"submission": "s", "command": ["echo", "a\0b"]}, "no NUL character"),
    ({"submission": "s", "command": ["true"], "env": {"A": "x\0"}}, "no NUL character"),
    ({"submission": "s", "command": ["true"], "cwd": "/tmp\0"}, "no NUL character"),
    ({"submission": "s", "command": ["true"], "cwd": 7}, "is a path"),
    ({"submission": "s", "command": ["true"], "env": {"A=B": "1"}}, "holds no '='"),
    ({"submission": "s", "command": ["true"], "array": {"lines": ["a\0"]}}, "no NUL"),
])
def test_a_malformed_spec_is_refused_with_the_reason(wire, words):
    with pytest.raises(JobSpecError, match=words):
        JobSpec.from_wire(wire)


def test_an_invalid_resource_spec_is_the_resource_error():
    with pytest.raises(ResourceSpecError):
        JobSpec.from_wire({"submission": "s", "command": ["true"], "resources": {"GPU": -1}})


@pytest.mark.parametrize("text, seconds", [
    ("90", 90), ("90s", 90), ("1.5", 1.5), ("15m", 900), ("2h", 7200), ("1d", 86400),
    ("1:30", 90), ("2:00:00", 7200), ("1-12:00:00", 129600),
])
def test_durations_are_read_as_people_write_them(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "-5", "1:2:3:4", "5 minutes"])
def test_a_bad_duration_says_how_to_write_one(text):
    with pytest.raises(JobSpecError, match="invalid duration"):
        parse_duration(text)


def test_attempt_keys_name_the_job_and_the_attempt():
    assert job_key(12, 3) == "job-12.3"
    assert parse_job_key("job-12.3") == (12, 3)
    for other in ("job-12", "job-x.1", "inc-1", "job-1.2.3", "job-.1"):
        assert parse_job_key(other) is None


def test_gpu_n_stands_for_device_n():
    assert named_devices(Resources.parse("gpu1=1 gpu0=1 MEMORY=2")) == (0, 1)
    assert named_devices(Resources.parse("GPU=2 gpux=1 gpu01x=1")) == ()


def test_a_worker_always_tells_its_lease():
    wire = ops.Register(name="w", address="a:1", nthreads=1, job_lease=600.0).to_wire()
    assert wire["job_lease"] == 600.0
    with pytest.raises(ops.BadOp, match="job_lease"):
        ops.decode({key: value for key, value in wire.items() if key != "job_lease"})

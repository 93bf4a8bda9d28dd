"""The job queue of a real scheduler daemon, before any worker runs a job: submissions are
acknowledged once journaled, read back with their reasons, cancelled, held and released,
and survive a kill -9 of the scheduler (the same submission then names the same job)."""

from __future__ import annotations

import signal

import pytest

from dsched import SchedError
from dsched.client.jobs import job_spec
from dsched.resources import ResourceSpecError


def test_jobs_are_acknowledged_queued_with_a_reason_and_survive_a_scheduler_kill(daemons):
    daemons.scheduler()
    client = daemons.client()
    future = client.submit_command(["echo", "hi"], resources="GPU=1", name="first")
    job = future.job_id(timeout=10)
    held = client.submit_command("sleep 1", hold=True).job_id(timeout=10)
    view = client.jobs([job])["jobs"][0]
    assert (view["state"], view["reason"], view["name"]) == ("queued", "no_workers", "first")
    assert client.jobs([held])["jobs"][0]["reason"] == "held"
    assert client.jobs(states=["held"])["total"] == 1

    daemons.scheduler_process.send_signal(signal.SIGKILL)
    daemons.scheduler_process.wait()
    daemons.scheduler()
    again = daemons.client()
    found = {v["id"]: v for v in again.jobs()["jobs"]}
    assert found[job]["state"] == "queued" and found[held]["state"] == "held"
    assert again.release_jobs([held, 99]) == {str(held): "released", "99": "unknown job"}
    assert again.cancel_jobs([job]) == {str(job): "cancelled"}
    with pytest.raises(Exception, match="cancelled"):
        again.watch_jobs([job])[0].result(timeout=10)


def test_a_retried_submission_names_the_same_job(daemons):
    daemons.scheduler()
    client = daemons.client()
    spec = job_spec(["true"])
    futures = [client._async._jobs.submit(spec) for _ in range(3)]
    assert len({f.job_id(timeout=10) for f in futures}) == 1
    assert client.jobs()["total"] == 1


def test_a_misspecified_job_is_refused_and_nothing_is_queued(daemons):
    daemons.scheduler()
    client = daemons.client()
    with pytest.raises(ResourceSpecError, match="GPU"):
        client.submit_command(["true"], resources="GPU=1.5")
    with pytest.raises(ResourceSpecError):
        client.submit_command(["true"], resources="GPU=-1")
    with pytest.raises(SchedError, match="unknown job 41"):
        client.submit_command(["true"], after_ok=[41]).job_id(timeout=10)
    assert client.jobs()["total"] == 0

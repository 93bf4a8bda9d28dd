"""The job book in the scheduler core: submitting, queueing, attempts, ends, cancel, hold,
dependencies, and the journal write that comes before every action of a change."""

from __future__ import annotations

import pytest

from dsched.scheduler import actions as act, events as ev
from sched_story import JobStory, job, journaled, started


def test_a_submit_is_journaled_before_it_is_answered_and_a_retry_names_the_same_job():
    s = JobStory()
    actions = s.jobs(job("echo", "hi", submission="abc"), job("true"))
    assert journaled(actions) == [(1, "queued"), (2, "queued")]
    assert s.ids(actions) == [1, 2]
    again = s.jobs(job("echo", "hi", submission="abc"), request=9)
    assert journaled(again) == [] and s.ids(again) == [1]
    assert len(s.state.jobs.jobs) == 2


def test_a_misspecified_request_queues_nothing_and_says_why():
    s = JobStory()
    [reply] = s.jobs(job(resources="GPU=1.5"), job("true"))
    assert isinstance(reply, act.JobsReply) and reply.value is None
    assert "nothing queued" in reply.error and "GPU" in reply.error
    [reply] = s.jobs(job(after_ok=(42,)))
    assert "unknown job 42" in reply.error
    assert s.state.jobs.jobs == {}


def test_an_attempt_is_journaled_assigned_before_its_execute_and_carries_the_command():
    s = JobStory()
    s.worker("w1", resources="foo=7")
    [job_id] = s.ids(s.jobs(job("train", "--lr", "1", resources="foo=5", env={"A": "1"})))
    # The placement happened in the same call: its row says assigned, and comes first.
    assert s.job(job_id).state.value == "assigned"
    s2 = JobStory()
    s2.worker("w1", resources="foo=7")
    actions = s2.jobs(job("train", resources="foo=5"))
    assert journaled(actions) == [(1, "assigned")]
    [execute] = [a for a in actions if isinstance(a, act.SendExecute)]
    assert execute.key == "job-1.1" and execute.job["command"] == ["train"]


def test_two_jobs_needing_foo_5_run_one_after_the_other_on_foo_7_and_together_on_foo_12():
    s = JobStory()
    s.worker("w1", nthreads=4, resources="foo=7")
    actions = s.jobs(job(resources="foo=5"), job(resources="foo=5"))
    assert started(actions) == [("job-1.1", "w1")]
    assert s.view(2)["reason"] == "resources"
    assert "waiting for foo on w1" in s.view(2)["detail"] and "job 1" in s.view(2)["detail"]
    s.start("job-1.1")
    assert started(s.end("job-1.1")) == [("job-2.1", "w1")]
    big = JobStory()
    big.worker("w1", nthreads=4, resources="foo=12")
    assert started(big.jobs(job(resources="foo=5"), job(resources="foo=5"))) == [
        ("job-1.1", "w1"), ("job-2.1", "w1")]


def test_a_job_needing_a_resource_no_worker_has_waits_with_that_reason():
    s = JobStory()
    s.worker("w1", resources="foo=7")
    [job_id] = s.ids(s.jobs(job(resources="bar=1 baz=1")))
    view = s.view(job_id)
    assert view["state"] == "queued" and view["reason"] == "missing_resources"
    assert view["detail"] == "requires resources no worker has: bar, baz"
    one = s.ids(s.jobs(job(resources="foo=1 qux=2")))[0]
    assert s.view(one)["detail"] == "requires resource no worker has: qux"
    too_big = s.ids(s.jobs(job(resources="foo=8")))[0]
    assert s.view(too_big)["reason"] == "too_large"
    lonely = JobStory()
    [job_id] = lonely.ids(lonely.jobs(job(resources="foo=1")))
    assert lonely.view(job_id)["reason"] == "no_workers"
    assert started(lonely.worker("w1", resources="foo=1")) == [("job-1.1", "w1")]


def test_jobs_queued_gpu0_gpu0_both_gpu1_start_the_gpu1_job_beside_the_first():
    s = JobStory()
    s.worker("w", nthreads=4, resources="gpu0=1 gpu1=1")
    actions = s.jobs(job(resources="gpu0=1"), job(resources="gpu0=1"),
                     job(resources="gpu0=1 gpu1=1"), job(resources="gpu1=1"))
    assert started(actions) == [("job-1.1", "w"), ("job-4.1", "w")]
    s.start("job-1.1"), s.start("job-4.1")
    assert started(s.end("job-1.1")) == [("job-2.1", "w")]
    s.start("job-2.1")
    s.end("job-4.1")
    assert started(s.end("job-2.1")) == [("job-3.1", "w")]


def test_a_submission_that_watches_is_told_each_end_without_a_watch_of_its_own():
    s = JobStory()
    s.worker("w1")
    actions = s.jobs(job(), job(hold=True), client="c", watch=True)
    [reply] = [a for a in actions if isinstance(a, act.JobsReply)]
    assert reply.value == [1, 2] and not [a for a in actions if isinstance(a, act.TellJobEnded)]
    s.start("job-1.1")
    [told] = [a for a in s.end("job-1.1") if isinstance(a, act.TellJobEnded)]
    assert told.clients == ("c",) and told.job["id"] == 1
    [told] = [a for a in s.cancel_jobs(2, client="other") if isinstance(a, act.TellJobEnded)]
    assert told.clients == ("c",) and told.job["state"] == "cancelled"
    # one submitted again (its reply lost) that has ended is told at once, after the reply
    actions = s.jobs(s.job(1).spec, client="c", request=5, watch=True)
    kinds = [type(a) for a in actions if isinstance(a, (act.JobsReply, act.TellJobEnded))]
    assert kinds == [act.JobsReply, act.TellJobEnded]


def test_an_attempt_runs_then_its_end_is_journaled_before_it_is_acknowledged_and_told():
    s = JobStory()
    s.worker("w1")
    [job_id] = s.ids(s.jobs(job()))
    s(ev.JobsWatched(client="c", jobs=(job_id,), now=s.now))
    assert journaled(s.start("job-1.1", pid=77)) == [(1, "running")]
    assert s.job(1).pid == 77
    actions = s.end("job-1.1", exit_code=0)
    assert journaled(actions) == [(1, "completed")]
    ack = [a for a in actions if isinstance(a, act.SendAttemptAck)]
    assert ack == [act.SendAttemptAck(worker="tcp://w1", keys=("job-1.1",))]
    [told] = [a for a in actions if isinstance(a, act.TellJobEnded)]
    assert told.clients == ("c",) and told.job["state"] == "completed"
    assert told.job["exit_code"] == 0 and s.state.tasks == {}
    # Watching a job that has ended answers at once.
    [again] = s(ev.JobsWatched(client="d", jobs=(1, 99), now=s.now))[:1]
    assert again.job["state"] == "completed"


def test_a_failed_job_is_retried_as_a_new_attempt_until_its_retries_run_out():
    s = JobStory()
    s.worker("w1")
    s.jobs(job(retries=1))
    s.start("job-1.1")
    assert started(s.end("job-1.1", "failed", exit_code=3)) == [("job-1.2", "w1")]
    assert s.job(1).retries_left == 0
    s.start("job-1.2")
    s.end("job-1.2", "failed", exit_code=3)
    assert s.states() == {1: "failed"} and s.job(1).exit_code == 3


def test_a_retried_job_shows_no_log_until_its_new_attempt_has_one():
    # The view's log is that of its attempt: a client reads it by the attempt's key.
    s = JobStory()
    s.worker("w1")
    s.jobs(job(retries=1))
    s.start("job-1.1")
    s.end("job-1.1", "failed", exit_code=3)
    assert (s.view(1)["attempt"], s.view(1)["log"]) == (2, "")
    s.start("job-1.2")
    assert s.view(1)["log"] == "/jobs/job-1.2.log"


def test_reports_about_an_older_attempt_are_ignored_and_a_running_one_is_stopped():
    s = JobStory()
    s.worker("w1")
    s.jobs(job(retries=1))
    s.start("job-1.1")
    s.end("job-1.1", "failed", exit_code=1)
    s.start("job-1.2")
    assert s.start("job-1.1", worker="w1") == [act.SendStopTask(key="job-1.1", worker="tcp://w1")]
    actions = s.end("job-1.1", "completed", worker="w1")
    assert journaled(actions) == [] and s.states() == {1: "running"}
    assert [a for a in actions if isinstance(a, act.SendAttemptAck)]


def test_timeouts_end_the_job_and_are_not_retried():
    s = JobStory()
    s.worker("w1")
    s.jobs(job(retries=3, time_limit=5.0))
    s.start("job-1.1")
    s.end("job-1.1", "timeout", exit_code=-15)
    assert s.states() == {1: "timeout"}


def test_cancel_ends_a_queued_job_at_once_and_a_running_one_once_its_worker_stopped_it():
    s = JobStory()
    s.worker("w1")
    s.jobs(job(), job())
    s.start("job-1.1")
    actions = s.cancel_jobs(1, 2, 3)
    [reply] = [a for a in actions if isinstance(a, act.JobsReply)]
    assert reply.value == {"1": "cancelling", "2": "cancelled", "3": "unknown job"}
    assert act.SendStopTask(key="job-1.1", worker="tcp://w1") in actions
    assert s.states() == {1: "running", 2: "cancelled"}
    assert started(s.end("job-1.1", "cancelled", worker="w1", exit_code=-15)) == []
    assert s.states() == {1: "cancelled", 2: "cancelled"}
    [reply] = [a for a in s.cancel_jobs(1) if isinstance(a, act.JobsReply)]
    assert reply.value == {"1": "already cancelled"}


def test_a_cancelled_attempt_not_yet_started_is_confirmed_by_a_task_stop():
    s = JobStory()
    s.worker("w1")
    s.jobs(job())
    s.cancel_jobs(1)
    s.confirm("job-1.1", "w1")
    assert s.states() == {1: "cancelled"}
    assert s.state.workers["tcp://w1"].assigned == 0


def test_held_jobs_wait_until_released():
    s = JobStory()
    s.worker("w1")
    actions = s.jobs(job(hold=True))
    assert started(actions) == [] and s.view(1)["reason"] == "held"
    [reply] = [a for a in s.release_jobs(1, 2) if isinstance(a, act.JobsReply)]
    assert reply.value == {"1": "released", "2": "unknown job"}
    assert s.states() == {1: "assigned"}


def test_after_ok_waits_for_success_and_never_runs_after_a_failure():
    s = JobStory()
    s.worker("w1", nthreads=3)
    s.jobs(job(), job())
    s.jobs(job(after_ok=(1,)), job(after_any=(2,)), job(after_ok=(2,)))
    assert s.view(3)["reason"] == "dependency" and "1" in s.view(3)["detail"]
    s.start("job-1.1"), s.start("job-2.1")
    assert started(s.end("job-1.1")) == [("job-3.1", "w1")]
    assert started(s.end("job-2.1", "failed", exit_code=1)) == [("job-4.1", "w1")]
    view = s.view(5)
    assert view["state"] == "queued" and view["reason"] == "dependency_never_satisfied"
    s.cancel_jobs(5)
    assert s.states()[5] == "cancelled"


def test_a_worker_refusing_an_attempt_gets_a_new_attempt_and_repeated_refusals_fail_the_job():
    s = JobStory(max_rejections=1)
    s.worker("w1")
    s.jobs(job())
    actions = s(ev.WorkerTaskRejected(key="job-1.1", worker="tcp://w1", reason="closing", now=s.now))
    assert started(actions) == []  # the next attempt waits out a back-off, as a task does
    assert started(s.at(0.5).tick()) == [("job-1.2", "w1")]
    s(ev.WorkerTaskRejected(key="job-1.2", worker="tcp://w1", reason="closing", now=s.now))
    assert s.states() == {1: "failed"} and "refused it 2 times" in s.job(1).detail


def test_a_python_task_may_not_take_a_job_attempt_key():
    s = JobStory()
    [erred] = s.submit(ev.TaskSpec(key="job-1.1"))
    assert isinstance(erred, act.TellErred) and erred.error == "reserved_key"


def test_jobs_wait_for_a_worker_however_long_no_worker_timeout_is():
    s = JobStory(no_worker_timeout=1.0)
    s.jobs(job(resources="GPU=1"))
    s.at(100).tick()
    assert s.states() == {1: "queued"}


def test_a_task_report_about_a_job_attempt_is_ignored():
    s = JobStory()
    s.worker("w1")
    s.jobs(job())
    s(ev.WorkerTaskFinished(key="job-1.1", worker="tcp://w1", now=s.now))
    assert s.states() == {1: "assigned"} and "job-1.1" in s.state.workers["tcp://w1"].processing


def test_jobs_are_never_sent_ahead_to_a_busy_worker_but_wait_for_a_free_one():
    """Three short jobs behind a long one: with prefetch, they went to the long job's worker
    and waited there while the other worker sat idle."""
    s = JobStory(prefetch=2)
    s.worker("a")
    assert started(s.jobs(job("long"), job("s1"), job("s2"), job("s3"))) == [("job-1.1", "a")]
    assert s.states() == {1: "assigned", 2: "queued", 3: "queued", 4: "queued"}
    assert (s.view(1)["reason"], s.view(1)["detail"]) == ("starting", "starting on a")
    assert s.view(2)["reason"] == "resources" and "a free slot on a" in s.view(2)["detail"]
    assert started(s.worker("b")) == [("job-2.1", "b")]
    s.start("job-2.1")
    assert started(s.end("job-2.1")) == [("job-3.1", "b")]


def test_a_high_priority_job_is_not_overtaken_by_jobs_queued_before_it():
    s = JobStory(prefetch=4)
    s.worker("w")
    s.jobs(job("running"), job("p0"), job("p0"), job("p0"), job("p0"))
    [urgent] = s.ids(s.jobs(job("urgent", priority=100), request=2))
    assert s.states() == {1: "assigned", 2: "queued", 3: "queued", 4: "queued", 5: "queued",
                          urgent: "queued"}  # none of them waits at w, to start before it
    s.start("job-1.1")
    assert started(s.end("job-1.1")) == [(f"job-{urgent}.1", "w")]


def test_a_handler_that_raises_leaves_nothing_for_the_next_event_to_send(monkeypatch):
    s = JobStory()
    schedule = s.state.placer.schedule

    def planted():
        raise RuntimeError("planted")

    monkeypatch.setattr(s.state.placer, "schedule", planted)
    with pytest.raises(RuntimeError, match="planted"):
        s.state.handle(ev.JobsSubmitted(client="c", request=1, jobs=(job(),), at=0.0, now=0.0))
    monkeypatch.setattr(s.state.placer, "schedule", schedule)
    assert s.state.handle(ev.Tick(now=1.0)) == []  # no half-made journal write, no reply

"""Jobs while their worker is away, when it returns, and after the scheduler restarts: the
job book keeps them on their worker until it returns or its lease has passed, reconciles
what the worker reports, and dispatches nothing while it recovers."""

from __future__ import annotations

import pytest

from dsched.protocol import ops
from dsched.scheduler import actions as act, events as ev
from dsched.scheduler.reconcile import Ack, Adopt, Kill, PutBack, Record, Vanished, reconcile
from dsched.scheduler.state import SchedulerState
from sched_story import JobStory, job, journaled, started


def running(key: str, pid: int = 100) -> ops.AttemptStarted:
    return ops.AttemptStarted(key=key, pid=pid, log=f"/jobs/{key}.log", started=5.0)


def ended(key: str, outcome: str = "completed", exit_code: int | None = 0) -> ops.AttemptEnded:
    return ops.AttemptEnded(key=key, outcome=outcome, exit_code=exit_code, started=5.0,
                            ended=9.0)


def story_with_running_job(**job_options) -> JobStory:
    s = JobStory(lease_margin=10.0)
    s.worker("w1", job_lease=100.0)
    s.jobs(job(**job_options))
    s.start("job-1.1")
    return s


def test_a_job_stays_running_while_its_worker_is_away_and_is_adopted_when_it_returns():
    s = story_with_running_job()
    s.worker("w2")
    assert started(s.leave("w1")) == []
    assert s.states() == {1: "running"} and "unreachable" in s.job(1).detail
    s.at(50).worker("w1", attempts=(running("job-1.1"),))
    assert s.states() == {1: "running"} and 1 not in s.state.jobs.limbo
    assert "job-1.1" in s.state.workers["tcp://w1"].processing  # its resources are booked
    s.end("job-1.1")
    assert s.states() == {1: "completed"}


def test_an_attempt_that_ended_while_its_worker_was_away_is_recorded_and_acknowledged():
    s = story_with_running_job()
    s.leave("w1")
    actions = s.worker("w1", attempts=(ended("job-1.1", "failed", 4),))
    assert journaled(actions) == [(1, "failed")]
    assert act.SendAttemptAck(worker="tcp://w1", keys=("job-1.1",)) in actions


def test_a_started_job_whose_worker_does_not_return_is_lost_after_the_lease_and_margin():
    s = story_with_running_job()
    s.leave("w1")
    s.at(109).tick()
    assert s.states() == {1: "running"}
    s.at(111).tick()
    view = s.view(1)
    assert view["state"] == "lost" and view["reason"] == "worker_lost"
    assert "--requeue" in view["detail"]


def test_with_requeue_a_lost_job_runs_again_but_only_after_the_lease_and_margin():
    s = story_with_running_job(requeue=True)
    s.worker("w2")
    s.leave("w1")
    s.at(109).heartbeat("w2")
    assert started(s.tick()) == []
    s.at(111).heartbeat("w2")
    assert started(s.tick()) == [("job-1.2", "w2")]


def test_a_worker_that_returns_without_a_started_job_loses_it_and_one_never_started_is_requeued():
    s = JobStory()
    s.worker("w1", nthreads=2)
    s.jobs(job(), job())
    s.start("job-1.1")  # job 2 was sent but never started
    s.leave("w1")
    actions = s.worker("w1", nthreads=2)
    assert s.states()[1] == "lost" and "came back without it" in s.job(1).detail
    assert "may have started" not in s.job(1).detail
    assert started(actions) == [("job-2.2", "w1")]


def test_a_worker_whose_machine_restarted_loses_even_a_job_it_was_only_sent():
    """Its records were in the page cache: the one of an attempt that started may be gone, so
    an attempt it does not list may have run, and is never run again."""
    s = JobStory()
    s.worker("w1", nthreads=2)
    s.jobs(job(), job())
    s.start("job-1.1")  # job 2 was sent, its start not heard
    s.leave("w1")
    actions = s.worker("w1", nthreads=2, machine_restarted=True)
    assert s.states() == {1: "lost", 2: "lost"} and started(actions) == []
    assert "its machine had restarted" in s.job(2).detail
    # With --requeue, it runs again, as any lost job does.
    s = JobStory()
    s.worker("w1")
    s.jobs(job(requeue=True))
    s.leave("w1")
    assert started(s.worker("w1", machine_restarted=True)) == [("job-1.2", "w1")]


def test_a_job_sent_to_a_worker_that_never_returns_may_have_started_so_it_is_lost():
    s = JobStory(lease_margin=10.0)
    s.worker("w1", job_lease=100.0)
    s.jobs(job())
    s.leave("w1")
    s.at(111).tick()
    assert s.states() == {1: "lost"} and "may have started" in s.job(1).detail


def test_an_attempt_being_started_as_its_worker_returned_gets_its_pid_once_it_has_started():
    s = JobStory(lease_margin=10.0)
    s.worker("w1")
    s.jobs(job())
    s.leave("w1")
    # Its supervisor had not yet said it spawned the job: listed with pid 0 and no log.
    s.worker("w1", attempts=(ops.AttemptStarted(key="job-1.1", pid=0, log="", started=0.0),))
    assert s.states() == {1: "running"}
    actions = s.at(20).start("job-1.1", pid=4321)
    assert journaled(actions) == [(1, "running")]
    view = s.view(1)
    assert (view["pid"], view["log"], view["started"]) == (4321, "/jobs/job-1.1.log", 20)


def test_stale_and_unknown_attempts_on_a_returning_worker_are_killed_and_old_ends_acknowledged():
    s = story_with_running_job()
    s.leave("w1")
    actions = s.worker("w1", attempts=(running("job-1.1"), running("job-9.1"),
                                       ended("job-8.3")))
    assert act.SendStopTask(key="job-9.1", worker="tcp://w1") in actions
    assert act.SendAttemptAck(worker="tcp://w1", keys=("job-8.3",)) in actions


def test_a_cancel_while_the_worker_is_away_stops_the_job_when_it_returns():
    s = story_with_running_job()
    s.leave("w1")
    s.cancel_jobs(1)
    actions = s.worker("w1", attempts=(running("job-1.1"),))
    assert act.SendStopTask(key="job-1.1", worker="tcp://w1") in actions
    s.end("job-1.1", "cancelled", worker="w1", exit_code=-15)
    assert s.states() == {1: "cancelled"}


def test_a_drained_worker_stopping_a_job_loses_it_unless_requeue():
    s = story_with_running_job()
    s.end("job-1.1", "cancelled", exit_code=-15)
    assert s.states() == {1: "lost"}


def rows_after(s: JobStory) -> list[dict]:
    return [j.to_row() for j in s.state.jobs.jobs.values()]


def test_a_restarted_scheduler_dispatches_no_job_until_the_workers_that_held_jobs_are_back():
    s = story_with_running_job()
    s.jobs(job(resources="GPU=1"), job())
    rows = rows_after(s)
    r = JobStory(lease_margin=10.0, recovery_timeout=30.0)
    r.at(1000)(ev.JobsLoaded(rows=tuple(rows), now=r.now))
    assert r.state.jobs.recovering and r.view(3)["reason"] == "recovering"
    assert started(r.worker("w2", nthreads=4)) == []
    [new] = r.ids(r.jobs(job(submission="fresh")))
    assert new == 4 and r.view(4)["reason"] == "recovering"
    r.ids(r.jobs(job(), request=5))  # a retried submit after the restart is the same job
    actions = r.worker("w1", attempts=(running("job-1.1"),))
    assert not r.state.jobs.recovering
    assert sorted(started(actions)) == [("job-3.2", "w2"), ("job-4.1", "w2"), ("job-5.1", "w2")]
    assert r.states()[1] == "running"


def test_recovery_ends_at_its_timeout_and_jobs_of_absent_workers_wait_out_the_lease():
    s = story_with_running_job()
    s.jobs(job())
    r = JobStory(lease_margin=10.0, recovery_timeout=30.0)
    r.at(1000)(ev.JobsLoaded(rows=tuple(rows_after(s)), now=r.now))
    r.worker("w2")
    assert started(r.at(1031).tick()) == [("job-2.2", "w2")]
    assert r.states()[1] == "running"
    r.at(1111).tick()
    assert r.states()[1] == "lost"


def test_finished_jobs_and_their_exit_codes_survive_restarts():
    s = story_with_running_job()
    s.end("job-1.1", "failed", exit_code=7)
    rows = rows_after(s)
    for _ in range(3):
        r = JobStory()
        r(ev.JobsLoaded(rows=tuple(rows), now=0.0))
        assert not r.state.jobs.recovering
        assert r.view(1)["state"] == "failed" and r.view(1)["exit_code"] == 7
        rows = rows_after(r)


def test_new_jobs_are_numbered_from_the_high_water_mark_when_the_journal_lost_jobs():
    """The journal kept jobs 1 and 2, but numbers up to 200 may have been given (its -wal file
    was lost): a new job gets 201, never a number an acknowledged job had, whose attempt
    (``job-7.1``) a worker may still hold."""
    s = story_with_running_job()
    s.jobs(job())
    r = JobStory()
    r(ev.JobsLoaded(rows=tuple(rows_after(s)), now=0.0, next_id=201))
    assert r.ids(r.jobs(job(submission="after the loss"))) == [201]
    # A mark below the journal's highest (a journal older than the mark) changes nothing.
    r = JobStory()
    r(ev.JobsLoaded(rows=tuple(rows_after(s)), now=0.0, next_id=1))
    assert r.ids(r.jobs(job(submission="no loss"))) == [3]


def test_reconcile_is_a_pure_decision_over_the_journal_and_the_report():
    s = story_with_running_job()
    s.jobs(job())  # job 2: assigned to w1 behind job 1
    jobs = s.state.jobs.jobs
    jobs[2].state, jobs[2].worker, jobs[2].attempt = type(jobs[1].state).assigned, "w1", 1
    before = {i: j.to_row() for i, j in jobs.items()}
    decisions = reconcile(jobs, "w1", [running("job-1.1"), ended("job-7.1"),
                                       running("job-1.0")], expected=[1, 2])
    assert decisions == [Adopt(1, running("job-1.1")), Ack("job-7.1"),
                         Kill("job-1.0", "it is not the current attempt of job 1"), PutBack(2)]
    assert {i: j.to_row() for i, j in jobs.items()} == before
    assert reconcile(jobs, "w1", [ended("job-1.1")], expected=[1]) == [
        Record(1, ended("job-1.1"))]
    assert reconcile(jobs, "w1", [], expected=[1]) == [Vanished(1)]
    # A worker whose machine restarted may have lost the record of an attempt it started: one
    # it does not list is given up on even where its start was never heard (never run twice).
    assert reconcile(jobs, "w1", [running("job-1.1")], expected=[1, 2],
                     machine_restarted=True) == [Adopt(1, running("job-1.1")), Vanished(2)]
    assert reconcile(jobs, "w2", [running("job-1.1")], expected=[]) == [
        Kill("job-1.1", "it is not the current attempt of job 1")]


def test_the_state_starts_empty_of_jobs():
    assert SchedulerState().jobs.jobs == {}


def test_a_requeued_job_keeps_its_place_ahead_of_later_jobs_of_its_priority():
    s = story_with_running_job(requeue=True)
    s.jobs(job("later"), job("later"), request=2)  # jobs 2 and 3 wait behind job 1
    s.leave("w1")
    s.at(111).tick()  # job 1's attempt is lost: queued again
    assert s.states() == {1: "queued", 2: "queued", 3: "queued"}
    assert started(s.worker("w2")) == [("job-1.2", "w2")]


def test_a_reason_says_what_is_true_now_recovery_over_and_a_cancel_done():
    s = story_with_running_job()
    s.jobs(job(resources="GPU=1"))
    r = JobStory(lease_margin=10.0, recovery_timeout=30.0)
    r.at(1000)(ev.JobsLoaded(rows=tuple(rows_after(s)), now=r.now))
    assert "the scheduler restarted" in r.view(2)["detail"]
    r.worker("w1", attempts=(running("job-1.1"),))  # recovery is over; job 2 waits for a GPU
    assert r.view(2)["reason"] == "missing_resources"
    assert "restarted" not in r.view(2)["detail"]
    r.cancel_jobs(1)
    assert r.view(1)["detail"] == "cancelled by c; stopping on w1"
    r.end("job-1.1", "cancelled", worker="w1", exit_code=-15)
    assert r.view(1)["state"] == "cancelled" and "stopping" not in r.view(1)["detail"]


@pytest.mark.parametrize("how", ["ended unstarted", "refused by a draining worker"])
def test_a_job_cancelled_before_it_started_ends_and_does_not_say_it_is_stopping(how):
    s = JobStory()
    s.worker("w1")
    s.jobs(job())  # assigned, not yet started
    s.cancel_jobs(1)
    if how == "ended unstarted":
        s.end("job-1.1", "cancelled", worker="w1", exit_code=None, started=None)
    else:  # the worker began to drain before the stop reached it
        s(ev.WorkerTaskRejected(key="job-1.1", worker="tcp://w1", reason="closing", now=s.now))
    assert s.view(1)["state"] == "cancelled"
    assert s.view(1)["detail"] == "cancelled by c"

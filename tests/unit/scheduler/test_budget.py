"""One failure budget (``budget.py``) for Python tasks and the attempts of jobs: each kind of
failure is counted against its limit, runs the attempt again (at once, or after a back-off),
then fails it with the kind's error; what is not the task's fault is not counted."""

from __future__ import annotations

import pytest
from sched_story import JobStory, Story, addr, job, started, task

from dsched.scheduler import actions as act, events as ev
from dsched.scheduler.budget import BUDGETS, DIED, LOST, RAISED, REFUSED, Failure, next_try
from dsched.scheduler.jobviews import job_table
from dsched.scheduler.views import pending, tasks_by_state


def erred(actions: list) -> dict[str, act.TellErred]:
    return {a.key: a for a in actions if isinstance(a, act.TellErred)}


def refusal(key: str, worker: str, reason: str = "no FOO here", now: float = 0.0):
    return ev.WorkerTaskRejected(key=key, worker=addr(worker), reason=reason, now=now)


# Each kind of failure, done to one task: how to set it up (its key), and one failure of it.

def setup_raised(s: Story) -> str:
    s.worker("w")
    s.submit(task("t", retries=2))
    return "t"


def setup_refused(s: Story) -> str:
    s.worker("w")
    s.submit(task("t"))
    return "t"


def setup_died(s: Story) -> str:
    s.worker("w")
    s.submit(task("t"))
    return "t"


def setup_lost(s: Story) -> str:
    s.worker("a")
    s.worker("b")
    s.submit(task("x", workers=("a",)), task("y", dependencies=("x",), workers=("b",)))
    s.finish("x", nbytes=10)
    return "x"


def raise_once(s: Story, i: int) -> list:
    return s.err("t")


def refuse_once(s: Story, i: int) -> list:
    actions = s(refusal("t", s.where("t"), now=s.now))
    s.at(s.now + 10)
    return actions + s.tick()  # past its back-off


def die_once(s: Story, i: int) -> list:
    s.worker(f"spare{i}")
    return s.leave(s.where("t"))


def lose_once(s: Story, i: int) -> list:
    actions = s(ev.WorkerMissingData(key="y", worker=addr("b"), dependency="x",
                                     tried=(addr("a"),), now=s.now))
    if s.state_of("x") == "processing":  # computed again: it finishes, and is lost again
        s.finish("x", nbytes=10)
    return actions


STORIES = {RAISED: (setup_raised, raise_once), REFUSED: (setup_refused, refuse_once),
           DIED: (setup_died, die_once), LOST: (setup_lost, lose_once)}


@pytest.mark.parametrize("failure", list(Failure))
def test_each_kind_of_failure_runs_the_task_again_within_its_budget_then_fails_it(failure):
    s = Story(allowed_failures=2, max_rejections=2)  # and retries=2
    setup, fail_once = STORIES[failure]
    key = setup(s)
    for i in range(2):
        assert erred(fail_once(s, i)) == {}
        assert s.state_of(key) != "erred"
    error = erred(fail_once(s, 2))[key]
    assert error.error == BUDGETS[failure].error
    assert getattr(s.state.tasks[key], BUDGETS[failure].counter) == 3


def test_the_back_off_doubles_for_refusals_alone_and_nothing_is_allowed_past_the_limit():
    assert [next_try(REFUSED, n, 5) for n in range(1, 8)] == [0.5, 1, 2, 4, 8, None, None]
    for failure in (RAISED, DIED, LOST):
        assert [next_try(failure, n, 2) for n in (1, 2, 3)] == [0, 0, None]
    assert next_try(RAISED, 1, 0) is None  # retries=0: the first exception ends it


def test_a_task_and_a_job_share_the_refusal_budget_and_its_back_off():
    s = JobStory(max_rejections=2)
    s.worker("w", nthreads=2)
    s.submit(task("t"))
    s.jobs(job())
    for n, backoff in ((1, 0.5), (2, 1.0)):
        s(refusal("t", "w", now=s.now))
        s(refusal(s.job(1).key, "w", now=s.now))
        assert started(s.at(s.now + backoff / 2).tick()) == []
        assert sorted(started(s.at(s.now + backoff / 2).tick())) == [(f"job-1.{n + 1}", "w"),
                                                                     ("t", "w")]
    errors = erred(s(refusal("t", "w", now=s.now)))
    s(refusal("job-1.3", "w", reason="no BAR here", now=s.now))
    assert errors["t"].error == "rejected"
    assert errors["t"].text == "workers refused this task 3 times; the last, w, said: no FOO here"
    assert s.states() == {1: "failed"}
    assert s.job(1).detail == "workers refused it 3 times; the last, w, said: no BAR here"
    assert s.state.counters["rejected"] == 6


def test_a_refused_job_waits_out_a_doubling_back_off_and_says_so():
    """Before, a refused job's next attempt was queued at once: a worker that refused it for a
    reason that lasts (a missing module, a full disk) was sent it again and again."""
    s = JobStory()
    s.worker("w")
    s.jobs(job())
    assert started(s(refusal("job-1.1", "w"))) == []
    view = s.view(1)
    assert (view["state"], view["reason"]) == ("queued", "refused")
    assert view["detail"] == "worker w refused attempt 1: no FOO here; trying again shortly"
    table = job_table(s.state)
    assert table["rows"][0][3:5] == ("refused", view["detail"])
    assert table["waiting"]["refused"] == 1
    # the job's attempt is not counted among the tasks that wait for a back-off
    assert "retry_backoff" not in pending(s.state, tasks_by_state(s.state))["by_reason"]
    assert started(s.at(0.4).tick()) == []
    assert started(s.at(0.5).tick()) == [("job-1.2", "w")]
    s(refusal("job-1.2", "w", now=0.5))
    assert started(s.at(1.4).tick()) == []
    assert started(s.at(1.5).tick()) == [("job-1.3", "w")]
    assert s.job(1).rejections == 2


def test_a_draining_workers_refusal_costs_a_job_nothing_and_it_goes_elsewhere_at_once():
    """Before, a job's refusals were counted even from a draining worker (which hands back
    what it has not started): with max_rejections=0 the job failed."""
    s = JobStory(max_rejections=0)
    s.worker("a")
    s.jobs(job())
    s.worker("b")
    s(ev.WorkerDraining(address=addr("a"), now=0))
    actions = s(refusal("job-1.1", "a", reason="the worker is closing"))
    assert started(actions) == [("job-1.2", "b")]
    assert s.states() == {1: "assigned"} and s.job(1).rejections == 0
    assert s.state.counters["rejected"] == 0


def test_a_job_cancelled_while_it_waits_out_a_back_off_ends_at_once():
    s = JobStory()
    s.worker("w")
    s.jobs(job())
    s(refusal("job-1.1", "w"))
    s.cancel_jobs(1)
    assert s.states() == {1: "cancelled"} and s.job(1).task is None
    assert not s.state.graph.retrying and started(s.at(5).tick()) == []


def test_a_job_whose_command_fails_uses_the_raised_row_and_runs_again_at_once():
    s = JobStory()
    s.worker("w")
    s.jobs(job(retries=1))
    s.start("job-1.1")
    assert started(s.end("job-1.1", "failed", exit_code=1)) == [("job-1.2", "w")]
    s.start("job-1.2")
    s.end("job-1.2", "failed", exit_code=1)
    assert s.states() == {1: "failed"} and s.job(1).retries_left == 0

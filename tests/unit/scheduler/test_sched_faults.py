"""Stories of faults that once lost or cancelled work: dropped intermediates under worker
deaths, one client's cancel, requests no worker can grant, refusals, draining workers,
crashed worker processes."""

from __future__ import annotations

from sched_story import Story, addr, started, task

from dsched.scheduler import actions as act, events as ev
from dsched.resources import Resources

DEBUG, INFO, WARNING = 10, 20, 30


def of(kind, actions):
    return [a for a in actions if isinstance(a, kind)]


def logs(s: Story, level: int) -> list[str]:
    return [a.message() for a in s.log if isinstance(a, act.LogLine) and a.level == level]


# -- nothing is cancelled that no one cancelled ------------------------------------------------


def test_a_chain_whose_intermediates_were_dropped_survives_losing_every_copy():
    s = Story()
    s.worker("a")
    s.worker("b")
    s.submit(task("d", wanted=False, workers=("a",)),
             task("t", dependencies=("d",), wanted=False, workers=("b",)),
             task("final", "GPU=1", dependencies=("t",)))
    s.finish("d")
    assert s.where("t") == "b"
    # a dies while t runs (t has its copy of d): d is not needed now, so not recomputed
    assert started(s.leave("a")) == []
    assert s.state_of("d") == "released"
    s.finish("t")
    assert s.state.tasks["final"].unrunnable_reason == "no worker offers resource GPU"
    # b dies before final could run: t is needed again, and so is d, through the chain
    s.leave("b")
    assert (s.state_of("final"), s.state_of("t"), s.state_of("d")) == (
        "waiting", "waiting", "queued")
    s.worker("a")
    s.worker("b")
    s.worker("gpu", resources="GPU=1")
    s.finish("d")
    actions = s.finish("t")
    assert started(actions) == [("final", "gpu")]
    assert of(act.TellFinished, s.finish("final")) == [
        act.TellFinished(key="final", clients=("c",), nbytes=0, who_has=(addr("gpu"),))]
    assert not of(act.TellCancelled, s.log)


def test_a_running_task_nobody_wants_any_more_is_stopped_and_released_not_cancelled():
    s = Story()
    s.worker("w")
    s.submit(task("x", wanted=False), task("y", "GPU=1", dependencies=("x",)))
    actions = s.release("y")
    assert actions == [act.SendStopTask(key="x", worker=addr("w"))]
    assert "x" not in s.state.tasks and "y" not in s.state.tasks  # nothing refers to them
    assert not of(act.TellCancelled, s.log)
    # wanted again before the worker confirmed: computed again, elsewhere or after the stop
    s.submit(task("x"))
    assert s.state_of("x") == "queued"
    assert started(s.confirm("x", "w")) == [("x", "w")]


def test_one_clients_cancel_leaves_another_clients_task_running():
    s = Story()
    s.worker("w")
    s.submit(task("a"), client="c1")
    s.submit(task("a"), client="c2")
    assert s.cancel("a", client="c1") == [
        act.TellCancelled(key="a", clients=("c1",), reason="cancelled by client c1")]
    assert s.state_of("a") == "processing"
    assert s.finish("a") == [act.TellFinished(key="a", clients=("c2",), nbytes=0,
                                            who_has=(addr("w"),))]


def test_a_cancel_takes_the_clients_dependents_along_but_not_another_clients():
    s = Story()
    s.worker("w")
    s.submit(task("a"), task("b", dependencies=("a",)), client="c1")
    s.submit(task("z", dependencies=("a",)), client="c2")
    actions = s.cancel("a", client="c1")
    assert [(a.key, a.clients) for a in of(act.TellCancelled, actions)] == [
        ("a", ("c1",)), ("b", ("c1",))]
    assert not of(act.SendStopTask, actions)  # z of c2 still needs a
    assert started(s.finish("a")) == [("z", "w")]
    assert act.SendStopTask(key="z", worker=addr("w")) in s.cancel("z", client="c2")
    assert s.state.tasks == {}  # forgotten; the worker holds z's thread until it confirms


# -- requests no worker can grant ------------------------------------------------------------


def test_a_gpu_request_above_one_that_is_not_whole_waits_with_the_rule_as_its_reason():
    s = Story()
    s.worker("w", resources="GPU=2")
    actions = s.submit(task("g", "GPU=1.5"))
    assert started(actions) == []
    (report,) = of(act.TellWaiting, actions)
    assert "not a fraction above one" in report.reason


def test_a_refused_task_backs_off_then_fails_with_the_workers_reason():
    s = Story(max_rejections=2)
    s.worker("w")
    s.submit(task("t"))
    refuse = ev.WorkerTaskRejected(key="t", worker=addr("w"), reason="this worker has no FOO", now=0)
    assert started(s(refuse)) == []
    assert s.state_of("t") == "waiting" and "no FOO" in s.state.tasks["t"].reason
    assert started(s.at(0.4).tick()) == []
    assert started(s.at(0.5).tick()) == [("t", "w")]  # after 0.5 s
    s(refuse)
    assert started(s.at(1.4).tick()) == []
    assert started(s.at(1.5).tick()) == [("t", "w")]  # after 1 s more
    (error,) = of(act.TellErred, s(refuse))
    assert error.error == "rejected" and "3 times" in error.text and "no FOO" in error.text
    assert s.state.counters["rejected"] == 3


def test_a_draining_workers_refusal_costs_the_task_nothing():
    s = Story()
    s.worker("a")
    s.submit(task("t"))
    s.worker("b")
    s(ev.WorkerDraining(address=addr("a"), now=0))
    actions = s(ev.WorkerTaskRejected(key="t", worker=addr("a"), reason="the worker is closing", now=0))
    assert started(actions) == [("t", "b")]
    assert s.state.tasks["t"].rejections == 0


# -- draining ------------------------------------------------------------------------------------


def test_a_draining_worker_is_sent_no_work_and_retires_once_idle():
    s = Story()
    s.worker("a", nthreads=2)
    s.submit(task("running"))
    actions = s(ev.WorkerDraining(address=addr("a"), now=0))
    assert actions == []  # still running one task
    actions = s.submit(task("later"))
    assert started(actions) == []
    assert of(act.TellWaiting, actions)[0].reason == "every connected worker is draining"
    assert of(act.SendRetire, s.finish("running")) == [act.SendRetire(worker=addr("a"))]
    s.worker("b")
    assert s.where("later") == "b"


def test_results_only_a_draining_worker_holds_are_copied_away_before_it_leaves():
    s = Story()
    s.worker("a")
    s.worker("b")
    s.submit(task("kept", workers=("a",)), task("dropped", workers=("a",)))
    s.finish("kept", nbytes=100)
    s.finish("dropped")
    s.release("dropped")
    actions = s(ev.WorkerDraining(address=addr("a"), now=0))
    assert actions == [act.SendReplicate(worker=addr("b"), key="kept", source=addr("a"), nbytes=100)]
    actions = s(ev.WorkerReplicated(key="kept", worker=addr("b"), nbytes=100, now=0))
    assert actions == [act.TellMoved(key="kept", clients=("c",), who_has=(addr("a"), addr("b"))),
                       act.SendRetire(worker=addr("a"))]
    s(ev.WorkerLeft(address=addr("a"), reason="worker drained", expected=True, now=0))
    assert s.state_of("kept") == "memory" and s.state.tasks["kept"].who_has == {addr("b"): None}
    assert s.state.counters == {**s.state.counters, "replicated": 1, "recomputed": 0}


def test_what_a_draining_worker_finishes_is_copied_too_and_what_cannot_be_is_recomputed():
    s = Story()
    s.worker("a")
    s.worker("b")
    s.submit(task("x", workers=("a",)), task("y", workers=("a",)))
    assert s.state.tasks["y"].prefetched  # x runs; y waits for a thread there
    s(ev.WorkerDraining(address=addr("a"), now=0))
    # ... which the draining worker gives back, as its core does with all it has not started
    s(ev.WorkerTaskRejected(key="y", worker=addr("a"), reason="the worker is closing", now=0))
    assert s.state_of("y") == "queued"
    actions = s.finish("x", worker="a")
    assert of(act.SendReplicate, actions) == [act.SendReplicate(worker=addr("b"), key="x", source=addr("a"))]
    actions = s(ev.WorkerReplicateFailed(key="x", worker=addr("b"), reason="peer gone", now=0))
    assert of(act.SendRetire, actions) == [act.SendRetire(worker=addr("a"))]
    s(ev.WorkerLeft(address=addr("a"), reason="worker drained", expected=True, now=0))
    assert s.state_of("x") == "queued"  # computed again: the client still wants it
    assert any("alone held 1 result(s), 1 of them still needed" in m for m in logs(s, INFO))


# -- crashed worker processes --------------------------------------------------------------------


def test_the_task_that_ended_a_worker_process_is_named_and_its_error_says_how():
    s = Story(allowed_failures=1)
    s.worker("w")
    s.submit(task("bomb"))
    s.leave("w")
    s(ev.WorkerJoined(address=addr("w2"), name="w", nthreads=1, resources=Resources.parse(None),
                   previous_exit="was killed by signal 11 (SIGSEGV)", now=0))
    assert ("Task bomb ended the worker process of w: it was killed by signal 11 (SIGSEGV)"
            in logs(s, WARNING))
    (error,) = of(act.TellErred, s(ev.WorkerLeft(address=addr("w2"), now=0)))
    assert error.error == "killed_worker"
    assert "2 worker(s) died while running task bomb " in error.text
    assert "its process was killed by signal 11 (SIGSEGV)" in error.text
    assert s.state.counters["deaths"] == 2


def test_a_prefetched_task_does_not_count_a_death_it_did_not_cause():
    s = Story(prefetch=1)
    s.worker("w")
    s.submit(task("running"), task("waiting"))
    assert s.where("waiting") == "w"
    s.leave("w")
    deaths = {k: t.deaths for k, t in s.state.tasks.items()}
    assert deaths == {"running": 1, "waiting": 0}
    assert s.state.counters["deaths"] == 1


# -- quiet logs ------------------------------------------------------------------------------------


def test_placements_are_logged_at_debug_only():
    s = Story()
    s.worker("w", resources="GPU=1")
    s.submit(task("t", "GPU=1"))
    assert "Scheduling task t (requires GPU=1) on worker w" in logs(s, DEBUG)
    assert not [m for m in logs(s, INFO) if "Scheduling" in m]

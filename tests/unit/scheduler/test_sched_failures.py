"""Stories of what goes wrong: unrunnable tasks, timeouts, dying workers, lost results."""

from __future__ import annotations

from sched_story import Story, addr, started, task

from dsched.scheduler import actions as act, events as ev


def waiting(actions):
    return [(a.keys, a.reason) for a in actions if isinstance(a, act.TellWaiting)]


def test_unrunnable_tasks_wait_with_distinct_reasons_until_a_fitting_worker_joins():
    s = Story()
    actions = s.submit(task("g", "GPU=4"), task("m", "MEMORY=1e9"), task("r", workers=("x",)))
    assert waiting(actions) == [(("g", "m", "r"), "no workers connected yet")]
    actions = s.worker("cpu", nthreads=2, resources="MEMORY=8e9")
    assert started(actions) == [("m", "cpu")]
    assert waiting(actions) == [
        (("g",), "no worker offers resource GPU"),
        (("m",), None),
        (("r",), "restricted to workers x, and none of them is connected"),
    ]
    actions = s.worker("small", resources="GPU=2")
    assert waiting(actions) == [(("g",), "needs GPU=4 but the largest worker offers GPU=2")]
    assert s.state.tasks["g"].unrunnable_reason == "needs GPU=4 but the largest worker offers GPU=2"

    actions = s.worker("big", resources="GPU=4")
    assert started(actions) == [("g", "big")]
    assert waiting(actions) == [(("g",), None)]
    assert started(s.worker("x")) == [("r", "x")]


def test_a_combination_no_single_worker_offers():
    s = Story()
    s.worker("a", resources="GPU=2")
    s.worker("b", resources="MEMORY=10")
    actions = s.submit(task("t", "GPU=1 MEMORY=1"))
    assert waiting(actions) == [
        (("t",), "needs GPU=1 MEMORY=1 but no single worker offers all of it")]


def test_no_worker_timeout_fails_unrunnable_tasks():
    s = Story(no_worker_timeout=10)
    s.worker("cpu")
    s.submit(task("g", "GPU=1"))
    s.at(9)
    assert s.tick() == []
    s.at(10)
    assert s.tick() == [act.TellErred(
        key="g", clients=("c",), error="no_worker",
        text="no worker could run this task for 10 s: no worker offers resource GPU")]


def test_no_worker_timeout_counts_from_when_the_task_became_unrunnable():
    s = Story(no_worker_timeout=10)
    s.worker("gpu", resources="GPU=1")
    s.submit(task("busy", "GPU=1"), task("g", "GPU=1"))
    s.at(8)
    s.leave("gpu")  # g (and busy, back in the queue) unrunnable from now
    s.at(17)
    assert s.tick() == []
    s.at(18)
    assert sorted(a.key for a in s.tick() if isinstance(a, act.TellErred)) == ["busy", "g"]


def test_a_dead_workers_tasks_go_back_to_the_queue():
    s = Story()
    s.worker("a")
    s.submit(task("t"))
    s.worker("b")
    assert started(s.leave("a")) == [("t", "b")]
    assert s.state.tasks["t"].deaths == 1


def test_killed_worker_after_allowed_failures_plus_one_deaths():
    s = Story(allowed_failures=1)
    s.worker("a")
    s.worker("b")
    s.submit(task("t"))
    s.leave(s.where("t"))
    actions = s.leave(s.where("t"))
    assert [(a.key, a.error) for a in actions if isinstance(a, act.TellErred)] == [
        ("t", "killed_worker")]
    assert "2 worker(s) died while running task t " in actions[0].text


def test_deaths_and_exceptions_are_counted_apart():
    s = Story(allowed_failures=1)
    s.worker("a")
    s.worker("b")
    s.worker("c")
    s.submit(task("t", retries=1))
    s.err("t")
    s.leave(s.where("t"))
    t = s.state.tasks["t"]
    assert (t.exceptions, t.deaths, t.state.value) == (1, 1, "processing")


def test_only_tasks_executing_on_the_dead_worker_count_the_death():
    s = Story(prefetch=1)
    s.worker("a")
    s.submit(task("run"), task("prefetched"))
    assert s.state.tasks["prefetched"].prefetched
    s.leave("a")
    assert s.state.tasks["run"].deaths == 1
    assert s.state.tasks["prefetched"].deaths == 0


def test_lost_results_still_wanted_are_recomputed_and_their_new_place_reported():
    s = Story()
    s.worker("a")
    s.submit(task("x"))
    s.finish("x")
    s.worker("b")
    actions = s.leave("a")
    assert started(actions) == [("x", "b")]
    # The client learns the result is gone (its future is pending again), then its new end.
    assert act.TellMoved(key="x", clients=("c",), who_has=()) in actions
    assert s.finish("x") == [act.TellFinished(key="x", clients=("c",), nbytes=0,
                                              who_has=(addr("b"),))]
    assert s.state.tasks["x"].who_has == {addr("b"): None}


def test_a_lost_result_is_recomputed_from_its_inputs_which_are_recomputed_too():
    s = Story()
    s.worker("a")
    s.submit(task("x", wanted=False), task("y", dependencies=("x",)))
    s.finish("x")
    s.finish("y")
    assert s.state_of("x") == "released"  # freed: y no longer needs it
    s.worker("b")
    assert started(s.leave("a")) == [("x", "b")]
    assert s.state_of("y") == "waiting"
    assert started(s.finish("x")) == [("y", "b")]
    s.finish("y")
    assert s.state_of("y") == "memory" and s.state_of("x") == "released"


def test_lost_results_no_one_needs_are_forgotten():
    s = Story()
    s.worker("a")
    s.worker("b")
    s.submit(task("x", wanted=False, workers=("a",)), task("y", dependencies=("x",)))
    s.finish("x")
    s.release("y")  # y (running on a or b) is cancelled; nothing needs x now
    assert "x" not in s.state.tasks
    assert started(s.leave("a")) == []


def test_a_lost_input_sends_its_queued_dependent_back_to_wait():
    s = Story()
    s.worker("a", resources="GPU=1")
    s.worker("b", nthreads=2)
    s.submit(task("in", "GPU=1", wanted=False), task("busy", "GPU=1"),
             task("out", "GPU=1", dependencies=("in",)))
    assert s.where("in") == "a"
    s.at(1)
    assert started(s.finish("in")) == [("busy", "a")]  # out is behind busy
    assert s.state_of("out") == "queued"
    s.leave("a")
    assert s.state_of("out") == "waiting"
    assert s.state.tasks["in"].reason is not None
    s.worker("c", resources="GPU=1")
    assert s.where("in") == "c" or s.where("busy") == "c"


def test_heartbeat_timeout_removes_the_worker():
    s = Story(heartbeat_timeout=5)
    s.worker("a")
    s.worker("b")
    s.submit(task("t", workers=("a",)))
    s.at(4)
    s(ev.WorkerHeartbeat(address=addr("b"), now=4))
    s.at(6)
    actions = s.tick()
    assert actions[0] == act.CloseWorker(worker=addr("a"), reason="no heartbeat for 6 s (timeout 5 s)")
    assert list(s.state.workers) == [addr("b")]
    assert s.state.tasks["t"].unrunnable_reason.startswith("restricted to workers a")


def test_results_from_a_removed_worker_are_ignored():
    s = Story()
    s.worker("a")
    s.submit(task("t"))
    s.leave("a")
    s.worker("b")
    assert s(ev.WorkerTaskFinished(key="t", worker=addr("a"), now=1)) == []
    assert s.state_of("t") == "processing" and s.where("t") == "b"


def test_missing_data_recomputes_the_input_and_retries_the_task():
    s = Story()
    s.worker("a")
    s.worker("b")
    s.submit(task("x", workers=("a",)))
    s.finish("x", nbytes=10)
    s.submit(task("y", dependencies=("x",), workers=("b",)))
    actions = s(ev.WorkerMissingData(key="y", worker=addr("b"), dependency="x", tried=(addr("a"),),
                            now=0))
    assert started(actions) == [("x", "a")]  # no copy of x left anywhere: compute it again
    assert s.state_of("y") == "waiting"
    assert started(s.finish("x")) == [("y", "b")]


def test_a_result_no_worker_can_ever_send_fails_instead_of_looping():
    s = Story(allowed_failures=2)
    s.worker("a")
    s.worker("b")
    s.submit(task("x", workers=("a",)), task("y", dependencies=("x",), workers=("b",)))
    for attempt in range(2):
        s.finish("x", nbytes=10)
        actions = s(ev.WorkerMissingData(key="y", worker=addr("b"), dependency="x",
                                tried=(addr("a"),), now=0))
        assert started(actions) == [("x", "a")]  # computed again, for now
    s.finish("x", nbytes=10)
    actions = s(ev.WorkerMissingData(key="y", worker=addr("b"), dependency="x", tried=(addr("a"),),
                            now=0))
    # x's client, told x was lost, hears it failed too: it could not fetch it either
    errors = {a.key: a for a in actions if isinstance(a, act.TellErred)}
    assert sorted(errors) == ["x", "y"] and errors["y"].error == "dependency"
    assert "no worker could send the result of x" in errors["y"].text
    assert s.state_of("x") == "erred" and s.state.tasks["x"].error == "unfetchable"
    assert s.state_of("y") == "erred" and started(actions) == []


def test_an_input_that_cannot_travel_at_all_fails_its_dependent_at_once():
    s = Story()
    s.worker("a")
    s.worker("b")
    s.submit(task("x", workers=("a",)), task("y", dependencies=("x",), workers=("b",)))
    s.finish("x", nbytes=10)
    actions = s(ev.WorkerMissingData(key="y", worker=addr("b"), dependency="x", tried=(addr("a"),),
                            reason="cannot send the result of x: TypeError: cannot pickle",
                            permanent=True, now=0))
    (error,) = [a for a in actions if isinstance(a, act.TellErred)]
    assert error.key == "y" and error.error == "unfetchable"
    assert "its input x cannot be sent" in error.text and "cannot pickle" in error.text
    assert started(actions) == [] and s.state_of("x") == "memory"  # not computed again


def test_a_lost_result_is_pending_again_for_its_clients_and_its_failure_reaches_them():
    """Dask's test_fan_out_pattern_deadlock: f finished on a, a died (f is computed again on
    b), then b died running it, with allowed_failures=0: the client hears that f was lost,
    then that f failed, naming it, not a finished f held by a dead worker."""
    s = Story(allowed_failures=0)
    s.worker("a")
    s.submit(task("f"))
    s.finish("f")
    s.worker("b")
    lost = s.leave("a")
    assert act.TellMoved(key="f", clients=("c",), who_has=()) in lost
    assert s.where("f") == "b"
    [erred] = [a for a in s.leave("b") if isinstance(a, act.TellErred)]
    assert (erred.key, erred.clients, erred.error) == ("f", ("c",), "killed_worker")
    assert "died while running task f " in erred.text

"""Stories of the pure SchedulerState: placement, order, resources, cancel, release."""

from __future__ import annotations

import pytest
from sched_story import Story, addr, started, task

from dsched.resources import Resources
from dsched.scheduler import SchedulerState, actions as act, events as ev


def test_guild_gpu1_task_starts_beside_the_first_gpu0_task():
    s = Story()
    s.worker("w", nthreads=4, resources="gpu0=1 gpu1=1")
    actions = s.submit(
        task("aaa", "gpu0=1"), task("bbb", "gpu0=1"), task("ccc", "gpu0=1 gpu1=1"),
        task("ddd", "gpu1=1"),
    )
    assert started(actions) == [("aaa", "w"), ("ddd", "w")]
    assert s.state.tasks["bbb"].state.value == "queued"
    assert s.state.tasks["bbb"].unrunnable_reason is None

    s.at(1)
    assert started(s.finish("aaa")) == [("bbb", "w")]
    assert started(s.finish("ddd")) == []  # ccc needs gpu0 too
    s.at(2)
    assert started(s.finish("bbb")) == [("ccc", "w")]


def test_a_joining_worker_is_logged_with_its_resources_or_none():
    s = Story()
    s.worker("cpu", nthreads=2)
    s.worker("gpu", resources="GPU=2")
    joined = [a.message() for a in s.log if isinstance(a, act.LogLine) and "joined" in a.msg]
    assert joined == ["Worker cpu joined from tcp://cpu: 2 threads, resources none",
                      "Worker gpu joined from tcp://gpu: 1 thread, resources GPU=2"]


def test_execute_carries_spec_resources_and_where_the_inputs_are():
    s = Story()
    s.worker("a", resources="GPU=1")
    s.submit(task("x", spec=b"f(1)"))
    s.finish("x", nbytes=100)
    actions = s.submit(task("y", "GPU=1", spec=b"g(x)", dependencies=("x",), priority=3))
    assert actions == [act.SendExecute(
        key="y", worker=addr("a"), spec=b"g(x)", resources=Resources.parse("GPU=1"),
        priority=3, who_has={"x": (addr("a"),)}, nbytes={"x": 100}, gpus=(0,),
    )]


def test_ten_tasks_of_a_tenth_gpu_fill_one_gpu_and_free_it_exactly():
    s = Story()
    s.worker("w", nthreads=20, resources="GPU=1")
    actions = s.submit(*(task(f"t{i}", "GPU=0.1") for i in range(11)))
    assert len(started(actions)) == 10
    w = s.state.workers[addr("w")]
    assert w.free == Resources.parse("GPU=0") and w.used == Resources.parse("GPU=1")
    assert s.state.tasks["t10"].state.value == "queued"

    assert started(s.finish("t0")) == [("t10", "w")]
    for i in range(1, 11):
        s.finish(f"t{i}")
    assert w.free == Resources.parse("GPU=1") and w.free["GPU"] == 10_000
    assert w.processing == {}


def test_a_worker_is_sent_no_more_tasks_than_its_threads_and_prefetch():
    s = Story()  # prefetch 2, as the daemon's default
    s.worker("w", nthreads=2)
    actions = s.submit(*map(task, "abcde"))
    assert started(actions) == [("a", "w"), ("b", "w"), ("c", "w"), ("d", "w")]
    assert [k for k, t in s.state.workers[addr("w")].processing.items() if t.prefetched] == [
        "c", "d"]  # they wait there for a thread
    assert started(s.finish("a")) == [("e", "w")]


def test_higher_priority_first_then_submission_order():
    s = Story(prefetch=0)  # the queue's own order, which tasks sent ahead would hide
    s.worker("w", nthreads=1)
    s.submit(task("busy"))
    s.submit(task("low1"), task("low2"))
    s.submit(task("high1", priority=5), task("high2", priority=5))
    order = []
    for _ in range(4):
        running = next(iter(s.state.workers[addr("w")].processing))
        order += [k for k, _ in started(s.finish(running))]
    assert order == ["high1", "high2", "low1", "low2"]


def test_priority_holds_across_resource_shapes():
    s = Story()
    s.worker("w", nthreads=1, resources="GPU=1")
    s.submit(task("busy"))
    # cpu could wait on w for its thread, but it is not sent ahead of gpu, which waits for it
    assert started(s.submit(task("cpu"), task("gpu", "GPU=1", priority=5))) == []
    assert started(s.finish("busy")) == [("gpu", "w"), ("cpu", "w")]


def test_validate_catches_broken_accounting():
    s = Story()
    s.worker("w", resources="GPU=1")
    s.submit(task("a", "GPU=1"))
    w = s.state.workers[addr("w")]
    w.room.free = Resources.parse("GPU=1")  # as if the GPU had been given back twice
    with pytest.raises(AssertionError, match="accounting"):
        s.state.validate()


def test_unknown_events_are_refused():
    with pytest.raises(TypeError, match="cannot handle"):
        SchedulerState().handle(object())


def test_resource_free_tasks_do_not_wait_behind_a_busy_gpu():
    s = Story()
    s.worker("w", nthreads=4, resources="GPU=1")
    actions = s.submit(task("g1", "GPU=1"), task("g2", "GPU=1"), task("cpu"))
    assert started(actions) == [("g1", "w"), ("cpu", "w")]


def test_restrictions_by_name_or_address():
    s = Story()
    s.worker("a", nthreads=4)
    s.worker("b", nthreads=1)
    actions = s.submit(task("x", workers=("b",)), task("y", workers=(addr("b"),)))
    assert started(actions) == [("x", "b"), ("y", "b")]  # y waits there; a idles
    assert s.state.tasks["y"].prefetched
    assert started(s.finish("x")) == []


def test_cancel_a_queued_task_reports_it_at_once():
    s = Story()
    s.worker("w", resources="GPU=1")
    s.submit(task("a", "GPU=1"), task("b", "GPU=1"))  # b waits in the queue for the GPU
    assert s.cancel("b") == [act.TellCancelled(key="b", clients=("c",),
                                             reason="cancelled by client c")]
    assert "b" not in s.state.tasks  # nobody wants it: forgotten
    assert started(s.finish("a")) == []


def test_cancel_running_frees_resources_only_when_the_worker_confirms():
    s = Story()
    s.worker("w", nthreads=2, resources="GPU=1")
    s.submit(task("a", "GPU=1"), task("b", "GPU=1"))
    assert s.cancel("a") == [
        act.TellCancelled(key="a", clients=("c",), reason="cancelled by client c"),
        act.SendStopTask(key="a", worker=addr("w")),
    ]
    assert s.state.workers[addr("w")].free == Resources.parse("GPU=0")  # still held
    assert s.state.tasks["b"].state.value == "queued"
    assert started(s.confirm("a", "w")) == [("b", "w")]


def test_a_cancelled_task_that_finished_anyway_frees_its_thread_and_result():
    s = Story()
    s.worker("w", resources="GPU=1")
    s.submit(task("a", "GPU=1"), task("b", "GPU=1"))
    s.cancel("a")
    actions = s.finish("a", worker="w")
    assert started(actions) == [("b", "w")]
    assert act.SendFree(worker=addr("w"), keys=("a",)) in actions


def test_cancel_takes_the_dependents_along():
    s = Story()
    s.worker("w")
    s.submit(task("a"), task("b", dependencies=("a",)), task("c", dependencies=("b",)))
    actions = s.cancel("a")
    assert [a.key for a in actions if isinstance(a, act.TellCancelled)] == ["a", "b", "c"]
    assert actions[-1] == act.SendStopTask(key="a", worker=addr("w"))


def test_each_task_end_is_reported_once_to_the_clients_that_want_it():
    s = Story()
    s.worker("w")
    s.submit(task("a"), client="c1")
    s.submit(task("a"), client="c2")  # the same key: one task, two clients
    assert s.finish("a") == [act.TellFinished(key="a", clients=("c1", "c2"), nbytes=0,
                                            who_has=(addr("w"),))]
    # a client asking later is told at once
    assert s.submit(task("a"), client="c3") == [
        act.TellFinished(key="a", clients=("c3",), nbytes=0, who_has=(addr("w"),))]


def test_released_results_are_freed_and_forgotten():
    s = Story()
    s.worker("w")
    s.submit(task("a"))
    s.finish("a")
    assert s.release("a") == [act.SendFree(worker=addr("w"), keys=("a",))]
    assert "a" not in s.state.tasks


def test_inputs_are_freed_when_the_last_dependent_finished():
    s = Story()
    s.worker("w")
    s.submit(task("a", wanted=False), task("b", dependencies=("a",)))
    s.finish("a")
    actions = s.finish("b")
    assert act.SendFree(worker=addr("w"), keys=("a",)) in actions
    assert s.state_of("a") == "released"  # kept while b exists, to recompute b if lost
    s.release("b")
    assert s.state.tasks == {}


def test_a_disconnected_client_releases_its_work():
    s = Story()
    s.worker("w")
    s.submit(task("a"), task("b"))
    actions = s.disconnect()
    assert act.SendStopTask(key="a", worker=addr("w")) in actions
    assert act.SendStopTask(key="b", worker=addr("w")) in actions  # sent ahead: there too
    assert s.state.tasks == {} and s.state.clients == {}
    assert s.state.workers[addr("w")].assigned == 2  # until the worker confirms
    s.confirm("a", "w")
    s.confirm("b", "w")
    assert s.state.workers[addr("w")].assigned == 0


def test_bad_submissions_err_with_a_reason():
    s = Story()
    s.worker("w")
    actions = s.submit(task("a", dependencies=("nope",)), task("b", dependencies=("a",)),
                       task("x", dependencies=("y",)), task("y", dependencies=("x",)))
    errs = {a.key: a for a in actions if isinstance(a, act.TellErred)}
    assert errs["a"].error == "unknown_dependency" and "'nope'" in errs["a"].text
    assert errs["b"].error == "dependency"
    assert errs["x"].error == errs["y"].error == "cycle"


def test_an_exception_errs_the_task_and_its_dependents_with_the_payload():
    s = Story()
    s.worker("w")
    s.submit(task("a"), task("b", dependencies=("a",)))
    actions = s.err("a", text="ZeroDivisionError")
    assert actions == [
        act.TellErred(key="a", clients=("c",), error="exception", text="ZeroDivisionError",
                    exception=b"pickled"),
        act.TellErred(key="b", clients=("c",), error="dependency",
                    text="dependency a failed: ZeroDivisionError", exception=b"pickled"),
    ]


def test_retries_rerun_a_task_that_raised():
    s = Story()
    s.worker("w")
    s.submit(task("a", retries=1))
    assert started(s.err("a")) == [("a", "w")]
    assert s.state.tasks["a"].exceptions == 1
    assert isinstance(s.err("a")[0], act.TellErred)


def test_reports_for_a_task_not_processing_on_that_worker_are_ignored():
    s = Story()
    s.worker("a")
    s.worker("b")
    s.submit(task("x"))
    other = "b" if s.where("x") == "a" else "a"
    actions = s(ev.WorkerTaskFinished(key="x", worker=addr(other), now=0))
    assert actions == [act.SendFree(worker=addr(other), keys=("x",))]
    assert s.state_of("x") == "processing"
    assert s(ev.WorkerTaskFinished(key="x", worker="tcp://gone", now=0)) == []


def test_resubmitting_an_erred_key_runs_it_afresh():
    s = Story()
    s.worker("w")
    s.submit(task("a"))
    s.err("a")
    assert started(s.submit(task("a"))) == [("a", "w")]
    assert s.state_of("a") == "processing"


def test_the_core_decides_membership_leases_and_refusals_while_draining():
    """Who is a member, whose lease runs on, and what a draining scheduler refuses are the
    core's decisions, each an action: the shell only carries them out."""
    from dsched.jobs import JobSpec

    s = Story()
    joined = s.worker("a")
    assert joined[0] == act.WorkerAccepted(worker=addr("a"))  # before anything else for it
    refused = s(ev.WorkerJoined(address=addr("b"), name="a", nthreads=1, resources=Resources(),
                                now=0.0))
    assert not [a for a in refused if isinstance(a, act.WorkerAccepted)]

    assert s(ev.WorkerHeartbeat(address=addr("a"), sent=5.0, now=1.0)) == [
        act.GrantLease(worker=addr("a"), sent=5.0)]
    s.leave("a")  # closed here: its heartbeats, still in flight, extend nothing
    assert s(ev.WorkerHeartbeat(address=addr("a"), sent=6.0, now=2.0)) == []

    s(ev.SchedulerDraining(now=3.0))
    assert s(ev.TasksSubmitted(client="c", tasks=(task("x"),), request=7, now=3.0)) == [
        act.Refused(client="c", request=7, reason="the scheduler is draining and takes no work",
                    keys=("x",))]
    assert "x" not in s.state.tasks
    [reply] = s(ev.JobsSubmitted(client="c", request=8, jobs=(JobSpec("s", ("true",)),),
                                 now=3.0))
    assert reply.error == "the scheduler is draining and takes no work"

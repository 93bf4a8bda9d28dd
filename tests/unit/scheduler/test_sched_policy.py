"""Stories of the placement policy: EASY backfill, locality, GPU best fit, least loaded."""

from __future__ import annotations

import pytest
from sched_story import Story, started, task

from dsched.resources import Resources
from dsched.scheduler import SchedulerState, events as ev
from dsched.scheduler.groups import GROUP_LIMIT, MAX_PASSES, SPREAD, HERE, NO_GROUP, where
from dsched.sim import SimTask, SimWorker, Simulation


def learned(s: Story, prefix: str, duration: float, resources: str | None = None) -> None:
    """Let the scheduler learn how long ``prefix`` tasks take."""
    s.submit(task(f"{prefix}-learn", resources))
    s.finish(f"{prefix}-learn", duration=duration)
    s.release(f"{prefix}-learn")


def test_easy_backfill_only_what_ends_before_the_reservation():
    s = Story()
    s.worker("w", nthreads=8, resources="GPU=2")
    learned(s, "short", 1)
    learned(s, "long", 10)
    s.at(100)
    assert started(s.submit(task("long-1", "GPU=1"))) == [("long-1", "w")]  # ends at 110
    assert started(s.submit(task("big", "GPU=2"))) == []  # reserves w from 110
    assert started(s.submit(task("short-1", "GPU=1"))) == [("short-1", "w")]  # ends at 101

    s.at(101)
    s.submit(task("long-2", "GPU=1"))
    assert started(s.finish("short-1")) == []  # long-2 would end at 111 and delay big
    s.cancel("long-2")
    assert started(s.submit(task("mystery", "GPU=1"))) == []  # duration unknown
    s.cancel("mystery")
    assert started(s.submit(task("short-2", "GPU=1"))) == [("short-2", "w")]
    assert started(s.submit(task("cpu-job"))) == [("cpu-job", "w")]  # a thread big does not need

    s.at(102)
    s.finish("short-2")
    s.at(110)
    assert started(s.finish("long-1")) == [("big", "w")]


def test_a_big_task_is_not_starved_by_a_stream_of_small_ones():
    workers = [SimWorker("w", nthreads=4, resources="GPU=2")]
    # one GPU=1 task of 2 s every second keeps both GPUs busy all the time
    smalls = [SimTask(f"small-{i}", 2.0, "GPU=1", submit_at=i * 1.0) for i in range(100)]
    big = SimTask("big-0", 3.0, "GPU=2", submit_at=5.5)
    report = Simulation(workers, [*smalls, big], validate=True).run()
    assert report.unfinished == []
    assert report.waits["big-0"] == 1.5  # it starts once the two running at 5.5 end


def test_without_learned_durations_nothing_backfills_onto_the_reservation():
    s = Story()
    s.worker("w", nthreads=4, resources="GPU=2")
    s.submit(task("a-0", "GPU=1"))
    s.submit(task("big", "GPU=2"))
    assert started(s.submit(task("b-0", "GPU=1"))) == []
    assert started(s.submit(task("c-0"))) == [("c-0", "w")]
    assert started(s.finish("a-0")) == [("big", "w")]


def test_cancelling_the_reserved_task_frees_its_worker_for_the_others():
    s = Story()
    s.worker("w", nthreads=4, resources="GPU=2")
    s.submit(task("a-0", "GPU=1"))
    s.submit(task("big", "GPU=2"))
    assert started(s.submit(task("b-0", "GPU=1"))) == []
    assert started(s.cancel("big")) == [("b-0", "w")]


def test_a_task_stopped_on_the_reserved_worker_lets_a_blocked_task_start():
    s = Story(prefetch=1)
    s.worker("w", nthreads=2, resources="GPU=2 MEMORY=8")
    learned(s, "gpu", 1, "GPU=2")
    assert started(s.submit(task("gpu-a", "GPU=2"), task("other"))) == [
        ("gpu-a", "w"), ("other", "w")]
    assert started(s.submit(task("gpu-b", "GPU=1 MEMORY=2"))) == []  # reserves w from 1
    # a prefetch slot is free, but gpu-b, ahead of mystery, waits for w's next thread
    assert started(s.submit(task("mystery"))) == []
    assert started(s.cancel("other")) == []  # other still holds its thread while it stops
    # other has stopped: a thread is spare beside gpu-b, and mystery starts on it
    assert started(s.confirm("other", "w")) == [("mystery", "w")]


def test_backfill_elsewhere_is_free():
    s = Story()
    s.worker("gpus", nthreads=4, resources="GPU=2")
    s.worker("one", nthreads=4, resources="GPU=1")
    s.submit(task("a-0", "GPU=1", workers=("gpus",)))
    s.submit(task("big", "GPU=2"))
    # the reservation is on "gpus"; "one" may take any GPU=1 task, duration unknown or not
    assert started(s.submit(task("b-0", "GPU=1"))) == [("b-0", "one")]


def test_prefer_the_worker_holding_the_inputs():
    s = Story()
    s.worker("a", nthreads=2)
    s.worker("b", nthreads=2)
    s.submit(task("x", workers=("a",)), task("busy", workers=("a",)))
    s.finish("x", nbytes=1000)
    assert started(s.submit(task("y", dependencies=("x",)))) == [("y", "a")]
    assert started(s.submit(task("z"))) == [("z", "b")]  # no inputs: the least loaded


def test_inputs_a_worker_must_fetch_from_another_are_counted():
    s = Story()
    s.worker("a")
    s.worker("b")
    s.submit(task("x", workers=("a",)), task("y", workers=("b",)))
    s.finish("x", nbytes=1000)
    s.finish("y", nbytes=10)
    s.submit(task("z", dependencies=("x", "y")))
    assert s.where("z") == "a" and s.state.counters["fetched"] == 1  # y, from b


def test_gpu_tasks_best_fit_so_whole_gpus_stay_free():
    s = Story()
    s.worker("g4", nthreads=4, resources="GPU=4")
    s.worker("g1", nthreads=4, resources="GPU=1")
    s.worker("g2", nthreads=4, resources="GPU=2")
    assert started(s.submit(task("one", "GPU=1"))) == [("one", "g1")]
    assert started(s.submit(task("two", "GPU=1"))) == [("two", "g2")]
    assert started(s.submit(task("four", "GPU=4"))) == [("four", "g4")]


def test_resource_free_tasks_go_to_the_least_loaded_worker():
    s = Story()
    s.worker("a", nthreads=4)
    s.worker("b", nthreads=4)
    actions = s.submit(*(task(f"t{i}") for i in range(4)))
    assert started(actions) == [("t0", "a"), ("t1", "b"), ("t2", "a"), ("t3", "b")]


def test_memory_tasks_go_where_most_memory_is_free():
    s = Story()
    s.worker("small", nthreads=4, resources="MEMORY=10e9")
    s.worker("large", nthreads=4, resources="MEMORY=100e9")
    assert started(s.submit(task("m", "MEMORY=5e9"))) == [("m", "large")]


def test_a_queue_of_unplaceable_tasks_does_not_slow_other_shapes():
    state = SchedulerState()
    state.handle(ev.WorkerJoined(address="w", name="w", nthreads=2,
                              resources=Resources.parse("GPU=1"), now=0))
    gpu_tasks = [task(f"g{i}", "GPU=1") for i in range(500)]
    state.handle(ev.TasksSubmitted(client="c", tasks=tuple(gpu_tasks), now=0))
    looked_at = []
    find = state.placer.choice.find
    state.placer.choice.find = lambda t, *rest: looked_at.append(t.key) or find(t, *rest)
    actions = state.handle(ev.TasksSubmitted(client="c", tasks=(task("cpu"),), now=0))
    assert started(actions) == [("cpu", "w")]
    assert looked_at == ["cpu"]  # the GPU queue's head was not even looked at again


def reduction(groups: int, width: int) -> list:
    """``groups`` partial sums, each of ``width`` inputs without inputs of their own."""
    specs = []
    for g in range(groups):
        roots = [f"r{g}-{i}" for i in range(width)]
        specs += [task(key) for key in roots]
        specs.append(task(f"p{g}", dependencies=tuple(roots)))
    return specs


def run_in_turns(s: Story, *names: str) -> dict[str, str]:
    """Each worker in turn ends the task it runs (not one it holds prefetched), until nothing
    is left; returns the worker each task ran on."""
    ran = {}
    workers = [s.state.workers[f"tcp://{name}"] for name in names]
    while any(w.processing for w in workers):
        for name, w in zip(names, workers):
            running = [k for k, t in w.processing.items() if not t.prefetched]
            if running:
                ran[running[0]] = name
                s.finish(running[0], nbytes=8)
    return ran


def test_the_inputs_of_a_reduction_run_together_on_one_worker():
    s = Story(prefetch=2)
    s.worker("a")
    s.worker("b")
    s.submit(*reduction(groups=12, width=4))
    ran = run_in_turns(s, "a", "b")
    for g in range(12):
        assert len({ran[f"r{g}-{i}"] for i in range(4)}) == 1, ran
    assert set(ran.values()) == {"a", "b"}


def test_a_free_worker_takes_a_task_whose_group_is_elsewhere_when_nothing_else_waits():
    s = Story(prefetch=2)
    s.worker("a")
    s.worker("b")
    actions = s.submit(*reduction(groups=1, width=4))
    assert started(actions) == [("r0-0", "a"), ("r0-1", "a"), ("r0-2", "a"), ("r0-3", "b")]


def test_a_worker_looks_past_the_head_only_among_tasks_of_the_same_priority():
    s = Story(prefetch=0)  # a worker is full at its threads, with no slot beyond them
    s.worker("a", nthreads=2)
    s.worker("b")
    actions = s.submit(*reduction(groups=1, width=3), *(task(f"low{i}", priority=-1)
                                                        for i in range(2)))
    # r0-2's group is on a, which is full; what waits behind it is of a lower priority
    assert started(actions) == [("r0-0", "a"), ("r0-1", "a"), ("r0-2", "b")]


def test_the_inputs_of_a_wide_reduction_spread_over_the_workers():
    s = Story()
    s.worker("a", nthreads=4)
    s.worker("b", nthreads=4)
    width = GROUP_LIMIT + 1
    actions = s.submit(*reduction(groups=1, width=width))
    assert started(actions)[:4] == [("r0-0", "a"), ("r0-1", "b"), ("r0-2", "a"), ("r0-3", "b")]


def held_on_a_busy_worker(s: Story) -> None:
    """Input h held on worker a, which then runs a long task; worker b joins, free."""
    s.worker("a")
    s.submit(task("h"))
    s.finish("h", nbytes=8)
    s.submit(task("long"))
    s.worker("b")


def run_on(s: Story, name: str, count: int) -> list[str]:
    """The worker ends its running task ``count`` times; the tasks it ran, in order."""
    w = s.state.workers[f"tcp://{name}"]
    ran = []
    for _ in range(count):
        key = next(iter(w.processing))
        ran.append(key)
        s.finish(key, nbytes=8)
    return ran


def test_a_head_is_not_passed_over_for_tasks_without_a_group():
    s = Story(prefetch=0)  # a worker is full at its threads, with no slot beyond them
    held_on_a_busy_worker(s)
    s.submit(task("blocker"))  # b is busy while the rest is queued
    s.submit(task("r"), task("p", dependencies=("r", "h")))  # r's group is on a
    s.submit(*(task(f"y{i}") for i in range(5)))
    assert run_on(s, "b", 2) == ["blocker", "r"]


def test_a_head_is_passed_over_at_most_a_few_times():
    s = Story(prefetch=0)  # a worker is full at its threads, with no slot beyond them
    held_on_a_busy_worker(s)
    s.submit(task("blocker"))
    s.submit(task("r"), task("p", dependencies=("r", "h")))
    s.submit(*reduction(groups=20, width=2))  # groups b can start, queued behind r
    ran = run_on(s, "b", MAX_PASSES + 2)
    assert ran.index("r") == MAX_PASSES + 1, ran  # after the blocker and MAX_PASSES others


def test_a_worker_does_not_take_a_task_still_stopping_there_in_front_of_the_head():
    s = Story(prefetch=0)  # a worker is full at its threads, with no slot beyond them
    s.worker("a")
    s.worker("b", nthreads=2)
    s.submit(task("u"), task("v"), task("pu", dependencies=("u", "v")))
    assert {s.where("u"), s.where("v")} == {"b"}
    s.cancel("u", "v", "pu")
    s.confirm("v", "b")  # u is still stopping on b, and holds one of its threads
    actions = s.submit(task("t0", workers=("a",)), task("t1"),
                       task("pt", dependencies=("t0", "t1")),
                       task("u"), task("v"), task("pu", dependencies=("u", "v")))
    # t1's group is on a, which is full; b may take a task of a new group, but not u
    assert started(actions) == [("t0", "a"), ("v", "b")]


def test_a_task_taken_in_front_of_the_head_does_not_delay_the_reservation():
    s = Story(prefetch=1)
    s.worker("a")
    s.worker("w", resources="GPU=1")
    learned(s, "short", 1)
    learned(s, "L", 10, "GPU=1")
    s.submit(task("h", workers=("a",)))
    s.finish("h", nbytes=8)
    s.submit(task("long-1", workers=("a",)), task("long-2", workers=("a",)))  # a is full
    s.submit(task("L-1", "GPU=1"))  # w's thread, until 10
    assert started(s.submit(task("X", "GPU=1"))) == []  # reserves w from 10
    actions = s.submit(task("short-r"), task("p", dependencies=("short-r", "h")),
                       task("mystery-u"), task("q", dependencies=("mystery-u", "mystery-v")),
                       task("mystery-v"))
    # short-r's group is on a; mystery-u's is nowhere, but its length is unknown, so it
    # could delay X. Neither is sent ahead to w, whose next thread X (ahead of them) waits
    # for: when L-1 ends, X starts there first
    assert started(actions) == []
    assert started(s.at(10).finish("L-1"))[0] == ("X", "w")


def test_a_group_spread_over_many_workers_has_no_home():
    def seen_from_w0(workers: int) -> str:
        """Where the group of a queued root is, its other inputs on ``workers`` workers."""
        s = Story()
        names = [f"w{i}" for i in range(workers)]
        for name in names:
            s.worker(name)
        roots = [f"r{i}" for i in range(workers)]
        s.submit(*(task(key, workers=(name,)) for key, name in zip(roots, names)),
                 task("late"), task("p", dependencies=(*roots, "late")))
        return where(s.state.tasks["late"], "tcp://w0")

    assert seen_from_w0(SPREAD) == HERE
    assert seen_from_w0(SPREAD + 1) == NO_GROUP


def test_a_prefetched_task_never_overtakes_a_higher_priority_task_waiting_for_that_worker():
    """Dask's test_constrained_vs_ready_priority_1, at the scheduler: with the worker's only
    thread busy, x (priority -1, no resources) may not be sent ahead while y (priority 0,
    R=1) waits for that thread: the worker would start x first."""
    for y_first in (False, True):
        s = Story(prefetch=2)
        s.worker("w", nthreads=1, resources="R=1")
        assert started(s.submit(task("clog"))) == [("clog", "w")]
        x, y = task("x", priority=-1), task("y", "R=1", priority=0)
        assert started(s.submit(*((y, x) if y_first else (x, y)))) == []
        # y first; only then may x be sent ahead, to start after y
        assert started(s.finish("clog")) == [("y", "w"), ("x", "w")]
        assert s.state.tasks["x"].prefetched


def test_a_lower_priority_task_is_still_prefetched_when_nothing_ahead_waits_for_the_worker():
    s = Story(prefetch=1)
    s.worker("w", nthreads=1, resources="R=1")
    s.worker("v", nthreads=1)
    s.submit(task("clog", workers=("w",)), task("clog2", workers=("v",)))
    # y waits for R, which only w has; x is sent ahead to v, where nothing waits
    s.submit(task("y", "R=1", priority=5), task("x", priority=-1, workers=("v",)))
    assert s.state.tasks["x"].prefetched


def test_a_higher_priority_task_arriving_later_goes_ahead_of_a_prefetched_one():
    """Dask's test_constrained_vs_ready_priority_1 as a client submits it, one call at a time:
    x (priority -1) was sent ahead to the busy worker before y (priority 0, R=1) came; y goes
    there too, and the worker, which starts the highest priority task it holds, starts y."""
    s = Story(prefetch=2)
    s.worker("w", nthreads=1, resources="R=1")
    s.submit(task("clog"))
    assert started(s.submit(task("x", priority=-1))) == [("x", "w")]
    assert started(s.submit(task("y", "R=1", priority=0))) == [("y", "w")]
    s.finish("clog")
    assert not s.state.tasks["y"].prefetched and s.state.tasks["x"].prefetched
    s.finish("y")
    assert not s.state.tasks["x"].prefetched


def test_a_task_with_resources_is_not_sent_ahead_behind_one_the_worker_starts_first():
    s = Story()  # prefetch 2, the daemon's default
    s.worker("w", resources="GPU=1")
    s.worker("v")
    s.submit(task("busy", workers=("w",)), task("d", workers=("v",)))
    s.submit(task("g", "GPU=1", dependencies=("d",)))
    assert started(s.submit(task("x", workers=("w",)))) == [("x", "w")]  # waits there
    s.finish("d")
    s.finish("busy")  # x takes w's thread: g must not be left waiting there with the GPU
    assert s.state.tasks["g"].state.value == "queued" or not s.state.tasks["g"].prefetched


def test_a_task_stopped_while_sent_ahead_may_run_elsewhere_before_that_worker_confirms():
    """Whether a task waits unstarted on a worker is that worker's: the task, stopped there
    while sent ahead, is wanted again and runs on another worker, which ends it, before the
    first confirms the stop. Each worker's books stay right (the invariants are checked after
    every event), and the core does not fail."""
    s = Story()  # prefetch 2
    X = dict(workers=("h", "a", "b"))
    s.worker("h")
    s.submit(task("x", **X), task("y", dependencies=("x",), workers=("g",)))
    s.finish("x", "h")
    s.worker("g")
    s.finish("y", "g")  # x is kept for its dependent, held on h alone
    s.worker("a")
    s.submit(task("p", workers=("a",)))  # a is busy
    s.leave("h")  # x, lost, is computed again: sent ahead to a, behind p
    assert s.where("x") == "a" and s.state.tasks["x"].prefetched
    s.cancel("x")  # a is told to stop it
    s.submit(task("x", **X))  # wanted again
    assert started(s.worker("b")) == [("x", "b")]  # and it starts on b at once
    s.finish("x", "b")
    s.confirm("x", "a")
    assert s.state.workers["tcp://a"].prefetched == 0 and s.state.placer.ahead == {}

"""WorkerState as a story of events in and instructions out; validate() after every event."""

import pytest

from dsched.resources import Resources
from dsched.protocol.ops import (
    Draining, Execute, Free, MissingData, Replicate, ReplicateFailed, Replicated, StopTask,
    TaskErred, TaskFinished, TaskRejected, TaskStopped,
)
from dsched.worker.actions import FetchDependency, KillTask, ReleaseResult, StartTask
from dsched.worker.events import (
    DependencyFetched, DependencyFetchFailed, DrainRequested, RunErred, RunFinished, RunStopped,
)
from dsched.worker.state import WorkerTaskState, WorkerState

R = Resources.parse


def handle(state: WorkerState, *events):
    actions = []
    for event in events:
        actions += state.handle(event, 0.0)
        state.validate()
    return actions


def execute(key, resources=None, priority=0, who_has=None, nbytes=None):
    return Execute(key, b"spec-" + key.encode(), R(resources), priority,
                            who_has or {}, nbytes or {})


def done(key, nbytes=10):
    return RunFinished(key, nbytes, start=100.0, stop=101.5, peak_memory=1 << 20)


def started(actions):
    return {a.key: a.gpus for a in actions if isinstance(a, StartTask)}


def test_a_task_starts_in_a_thread_and_reports_done():
    state = WorkerState(nthreads=2)
    assert handle(state, execute("x")) == [StartTask("x", b"spec-x", (), "thread", (), R(None))]
    assert state.state_of("x") is WorkerTaskState.EXECUTING
    assert handle(state, done("x")) == [
        TaskFinished("x", 10, 100.0, 101.5, 1.5, peak_memory=1 << 20)
    ]
    assert state.state_of("x") is WorkerTaskState.DONE
    assert state.snapshot().results == {"x": 10}
    assert state.is_idle()


def test_never_more_than_nthreads_and_the_rest_waits_in_priority_order():
    state = WorkerState(nthreads=2)
    actions = handle(state, execute("a"), execute("b"), execute("c"), execute("d", priority=5))
    assert list(started(actions)) == ["a", "b"]
    assert state.free_threads == 0
    assert list(started(handle(state, done("a")))) == ["d"]  # higher priority jumps the queue
    assert list(started(handle(state, done("b")))) == ["c"]


def test_gpu_task_gets_its_device_and_a_pinned_process():
    state = WorkerState(nthreads=4, resources=R("GPU=2"))
    actions = handle(state, execute("train", "GPU=1"))
    assert actions == [StartTask("train", b"spec-train", (0,), "gpu-process", (), R("GPU=1"))]
    assert state.used == R("GPU=1") and state.available == R("GPU=1")


def test_physical_devices_are_what_tasks_get():
    # A worker restricted to devices 2,3 (CUDA_VISIBLE_DEVICES=2,3) hands out 2 and 3.
    state = WorkerState(nthreads=4, resources=R("GPU=2"), gpus=(2, 3))
    actions = handle(state, execute("a", "GPU=1"), execute("b", "GPU=1"))
    assert started(actions) == {"a": (2,), "b": (3,)}
    with pytest.raises(ValueError, match="must agree"):
        WorkerState(nthreads=1, resources=R("GPU=2"), gpus=(0,))


def test_no_head_of_line_blocking_behind_a_task_that_does_not_fit():
    state = WorkerState(nthreads=4, resources=R("GPU=1 MEMORY=10"))
    actions = handle(state, execute("gpu1", "GPU=1"), execute("gpu2", "GPU=1", priority=9),
                     execute("cpu"), execute("mem", "MEMORY=10"))
    assert started(actions) == {"gpu1": (0,), "cpu": (), "mem": ()}
    assert state.state_of("gpu2") is WorkerTaskState.READY
    assert started(handle(state, done("gpu1"))) == {"gpu2": (0,)}


def test_halves_share_a_device_and_a_whole_request_waits_for_a_free_one():
    state = WorkerState(nthreads=8, resources=R("GPU=2"))
    actions = handle(state, execute("h1", "GPU=0.5"), execute("h2", "GPU=0.5"),
                     execute("w2", "GPU=2"), execute("w1", "GPU=1"))
    assert started(actions) == {"h1": (0,), "h2": (0,), "w1": (1,)}
    handle(state, done("h1"), done("h2"))
    assert state.state_of("w2") is WorkerTaskState.READY  # device 1 is still taken
    assert started(handle(state, done("w1"))) == {"w2": (0, 1)}


def test_tasks_that_can_never_run_here_are_rejected_not_queued():
    state = WorkerState(nthreads=2, resources=R("GPU=2"))
    [bad] = handle(state, execute("frac", "GPU=1.5"))
    assert isinstance(bad, TaskRejected) and "whole number of GPUs" in bad.reason
    [absent] = handle(state, execute("fpga", "FPGA=1"))
    assert "has no FPGA" in absent.reason
    [big] = handle(state, execute("big", "GPU=3"))
    assert "offers only GPU=2" in big.reason
    assert state.is_idle() and not state.tasks


def test_failure_releases_everything_and_reports_the_exception():
    state = WorkerState(nthreads=1, resources=R("GPU=1"))
    handle(state, execute("x", "GPU=1"), execute("y", "GPU=0.5"))
    actions = handle(state, RunErred("x", b"pickled", "Traceback ... ValueError", 1.0, 2.0))
    assert actions[0] == TaskErred("x", b"pickled", "Traceback ... ValueError", 1.0, 2.0)
    assert started(actions) == {"y": (0,)}
    handle(state, RunErred("y", b"", "boom"))
    assert state.is_idle() and state.results == {}


def test_cancel_of_a_running_task_stops_it_and_frees_only_when_it_has_stopped():
    state = WorkerState(nthreads=1, resources=R("GPU=1"))
    handle(state, execute("x", "GPU=1"), execute("next", "GPU=1"))
    assert handle(state, StopTask("x")) == [KillTask("x")]
    assert handle(state, StopTask("x")) == []
    assert state.ledger.holders() == {"x": (0,)}  # the process may still hold the device
    actions = handle(state, RunStopped("x"))
    assert actions == [TaskStopped("x"), StartTask("next", b"spec-next", (0,), "gpu-process",
                                                       (), R("GPU=1"))]


def test_a_cancelled_task_that_finished_first_is_still_cancelled_and_its_result_dropped():
    state = WorkerState(nthreads=1)
    handle(state, execute("x"), StopTask("x"))
    assert handle(state, done("x")) == [ReleaseResult("x"), TaskStopped("x")]
    assert handle(state, RunStopped("x")) == []  # the late confirmation changes nothing
    assert state.is_idle() and not state.results


def test_cancel_of_a_waiting_task_reports_at_once():
    state = WorkerState(nthreads=1)
    handle(state, execute("a"), execute("b"))
    assert handle(state, StopTask("b")) == [TaskStopped("b")]
    assert handle(state, StopTask("unknown")) == []
    handle(state, done("a"))
    assert state.is_idle()


def test_a_process_that_dies_without_a_cancel_is_a_failure():
    state = WorkerState(nthreads=1)
    handle(state, execute("x"))
    [report] = handle(state, RunStopped("x", reason="killed by signal 9"))
    assert isinstance(report, TaskErred) and "signal 9" in report.text
    assert state.is_idle()


def test_inputs_are_fetched_once_from_peers_and_released_after_use():
    state = WorkerState(nthreads=2, address="tcp://me:1")
    who = {"d": ("tcp://me:1", "tcp://w1:1", "tcp://w2:1")}
    actions = handle(state, execute("t1", who_has=who, nbytes={"d": 800}),
                     execute("t2", who_has=who))
    assert actions == [FetchDependency("d", "tcp://w1:1", 800)]  # never from itself; once
    assert state.state_of("t1") is WorkerTaskState.FETCHING
    assert handle(state, DependencyFetchFailed("d", "tcp://w1:1", "gone")) == [
        FetchDependency("d", "tcp://w2:1", 800)
    ]
    actions = handle(state, DependencyFetched("d", 800, "tcp://w2:1"))
    assert started(actions) == {"t1": (), "t2": ()}
    assert actions[0].dependencies == ("d",)
    assert handle(state, done("t1")) == [TaskFinished("t1", 10, 100.0, 101.5, 1.5, 1 << 20)]
    assert handle(state, done("t2"))[-1] == ReleaseResult("d")  # nobody here needs it now
    assert set(state.results) == {"t1", "t2"}


def test_an_input_on_no_reachable_worker_hands_the_task_back():
    state = WorkerState(nthreads=1)
    handle(state, execute("t", who_has={"d": ("tcp://w1:1",), "e": ("tcp://w1:1",)}))
    actions = handle(state, DependencyFetchFailed("d", "tcp://w1:1"))
    assert actions == [MissingData("t", "d", ("tcp://w1:1",))]
    # The other fetch was already under way: its data is dropped on arrival.
    assert handle(state, DependencyFetched("e", 5)) == [ReleaseResult("e")]
    assert state.is_idle()
    assert handle(state, execute("u", who_has={"d": ()})) == [MissingData("u", "d", ())]


def test_a_task_can_wait_for_a_result_being_computed_here():
    state = WorkerState(nthreads=2)
    handle(state, execute("a"), execute("b", who_has={"a": ("tcp://me:1",)}))
    assert state.state_of("b") is WorkerTaskState.FETCHING and not state.fetches
    assert started(handle(state, done("a"))) == {"b": ()}
    handle(state, RunErred("x-unknown", b"", ""))  # stale: ignored
    handle(state, StopTask("b"))
    # A dependent of a task that ends without a result is handed back.
    handle(state, execute("c"), execute("d", who_has={"c": ("tcp://me:1",)}))
    actions = handle(state, RunErred("c", b"", "boom"))
    assert MissingData("d", "c", ()) in actions


def test_free_keys_releases_results_but_keeps_those_still_needed_here():
    state = WorkerState(nthreads=1)
    handle(state, execute("a"), done("a"), execute("b", who_has={"a": ()}))
    handle(state, execute("c", who_has={"a": ()}))  # waits for the one thread
    assert handle(state, Free(("a", "nothing"))) == []
    assert state.state_of("a") is None and "a" in state.results  # borrowed now
    handle(state, done("b"))
    assert handle(state, done("c")) == [TaskFinished("c", 10, 100.0, 101.5, 1.5, 1 << 20),
                                        ReleaseResult("a")]
    assert handle(state, Free(("b", "c"))) == [ReleaseResult("b"), ReleaseResult("c")]
    assert state.results == {} and state.is_idle()


def test_drain_hands_back_waiting_tasks_and_lets_running_ones_finish():
    state = WorkerState(nthreads=1)
    handle(state, execute("run"), execute("wait"), execute("fetch", who_has={"d": ("w",)}))
    actions = handle(state, DrainRequested())
    assert actions == [Draining(),  # first, so the scheduler stops sending work here
                       TaskRejected("wait", "the worker is closing"),
                       TaskRejected("fetch", "the worker is closing")]
    assert handle(state, DrainRequested()) == []
    assert handle(state, execute("new")) == [TaskRejected("new", "the worker is closing")]
    handle(state, done("run"))
    assert handle(state, DependencyFetched("d", 1)) == [ReleaseResult("d")]
    assert state.is_idle()


def test_snapshot_for_reconnect_and_a_repeated_execute_is_answered_not_rerun():
    state = WorkerState(nthreads=1, resources=R("GPU=1"))
    handle(state, execute("a", "GPU=1"), execute("b"))
    snapshot = state.snapshot()
    assert [(r.key, r.state, r.gpus) for r in snapshot.running] == [("a", "executing", (0,))]
    assert snapshot.waiting == ("b",) and snapshot.results == {}
    assert handle(state, execute("a", "GPU=1")) == []
    [report] = handle(state, done("a"))[:1]
    assert handle(state, execute("a", "GPU=1")) == [report]


def test_unknown_events_and_bad_construction_are_errors():
    with pytest.raises(TypeError):
        WorkerState(1).handle(object(), 0.0)
    with pytest.raises(ValueError):
        WorkerState(0)


def test_a_copy_asked_for_is_fetched_kept_and_reported_then_freed_like_a_result():
    state = WorkerState(nthreads=1)
    assert handle(state, Replicate("r", ("tcp://a", "tcp://b"), 5)) == [
        FetchDependency("r", "tcp://a", 5)]
    assert handle(state, DependencyFetchFailed("r", "tcp://a", "peer gone")) == [
        FetchDependency("r", "tcp://b", 5)]  # another holder, though no task here needs it
    assert handle(state, DependencyFetched("r", 5, "tcp://b")) == [Replicated("r", 5)]
    assert state.snapshot().results == {"r": 5}  # kept, and adopted again on a reconnect
    # asked to run it (the scheduler did not know the copy was here): done, untimed
    assert handle(state, execute("r")) == [TaskFinished("r", 5, 0.0, 0.0, -1.0)]
    assert handle(state, Free(("r",))) == [ReleaseResult("r")]
    assert state.is_idle() and state.results == {}


def test_a_copy_that_cannot_be_fetched_is_reported_with_the_reason():
    state = WorkerState(nthreads=1)
    handle(state, Replicate("r", ("tcp://a",)))
    assert handle(state, DependencyFetchFailed("r", "tcp://a", "peer gone")) == [
        ReplicateFailed("r", "peer gone")]
    assert handle(state, Replicate("s", ())) == [
        ReplicateFailed("s", "no other worker holds it")]
    handle(state, DrainRequested())
    assert handle(state, Replicate("t", ("tcp://a",))) == [
        ReplicateFailed("t", "the worker is closing")]


def test_an_input_being_fetched_for_a_task_is_also_kept_when_a_copy_is_asked_for():
    state = WorkerState(nthreads=1)
    handle(state, execute("t", who_has={"d": ("tcp://a",)}))
    assert handle(state, Replicate("d", ("tcp://a",))) == []  # already on its way
    actions = handle(state, DependencyFetched("d", 3, "tcp://a"))
    assert actions[0] == Replicated("d", 3) and started(actions) == {"t": ()}
    handle(state, done("t"))
    assert "d" in state.results  # the task is done, but the scheduler counts this copy


def test_a_missing_input_is_reported_with_the_fetch_error():
    state = WorkerState(nthreads=1)
    handle(state, execute("t", who_has={"d": ("tcp://a",)}))
    assert handle(state, DependencyFetchFailed("d", "tcp://a", "over comm.max_message_size")) == [
        MissingData("t", "d", ("tcp://a",), "over comm.max_message_size")]


def test_an_input_that_cannot_travel_is_not_asked_of_other_holders():
    state = WorkerState(nthreads=1)
    handle(state, execute("t", who_has={"d": ("tcp://a", "tcp://b")}))
    assert handle(state, DependencyFetchFailed("d", "tcp://a", "cannot pickle", True)) == [
        MissingData("t", "d", ("tcp://a",), "cannot pickle", True)]


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("px, py, first", [(-1, 0, "y"), (0, -1, "x"), (1, 0, "x")])
def test_constrained_vs_ready_priority(px, py, first, swap):
    """Dask's test_constrained_vs_ready_priority_1: held beside each other, a resource-free
    task and one that needs R start in priority order, whichever arrived first."""
    state = WorkerState(nthreads=1, resources=R("R=1"))
    handle(state, execute("clog"))
    arrivals = [execute("x", priority=px), execute("y", "R=1", priority=py)]
    handle(state, *(arrivals[::-1] if swap else arrivals))
    assert list(started(handle(state, done("clog")))) == [first]


def test_at_the_drain_deadline_running_tasks_are_handed_back_never_failed():
    from dsched.worker.events import DrainTimedOut

    state = WorkerState(nthreads=2, resources=R("GPU=1"))
    handle(state, execute("on-gpu", "GPU=1"), execute("on-thread"))
    handle(state, DrainRequested())
    actions = handle(state, DrainTimedOut())
    # The thread cannot be stopped: handed back at once. The GPU process is killed first.
    assert actions == [KillTask("on-gpu"), TaskRejected("on-thread", "the worker is closing")]
    assert handle(state, RunStopped("on-gpu", "killed by signal 9")) == [
        TaskRejected("on-gpu", "the worker is closing")]
    assert handle(state, done("on-thread")) == [ReleaseResult("on-thread")]  # ignored
    assert state.is_idle()


def test_at_the_drain_deadline_a_thread_task_asked_to_stop_before_is_left_too():
    from dsched.worker.events import DrainTimedOut

    state = WorkerState(nthreads=2, resources=R("GPU=1"))
    handle(state, execute("on-thread"), execute("on-gpu", "GPU=1"))
    # the scheduler asked both to stop (their futures were dropped): neither ended yet
    assert handle(state, StopTask("on-thread"), StopTask("on-gpu")) == [
        KillTask("on-thread"), KillTask("on-gpu")]
    handle(state, DrainRequested())
    # The thread cannot be stopped: its stop is said at once, and the worker may leave (it
    # waited the jobs' grace period for it); the GPU process is being killed already.
    assert handle(state, DrainTimedOut()) == [TaskStopped("on-thread")]
    assert handle(state, RunStopped("on-gpu", "killed by signal 9")) == [TaskStopped("on-gpu")]
    assert state.is_idle()


def test_a_task_being_stopped_and_sent_again_ends_as_the_run_asked_for():
    # On a thread it runs on: its end is reported as a finish.
    state = WorkerState(nthreads=1)
    handle(state, execute("x"), StopTask("x"))
    assert handle(state, execute("x")) == []
    assert [type(a) for a in handle(state, done("x"))] == [TaskFinished]
    # In a GPU process it was killed: it starts again once it is gone.
    state = WorkerState(nthreads=1, resources=R("GPU=1"))
    handle(state, execute("y", "GPU=1"), StopTask("y"))
    assert handle(state, execute("y", "GPU=1")) == []
    assert list(started(handle(state, RunStopped("y", "killed by signal 9")))) == ["y"]


def test_the_worker_books_the_devices_the_scheduler_granted_once_they_are_free_here():
    gb = 10**9
    state = WorkerState(nthreads=4, resources=R("GPU=2 GPU_MEMORY=48e9"),
                        gpus={0: 24 * gb, 1: 24 * gb})
    granted = Execute("a", b"spec-a", R("GPU_MEMORY=20G"), gpus=(1,))
    assert started(handle(state, granted)) == {"a": (1,)}  # device 1, as granted
    # device 1 has 4 GB left: a task granted it waits for it, though device 0 is free
    second = Execute("b", b"spec-b", R("GPU_MEMORY=10G"), gpus=(1,))
    assert started(handle(state, second)) == {}
    assert state.state_of("b") is WorkerTaskState.READY
    assert started(handle(state, done("a"))) == {"b": (1,)}


def test_memory_more_than_any_device_of_the_worker_has_is_rejected_with_its_devices():
    state = WorkerState(nthreads=2, resources=R("GPU=2 GPU_MEMORY=48e9"),
                        gpus={0: 24 * 10**9, 1: 24 * 10**9})
    [rejected] = handle(state, execute("big", "GPU_MEMORY=30G"))
    assert isinstance(rejected, TaskRejected)
    assert rejected.reason == ("no device of this worker could grant GPU_MEMORY=3e10 "
                               "(device 0: 24 GB, device 1: 24 GB)")

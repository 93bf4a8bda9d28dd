"""A GPU device that faults, as the worker core sees it (``gpufaults.py``): it is fenced, the
work on it stopped and handed back with the fault as its reason, what waited for it handed
back too, the fence said again at each registration, and an operator's release lifts it.
validate() after every event."""

from dsched.policy import WorkerPolicy
from dsched.protocol.ops import (
    Execute, GpuFenced, GpuReleased, TaskRejected, UnfenceGpu,
)
from dsched.resources import Resources
from dsched.worker.actions import KillJob, KillTask
from dsched.worker.events import GpuFaulted, RunStopped, SessionLost, SessionOpened
from dsched.worker.gpufaults import FAULT
from dsched.worker.state import WorkerState

R = Resources.parse
GB = 10**9
XID_79 = "gpu fault: Xid 79 on gpu1 (GPU-1)"


def handle(state: WorkerState, *events):
    actions = []
    for event in events:
        actions += state.handle(event, 10.0)
        state.validate()
    return actions


def worker() -> WorkerState:
    state = WorkerState(8, R("GPU=2 GPU_MEMORY=160e9"), gpus={0: 80 * GB, 1: 80 * GB},
                        policy=WorkerPolicy(job_lease=100.0))
    handle(state, SessionOpened(10.0))
    return state


def job(key: str, resources: str, gpus: tuple[int, ...]) -> Execute:
    return Execute(key, (b"", b""), R(resources), job={"command": ["train"], "env": {},
                                                      "cwd": None, "time_limit": None,
                                                      "name": "n"}, gpus=gpus)


def task(key: str, resources: str, gpus: tuple[int, ...]) -> Execute:
    return Execute(key, b"spec", R(resources), gpus=gpus)


def test_a_fault_fences_the_device_and_hands_back_the_work_on_it_with_the_reason():
    state = worker()
    handle(state, job("job-1.1", "GPU_MEMORY=60G", (1,)), task("t-on-1", "GPU_MEMORY=10G", (1,)),
           task("t-on-0", "GPU=1", (0,)), task("t-waits", "GPU_MEMORY=30G", (1,)))
    actions = handle(state, GpuFaulted(1, XID_79))
    assert actions == [GpuFenced(1, XID_79), KillJob("job-1.1", FAULT, XID_79),
                       KillTask("t-on-1"), TaskRejected("t-waits", XID_79)]
    assert not state.slots.ledger.fits(R("GPU_MEMORY=1G"))  # device 0 is held whole
    # the Python task's process is killed: it goes back as refused, with the fault
    assert handle(state, RunStopped("t-on-1", "killed")) == [TaskRejected("t-on-1", XID_79)]
    assert handle(state, GpuFaulted(1, XID_79)) == []  # fenced once


def test_a_fence_is_said_again_at_each_registration_until_an_operator_releases_it():
    state = worker()
    handle(state, GpuFaulted(1, XID_79))
    handle(state, SessionLost())
    assert handle(state, SessionOpened(20.0)) == [GpuFenced(1, XID_79)]
    assert handle(state, UnfenceGpu(1)) == [GpuReleased(1)]
    assert handle(state, UnfenceGpu(1)) == []
    handle(state, task("t", "GPU=1", (1,)))
    assert state.slots.ledger.held("t") == (1,)  # it runs there again


def test_a_fault_of_a_device_the_worker_does_not_have_changes_nothing():
    state = worker()
    assert handle(state, GpuFaulted(7, "gpu fault: Xid 79 on gpu7")) == []


def test_work_granted_a_fenced_device_is_refused_whether_it_arrives_late_or_waits_for_input():
    state = worker()
    fetching = Execute("needs-x", b"spec", R("GPU=1"), who_has={"x": ("peer:1",)}, gpus=(1,))
    handle(state, fetching)
    actions = handle(state, GpuFaulted(1, XID_79))
    assert TaskRejected("needs-x", XID_79) in actions and "needs-x" not in state.tasks
    late = handle(state, task("late", "GPU=1", (1,)), job("job-2.1", "GPU=1", (1,)))
    assert late == [TaskRejected("late", XID_79), TaskRejected("job-2.1", XID_79)]


def test_a_task_sent_again_waits_for_the_devices_granted_now():
    state = worker()
    handle(state, task("a", "GPU=2", (0, 1)), task("b", "GPU=1", (1,)))
    assert state.tasks["b"].granted == (1,)
    handle(state, task("b", "GPU=1", (0,)))  # placed again, on device 0, after a reconnect
    assert state.tasks["b"].granted == (0,)

"""WorkerState and shell-command jobs, as a story of events in and instructions out:
slots and resources, never started twice, outcomes kept until acknowledged, what a
registration lists, the session and the lease, cancel and drain, and gpu<N> pinning.
validate() after every event."""

import pytest

from dsched.policy import WorkerPolicy
from dsched.protocol.ops import (
    AttemptAck, AttemptEnded, AttemptStarted, Execute, Lease, Proceed, StopTask, TaskFinished,
    TaskRejected,
)
from dsched.resources import Resources
from dsched.worker.actions import (
    CANCEL, SHUTDOWN, DropJob, EndUnstartedJob, ExtendLease, ForgetAttempt, KillJob, ProceedJob,
    StartJob, StartTask,
)
from dsched.worker.events import (
    AttemptsRecovered, DrainRequested, DrainTimedOut, RunFinished, SessionLost, SessionOpened,
)
from dsched.worker.state import WorkerTaskState, WorkerState

R = Resources.parse
LEASE = 100.0
#: The worker's monotonic clock as the shell hands each event over, unless a test says.
NOW = 10.0


def handle(state: WorkerState, *events, now: float = NOW):
    actions = []
    for event in events:
        actions += state.handle(event, now)
        state.validate()
    return actions


def registered(nthreads=2, resources=None, **kwargs) -> WorkerState:
    """A worker whose session opened at time 10 (its monotonic clock)."""
    state = WorkerState(nthreads, R(resources), policy=WorkerPolicy(job_lease=LEASE), **kwargs)
    assert handle(state, SessionOpened(10.0)) == []  # no job runs yet: no lease to extend
    return state


def job(key, resources=None, priority=0, command=("train", "--fast"), hold=False):
    return Execute(key, (b"", b""), R(resources), priority,
                   job={"command": list(command), "env": {"A": "1"}, "cwd": None,
                        "time_limit": None, "name": "n"}, hold=hold)


def started(key, pid=4321, gpus=()):
    return AttemptStarted(key, pid, f"/jobs/{key}.log", gpus, 1000.0)


def ended(key, outcome="completed", exit_code=0):
    return AttemptEnded(key, outcome, exit_code, "", f"/jobs/{key}.log", 1000.0, 1005.0)


def starts(actions):
    return {a.key: a.gpus for a in actions if isinstance(a, (StartJob, StartTask))}


def test_a_job_starts_with_its_command_devices_and_lease_and_reports_its_steps():
    state = registered(resources="GPU=2")
    actions = handle(state, job("job-1.1", "GPU=1"))
    assert actions == [StartJob("job-1.1", job("job-1.1").job, (0,), R("GPU=1"), 10.0 + LEASE)]
    assert state.state_of("job-1.1") is WorkerTaskState.EXECUTING and state.used == R("GPU=1")
    assert handle(state, started("job-1.1", gpus=(0,))) == [started("job-1.1", gpus=(0,))]
    assert handle(state, ended("job-1.1")) == [ended("job-1.1")]
    assert state.is_idle() and state.available == R("GPU=2")


def test_jobs_take_task_slots_and_one_that_does_not_fit_holds_back_none_behind_it():
    state = registered(nthreads=2, resources="GPU=1")
    actions = handle(state, job("job-1.1", "GPU=1"), job("job-2.1", "GPU=1", priority=9),
                     job("job-3.1"), Execute("t", (b"f", b"a")), job("job-4.1"))
    assert starts(actions) == {"job-1.1": (0,), "job-3.1": ()}  # two threads
    assert state.free_threads == 0
    assert state.state_of("job-2.1") is WorkerTaskState.READY
    assert starts(handle(state, ended("job-3.1"))) == {"t": ()}  # GPU still taken: t, in order
    assert starts(handle(state, ended("job-1.1"))) == {"job-2.1": (0,)}


def test_a_job_waits_while_no_session_is_up():
    state = WorkerState(1, policy=WorkerPolicy(job_lease=LEASE))
    assert handle(state, job("job-1.1")) == []
    assert state.state_of("job-1.1") is WorkerTaskState.READY
    actions = handle(state, SessionOpened(50.0))
    assert actions == [StartJob("job-1.1", job("job-1.1").job, (), R(None), 50.0 + LEASE)]


def test_an_attempt_is_never_started_twice():
    state = registered()
    handle(state, job("job-1.1"))
    assert handle(state, job("job-1.1")) == []  # still running: nothing to say
    handle(state, started("job-1.1"), ended("job-1.1", "failed", 3))
    # Ended: answered with what is known, not run again.
    assert handle(state, job("job-1.1")) == [ended("job-1.1", "failed", 3)]


def test_an_outcome_is_kept_until_acknowledged_then_its_record_is_forgotten():
    state = registered()
    handle(state, job("job-1.1"), started("job-1.1"), ended("job-1.1"))
    assert state.snapshot().attempts == (ended("job-1.1"),)
    assert handle(state, AttemptAck(("job-1.1", "job-9.9"))) == [ForgetAttempt("job-1.1")]
    assert state.snapshot().attempts == ()
    assert handle(state, AttemptAck(("job-1.1",))) == []


def test_a_registration_lists_running_and_unacknowledged_attempts_and_no_job_as_a_task():
    state = registered(nthreads=3)
    handle(state, job("job-1.1"), job("job-2.1"), job("job-3.1"), started("job-1.1"),
           started("job-3.1"), ended("job-3.1"), Execute("t", (b"f", b"a")))
    snapshot = state.snapshot()
    # job-2.1 has been handed to its supervisor, which has not said it started: listed as
    # being started (pid 0), so the scheduler does not dispatch it again elsewhere.
    assert snapshot.attempts == (started("job-1.1"), AttemptStarted("job-2.1", 0, "", (), 0.0),
                                 ended("job-3.1"))
    assert [t.key for t in snapshot.running] == ["t"] and snapshot.waiting == ()


def test_a_lost_session_drops_unstarted_jobs_silently_and_keeps_running_ones():
    state = registered(nthreads=1)
    handle(state, job("job-1.1"), job("job-2.1"), Execute("t", (b"f", b"a")))
    assert handle(state, SessionLost()) == []  # not reported: the scheduler puts it back
    assert state.state_of("job-2.1") is None
    assert state.state_of("job-1.1") is WorkerTaskState.EXECUTING
    assert state.state_of("t") is WorkerTaskState.READY  # tasks are not the session's to drop
    assert [a.key for a in state.snapshot().attempts] == ["job-1.1"]


def held(key, resources=None):
    """The attempt ``key`` sent ahead of the scheduler's commit (``Execute.hold``)."""
    return job(key, resources, hold=True)


def test_a_held_attempt_is_prepared_held_and_told_to_proceed_once_committed():
    state = registered(nthreads=1)
    actions = handle(state, held("job-1.1"), held("job-2.1"))
    assert actions == [StartJob("job-1.1", job("job-1.1").job, (), R(None), 10.0 + LEASE,
                                hold=True)]
    assert handle(state, Proceed(("job-1.1", "job-2.1", "job-9.1"))) == [ProceedJob("job-1.1")]
    assert handle(state, Proceed(("job-1.1",))) == []  # said once
    # job-2.1, committed before it could start, starts unheld
    actions = handle(state, started("job-1.1"), ended("job-1.1"))
    assert [a for a in actions if type(a) is StartJob] == [
        StartJob("job-2.1", job("job-2.1").job, (), R(None), 10.0 + LEASE, hold=False)]


def test_a_held_attempt_whose_session_ends_is_dropped_unlisted_and_may_be_sent_again():
    state = registered(nthreads=2, resources="GPU=1")
    handle(state, held("job-1.1", "GPU=1"), job("job-2.1"))
    handle(state, started("job-2.1"))
    assert handle(state, SessionLost()) == [DropJob("job-1.1")]  # job-2.1 runs on
    assert state.available == R("GPU=1") and state.free_threads == 1
    assert [a.key for a in state.snapshot().attempts] == ["job-2.1"]
    assert handle(state, Proceed(("job-1.1",))) == []  # too late: dropped
    handle(state, SessionOpened(20.0))
    actions = handle(state, job("job-1.1", "GPU=1"))  # the scheduler put it back: sent again
    assert [(a.key, a.hold) for a in actions if type(a) is StartJob] == [("job-1.1", False)]


def test_a_held_attempt_stopped_or_drained_is_no_longer_held():
    state = registered(nthreads=1)
    handle(state, held("job-1.1"), held("job-2.1"))
    assert handle(state, StopTask("job-2.1")) == [
        EndUnstartedJob("job-2.1", "cancelled", "cancelled before it started")]
    assert handle(state, StopTask("job-1.1")) == [KillJob("job-1.1", CANCEL)]
    assert state.attempts.held == {"job-1.1"}  # until its end is heard
    handle(state, AttemptEnded("job-1.1", "cancelled", None, "cancelled before it started",
                               "/jobs/job-1.1.log", None, 1.0))
    assert state.attempts.held == set()


def test_leases_extend_running_jobs_and_never_shrink():
    state = registered()
    assert handle(state, Lease(20.0)) == []  # nothing running
    handle(state, job("job-1.1"))
    assert handle(state, Lease(30.0)) == [ExtendLease(30.0 + LEASE)]
    assert handle(state, Lease(25.0)) == []  # a late answer to an older heartbeat
    assert handle(state, SessionLost(), SessionOpened(40.0)) == [ExtendLease(40.0 + LEASE)]
    assert handle(state, job("job-2.1"))[0].lease_until == 40.0 + LEASE


def test_no_job_starts_once_the_lease_has_run_out_until_a_new_lease():
    state = registered(nthreads=1)
    over = 10.0 + LEASE  # the scheduler was silent that long, or this worker was frozen
    assert handle(state, job("job-1.1"), now=over) == []
    assert state.state_of("job-1.1") is WorkerTaskState.READY
    # A late answer to a heartbeat sent before then renews a lease that is over by now.
    assert handle(state, Lease(over - LEASE + 1.0), now=over + 2.0) == []
    assert handle(state, Lease(over + 2.0), now=over + 2.5) == [
        StartJob("job-1.1", job("job-1.1").job, (), R(None), over + 2.0 + LEASE)]


def test_stop_task_kills_a_running_job_and_ends_an_unstarted_one():
    state = registered(nthreads=1)
    handle(state, job("job-1.1"), job("job-2.1"))
    assert handle(state, StopTask("job-1.1")) == [KillJob("job-1.1", CANCEL)]
    assert handle(state, StopTask("job-1.1")) == []  # being stopped already
    assert handle(state, StopTask("job-2.1")) == [
        EndUnstartedJob("job-2.1", "cancelled", "cancelled before it started")]
    assert state.state_of("job-2.1") is None
    # The shell stamps the time on the outcome and hands it back: kept and reported.
    cancelled = AttemptEnded("job-2.1", "cancelled", None, "cancelled before it started",
                             ended=1001.0)
    assert handle(state, cancelled) == [cancelled]
    assert handle(state, job("job-2.1")) == [cancelled]
    stopped = ended("job-1.1", "cancelled", -15)
    assert handle(state, stopped) == [stopped] and state.is_idle()


def test_draining_hands_back_unstarted_jobs_and_shuts_running_ones_down_at_the_deadline():
    state = registered(nthreads=1)
    handle(state, job("job-1.1"), job("job-2.1"))
    assert handle(state, DrainRequested())[1:] == [TaskRejected("job-2.1",
                                                                "the worker is closing")]
    assert handle(state, job("job-3.1")) == [TaskRejected("job-3.1", "the worker is closing")]
    assert handle(state, DrainTimedOut()) == [KillJob("job-1.1", SHUTDOWN)]
    assert state.running_jobs() == ["job-1.1"]
    handle(state, ended("job-1.1", "lost", -15))
    assert state.running_jobs() == [] and state.is_idle()


def test_attempts_an_earlier_process_left_are_listed_and_answer_their_execute():
    state = WorkerState(1, policy=WorkerPolicy(job_lease=LEASE))
    lost = AttemptEnded("job-5.2", "lost", None, "its worker process ended while it ran")
    handle(state, AttemptsRecovered((lost,)), SessionOpened(0.0))
    assert state.snapshot().attempts == (lost,)
    assert handle(state, job("job-5.2")) == [lost]


@pytest.mark.parametrize("key, fields, error", [
    ("job-1.1", {"command": []}, "its command is not a non-empty list of strings"),
    ("job-1.1", {"command": ["x", 1]}, "its command is not a non-empty list of strings"),
    ("job-1.1", {"command": ["x"], "env": {"A": 1}}, "its env does not map names to strings"),
    ("job-1.1", {"command": ["x"], "cwd": 3}, "its cwd is not a string"),
    ("job-1.1", {"command": ["x"], "time_limit": -1}, "its time limit is not a positive number"),
    ("../etc", {"command": ["x"]}, "'../etc' is not the key of a job attempt"),
])
def test_a_malformed_job_is_rejected_with_the_reason(key, fields, error):
    state = registered()
    reply, = handle(state, Execute(key, (b"", b""), job=fields))
    assert type(reply) is TaskRejected and reply.reason.startswith(f"a malformed job: {error}")


def test_a_job_that_never_fits_is_rejected():
    state = registered(resources="GPU=1")
    assert handle(state, job("job-1.1", "GPU=2")) == [
        TaskRejected("job-1.1", "the task needs GPU=2 but this worker offers only GPU=1")]


def test_gpu_n_resources_pin_a_job_to_those_devices():
    state = registered(nthreads=3, resources="gpu0=1 gpu1=1")
    actions = handle(state, job("job-1.1", "gpu0=1 gpu1=1"), job("job-2.1", "gpu1=1"))
    assert starts(actions) == {"job-1.1": (0, 1)}  # job-2.1 waits for gpu1
    assert starts(handle(state, ended("job-1.1"))) == {"job-2.1": (1,)}


def test_gpu_n_resources_pin_a_python_task_in_a_gpu_process():
    state = WorkerState(2, R("GPU=1 gpu3=1"), gpus=(5,))
    actions = handle(state, Execute("a", (b"f", b"x"), R("gpu3=1")),
                     Execute("b", (b"f", b"x"), R("GPU=1 gpu3=0.5")))
    assert actions[0] == StartTask("a", (b"f", b"x"), (3,), "gpu-process", (), R("gpu3=1"))
    assert starts(actions) == {"a": (3,)}  # b waits for gpu3
    assert starts(handle(state, RunFinished("a", 1, 0.0, 1.0))) == {"b": (3, 5)}

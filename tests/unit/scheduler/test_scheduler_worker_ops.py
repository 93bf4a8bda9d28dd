"""The scheduler's shell and a worker's connections: a connection hears nothing before its
Registered, and a registration's answer goes to the connection it came on. An op decided for
the worker's earlier connection (queued behind a journal commit while the worker registered
again) is not sent on the new one: the registration has made the state reconcile what it was
about, and a worker whose first op is not Registered gives up."""

from __future__ import annotations

from dataclasses import replace

from dsched.resources import Resources
from dsched.scheduler import actions as act
from dsched.scheduler.server import Scheduler
from dsched.settings import CommConfig, SchedulerConfig

W1 = "tcp://w1"


class Comm:
    closed = False

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.closed_with = ""

    def write_nowait(self, wire: dict, bulk: bool = False) -> None:
        self.sent.append(wire["op"])

    def flush_now(self) -> None:
        self.sent.append("(sent)")

    def close_nowait(self, reason: str) -> None:
        self.closed_with = reason


def register(scheduler: Scheduler) -> Comm:
    """A connection from W1 whose register op came, as ``_serve_worker`` books it."""
    comm = Comm()
    scheduler.links.register(W1, comm)
    return comm


def execute(key: str) -> act.SendExecute:
    return act.SendExecute(key=key, worker=W1, spec=b"", resources=Resources(),
                           job={"command": ["true"]})


def test_a_workers_connection_hears_nothing_before_its_registered():
    scheduler = Scheduler(SchedulerConfig(), CommConfig(), token="t")
    comm = register(scheduler)
    scheduler._carry_out(execute("job-1.1"))  # decided for an earlier connection
    scheduler._carry_out(act.SendAttemptAck(worker=W1, keys=("job-0.1",)))
    assert comm.sent == []
    scheduler._carry_out(act.WorkerAccepted(worker=W1))
    scheduler._carry_out(act.SendProceed(worker=W1, keys=("job-2.1",)))
    assert comm.sent == ["registered", "proceed"]


def test_a_registrations_answer_goes_to_the_connection_it_came_on():
    scheduler = Scheduler(SchedulerConfig(), CommConfig(), token="t")
    second = register(scheduler)
    third = register(scheduler)  # the worker registered again before the second's answer
    scheduler._carry_out(act.WorkerAccepted(worker=W1))  # the second's: it is gone
    scheduler._carry_out(execute("job-1.1"))  # decided for the second connection
    scheduler._carry_out(act.CloseWorker(worker=W1, reason="stopped answering"))
    assert (second.sent, third.sent) == ([], [])
    scheduler._carry_out(act.WorkerAccepted(worker=W1))  # the third's
    assert third.sent == ["registered"]


def test_a_refusal_closes_the_connection_it_answers():
    scheduler = Scheduler(SchedulerConfig(), CommConfig(), token="t")
    refused = register(scheduler)
    accepted = register(scheduler)
    scheduler._carry_out(act.CloseWorker(worker=W1, reason="a worker needs a thread",
                                         refused=True))
    scheduler._carry_out(act.WorkerAccepted(worker=W1))
    assert refused.closed_with == "refused: a worker needs a thread"
    assert (accepted.closed_with, accepted.sent) == ("", ["registered"])


def test_a_commits_held_attempts_go_to_a_worker_in_one_message():
    scheduler = Scheduler(SchedulerConfig(), CommConfig(), token="t")
    comm = register(scheduler)
    scheduler._carry_out(act.WorkerAccepted(worker=W1))
    for key in ("job-1.1", "job-2.1"):
        scheduler._carry_out(replace(execute(key), hold=True))
    assert comm.sent == ["registered", "execute", "execute"]  # not flushed one by one
    scheduler.links.flush()  # the group commit: every attempt of its write went ahead
    scheduler.links.flush()  # nothing more to send
    assert comm.sent == ["registered", "execute", "execute", "(sent)"]


def test_a_commits_acknowledgements_and_proceeds_go_to_a_worker_when_flushed():
    scheduler = Scheduler(SchedulerConfig(), CommConfig(), token="t")
    comm = register(scheduler)
    scheduler._carry_out(act.WorkerAccepted(worker=W1))
    scheduler._carry_out(act.SendAttemptAck(worker=W1, keys=("job-1.1",)))
    scheduler._carry_out(act.SendProceed(worker=W1, keys=("job-2.1",)))
    assert comm.sent == ["registered", "attempt-ack", "proceed"]
    scheduler.links.flush()  # the group commit, once its worker ops are carried out
    assert comm.sent == ["registered", "attempt-ack", "proceed", "(sent)"]


async def test_a_connection_that_ends_is_not_kept_for_the_next_flush():
    # Ops go to workers outside commits too (a tasks-only scheduler may never commit): the
    # connections they went on must not pile up in the set the next commit flushes.
    from dsched.errors import CommClosedError
    from dsched.protocol import ops

    class Leaving(Comm):
        async def recv(self):
            return [ops.Register(name="w1", address=W1, nthreads=1, job_lease=60.0).to_wire()]

        def __aiter__(self):
            return self

        async def __anext__(self):
            raise CommClosedError("gone")

        async def close(self, reason: str) -> None:
            self.closed = True

    scheduler = Scheduler(SchedulerConfig(), CommConfig(), token="t")
    comm = Leaving()
    await scheduler._serve_worker(comm)
    assert "registered" in comm.sent  # written to: it was in the set while it lasted
    assert comm not in scheduler.links._to_flush

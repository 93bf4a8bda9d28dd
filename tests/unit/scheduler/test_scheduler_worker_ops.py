"""The scheduler's shell and a worker's connection: a connection hears nothing before its
Registered. An op decided for the worker's earlier connection (queued behind a journal commit
while the worker registered again) is not sent on the new one: the registration has made the
state reconcile what it was about, and a worker whose first op is not Registered gives up."""

from __future__ import annotations

from dsched.resources import Resources
from dsched.scheduler import actions as act
from dsched.scheduler.server import Scheduler
from dsched.settings import CommConfig, SchedulerConfig


class Comm:
    closed = False

    def __init__(self) -> None:
        self.sent: list[str] = []

    def write_nowait(self, wire: dict, bulk: bool = False) -> None:
        self.sent.append(wire["op"])


def test_a_workers_connection_hears_nothing_before_its_registered():
    scheduler = Scheduler(SchedulerConfig(), CommConfig(), token="t")
    comm = scheduler.workers["tcp://w1"] = Comm()
    stale = act.SendExecute(key="job-1.1", worker="tcp://w1", spec=b"", resources=Resources(),
                            job={"command": ["true"]})
    scheduler._carry_out(stale)
    scheduler._carry_out(act.SendAttemptAck(worker="tcp://w1", keys=("job-0.1",)))
    assert comm.sent == []
    scheduler._carry_out(act.WorkerAccepted(worker="tcp://w1"))
    scheduler._carry_out(act.SendProceed(worker="tcp://w1", keys=("job-2.1",)))
    assert comm.sent == ["registered", "proceed"]

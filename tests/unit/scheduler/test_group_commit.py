"""The group commit's shell rules: nothing is said before the rows it depends on are
committed (a job attempt goes ahead only as a hold, its Proceed after the commit), and once
they are, what a worker waits for goes out before what clients hear."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace

from deadline import wait_until_async

from dsched.resources import Resources
from dsched.scheduler import actions as act
from dsched.scheduler.commits import GroupCommit


class Journal:
    path = "journal"

    def __init__(self) -> None:
        self.written: list = []

    def write(self, rows, attempts=()) -> None:
        self.written.append([row["id"] for row in rows])


def group_commit(journal, carry_out, tasks: list, **options) -> GroupCommit:
    """A group commit whose commits run as tasks, gathered in ``tasks``."""
    return GroupCommit(journal, carry_out, fail=lambda why: None,
                       committed=lambda seconds, rows: None,
                       spawn=lambda commit: tasks.append(asyncio.ensure_future(commit))
                       or tasks[-1], **options)


async def test_once_committed_a_workers_ops_go_first_each_kind_in_order():
    journal, done, tasks = Journal(), [], []
    commits = group_commit(journal, done.append, tasks,
                           urgent=lambda action: action.startswith("worker"))
    write = act.JournalWrite(rows=({"id": 1},), causes=frozenset({"end"}))
    commits.carry_out_all([write, "client: job 1 ended", "worker: ack 1", "worker: start 2"])
    commits.carry_out_all(["client: job 2 started", "worker: start 3"])  # waits behind it
    assert done == []  # nothing before the commit
    await asyncio.gather(*tasks)
    assert journal.written == [[1]]
    assert done == ["worker: ack 1", "worker: start 2", "worker: start 3",
                    "client: job 1 ended", "client: job 2 started"]
    commits.close()


async def test_once_committed_a_workers_ops_are_sent_before_what_clients_hear_is_made():
    journal, done, tasks = Journal(), [], []
    commits = group_commit(journal, done.append, tasks,
                           urgent=lambda action: action.startswith("worker"),
                           flush=lambda: done.append("sent"))
    write = act.JournalWrite(rows=({"id": 1},), causes=frozenset({"end"}))
    commits.carry_out_all([write, "client: job 1 ended", "worker: ack 1", "worker: proceed 2"])
    await asyncio.gather(*tasks)
    # the worker waits on its Proceed to spawn the next job: it goes out at once, not at the
    # end of the loop's turn, after the clients' news is made
    assert done == ["worker: ack 1", "worker: proceed 2", "sent", "client: job 1 ended"]
    commits.close()


def test_what_goes_first_by_default_is_every_op_to_a_worker():
    commits = GroupCommit(Journal(), lambda action: None, fail=lambda why: None,
                          committed=lambda seconds, rows: None, spawn=lambda commit: None)
    assert commits._urgent(act.SendAttemptAck(worker="tcp://w1", keys=("job-1.1",)))
    assert not commits._urgent(act.TellJobEnded(clients=("c",), job={"id": 1}))
    commits.close()


def execute(key: str, worker: str = "tcp://w1", job: dict | None = None) -> act.SendExecute:
    return act.SendExecute(key=key, worker=worker, spec=b"", resources=Resources(), job=job)


class SlowJournal(Journal):
    """A journal whose write returns once the test says so."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def write(self, rows, attempts=()) -> None:
        assert self.release.wait(30)
        super().write(rows, attempts)


async def test_a_job_attempt_goes_ahead_of_its_commit_held_and_its_proceed_follows_it():
    journal, done, tasks = SlowJournal(), [], []

    def carry_out(action) -> None:  # what was said, and whether the journal had it then
        done.append((action, len(journal.written)))

    commits = group_commit(journal, carry_out, tasks)
    train = {"command": ["train"]}
    write = act.JournalWrite(rows=({"id": 1}, {"id": 2}), causes=frozenset({"dispatch"}))
    joining = act.WorkerAccepted(worker="tcp://w2")
    commits.carry_out_all([write, execute("job-1.1", job=train), execute("task-a"), joining,
                           execute("job-2.1", worker="tcp://w2", job=train)])
    await wait_until_async(lambda: done, 30, what="the attempt to go ahead")
    journal.release.set()  # the write returns only now
    await asyncio.gather(*tasks)
    assert done == [
        # before the commit: the job attempt, held; not the task, nor anything to a worker
        # whose Registered waits behind the commit (it must hear that first)
        (replace(execute("job-1.1", job=train), hold=True), 0),
        (act.SendProceed(worker="tcp://w1", keys=("job-1.1",)), 1),
        (execute("task-a"), 1),
        (joining, 1),
        (execute("job-2.1", worker="tcp://w2", job=train), 1),
    ]
    commits.close()


async def test_the_attempts_a_commit_starts_go_ahead_together_then_are_sent_once():
    journal, done, tasks = SlowJournal(), [], []
    commits = group_commit(journal, done.append, tasks, flush=lambda: done.append("sent"))
    train = {"command": ["train"]}
    write = act.JournalWrite(rows=({"id": 1}, {"id": 2}), causes=frozenset({"dispatch"}))
    commits.carry_out_all([write, execute("job-1.1", job=train), execute("job-2.1", job=train)])
    await wait_until_async(lambda: "sent" in done, 30, what="the attempts to go ahead")
    # both held attempts written, then sent in one go (the shell flushes each worker once),
    # while the commit's thread still writes
    assert done == [replace(execute("job-1.1", job=train), hold=True),
                    replace(execute("job-2.1", job=train), hold=True), "sent"]
    assert journal.written == []
    journal.release.set()
    await asyncio.gather(*tasks)
    assert done[3:] == [act.SendProceed(worker="tcp://w1", keys=("job-1.1",)),
                        act.SendProceed(worker="tcp://w1", keys=("job-2.1",)), "sent"]
    commits.close()


async def test_nothing_goes_ahead_of_a_commit_that_starts_no_attempt():
    journal, done, tasks = SlowJournal(), [], []
    journal.release.set()
    commits = group_commit(journal, lambda action: done.append((action, len(journal.written))),
                           tasks)
    train = {"command": ["train"]}
    write = act.JournalWrite(rows=({"id": 1},), causes=frozenset({"submit"}))
    commits.carry_out_all([write, execute("job-1.1", job=train)])
    await asyncio.gather(*tasks)
    assert done == [(execute("job-1.1", job=train), 1)]
    commits.close()

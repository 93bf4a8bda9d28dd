"""The group commit's shell rules: nothing is said before the rows it depends on are
committed, and once they are, what a worker waits for goes out before what clients hear."""

from __future__ import annotations

import asyncio

from dsched.scheduler import actions as act
from dsched.scheduler.commits import GroupCommit


class Journal:
    path = "journal"

    def __init__(self) -> None:
        self.written: list = []

    def write(self, rows, attempts=()) -> None:
        self.written.append([row["id"] for row in rows])


async def test_once_committed_a_workers_ops_go_first_each_kind_in_order():
    journal, done, tasks = Journal(), [], []
    commits = GroupCommit(journal, done.append, fail=lambda why: None,
                          committed=lambda seconds, rows: None,
                          spawn=lambda commit: tasks.append(asyncio.ensure_future(commit))
                          or tasks[-1],
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


def test_what_goes_first_by_default_is_every_op_to_a_worker():
    commits = GroupCommit(Journal(), lambda action: None, fail=lambda why: None,
                          committed=lambda seconds, rows: None, spawn=lambda commit: None)
    assert commits._urgent(act.SendAttemptAck(worker="tcp://w1", keys=("job-1.1",)))
    assert not commits._urgent(act.TellJobEnded(clients=("c",), job={"id": 1}))
    commits.close()

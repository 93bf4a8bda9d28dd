"""A worker's AttemptEnded whose exit code (or start) is an integer the wire carries but a
journal's column does not (2**63 to 2**64) is recorded without it: the journal write succeeds.
It once raised OverflowError, which stopped the scheduler; the worker, its report not
acknowledged, sent it again at its next registration, and the restarted scheduler stopped the
same way."""

import msgpack
import pytest

from dsched.protocol import ops
from dsched.scheduler import actions as act, events as ev
from dsched.scheduler.journal import Journal
from sched_story import JobStory, addr, job


def writes(actions):
    return [a for a in actions if isinstance(a, act.JournalWrite)]


def rows_after(s):
    rows = {}
    for a in writes(s.log):
        rows.update((r["id"], r) for r in a.rows)
    return list(rows.values())


@pytest.mark.parametrize("field, kept", [("exit_code", None), ("started", float(2**63))])
def test_a_huge_exit_code_is_left_out_of_the_attempts_row_and_a_start_is_a_float(tmp_path,
                                                                                   field, kept):
    wire = ops.AttemptEnded(key="job-1.1", outcome="failed", exit_code=1, started=1.0).to_wire()
    wire[field] = 2**63
    report = ops.decode(msgpack.unpackb(msgpack.packb(wire)))  # accepted by the protocol
    s = JobStory()
    s.worker("w1")
    s.jobs(job("x"))
    s.start("job-1.1")
    [w] = writes(s(ev.WorkerAttemptEnded(worker=addr("w1"), now=s.now, report=report)))
    journal = Journal(str(tmp_path / "jobs.sqlite"))
    try:
        journal.write(w.rows, w.attempts)
    finally:
        journal.close()
    [row] = w.attempts
    assert row[field] == kept


def test_after_a_restart_the_same_report_from_registration_is_recorded_too(tmp_path):
    s = JobStory()
    s.worker("w1")
    s.jobs(job("x"))
    s.start("job-1.1")
    r = JobStory()
    r(ev.JobsLoaded(rows=tuple(rows_after(s)), now=0.0))
    report = ops.AttemptEnded(key="job-1.1", outcome="completed", exit_code=2**63, started=1.0)
    [w] = writes(r.worker("w1", attempts=(report,)))
    assert w.attempts  # Record: a row is made from the same report
    journal = Journal(str(tmp_path / "jobs.sqlite"))
    try:
        journal.write(w.rows, w.attempts)
    finally:
        journal.close()
    assert [row["exit_code"] for row in w.attempts] == [None]

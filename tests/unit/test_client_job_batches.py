"""Submissions queued one after another leave as one submit-jobs op, and each job still fares
as it would alone: its own number, its own refusal, its own cancel. On the client's own loop a
full batch leaves at once, so that the scheduler takes it while the caller makes the next."""

from __future__ import annotations

import threading

import pytest

from dsched.client.jobs import EAGER, JobDesk
from dsched.client.outbox import Deferred
from dsched.jobspec import job_spec
from dsched.protocol import ops
from test_client_owner import DeskOwner, HeldOutbox


def desk_and_outbox():
    log = []
    outbox = HeldOutbox(log)
    return JobDesk(DeskOwner(log), outbox), outbox, log


def leave(outbox):
    """The queued items leave in order, as the client's loop makes them."""
    made = [item.make() if isinstance(item, Deferred) else item for item in outbox.queue]
    outbox.queue.clear()
    return [op for op in made if op is not None]


def test_submissions_one_after_another_leave_as_one_op_and_each_learns_its_number():
    desk, outbox, _ = desk_and_outbox()
    futures = [desk.submit(job_spec(["echo", str(i)])) for i in range(3)]
    [op] = leave(outbox)
    assert type(op) is ops.SubmitJobs and op.watch and op.id == 1
    assert [job["command"] for job in op.jobs] == [["echo", "0"], ["echo", "1"], ["echo", "2"]]
    assert desk.on_reply(ops.Reply(id=1, value=[7, 8, 9]))
    assert [future.job_id(timeout=5) for future in futures] == [7, 8, 9]
    assert desk.unsettled() == []


def test_an_op_queued_between_two_submissions_keeps_its_place():
    desk, outbox, _ = desk_and_outbox()
    desk.submit(job_spec(["a"]))
    outbox.enqueue(ops.Release(keys=("k",)))
    desk.submit(job_spec(["b"]))
    desk.submit(job_spec(["c"]))
    made = leave(outbox)
    assert [type(op) for op in made] == [ops.SubmitJobs, ops.Release, ops.SubmitJobs]
    assert [len(made[0].jobs), len(made[2].jobs)] == [1, 2]


def test_a_job_that_runs_after_others_goes_alone():
    # An unknown job among those it runs after would have its whole batch refused.
    desk, outbox, _ = desk_and_outbox()
    for deps in ((), (), (5,), (), ()):
        desk.submit(job_spec(["true"], after_ok=deps))
    assert [len(op.jobs) for op in leave(outbox)] == [2, 1, 2]


def test_a_refused_batch_is_sent_again_job_by_job_so_only_the_bad_one_is_refused():
    desk, outbox, log = desk_and_outbox()
    good, bad, cancelled, other = (desk.submit(job_spec(["true"], name=name))
                                   for name in ("good", "bad", "cancelled", "other"))
    [op] = leave(outbox)
    cancelled.cancel()  # while the batch's answer is on its way
    assert desk.on_reply(ops.Error(reason="nothing queued: job 'bad' ...", id=op.id))
    again = [op for kind, op in log if kind == "send"]
    assert [(op.id, op.jobs[0]["name"]) for op in again] == [(1, "good"), (2, "bad"),
                                                             (4, "other")]
    assert [op.jobs[0]["submission"] for op in again] == [
        job["submission"] for job in op.jobs if job["name"] != "cancelled"]
    assert cancelled.cancelled()  # never queued, and not sent again
    assert desk.on_reply(ops.Reply(id=1, value=[7]))
    assert desk.on_reply(ops.Error(reason="nothing queued: job 'bad' ...", id=2))
    assert desk.on_reply(ops.Reply(id=4, value=[8]))
    assert (good.job_id(timeout=5), other.job_id(timeout=5)) == (7, 8)
    with pytest.raises(Exception, match="job 'bad'"):
        bad.job_id(timeout=5)
    assert desk.unsettled() == []


def test_a_job_cancelled_before_its_batch_left_is_left_out_of_it():
    desk, outbox, _ = desk_and_outbox()
    kept, cancelled = desk.submit(job_spec(["a"])), desk.submit(job_spec(["b"]))
    cancelled.cancel()
    [op] = leave(outbox)
    assert [job["command"] for job in op.jobs] == [["a"]] and cancelled.cancelled()
    assert desk.on_reply(ops.Reply(id=op.id, value=[5])) and kept.job_id(timeout=5) == 5


def test_a_batch_unanswered_when_the_connection_is_lost_is_sent_again_whole():
    desk, outbox, log = desk_and_outbox()
    for name in ("a", "b"):
        desk.submit(job_spec([name]))
    [first] = leave(outbox)
    desk.resend()
    [again] = [op for kind, op in log if kind == "send" and type(op) is ops.SubmitJobs]
    assert (again.id, again.jobs) == (first.id, first.jobs)  # the same submission ids


def test_submissions_from_several_threads_each_leave_once():
    desk, outbox, _ = desk_and_outbox()
    futures = []

    def submit_many(name):
        for i in range(200):
            futures.append(desk.submit(job_spec([name, str(i)])))

    threads = [threading.Thread(target=submit_many, args=(name,)) for name in "abc"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sent = [job["submission"] for op in leave(outbox) for job in op.jobs]
    assert len(sent) == len(set(sent)) == 600


def test_a_batch_holds_at_most_a_thousand_jobs():
    desk, outbox, _ = desk_and_outbox()
    for i in range(2500):
        desk.submit(job_spec(["true"]))
    assert [len(op.jobs) for op in leave(outbox)] == [1000, 1000, 500]


class EagerOutbox(HeldOutbox):
    """A held outbox that records what ``flush_now`` sent at once."""

    def __init__(self, log):
        super().__init__(log)
        self.left_at_once = []

    def flush_now(self):
        self.left_at_once += leave(self)


@pytest.mark.parametrize("on_loop", [True, False])
def test_on_the_clients_loop_a_full_batch_leaves_at_once(on_loop):
    log = []
    outbox = EagerOutbox(log)
    desk = JobDesk(DeskOwner(log, on_loop=on_loop), outbox)
    for i in range(EAGER + 5):
        desk.submit(job_spec(["echo", str(i)]))
    at_once = [len(op.jobs) for op in outbox.left_at_once]
    at_the_loops_turn = [len(op.jobs) for op in leave(outbox)]
    # From another thread, the loop sends as it turns, in batches of up to BATCH.
    assert (at_once, at_the_loops_turn) == (([EAGER], [5]) if on_loop else ([], [EAGER + 5]))

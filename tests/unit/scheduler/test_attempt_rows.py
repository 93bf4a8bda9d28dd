"""Every ended job attempt leaves one row for the journal's history, in the journal write of the
change that ends it: an end its worker reported (each attempt of a retried job, an end heard
when the worker comes back), an attempt given up without a report (its worker vanished past its
lease, or came back without it), with the GPUs it held and what it did with them."""

from __future__ import annotations

import pytest

from dsched.jobs import ArraySpec
from dsched.protocol import ops
from dsched.resources import Resources
from dsched.scheduler import actions as act, events as ev
from dsched.scheduler.attemptrows import COLUMNS, backfilled, gpu_amount, view
from dsched.scheduler.outbox import Outbox
from sched_story import JobStory, addr, job, journaled

GPU_USE = {"uuids": ["GPU-aaaa", "GPU-bbbb"], "samples": 12, "util_avg": 61.5,
           "util_peak": 99.0, "mem_avg": 30 * 10**9, "mem_peak": 41 * 10**9}


def ended(s: JobStory, key: str, outcome: str = "completed", exit_code: int | None = 0,
          gpu: dict | None = None, oom: bool = False, started: float = 100.0) -> list:
    """The worker of ``key`` says how it ended, at ``s.now``, with its GPU use."""
    worker = s.job(int(key[4:].split(".")[0])).worker
    return s(ev.WorkerAttemptEnded(worker=addr(worker), now=s.now, report=ops.AttemptEnded(
        key=key, outcome=outcome, exit_code=exit_code, error=f"{outcome}!" * (outcome !=
        "completed"), started=started, ended=s.now + 1000.0, gpu=gpu, oom=oom)))


def attempt_rows(actions: list) -> list[dict]:
    """The attempt rows of the journal write, which comes first, with the job rows."""
    journaled(actions)
    return list(actions[0].attempts) if actions and isinstance(actions[0], act.JournalWrite) \
        else []


def test_a_reported_end_is_one_row_in_the_write_that_records_the_jobs_end():
    s = JobStory()
    s.worker("g", resources="GPU=2")
    s.jobs(job("train", resources="GPU=2", name="train-a"))
    s.start("job-1.1")
    actions = ended(s.at(50), "job-1.1", gpu=GPU_USE)
    assert journaled(actions) == [(1, "completed")]
    [row] = attempt_rows(actions)
    assert set(row) == set(COLUMNS)
    assert row == {"job": 1, "attempt": 1, "array_id": None, "array_index": None,
                   "name": "train-a", "state": "completed", "worker": "g", "started": 100.0,
                   "ended": 1050.0, "exit_code": 0, "error": "", "resources": "GPU=2",
                   "gpus": 2.0, "gpu_uuids": "GPU-aaaa,GPU-bbbb", "util_avg": 61.5,
                   "util_peak": 99.0, "mem_avg": 30 * 10**9, "mem_peak": 41 * 10**9,
                   "oom": False}
    # The acknowledgement waits behind the same write.
    assert any(isinstance(a, act.SendAttemptAck) for a in actions[1:])


def test_both_attempts_of_a_retried_job_have_a_row_and_the_failure_says_it_ran_out_of_memory():
    s = JobStory()
    s.worker("g", resources="GPU=1")
    s.jobs(job("train", resources="GPU=1", retries=1))
    s.start("job-1.1")
    first = attempt_rows(ended(s.at(10), "job-1.1", "failed", 1, gpu=GPU_USE, oom=True))
    assert [(r["attempt"], r["state"], r["oom"], r["exit_code"]) for r in first] == [
        (1, "failed", True, 1)]
    s.at(20).heartbeat("g")
    s.tick()  # the retry's back-off is over: attempt 2 starts
    s.start("job-1.2")
    second = attempt_rows(ended(s.at(30), "job-1.2"))
    assert [(r["attempt"], r["state"], r["oom"]) for r in second] == [(2, "completed", False)]
    assert s.job(1).state.value == "completed"


@pytest.mark.parametrize("outcome, cancelling, state", [
    ("completed", True, "completed"), ("failed", True, "cancelled"), ("failed", False, "failed"),
    ("timeout", False, "timeout"), ("idle", False, "cancelled"), ("cancelled", False, "lost"),
    ("lost", False, "lost")])
def test_the_rows_state_is_how_the_job_book_reads_the_end(outcome, cancelling, state):
    s = JobStory()
    s.worker("w")
    s.jobs(job())
    s.start("job-1.1")
    if cancelling:
        s.cancel_jobs(1)
    [row] = attempt_rows(ended(s, "job-1.1", outcome, exit_code=None))
    assert row["state"] == state


def test_an_attempt_whose_worker_never_returns_is_lost_with_its_end_left_to_the_journal():
    s = JobStory(lease_margin=10.0)
    s.worker("w1", job_lease=100.0)
    s.jobs(job(name="long"))
    s.start("job-1.1")
    s.leave("w1")
    assert attempt_rows(s.at(109).tick()) == []
    [row] = attempt_rows(s.at(111).tick())
    assert (row["job"], row["attempt"], row["state"], row["worker"]) == (1, 1, "lost", "w1")
    assert row["ended"] is None and row["started"] == 0.0  # the journal stamps its commit
    assert "did not return within its job lease" in row["error"]


def test_a_requeued_lost_attempt_and_its_successor_each_have_a_row():
    s = JobStory(lease_margin=10.0)
    s.worker("w1", job_lease=100.0)
    s.jobs(job(requeue=True))
    s.start("job-1.1")
    s.worker("w2")
    s.leave("w1")
    s.at(111).heartbeat("w2")
    [lost] = attempt_rows(s.tick())
    assert (lost["attempt"], lost["state"]) == (1, "lost")
    s.start("job-1.2")
    [done] = attempt_rows(ended(s, "job-1.2"))
    assert (done["attempt"], done["state"]) == (2, "completed")


def test_a_worker_back_without_a_started_attempt_loses_it_and_an_end_it_reports_is_recorded():
    s = JobStory()
    s.worker("w1", nthreads=2)
    s.jobs(job(), job())
    s.start("job-1.1")
    s.start("job-2.1")
    s.leave("w1")
    report = ops.AttemptEnded(key="job-2.1", outcome="failed", exit_code=3, started=5.0,
                              ended=9.0, gpu=None)
    rows = attempt_rows(s.worker("w1", nthreads=2, attempts=(report,)))
    assert sorted((r["job"], r["state"], r["ended"]) for r in rows) == [
        (1, "lost", None), (2, "failed", 9.0)]


def test_an_attempt_refused_before_it_started_ran_nothing_and_has_no_row():
    s = JobStory()
    s.worker("w1")
    s.jobs(job())
    actions = s(ev.WorkerTaskRejected(key="job-1.1", worker=addr("w1"), reason="full",
                                      now=s.now))
    assert journaled(actions) == [(1, "queued")] and attempt_rows(actions) == []


def test_an_array_elements_row_names_its_array_and_index():
    s = JobStory()
    s.worker("w1")
    s.jobs(job("train", "{}", array=ArraySpec.parse("10-11"), name="sweep"))
    s.start("job-2.1")
    [row] = attempt_rows(ended(s, "job-2.1"))
    assert (row["job"], row["array_id"], row["array_index"], row["name"]) == (2, 1, 10, "sweep")


def test_a_worker_sending_junk_gpu_figures_gets_them_dropped_not_the_scheduler_stopped():
    s = JobStory()
    s.worker("g", resources="GPU=1")
    s.jobs(job(resources="GPU=1"))
    s.start("job-1.1")
    junk = {"uuids": "GPU-x", "samples": 3, "util_avg": "high", "util_peak": float("nan"),
            "mem_avg": 2**64, "mem_peak": 2.5}
    [row] = attempt_rows(ended(s, "job-1.1", gpu=junk))
    assert (row["gpu_uuids"], row["util_avg"], row["util_peak"], row["mem_avg"],
            row["mem_peak"]) == ("", None, None, None, 2)
    assert attempt_rows(ended(s, "job-1.1")) == []  # an end heard twice is recorded once


def test_an_attempt_not_sampled_has_no_use_figures():
    s = JobStory()
    s.worker("g", resources="GPU=1")
    s.jobs(job(resources="GPU=1"))
    s.start("job-1.1")
    [row] = attempt_rows(ended(s, "job-1.1", gpu={"uuids": ["GPU-a"], "samples": 0,
                                                  "util_avg": 0.0, "util_peak": 0.0}))
    assert (row["gpu_uuids"], row["util_avg"], row["mem_peak"]) == ("GPU-a", None, None)


@pytest.mark.parametrize("asked, memory, held", [
    ("GPU=2", (), 2.0), ("GPU=0.5", (), 0.5), ("gpu0=1 gpu1=1", (), 2.0),
    ("GPU_MEMORY=20e9", (80e9,), 0.25), ("GPU_MEMORY=20e9", (0,), 0.0),
    ("MEMORY=10e9", (), 0.0)])
def test_the_gpus_an_attempt_held(asked, memory, held):
    from dsched.devices import DeviceBook

    book = DeviceBook({0: int(m * 10_000) for m in memory}) if memory else None
    assert gpu_amount(Resources.parse(asked), (0,), book) == held


def test_a_memory_only_demand_holds_its_share_of_the_device_it_was_granted():
    s = JobStory()
    s.worker("g", resources="GPU=1 GPU_MEMORY=80e9", memory=(80e9,))
    s.jobs(job(resources="GPU_MEMORY=20e9"))
    s.start("job-1.1")
    [row] = attempt_rows(ended(s, "job-1.1", started=0.0))
    assert row["gpus"] == 0.25


def test_gpu_hours_are_duration_times_gpus_and_efficiency_the_average_use():
    row = {"job": 3, "attempt": 1, "array_id": None, "array_index": None, "name": "t",
           "state": "completed", "worker": "g", "started": 1000.0, "ended": 1000.0 + 5400,
           "exit_code": 0, "error": "", "resources": "GPU=4", "gpus": 4.0,
           "gpu_uuids": "a,b,c,d", "util_avg": 45.0, "util_peak": 100.0, "mem_avg": 1,
           "mem_peak": 2, "oom": 0}
    shown = view(tuple(row[c] for c in COLUMNS))
    assert shown["id"] == 3 and shown["gpu_uuids"] == ["a", "b", "c", "d"]
    assert shown["duration"] == 5400 and shown["gpu_hours"] == pytest.approx(6.0)
    assert shown["efficiency"] == pytest.approx(0.45) and shown["oom"] is False
    unsampled = view(tuple({**row, "util_avg": None}[c] for c in COLUMNS))
    assert unsampled["efficiency"] is None and unsampled["gpu_hours"] == pytest.approx(6.0)
    cpu = view(tuple({**row, "gpus": 0.0, "started": None}[c] for c in COLUMNS))
    assert (cpu["duration"], cpu["gpu_hours"], cpu["efficiency"]) == (None, 0.0, None)


def test_a_handler_that_raises_leaves_no_attempt_row_for_the_next_write():
    out = Outbox()
    out.attempt({"job": 1})
    out.discard()
    assert out.take() == []


def test_the_upgrade_of_an_array_of_many_ended_elements_reads_its_spec_once():
    import time

    from dsched.jobspec import array_spec

    n = 20_000
    array = array_spec([f"file{i}.txt" for i in range(n)], None)
    rows = [{"id": 1, "spec": {"array": array.to_wire(), "resources": {}, "name": "sweep"},
             "state": "running", "started": False, "block": n}]
    rows += [{"id": 2 + p, "parent": 1, "position": p, "state": "completed", "started": True,
              "attempt": 1, "worker": "w", "start_time": 1.0, "end_time": 2.0, "exit_code": 0,
              "error": "", "gpus": [], "spec": {"resources": {}, "name": "sweep", "array": None},
              "submitted": 0.0} for p in range(n)]
    started = time.perf_counter()
    made = backfilled(rows)
    assert len(made) == n and made[-1]["array_index"] == n - 1
    assert time.perf_counter() - started < 2.0  # read once per element, it took minutes

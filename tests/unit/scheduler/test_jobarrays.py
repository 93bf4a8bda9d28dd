"""Array jobs in the scheduler core: one submission of many elements, fed to the queue one at
a time within the array's limit, numbered in a block, cancelled, released and waited for as a
whole or one element at a time, and rebuilt from the journal."""

from __future__ import annotations

import pytest

from dsched.jobs import ArraySpec, JobSpec, JobSpecError
from dsched.scheduler import actions as act, events as ev
from dsched.scheduler.jobviews import jobs_view
from sched_story import JobStory, job, journaled, started


def array(text: str = "0-9", *command: str, **kw):
    return job(*(command or ("train", "--seed", "{}")), array=ArraySpec.parse(text), **kw)


def run_all(s: JobStory, keys: list[str], outcome: str = "completed") -> list:
    """Start and end each attempt in ``keys``; the attempts that were started meanwhile."""
    more = []
    for key in keys:
        s.start(key)
        more += started(s.end(key, outcome=outcome, exit_code=0 if outcome == "completed"
                              else 1))
    return more


def test_an_array_is_one_journal_row_and_its_elements_are_numbered_after_it():
    s = JobStory()
    actions = s.jobs(array("0-999999"), job("true"))
    assert journaled(actions) == [(1, "queued"), (1_000_002, "queued")]
    assert s.ids(actions) == [1, 1_000_002]
    assert len(s.state.jobs.jobs) == 3  # the array, its first element (fed), the job
    assert s.job(2).spec.command == ("train", "--seed", "0")
    view = s.view(1)
    assert view["array"]["size"] == 1_000_000 and view["array"]["counts"] == {"queued": 1_000_000}


def test_elements_run_one_after_another_within_the_limit_with_their_index_in_command_and_env():
    s = JobStory()
    s.worker("w1", nthreads=4)
    actions = s.jobs(array("10-14%2"))
    placed = started(actions)
    assert placed == [("job-2.1", "w1"), ("job-3.1", "w1")]  # two at once: the limit
    execute = next(a for a in actions if isinstance(a, act.SendExecute))
    assert execute.job["command"] == ["train", "--seed", "10"]
    assert execute.job["env"] == {"SCHED_ARRAY_ID": "1", "SCHED_ARRAY_INDEX": "10",
                                  "SCHED_ARRAY_SIZE": "5"}
    assert run_all(s, ["job-2.1"]) == [("job-4.1", "w1")]
    assert run_all(s, ["job-3.1", "job-4.1"]) == [("job-5.1", "w1"), ("job-6.1", "w1")]
    assert s.view(1)["state"] == "running"
    assert s.view(1)["array"]["counts"] == {"completed": 3, "assigned": 2}
    s(ev.JobsWatched(client="c", jobs=(1,), now=s.now))
    s.start("job-5.1")
    actions = s.end("job-5.1") + (s.start("job-6.1") and s.end("job-6.1"))
    [told] = [a for a in actions if isinstance(a, act.TellJobEnded)]
    assert told.job["id"] == 1 and told.job["state"] == "completed"
    assert s.job(1).state.value == "completed" and "5 completed" in s.job(1).detail


def test_an_array_fills_every_free_slot_at_once_and_keeps_one_element_queued():
    s = JobStory()
    s.jobs(array("0-99"))
    actions = s.worker("w1", nthreads=8)
    assert len(started(actions)) == 8
    queued = [j for j in s.state.jobs.jobs.values() if j.state.value == "queued"
              and j.array is None]
    assert [j.id for j in queued] == [10]  # the head: the others are not made yet
    assert len(s.state.jobs.jobs) == 1 + 9


def test_an_array_that_did_not_complete_ends_as_its_first_element_that_did_not():
    s = JobStory()
    s.worker("w1", nthreads=1)
    s.jobs(array("0-2"))
    run_all(s, ["job-2.1"])
    run_all(s, ["job-3.1"], outcome="failed")
    run_all(s, ["job-4.1"])
    assert s.job(1).state.value == "failed"
    assert s.job(1).detail == "2 completed, 1 failed"


def test_after_ok_on_an_array_waits_for_every_element_and_on_an_element_for_that_one():
    s = JobStory()
    s.worker("w1", nthreads=1)
    [arr] = s.ids(s.jobs(array("0-2")))
    [whole] = s.ids(s.jobs(job("eval", after_ok=(arr,))))
    [third] = s.ids(s.jobs(job("look", after_ok=(arr + 3,))))  # element 1_2, not made yet
    assert s.view(whole)["reason"] == "dependency"
    assert s.view(third)["reason"] == "dependency"
    assert s.view(arr + 3)["reason"] == "priority"  # made when named; waits for its turn
    run_all(s, ["job-2.1", "job-3.1"])
    assert s.view(third)["reason"] == "dependency"
    more = run_all(s, ["job-4.1"])
    assert set(more) == {(f"job-{whole}.1", "w1")} or set(more) == {(f"job-{third}.1", "w1")}
    assert s.job(arr).state.value == "completed"
    assert not s.job(whole).deps_left and not s.job(third).deps_left


def test_cancelling_an_array_cancels_its_running_elements_and_never_starts_the_rest():
    s = JobStory()
    s.worker("w1", nthreads=2)
    s.jobs(array("0-999"))
    s.start("job-2.1")
    [reply] = [a for a in s.cancel_jobs(1) if isinstance(a, act.JobsReply)]
    assert reply.value == {"1": "cancelling"}
    assert s.view(1)["array"]["counts"] == {"running": 1, "assigned": 1, "cancelled": 998}
    assert started(s.end("job-2.1", outcome="cancelled", worker="w1")) == []
    actions = s(ev.WorkerTaskStopped(worker="tcp://w1", key="job-3.1", now=s.now))
    assert s.job(1).state.value == "cancelled"
    assert started(actions) == []
    assert len(s.state.jobs.jobs) == 4  # the array, two elements run, the head cancelled
    [reply] = [a for a in s.cancel_jobs(500) if isinstance(a, act.JobsReply)]
    assert reply.value == {"500": "already cancelled"}


def test_one_element_is_cancelled_by_its_number_and_the_array_goes_on_without_it():
    s = JobStory()
    s.worker("w1", nthreads=1)
    s.jobs(array("0-2"))
    [reply] = [a for a in s.cancel_jobs(4) if isinstance(a, act.JobsReply)]
    assert reply.value == {"4": "cancelled"}
    run_all(s, ["job-2.1"])
    more = run_all(s, ["job-3.1"])
    assert more == [] and s.job(1).state.value == "cancelled"
    assert s.job(1).detail == "2 completed, 1 cancelled"


def test_a_held_array_runs_nothing_until_it_is_released_and_its_elements_are_not_held_alone():
    s = JobStory()
    s.worker("w1", nthreads=2)
    [arr] = s.ids(s.jobs(array("0-3", hold=True)))
    assert s.view(arr)["state"] == "held" and s.view(arr)["array"]["counts"] == {"held": 4}
    [reply] = [a for a in s.release_jobs(arr + 2) if isinstance(a, act.JobsReply)]
    assert "release its array, 1" in reply.value["3"]
    actions = s.release_jobs(arr)
    assert started(actions) == [("job-2.1", "w1"), ("job-3.1", "w1")]


def test_status_shows_an_array_as_one_line_and_expands_or_names_its_elements():
    s = JobStory()
    s.worker("w1", nthreads=1)
    s.jobs(array("0-4"), job("true"))
    listed = jobs_view(s.state)
    assert [v["id"] for v in listed["jobs"]] == [1, 7]
    assert listed["total"] == 2 and listed["counts"] == {"assigned": 1, "queued": 5}
    expanded = jobs_view(s.state, expand=True)
    assert [v["id"] for v in expanded["jobs"]] == [1, 2, 3, 4, 5, 6, 7]
    assert [v["array_index"] for v in expanded["jobs"][1:6]] == [0, 1, 2, 3, 4]
    one = jobs_view(s.state, ids=(5,))["jobs"]
    assert one[0]["array_id"] == 1 and one[0]["command"] == ["train", "--seed", "3"]
    assert one[0]["reason"] == "priority" and 5 not in s.state.jobs.jobs  # shown, not made
    assert [v["id"] for v in jobs_view(s.state, states=("running",))["jobs"]] == [1]
    assert [v["id"] for v in jobs_view(s.state, states=("queued",))["jobs"]] == [7]


def test_a_restart_rebuilds_an_array_from_its_row_and_its_elements_rows():
    s = JobStory()
    s.worker("w1", nthreads=1)
    rows = {}
    for actions in (s.jobs(array("0-4%1")), s.start("job-2.1"), s.end("job-2.1"),
                    s.start("job-3.1")):
        for a in actions:
            if isinstance(a, act.JournalWrite):
                rows.update({row["id"]: row for row in a.rows})
    assert sorted(rows) == [1, 2, 3]  # the array, and the elements that were dispatched
    again = JobStory()
    again(ev.JobsLoaded(rows=tuple(rows[i] for i in sorted(rows)), now=again.now))
    array_job = again.job(1)
    assert array_job.array.counts() == {"completed": 1, "running": 1, "queued": 3}
    assert again.state.jobs.next_id == 7
    again.worker("w1", nthreads=1, attempts=())


def test_the_dashboard_table_shows_an_array_by_its_elements_and_counts_them():
    from dsched.scheduler.jobviews import JOB_ROW, job_table

    s = JobStory()
    s.worker("w1", nthreads=1)
    s.jobs(array("0-9"))
    table = job_table(s.state)
    rows = {row[0]: dict(zip(JOB_ROW, row)) for row in table["rows"]}
    assert rows[1]["state"] == "running" and rows[1]["detail"] == "1 assigned, 9 queued"
    assert table["counts"]["queued"] == 9 and table["counts"]["assigned"] == 1


def test_a_restart_with_a_job_after_an_element_not_yet_fed_queues_that_element_once():
    # Found by the property test: the element named by the dependency was made while the rows
    # were loaded, then queued both by the load and by its array's feed.
    s = JobStory()
    rows = {}
    for actions in (s.jobs(array("0-3")), s.jobs(job("eval", after_ok=(3,)))):
        for a in actions:
            if isinstance(a, act.JournalWrite):
                rows.update({row["id"]: row for row in a.rows})
    assert sorted(rows) == [1, 6]
    again = JobStory()
    again(ev.JobsLoaded(rows=tuple(rows[i] for i in sorted(rows)), now=again.now))
    assert started(again.worker("w1", nthreads=1)) == [("job-2.1", "w1")]
    assert run_all(again, ["job-2.1"]) == [("job-3.1", "w1")]
    assert run_all(again, ["job-3.1"]) == [("job-4.1", "w1")]


def test_after_a_restart_an_array_keeps_its_place_behind_jobs_submitted_before_it():
    s = JobStory()
    rows = {}
    for actions in (s.jobs(job("before")), s.jobs(array("0-2")), s.jobs(job("after"))):
        for a in actions:
            if isinstance(a, act.JournalWrite):
                rows.update({row["id"]: row for row in a.rows})
    again = JobStory()
    again(ev.JobsLoaded(rows=tuple(rows[i] for i in sorted(rows)), now=again.now))
    keys = [key for key, _ in started(again.worker("w1", nthreads=1))]
    for _ in range(4):  # one slot: each end starts the next
        keys += [key for key, _ in run_all(again, [keys[-1]])]
    assert [key.split(".")[0] for key in keys] == ["job-1", "job-3", "job-4", "job-5", "job-6"]


def test_expanding_a_million_element_array_costs_the_page_not_the_array():
    import time

    s = JobStory()
    s.worker("w1", nthreads=1)
    s.jobs(array("0-999999"))
    started_at = time.perf_counter()
    page = jobs_view(s.state, ids=(1,), expand=True, offset=10, limit=20)
    by_state = jobs_view(s.state, expand=True, states=("assigned",))
    took = time.perf_counter() - started_at
    assert page["total"] == 1_000_001 and [v["id"] for v in page["jobs"]] == list(range(11, 31))
    assert [v["id"] for v in by_state["jobs"]] == [2] and by_state["total"] == 1
    assert took < 1.0, took  # walking the array, or making its elements, takes many seconds
    both = jobs_view(s.state, ids=(1, 2, 3), expand=True, limit=3)
    assert [v["id"] for v in both["jobs"]] == [1, 2, 3]  # each element once, after its array


def test_an_element_named_in_a_held_array_is_shown_and_counted_held():
    s = JobStory()
    s.jobs(array("0-3", hold=True))
    s(ev.JobsWatched(client="c", jobs=(4,), now=s.now))
    assert s.view(4)["state"] == "held" and s.view(4)["reason"] == "held"
    assert s.view(1)["array"]["counts"] == {"held": 4}


@pytest.mark.parametrize("indices, words", [
    ("0-99999999999999999999", r"below 2\*\*63"), ("0-99999999", "at most 10,000,000 elements"),
    ("7-3", "invalid array range"), ("1,1", "given twice"),
    ("0-3%0", r"limit \(%N\) must be from 1 to"),
])
def test_an_array_the_wire_cannot_carry_or_the_scheduler_cannot_hold_is_refused(indices, words):
    wire = {"submission": "s", "command": ["true"], "array": {"indices": indices}}
    with pytest.raises(JobSpecError, match=words):
        JobSpec.from_wire(wire)
    with pytest.raises(JobSpecError, match="steps of 1 or more"):
        ArraySpec(ranges=(range(10, 0, -1),))

"""The dashboard's jobs section without a network: the job table it reads from the scheduler,
what it observes of jobs and the journal, the lists cut from it, its metric families (parsed
back as Prometheus reads them), and reading a job's log from a worker that answers, answers
slowly, or not at all."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dsched.jobstates import JobState
from dsched.protocol import ops
from dsched.scheduler.http import jobs, metrics
from dsched.scheduler.http.joblog import LogReader, LogUnavailable, chunk
from dsched.scheduler.http.observe import Observations
from dsched.scheduler.jobviews import JOB_ROW, WAITING_REASONS, job_table

sys.path.insert(0, str(Path(__file__).parent / "scheduler"))
from sched_story import JobStory, job, without_logs  # noqa: E402


class Watched(JobStory):
    """A JobStory whose every event and its actions are handed to ``observed``, as the
    scheduler shell hands them to the dashboard."""

    def __init__(self):
        super().__init__()
        self.observed = Observations(self.state.tasks, wall_clock=lambda: 500.0)

    def __call__(self, event) -> list:
        actions = self.state.handle(event)
        self.observed(event, actions)
        self.state.validate()
        return without_logs(actions)


def rows_by_id(table: dict) -> dict[int, dict]:
    return {row[0]: dict(zip(JOB_ROW, row)) for row in table["rows"]}


def test_the_job_table_gives_each_waiting_job_the_reason_its_own_view_gives():
    s = JobStory()
    s.worker("w1", nthreads=4, resources="foo=7")
    # 1 runs; 2 and 3 wait for foo, 2 holding the reservation; 4 starts beside it on what
    # the reservation leaves; 5 asks for what no worker has; 6 is held.
    s.ids(s.jobs(job(resources="foo=5"), job(resources="foo=5"), job(resources="foo=5"),
                 job(resources="foo=1"), job(resources="bar=1"), job(hold=True)))
    table = job_table(s.state)
    assert [row[0] for row in table["rows"]] == [6, 5, 4, 3, 2, 1]  # newest first
    rows = rows_by_id(table)
    for job_id in (2, 3, 5):
        view = s.view(job_id)
        assert (rows[job_id]["reason"], rows[job_id]["detail"]) == (view["reason"],
                                                                    view["detail"])
    assert "reserved for job 2" in rows[3]["detail"] and "reserved" not in rows[2]["detail"]
    assert rows[6]["reason"] == "held" and rows[4]["state"] == "assigned"
    assert rows[1]["worker"] == "w1" and rows[5]["resources"] == "bar=1"
    assert table["counts"] == {**{state.value: 0 for state in JobState}, "queued": 3,
                               "held": 1, "assigned": 2}
    assert table["waiting"] == {**dict.fromkeys(WAITING_REASONS, 0), "resources": 2,
                                "missing_resources": 1, "held": 1}
    assert "worker_lost" not in table["waiting"]  # the reason of a lost job: it waits no more
    assert (table["unreachable"], table["recovering"]) == (0, False)


def test_the_row_of_an_ended_job_is_made_once_and_those_of_the_others_each_time():
    s = JobStory()
    s.worker("w1", resources="foo=1")
    s.ids(s.jobs(job(resources="foo=1"), job(resources="foo=1")))
    s.start("job-1.1")
    s.end("job-1.1")  # 1 completed; 2 is sent to w1
    known: dict = {}
    first = rows_by_id(job_table(s.state, known))
    assert list(known) == [1] and first[2]["state"] == "assigned"
    s.start("job-2.1")
    again = job_table(s.state, known)
    assert again["rows"][1] is known[1]
    assert rows_by_id(again)[2]["state"] == "running" and 2 not in known


def test_observations_time_job_attempts_count_ends_and_failures_and_journal_commits():
    s = Watched()
    s.worker("w1", nthreads=2, resources="foo=7")
    s.ids(s.jobs(job(resources="foo=5", name="first"), job(resources="foo=5", name="second")))
    s.at(2.0).start("job-1.1")
    s.at(5.0).end("job-1.1", started=1000.0)  # the worker's clock: ran from 1000 to ...
    observed = s.observed
    assert observed.job_queue_wait.count == 2 and observed.job_queue_wait.sum == 5.0
    assert observed.queue_wait.count == 0  # tasks' waits are kept apart
    assert observed.job_run_time.count == 0  # ended at 5.0 on a clock started at 1000: not timed
    s.at(6.0).start("job-2.1")
    s.at(9.0).end("job-2.1", outcome="failed", exit_code=3, started=8.0)
    assert (observed.job_run_time.count, observed.job_run_time.sum) == (1, 1.0)
    s.at(9.5).end("job-2.1", outcome="failed", exit_code=3, started=8.0, worker="w1")  # again
    assert observed.job_run_time.count == 1
    assert observed.jobs_ended == {"completed": 1, "failed": 1}
    (failure,) = observed.job_failures
    assert failure == {"time": 500.0, "id": 2, "name": "second", "state": "failed",
                       "detail": "failed!", "exit_code": 3, "worker": "w1"}
    observed.committed(0.002, 3)
    observed.committed(0.004, 1)
    assert (observed.commit_time.count, observed.rows_written) == (2, 4)


def part_of(s: Watched) -> dict:
    from types import SimpleNamespace

    return jobs.jobs_part(SimpleNamespace(state=s.state), s.observed)


def test_lists_are_cut_from_the_rows_by_state_name_and_reason():
    s = Watched()
    s.worker("w1", resources="foo=1")
    s.ids(s.jobs(job(name="a", resources="foo=1"), job(name="b", resources="foo=1"),
                 job(name="a", resources="tpu=1"), job(name="c", hold=True)))
    part = part_of(s)
    ids = lambda rows: [row[0] for row in rows]  # noqa: E731
    assert ids(jobs.select(part, {})) == [4, 3, 2, 1]
    assert ids(jobs.select(part, {"state": ["queued"]})) == [3, 2]
    assert ids(jobs.select(part, {"state": ["queued", "held"]})) == [4, 3, 2]
    assert ids(jobs.select(part, {"name": ["a"]})) == [3, 1]
    assert ids(jobs.select(part, {"name": ["a"], "state": ["queued"]})) == [3]
    assert ids(jobs.select(part, {"reason": ["missing_resources"]})) == [3]
    assert ids(jobs.select(part, {"state": ["lost"]})) == []
    (item,) = jobs.items(jobs.select(part, {"name": ["b"]}))
    assert item["id"] == 2 and item["reason"] == "resources" and set(item) == set(JOB_ROW)


def test_job_metric_families_follow_prometheus_rules_and_name_no_job():
    s = Watched()
    s.worker("w1", nthreads=2, resources="foo=7")
    s.ids(s.jobs(job("train.py", resources="foo=5", name="secret-name"),
                 job(resources="tpu=1"), job(hold=True)))
    s.at(1.0).start("job-1.1")
    s.at(3.0).end("job-1.1", outcome="timeout", exit_code=None, started=1.0)
    s.observed.committed(0.003, 2)
    part = part_of(s)
    collector = metrics.Collector(lambda: {"jobs": part}, {"jobs": metrics.job_metrics})
    text = metrics.exposition(metrics.registry(collector)).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, kind in (("dsched_jobs", "gauge"), ("dsched_jobs_waiting", "gauge"),
                       ("dsched_jobs_ended", "counter"), ("dsched_jobs_unreachable", "gauge"),
                       ("dsched_jobs_recovering", "gauge"),
                       ("dsched_job_queue_wait_seconds", "histogram"),
                       ("dsched_job_run_seconds", "histogram"),
                       ("dsched_journal_commit_seconds", "histogram"),
                       ("dsched_journal_rows_written", "counter")):
        assert families[name].type == kind, name
    samples = {(x.name, tuple(sorted(x.labels.items()))): x.value
               for f in families.values() for x in f.samples}
    assert samples[("dsched_jobs", (("state", "timeout"),))] == 1
    assert samples[("dsched_jobs", (("state", "running"),))] == 0
    assert samples[("dsched_jobs_waiting", (("reason", "missing_resources"),))] == 1
    assert samples[("dsched_jobs_waiting", (("reason", "held"),))] == 1
    assert samples[("dsched_jobs_waiting", (("reason", "no_workers"),))] == 0
    assert samples[("dsched_jobs_ended_total", (("state", "timeout"),))] == 1
    assert samples[("dsched_jobs_ended_total", (("state", "lost"),))] == 0
    assert samples[("dsched_job_run_seconds_count", ())] == 1
    assert samples[("dsched_job_run_seconds_sum", ())] == 2.0
    assert samples[("dsched_journal_commit_seconds_count", ())] == 1
    assert samples[("dsched_journal_rows_written_total", ())] == 2
    labels = {v for name, pairs in samples if name.startswith("dsched_")
              for label, v in pairs if label != "le"}
    assert not {"1", "2", "3", "secret-name", "train.py"} & labels


def test_a_piece_of_log_ends_on_a_whole_character():
    text = "héllo\n".encode()  # é is two bytes: 1 and 2
    assert chunk(text, 0, 7, False) == {"offset": 0, "next_offset": 7, "size": 7,
                                        "ended": False, "text": "héllo\n"}
    cut = chunk(text[:2], 0, 7, False)  # "h" and half of "é": the half is read again
    assert (cut["text"], cut["next_offset"]) == ("h", 1)
    assert chunk(text[1:], 1, 7, True)["text"] == "éllo\n"
    assert chunk(b"ab\xc3", 0, 3, True)["text"] == "ab\ufffd"  # ended: nothing will complete it
    lone = chunk(b"\xc3", 1, 7, False)  # too short to hold a character: not read for ever
    assert (lone["text"], lone["next_offset"]) == ("\ufffd", 2)


def test_a_piece_of_log_is_shown_without_terminal_escape_sequences():
    log = ("\x1b[1;31mERROR\x1b[0m disk full\n\x1b]0;train: epoch 3\x07\x1b(B\x1b[m"
           "\x1b[2K\r\x1b]8;;https://example.org\x1b\\docs\x1b]8;;\x1b\\ ok\n").encode()
    assert chunk(log, 0, len(log), True)["text"] == "ERROR disk full\n\rdocs ok\n"
    # A read that stops inside a sequence stops before it: the next one reads it whole.
    cut = chunk(b"ok \x1b[3", 0, 20, False)
    assert (cut["text"], cut["next_offset"]) == ("ok ", 3)
    assert chunk(b"\x1b[31mred\x1b[0m", 3, 20, False)["text"] == "red"
    title = "ok \x1b]0;é".encode()[:-1]  # in an OSC's text, and a character cut in two
    assert chunk(title, 0, 20, False) == {"offset": 0, "next_offset": 3, "size": 20,
                                          "ended": False, "text": "ok "}
    assert chunk(b"\x1b[3", 10, 13, False)["next_offset"] == 10  # all there is yet: waits
    # One that no read can hold whole, or that nothing will complete, is not waited for.
    lone = chunk(b"\x1b[3", 10, 20, False)
    assert (lone["text"], lone["next_offset"]) == ("[3", 13)
    assert chunk(b"ok \x1b[3", 0, 6, True)["text"] == "ok [3"


class FakePool:
    """Stands in for the PeerPool: answers GetLog from ``logs`` (key -> bytes), or as told."""

    def __init__(self, logs=None, answer=None):
        self.logs = logs or {}
        self.answer = answer
        self.asked: list[tuple] = []
        self.entered = asyncio.Event()
        self.closed = False

    async def get_log(self, address, key, offset, limit, timeout=None):
        self.asked.append((address, key, offset, limit))
        self.entered.set()
        if self.answer is not None:
            return await self.answer()
        data = self.logs[key]
        return ops.Log(id=1, data=data[offset:offset + limit], size=len(data), ended=True)

    async def close(self):
        self.closed = True


JOB = {"id": 7, "attempt": 2, "worker": "w1", "address": "127.0.0.1:9", "log": "/x/job-7.2.log",
       "state": "running"}


async def test_a_log_is_read_from_the_worker_of_the_latest_attempt():
    made = []
    pool = FakePool({"job-7.2": b"line 1\nline 2\nline 3\n"})
    reader = LogReader(lambda: made.append(1) or pool)
    with pytest.raises(LogUnavailable) as no_log:
        await reader.read({**JOB, "address": "", "log": "", "state": "queued"}, 0, 10)
    assert no_log.value.status == 404 and "no log yet" in str(no_log.value)
    assert made == []  # nothing opened for that
    piece = await reader.read(JOB, 7, 100)
    assert pool.asked == [("127.0.0.1:9", "job-7.2", 7, 100)]
    assert piece == {"job": 7, "attempt": 2, "worker": "w1", "offset": 7, "next_offset": 21,
                     "size": 21, "ended": True, "text": "line 2\nline 3\n"}
    tail = await reader.tail(JOB, nbytes=10)  # from the start of the first whole line
    assert (tail["text"], tail["skipped"], tail["next_offset"]) == ("line 3\n", 11, 21)
    await reader.close()
    assert pool.closed and made == [1]


async def test_a_log_is_read_where_its_worker_is_connected_now_else_where_it_was():
    pool = FakePool({"job-7.2": b"kept\n"})
    where = {"w1": "127.0.0.1:10"}  # its nanny started it again, on a new port
    reader = LogReader(lambda: pool, locate=where.get)
    assert (await reader.read(JOB, 0, 100))["text"] == "kept\n"
    where.clear()  # not connected: the address the attempt was recorded with
    await reader.read(JOB, 0, 100)
    assert [asked[0] for asked in pool.asked] == ["127.0.0.1:10", "127.0.0.1:9"]


async def test_a_log_read_is_bounded_in_time_and_in_number_and_says_what_went_wrong():
    never = asyncio.Event()

    async def silent():
        await never.wait()

    pool = FakePool(answer=silent)
    reader = LogReader(lambda: pool, timeout=0.2, at_once=1)
    first = asyncio.ensure_future(reader.read(JOB, 0, 10))
    await pool.entered.wait()
    with pytest.raises(LogUnavailable) as busy:  # refused at once, not queued
        await reader.read(JOB, 0, 10)
    assert busy.value.status == 503
    with pytest.raises(LogUnavailable) as late:
        await first
    assert late.value.status == 504 and "did not answer within 0.2 s" in str(late.value)
    assert reader.in_flight == 0

    async def refused():
        raise ConnectionRefusedError(111, "Connect call failed")

    reader = LogReader(lambda: FakePool(answer=refused))
    with pytest.raises(LogUnavailable) as gone:
        await reader.read(JOB, 0, 10)
    assert gone.value.status == 502 and "w1 (127.0.0.1:9), which cannot be reached" in str(
        gone.value)

    async def missing():
        return ops.Log(id=1, error="no log of job-7.2 on this worker")

    reader = LogReader(lambda: FakePool(answer=missing))
    with pytest.raises(LogUnavailable) as lost:
        await reader.read(JOB, 0, 10)
    assert lost.value.status == 404 and "no log of job-7.2" in str(lost.value)

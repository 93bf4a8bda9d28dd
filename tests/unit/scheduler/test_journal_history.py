"""The journal's history of ended attempts: written in the transaction of the job rows that
record their ends, a journal of layout 1 upgraded with a row for each ended job, and the query
``sched history`` asks (``history.query``): each filter, newest first, the same answer however
it is read, from index scans that stop at the limit, under 200 ms over 100,000 attempts (the
bench, ``bench/history.py``, times 1,000,000)."""

from __future__ import annotations

import sqlite3
import time

import msgpack
import pytest

from dsched.errors import ConfigError
from dsched.jobs import ArraySpec
from dsched.scheduler import actions as act, history
from dsched.scheduler.journal import INSERT_ATTEMPT, INSERT_NAME, SCHEMA, Journal
from sched_story import JobStory, job

T0 = 1_700_000_000.0


def attempt(job_id: int, number: int = 1, **fields) -> dict:
    """An attempt's row, as the job book makes it."""
    return {"job": job_id, "attempt": number, "array_id": None, "array_index": None,
            "name": f"job-{job_id}", "state": "completed", "worker": "w", "started": T0,
            "ended": T0 + 60 * job_id, "exit_code": 0, "error": "", "resources": "GPU=1",
            "gpus": 1.0, "gpu_uuids": "GPU-a", "util_avg": 50.0, "util_peak": 90.0,
            "mem_avg": 10**9, "mem_peak": 2 * 10**9, "oom": False, **fields}


def found(path, **filters) -> list[tuple[int, int]]:
    return [(v["id"], v["attempt"]) for v in history.query(str(path), **filters)]


# -- the write --------------------------------------------------------------------------------


def test_attempt_rows_are_committed_with_the_job_rows_or_not_at_all(tmp_path):
    path = tmp_path / "jobs.sqlite"
    journal = Journal(str(path))
    journal.write([{"id": 1, "state": "completed"}], [attempt(1)])
    with pytest.raises(KeyError):  # a row the table cannot take: the job row is not kept
        journal.write([{"id": 2, "state": "completed"}], [{"job": 2}])
    journal.close()
    assert [row["id"] for row in Journal(str(path)).load()] == [1]
    assert found(path) == [(1, 1)]


def test_an_attempt_whose_end_is_not_known_ended_when_it_was_committed(tmp_path):
    path = tmp_path / "jobs.sqlite"
    journal = Journal(str(path))
    before = time.time()
    journal.write([{"id": 4}], [attempt(4, state="lost", ended=None, started=None)])
    after = time.time()
    [lost] = history.query(str(path))
    assert before <= lost["ended"] <= after and lost["duration"] is None
    assert lost["gpu_hours"] == 0.0
    journal.close()


def test_the_query_reads_beside_a_writer_and_a_journal_without_attempts_says_so(tmp_path):
    path = tmp_path / "jobs.sqlite"
    journal = Journal(str(path))
    journal.db.execute("BEGIN IMMEDIATE")  # a commit in flight: the reader goes on
    assert history.query(str(path)) == []
    journal.db.execute("ROLLBACK")
    journal.close()
    with pytest.raises(sqlite3.Error):
        history.query(str(tmp_path / "missing.sqlite"))


# -- layout 1 -----------------------------------------------------------------------------------


def layout_1_rows() -> list[dict]:
    """The job rows a scheduler of layout 1 journaled: a job completed, one failed after a
    retry, one lost, one held, and an array with one element ended and one lost unstarted."""
    s = JobStory(lease_margin=1.0)
    s.worker("w1", nthreads=4, job_lease=1.0)
    s.jobs(job(name="ok"), job(retries=1), job(name="away"), job(hold=True),
           job("x", "{}", array=ArraySpec.parse("5-6"), name="sweep"))
    s.start("job-1.1")
    s.end("job-1.1")
    for attempt_number in (1, 2):
        s.start(f"job-2.{attempt_number}")
        s.end(f"job-2.{attempt_number}", "failed", exit_code=1)
        s.tick()
    s.start("job-6.1")
    s.end("job-6.1")
    s.start("job-3.1")
    s.leave("w1")
    s.at(10).tick()
    rows: dict[int, dict] = {}
    for action in s.log:
        if isinstance(action, act.JournalWrite):
            rows.update((row["id"], row) for row in action.rows)
    assert {i: r["state"] for i, r in rows.items()} == {
        1: "completed", 2: "failed", 3: "lost", 4: "held", 5: "lost", 6: "completed",
        7: "lost"}
    return list(rows.values())


def test_a_layout_1_journal_is_upgraded_with_a_row_for_each_ended_jobs_last_attempt(tmp_path):
    path = tmp_path / "jobs.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, row BLOB NOT NULL)")
    rows = layout_1_rows()
    db.executemany("INSERT INTO jobs VALUES (?, ?)",
                   [(row["id"], msgpack.packb(row)) for row in rows])
    db.execute("PRAGMA user_version=1")
    db.commit()
    db.close()
    journal = Journal(str(path))
    assert journal.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA == 2
    assert len(journal.load()) == len(rows)  # the jobs themselves, as they were
    shown = {v["id"]: v for v in history.query(str(path))}
    assert sorted(shown) == [1, 2, 3, 6]
    assert (shown[2]["attempt"], shown[2]["state"], shown[2]["exit_code"]) == (2, "failed", 1)
    assert (shown[3]["state"], shown[3]["ended"]) == ("lost", shown[3]["started"])
    assert (shown[6]["array_id"], shown[6]["array_index"], shown[6]["name"]) == (5, 5, "sweep")
    assert shown[1]["util_avg"] is None and shown[1]["gpu_uuids"] == []
    journal.write([{"id": 8}], [attempt(8)])  # and it goes on as a journal of layout 2
    journal.close()
    assert Journal(str(path)).db.execute("SELECT count(*) FROM attempts").fetchone() == (5,)


def test_a_journal_of_a_later_layout_is_refused(tmp_path):
    path = tmp_path / "jobs.sqlite"
    Journal(str(path)).close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version=3")
    db.close()
    with pytest.raises(ConfigError, match="has layout 3, and this version of dsched reads "
                                          "layout 2"):
        Journal(str(path))


# -- the query ----------------------------------------------------------------------------------


@pytest.fixture
def journal(tmp_path):
    """Ten jobs: 1-6 named train-N, 7-8 eval-N, 9 an array whose elements 10-11 are sweep; job
    3 failed then completed; 5 lost; 6 failed out of GPU memory."""
    path = tmp_path / "jobs.sqlite"
    journal = Journal(str(path))
    rows = [attempt(i, name=f"train-{i}") for i in (1, 2, 4)]
    rows += [attempt(3, 1, name="train-3", state="failed", exit_code=1, ended=T0 + 100),
             attempt(3, 2, name="train-3"),
             attempt(5, name="train-5", state="lost", worker="gone"),
             attempt(6, name="train-6", state="failed", oom=True),
             attempt(7, name="eval-7"), attempt(8, name="eval-8", state="cancelled"),
             attempt(10, name="sweep", array_id=9, array_index=0),
             attempt(11, name="sweep", array_id=9, array_index=1, state="failed")]
    journal.write([{"id": row["job"]} for row in rows], rows)
    yield path
    journal.close()


def test_newest_first_within_the_limit(journal):
    assert found(journal) == [(11, 1), (10, 1), (8, 1), (7, 1), (6, 1), (5, 1), (4, 1),
                              (3, 2), (2, 1), (3, 1), (1, 1)]
    assert found(journal, limit=3) == [(11, 1), (10, 1), (8, 1)]
    assert found(journal, limit=0) == []


@pytest.mark.parametrize("filters, expected", [
    ({"states": ["failed"]}, [(11, 1), (6, 1), (3, 1)]),
    ({"states": ["lost", "cancelled"]}, [(8, 1), (5, 1)]),
    ({"name": "train-3"}, [(3, 2), (3, 1)]),
    ({"name": "eval-*"}, [(8, 1), (7, 1)]),
    ({"name": "*-[67]"}, [(7, 1), (6, 1)]),
    ({"name": "nothing*"}, []),
    ({"name": "train"}, []),
    ({"since": T0 + 300, "until": T0 + 480}, [(7, 1), (6, 1), (5, 1)]),
    ({"since": T0 + 600}, [(11, 1), (10, 1)]),
    ({"jobs": [3, 7]}, [(7, 1), (3, 2), (3, 1)]),
    ({"jobs": [9]}, [(11, 1), (10, 1)]),
    ({"jobs": [9, 6], "states": ["failed"]}, [(11, 1), (6, 1)]),
    ({"states": ["failed"], "name": "train-*", "until": T0 + 200}, [(3, 1)]),
    ({"name": "sweep", "states": ["completed"]}, [(10, 1)]),
])
def test_each_filter(journal, filters, expected):
    assert found(journal, **filters) == expected


@pytest.mark.parametrize("filters", [
    {"name": "*-*"}, {"name": "train-*", "states": ["failed", "completed"]},
    {"states": ["failed", "completed", "lost"], "since": T0 + 100}, {"jobs": [1, 3, 9, 6]},
    {"jobs": [3, 9], "name": "*e*", "states": ["failed", "completed"]}])
def test_the_answer_is_the_same_however_the_query_is_read(journal, monkeypatch, filters):
    """A glob of few names is read one name at a time, of many by state or by time; many jobs
    in lists, few one at a time: the answer does not depend on it."""
    one_at_a_time = found(journal, limit=4, **filters)
    monkeypatch.setattr(history, "_SCANS", 1)
    monkeypatch.setattr(history, "_CHUNK", 2)
    assert found(journal, limit=4, **filters) == one_at_a_time


def test_the_output_carries_gpu_hours_and_efficiency(journal):
    [failed] = history.query(str(journal), jobs=[6])
    assert failed["oom"] is True and failed["state"] == "failed"
    assert failed["duration"] == 360.0 and failed["gpu_hours"] == pytest.approx(0.1)
    assert failed["efficiency"] == 0.5 and failed["gpu_uuids"] == ["GPU-a"]


# -- at scale -----------------------------------------------------------------------------------

SCALE = 100_000
NAMES = 300


def many_attempts(n: int):
    """``n`` attempts, one ending every 10 s: mostly completed, names train-0 to train-299, a
    few old ones named legacy-N."""
    states = ["completed"] * 90 + ["failed"] * 7 + ["timeout", "cancelled", "lost"]
    for i in range(n):
        name = f"legacy-{i % NAMES}" if i < n // 10 else f"train-{i % NAMES}"
        yield (i + 1, 1, None, None, name, states[(i * 7919) % 100], "w", T0 + 10 * i - 600,
               T0 + 10 * i, 0, "", "GPU=1", 1.0, "GPU-a", 40.0, 90.0, 1, 2, 0)


@pytest.fixture(scope="module")
def big_journal(tmp_path_factory):
    path = tmp_path_factory.mktemp("history") / "jobs.sqlite"
    journal = Journal(str(path))
    journal.db.execute("BEGIN")
    journal.db.executemany(INSERT_ATTEMPT, many_attempts(SCALE))
    journal.db.executemany(INSERT_NAME, [(f"{kind}-{i}",) for kind in ("train", "legacy")
                                         for i in range(NAMES)])
    journal.db.execute("COMMIT")
    journal.close()
    return path


SHAPES = {
    "newest": {}, "state": {"states": ["failed"]}, "rare states": {"states": ["lost", "timeout"]},
    "name": {"name": "train-7"}, "glob of few names": {"name": "train-1?"},
    "glob of many names": {"name": "train-*"}, "old names": {"name": "legacy-*"},
    "failed of a glob": {"states": ["failed"], "name": "train-2*"},
    "a day": {"since": T0 + 400_000, "until": T0 + 486_400}, "last hour": {"since": T0 + 996_400},
    "jobs": {"jobs": [5, 50_000, 99_999]},
}


@pytest.mark.parametrize("shape", SHAPES)
def test_each_scan_reads_an_index_alone_and_sorts_nothing(big_journal, shape):
    filters = SHAPES[shape]
    db = sqlite3.connect(big_journal)
    scans = history._scans(db, tuple(filters.get("jobs", ())), tuple(filters.get("states", ())),
                           filters.get("name", ""), filters.get("since"), filters.get("until"),
                           100)
    for sql, args in scans:
        plan = " ".join(row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}", args))
        if "job IN" in sql:  # a job has few attempts
            assert "autoindex" in plan
        else:
            assert "COVERING INDEX" in plan and "TEMP B-TREE" not in plan, plan


def test_a_filtered_query_over_100000_attempts_answers_in_under_200_ms(big_journal):
    slowest = {}
    for shape, filters in SHAPES.items():
        history.query(str(big_journal), **filters)  # the pages read once, as a live journal's
        started = time.perf_counter()
        assert history.query(str(big_journal), **filters)
        slowest[shape] = time.perf_counter() - started
    assert max(slowest.values()) < 0.2, slowest


def test_an_array_and_one_of_its_elements_asked_together_count_the_element_once(tmp_path):
    path = str(tmp_path / "jobs.sqlite")
    journal = Journal(path)
    rows = [attempt(10, array_id=9, array_index=0), attempt(11, array_id=9, array_index=1)]
    journal.write([{"id": r["job"]} for r in rows], rows)
    journal.close()
    assert [a["id"] for a in history.query(path, jobs=(9, 11), limit=2)] == [11, 10]


def test_numbers_sqlite_cannot_bind_match_nothing(tmp_path):
    path = str(tmp_path / "jobs.sqlite")
    journal = Journal(path)
    journal.write([{"id": 1}], [attempt(1)])
    journal.close()
    assert history.query(path, jobs=(2**63, 2**64 - 1)) == []
    assert history.query(path, since=2**63) == []  # times are floats: bound as they are
    assert [a["id"] for a in history.query(path, until=2**64)] == [1]
    assert [a["id"] for a in history.query(path, jobs=(1, 2**63))] == [1]

"""The journal's own guarantees: a write that fails says why (not what its rollback said), a
journal that cannot be written is refused when it is opened, and job numbers are never given
twice, even by a journal that lost the commits in its -wal file."""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3

import pytest

from dsched.errors import ConfigError
from dsched.scheduler.journal import MARK_FILENAME, RESERVE, Journal, JournalNotWritable
from storage_helpers import read_only_file


def write_jobs(journal: Journal, first: int, last: int) -> None:
    for job_id in range(first, last + 1):  # one commit each, as acknowledged submissions
        journal.write([{"id": job_id, "command": ["true"]}])


def mark(directory) -> dict:
    return json.loads((directory / MARK_FILENAME).read_text())


def test_a_write_that_fills_the_disk_reports_the_full_disk_not_the_rollback(tmp_path):
    journal = Journal(str(tmp_path / "jobs.sqlite"))
    write_jobs(journal, 1, 1)
    # The database may grow no further: SQLite's own "database or disk is full", which rolls
    # the transaction back by itself, as a full disk does.
    pages = journal.db.execute("PRAGMA page_count").fetchone()[0]
    journal.db.execute(f"PRAGMA max_page_count={pages}")
    with pytest.raises(sqlite3.OperationalError) as failed:
        journal.write([{"id": 2, "blob": b"x" * 100_000}])
    assert str(failed.value) == "database or disk is full"
    assert not journal.db.in_transaction
    journal.close()
    assert [row["id"] for row in Journal(str(tmp_path / "jobs.sqlite")).load()] == [1]


def test_a_journal_that_cannot_be_written_is_refused_when_opened(tmp_path):
    path = tmp_path / "jobs.sqlite"
    journal = Journal(str(path))
    write_jobs(journal, 1, 3)
    journal.close()
    with read_only_file(path):
        with pytest.raises(JournalNotWritable) as refused:
            Journal(str(path))
    assert str(refused.value).startswith(f"the journal {path} cannot be written: attempt to "
                                         "write a readonly database; ")
    assert isinstance(refused.value, ConfigError)


def test_numbers_stay_above_every_job_the_journal_lost_with_its_wal(tmp_path, caplog):
    live, lost = tmp_path / "live", tmp_path / "lost"
    live.mkdir()
    lost.mkdir()
    journal = Journal(str(live / "jobs.sqlite"))
    write_jobs(journal, 1, 50)
    journal.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # jobs 1-50 reach the database file
    write_jobs(journal, 51, 150)  # in the -wal file only
    # The storage loses the -wal file: what is left is the database file, and the mark.
    for name in ("jobs.sqlite", MARK_FILENAME):
        shutil.copy(live / name, lost / name)
    journal.close()

    with caplog.at_level(logging.WARNING, "dsched.scheduler"):
        survivor = Journal(str(lost / "jobs.sqlite"))
    assert [row["id"] for row in survivor.load()][-1] == 50
    # Up to 200 may have been given (raised at 1, then at 101); 51-100 surely were.
    assert survivor.next_id == 2 * RESERVE + 1
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning == (
        f"The journal {lost / 'jobs.sqlite'} holds no job numbered above 50, but jobs up to 100 "
        "had been committed to it: acknowledged jobs were lost (its -wal file lost or cut "
        "short, or the journal replaced); new jobs are numbered from 201, so that no number is "
        "given twice")
    survivor.close()


def test_the_mark_costs_a_write_per_reserve_jobs_and_a_clean_close_leaves_no_gap(tmp_path,
                                                                                monkeypatch,
                                                                                caplog):
    path = str(tmp_path / "jobs.sqlite")
    marks = []
    write_mark = Journal._write_mark
    monkeypatch.setattr(Journal, "_write_mark",
                        lambda self, *mark: (marks.append(mark), write_mark(self, *mark)))
    journal = Journal(path)
    write_jobs(journal, 1, 250)
    write_jobs(journal, 7, 7)  # a change to an older job raises nothing
    assert marks == [(1 + RESERVE, 0), (101 + RESERVE, 100), (201 + RESERVE, 200)]
    # Killed here (not closed), a restart skips the numbers reserved, and warns of nothing.
    with caplog.at_level(logging.WARNING, "dsched.scheduler"):
        after_a_kill = Journal(path)
    assert after_a_kill.next_id == 201 + RESERVE and not caplog.records
    after_a_kill.close()
    journal.close()
    assert mark(tmp_path) == {"next": 251, "committed": 250}
    assert Journal(path).next_id == 251


def test_a_mark_that_cannot_be_read_stops_the_start(tmp_path):
    (tmp_path / MARK_FILENAME).write_text("{not json")
    with pytest.raises(ConfigError, match=f"cannot read {tmp_path / MARK_FILENAME}, the "
                                          "high-water mark of the job numbers"):
        Journal(str(tmp_path / "jobs.sqlite"))

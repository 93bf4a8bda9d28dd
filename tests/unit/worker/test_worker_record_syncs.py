"""Which writes of the job directory wait for the disk (issue 20): none per job.

A job's records (before the spawn, with the pid, the outcome) are replaced atomically in the
page cache: they survive every process of the worker, and cost a job no fsync. What a restart
of the machine may take is covered by ``machine.boot``, written to the disk once per start of
the machine: a worker that finds another start there tells the scheduler, which then gives up
on any attempt the worker does not list, never runs it again (``reconcile``).
"""

from __future__ import annotations

import json
import os

import pytest

from dsched.worker import jobrecords
from dsched.worker.jobrecords import (
    BOOT_NAME, machine_restarted, mark_boot, new_record, read_record, record_path,
    remove_record, write_record,
)


def counting(monkeypatch) -> list:
    synced: list = []
    real = os.fsync
    monkeypatch.setattr(jobrecords.os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    return synced


def test_a_record_is_replaced_atomically_without_a_sync(tmp_path, monkeypatch):
    synced = counting(monkeypatch)
    path = record_path(str(tmp_path), "job-1.1")
    write_record(path, new_record("job-1.1", {"command": ["true"]}, (), "log", "w"))
    write_record(path, {**read_record(path), "pid": 7})
    assert synced == [] and read_record(path)["pid"] == 7
    assert os.listdir(tmp_path) == ["job-1.1.json"]  # no temporary file left


def test_forgetting_a_record_does_not_wait_for_the_disk(tmp_path, monkeypatch):
    path = record_path(str(tmp_path), "job-1.1")
    write_record(path, new_record("job-1.1", {"command": ["true"]}, (), "log", "w"))
    synced = counting(monkeypatch)
    remove_record(str(tmp_path), "job-1.1")
    assert synced == [] and not os.path.exists(path)


@pytest.fixture
def boot(tmp_path, monkeypatch):
    """This machine's boot id, in a file the test may change (a restart of the machine)."""
    path = tmp_path / "boot_id"
    path.write_text("first-boot\n")
    monkeypatch.setattr(jobrecords, "BOOT_ID", str(path))
    return path


def test_a_restart_of_the_machine_is_said_until_a_scheduler_has_heard_it(tmp_path, boot,
                                                                          monkeypatch):
    directory = tmp_path / "jobs"
    directory.mkdir()
    # Never marked: nothing tells what a restart may have taken.
    assert machine_restarted(str(directory)) and machine_restarted(str(directory))
    synced = counting(monkeypatch)
    mark_boot(str(directory))  # a scheduler heard it
    assert (directory / BOOT_NAME).read_text() == "first-boot\n"
    assert len(synced) == 2  # the mark and its directory: on the disk
    # Another worker process, the same start of the machine: its records are all there.
    assert not machine_restarted(str(directory))
    boot.write_text("second-boot\n")
    assert machine_restarted(str(directory))
    # A worker process that ended before a scheduler heard it: the next one says it again.
    assert machine_restarted(str(directory))
    mark_boot(str(directory))
    assert not machine_restarted(str(directory))


def test_a_machine_that_does_not_say_its_start_counts_as_restarted(tmp_path, monkeypatch):
    monkeypatch.setattr(jobrecords, "BOOT_ID", str(tmp_path / "none"))
    mark_boot(str(tmp_path))
    assert machine_restarted(str(tmp_path)) and not (tmp_path / BOOT_NAME).exists()


def test_the_mark_is_no_record_and_recovery_passes_over_it(tmp_path, boot):
    mark_boot(str(tmp_path))
    assert jobrecords.recover(str(tmp_path), 0.0) == []
    assert (tmp_path / BOOT_NAME).exists()


def test_a_supervisor_writes_the_end_to_the_record_before_it_tells_it(tmp_path, monkeypatch):
    """A worker process that starts after the supervisor died having told the end finds it
    in the record; the start not told yet goes with the end, in one write."""
    from dsched.worker import jobsupervisor

    path = record_path(str(tmp_path), "job-1.1")
    write_record(path, new_record("job-1.1", {"command": ["true"]}, (), "log", "w"))
    told: list = []
    monkeypatch.setattr(jobsupervisor.Supervision, "_tell",
                        lambda self, data: told.append((self.untold + data,
                                                        read_record(path)["ended"])))
    supervision = jobsupervisor.Supervision(path, read_record(path), 1.0, 0.0)
    supervision.untold = b"started\n"
    supervision._end("completed", 0, "", 5.0)
    [(data, recorded)] = told
    assert recorded["outcome"] == "completed"
    started, ended, rest = data.split(b"\n")
    assert started == b"started" and json.loads(ended) == recorded and rest == b""


def test_an_end_that_cannot_be_recorded_is_still_told(tmp_path, monkeypatch, capfd):
    """A full disk must not turn a job that ran into one whose supervisor died unheard (the
    worker would report it lost, and a --requeue job would run again)."""
    import errno

    from dsched.worker import jobsupervisor

    path = record_path(str(tmp_path), "job-1.1")
    write_record(path, new_record("job-1.1", {"command": ["true"]}, (), "log", "w"))

    def full(path, fields):
        raise OSError(errno.ENOSPC, "No space left on device")

    told: list = []
    monkeypatch.setattr(jobsupervisor, "add_to_record", full)
    monkeypatch.setattr(jobsupervisor.Supervision, "_tell",
                        lambda self, data: told.append(self.untold + data))
    supervision = jobsupervisor.Supervision(path, read_record(path), 1.0, 0.0)
    supervision.last_words = lambda: b"done\n"
    supervision._end("completed", 0, "", 5.0)
    [data] = told
    ended, done, rest = data.split(b"\n")
    assert json.loads(ended)["outcome"] == "completed" and done == b"done" and rest == b""
    assert "cannot record how job-1.1 ended: No space left on device" in capfd.readouterr().err


def test_an_end_written_after_its_record_was_forgotten_does_not_bring_it_back(tmp_path):
    """The scheduler may acknowledge an end, and the worker forget its record, before the
    supervisor (which told the end first) has written it: the record stays forgotten."""
    path = record_path(str(tmp_path), "job-1.1")
    write_record(path, new_record("job-1.1", {"command": ["true"]}, (), "log", "w"))
    remove_record(str(tmp_path), "job-1.1")
    jobrecords.add_to_record(path, {"ended": {"outcome": "completed"}})
    assert os.listdir(tmp_path) == []


def test_a_line_cut_short_by_a_crash_is_passed_over(tmp_path):
    path = record_path(str(tmp_path), "job-1.1")
    write_record(path, new_record("job-1.1", {"command": ["true"]}, (), "log", "w"))
    jobrecords.add_to_record(path, {"pid": 7, "started": 5.0})
    with open(path, "ab") as file:
        file.write(b'{"ended":{"op":"attem')  # the supervisor died as it wrote
    record = read_record(path)
    assert (record["pid"], record["started"], record["ended"]) == (7, 5.0, None)

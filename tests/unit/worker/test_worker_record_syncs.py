"""Which record writes wait for the disk (issue 20): the record before the spawn and the
outcome, no other.

The record written before the spawn must outlive the machine (a worker that comes back after a
power loss reports the attempt as one that may have started, never lets it run again); so must
the outcome, before the worker reports it. The record with the pid need only outlive the
worker process (without it the attempt is still one that may have started); a forgotten
record may come back after a power loss (it is reported and acknowledged again).
"""

from __future__ import annotations

import os
from types import SimpleNamespace

from dsched.worker import jobrecords
from dsched.worker.jobrecords import new_record, read_record, record_path, remove_record, write_record


def counting(monkeypatch) -> list:
    synced: list = []
    real = os.fsync
    monkeypatch.setattr(jobrecords.os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    return synced


def test_a_record_not_asked_to_be_durable_is_replaced_atomically_without_a_sync(tmp_path,
                                                                               monkeypatch):
    synced = counting(monkeypatch)
    path = record_path(str(tmp_path), "job-1.1")
    write_record(path, new_record("job-1.1", {"command": ["true"]}, (), "log", "w"),
                 durable=False)
    assert synced == [] and read_record(path)["key"] == "job-1.1"
    assert os.listdir(tmp_path) == ["job-1.1.json"]  # no temporary file left


def test_a_durable_record_syncs_the_file_and_its_directory(tmp_path, monkeypatch):
    synced = counting(monkeypatch)
    path = record_path(str(tmp_path), "job-1.1")
    write_record(path, new_record("job-1.1", {"command": ["true"]}, (), "log", "w"))
    assert len(synced) == 2


def test_forgetting_a_record_does_not_wait_for_the_disk(tmp_path, monkeypatch):
    path = record_path(str(tmp_path), "job-1.1")
    write_record(path, new_record("job-1.1", {"command": ["true"]}, (), "log", "w"))
    synced = counting(monkeypatch)
    remove_record(str(tmp_path), "job-1.1")
    assert synced == [] and not os.path.exists(path)


def test_the_record_written_before_a_spawn_waits_for_the_disk(tmp_path, monkeypatch):
    from dsched.worker import jobrunner

    durable: list = []
    monkeypatch.setattr(jobrunner, "write_record",
                        lambda path, record, durable_=True, **kw: durable.append(
                            kw.get("durable", durable_)))
    monkeypatch.setattr(jobrunner, "open_locked_log", lambda log: -1)
    start = SimpleNamespace(key="job-1.1", job={"command": ["true"]}, gpus=())
    jobrunner.JobRunner._record(SimpleNamespace(worker_name="w"), str(tmp_path / "r.json"),
                                "log", start)
    assert durable == [True]

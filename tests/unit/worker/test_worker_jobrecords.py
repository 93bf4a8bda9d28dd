"""The job directory: records replaced whole, what a worker process that starts makes of what
an earlier one left, one worker process per directory (the holder named), private to its user,
and logs read from an offset."""

import logging
import os
import stat

import pytest

from dsched.protocol.ops import AttemptEnded
from dsched.worker.jobrecords import (
    DIED_WHILE_RUNNING, DIED_WHILE_STARTING, add_to_record, default_directory, lock_directory,
    log_path,
    new_record, read_log, read_record, record_path, recover, remove_record, write_record,
)


def record(directory, key, **fields):
    path = record_path(str(directory), key)
    write_record(path, {**new_record(key, {"command": ["true"]}, (), log_path(str(directory), key),
                                     "w1"), **fields})
    return path


def test_an_attempt_without_an_outcome_and_no_supervisor_is_recovered_lost(tmp_path):
    running = record(tmp_path, "job-1.1", pid=123, started=1000.0)
    starting = record(tmp_path, "job-2.1")  # recorded, then the worker died before its start
    done = AttemptEnded("job-3.1", "completed", 0, "", "log", 1000.0, 1001.0)
    record(tmp_path, "job-3.1", ended=done.to_wire())

    found = {ended.key: ended for ended in recover(str(tmp_path), wait=5)}

    assert found["job-3.1"] == done
    assert (found["job-1.1"].outcome, found["job-1.1"].error) == ("lost", DIED_WHILE_RUNNING)
    assert found["job-1.1"].started == 1000.0
    assert (found["job-2.1"].outcome, found["job-2.1"].error) == ("lost", DIED_WHILE_STARTING)
    # Written down: a second restart before the scheduler acknowledges says the same.
    assert read_record(running)["ended"] == found["job-1.1"].to_wire()
    assert read_record(starting)["ended"] == found["job-2.1"].to_wire()
    assert {e.key: e for e in recover(str(tmp_path), wait=5)} == found


def test_an_attempt_held_for_its_commit_and_never_told_to_go_is_gone_unlisted(tmp_path):
    held = record(tmp_path, "job-1.1", hold=True)  # its worker died before the scheduler's go
    told = record(tmp_path, "job-2.1", hold=True)
    add_to_record(told, {"hold": False})  # told to go: it may have started

    found = {ended.key: ended for ended in recover(str(tmp_path), wait=5)}

    assert list(found) == ["job-2.1"] and found["job-2.1"].error == DIED_WHILE_STARTING
    assert not os.path.exists(held)


def test_leftovers_of_a_cut_short_write_go_and_a_bad_record_is_skipped(tmp_path, caplog):
    (tmp_path / ".abc.tmp").write_text("{half")
    (tmp_path / "job-1.1.json").write_text("not json")
    with caplog.at_level(logging.WARNING, logger="dsched.worker"):
        assert recover(str(tmp_path), wait=1) == []
    assert os.listdir(tmp_path) == ["job-1.1.json"]
    assert "Ignoring" in caplog.text and "job-1.1.json" in caplog.text


def test_a_forgotten_record_leaves_its_log(tmp_path):
    path = record(tmp_path, "job-1.1")
    (tmp_path / "job-1.1.log").write_text("output")
    remove_record(str(tmp_path), "job-1.1")
    remove_record(str(tmp_path), "job-1.1")  # twice: nothing to do
    assert not os.path.exists(path) and (tmp_path / "job-1.1.log").exists()


def test_two_worker_processes_never_share_a_job_directory(tmp_path):
    directory = str(tmp_path / "jobs")
    held = lock_directory(directory, "worker w at 127.0.0.1:4567")
    try:
        # The lock file says who holds it; the refused one names the holder.
        said = f"pid {os.getpid()}, worker w at 127.0.0.1:4567"
        assert (tmp_path / "jobs" / "worker.lock").read_text() == said + "\n"
        with pytest.raises(OSError) as refused:
            lock_directory(directory, "worker v at 127.0.0.1:4568")
        assert refused.value.strerror == (
            f"the job directory {directory} is in use by another worker process ({said}): give "
            "each worker its own --name or worker.job_directory")
    finally:
        os.close(held)
    os.close(lock_directory(directory))  # free again once the holder has let go


def test_the_job_directory_is_made_private_and_one_others_may_write_to_is_refused(tmp_path):
    directory = tmp_path / "made" / "jobs"
    os.close(lock_directory(str(directory)))
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700  # records hold environments
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(OSError) as refused:
        lock_directory(str(shared))
    assert refused.value.strerror == (
        f"the job directory {shared} may be written by other users (mode 0777): chmod 700 it, "
        "or set worker.job_directory to a directory of this user's")
    assert not (shared / "worker.lock").exists()


def test_a_job_directory_that_cannot_be_made_is_named_with_the_setting(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OSError) as refused:
        lock_directory(str(blocker / "jobs"))
    # Not a bare "Permission denied" or "Not a directory": the path, and what to change.
    assert refused.value.strerror == (
        f"cannot create the job directory {blocker / 'jobs'}: Not a directory; set "
        "worker.job_directory to a directory of this user's")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_job_directory_of_another_user_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(OSError) as refused:
        lock_directory(str(theirs))
    assert refused.value.strerror.startswith(f"the job directory {theirs} belongs to ")
    assert "(uid 65534), not to this user" in refused.value.strerror
    assert refused.value.strerror.endswith(
        "set worker.job_directory to a directory of this user's")


def test_a_log_is_read_from_an_offset(tmp_path):
    path = tmp_path / "job-1.1.log"
    path.write_bytes(b"0123456789")
    assert read_log(str(path), 0, 4) == (b"0123", 10)
    assert read_log(str(path), 8, 100) == (b"89", 10)
    assert read_log(str(path), 50, 100) == (b"", 10)
    with pytest.raises(FileNotFoundError):
        read_log(str(tmp_path / "job-2.1.log"), 0, 10)


def test_file_names_come_only_from_attempt_keys(tmp_path):
    assert record_path("/d", "job-12.3") == "/d/job-12.3.json"
    for key in ("../x", "job-1", "job-1.1/../../x", "job-a.1"):
        with pytest.raises(ValueError):
            log_path("/d", key)


def test_the_default_directory_is_named_for_the_worker(tmp_path):
    jobs = tmp_path / "sched-jobs"
    assert default_directory(str(tmp_path), "host-12-0") == str(jobs / "host-12-0")
    assert default_directory(str(tmp_path), "../a b") == str(jobs / ".._a_b")
    assert default_directory(str(tmp_path), "..") == str(jobs / "__")


def test_without_a_local_directory_the_default_is_in_the_users_state_directory(home,
                                                                             monkeypatch):
    # Not the temp dir, which every account shares (the first user's directory locks out the
    # second) and which is emptied at boot: beside the scheduler's state, in this user's home.
    assert default_directory(None, "w") == str(home / ".local" / "state" / "sched" / "jobs" / "w")
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    assert default_directory(None, "w") == str(home / "state" / "sched" / "jobs" / "w")

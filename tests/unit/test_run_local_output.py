"""``sched run-local``'s jobs' output (``cli.joboutput``), read from log files written as a
worker writes them: whole lines only, prefixed with their job's number, so that two jobs' lines
never mix; a job's last partial line once it ended; copies kept in a log directory; the last
lines of a job that did not complete, shown under its line at the end."""

from __future__ import annotations

from dsched.cli import joboutput
from dsched.cli.joboutput import JobOutput


def view(job: int, state: str, log) -> dict:
    return {"id": job, "name": "", "state": state, "log": str(log), "detail": "",
            "duration": 0.5, "exit_code": None}


def test_lines_of_two_jobs_come_whole_and_prefixed_and_a_last_partial_line_at_the_end(
        tmp_path):
    one, two = tmp_path / "job-1.1.log", tmp_path / "job-2.1.log"
    output = JobOutput()
    assert output.read([view(1, "queued", ""), view(2, "running", two)]) == []  # none yet
    one.write_bytes(b"a1\npart")
    two.write_bytes(b"b1\nb")
    running = [view(1, "running", one), view(2, "running", two)]
    assert output.read(running) == ["[1] a1", "[2] b1"]
    with open(one, "ab") as f:
        f.write(b"ial\n10%\r50%\r100%\r\n\xff\n")
    assert output.read(running) == ["[1] partial", "[1] 100%", "[1] \ufffd"]
    assert output.read(running) == []
    with open(two, "ab") as f:
        f.write(b"2 without an end")
    ended = [view(1, "completed", one), view(2, "failed", two)]
    assert output.read(ended) == ["[2] b2 without an end"]
    assert output.read(ended) == []  # read to its end once
    output.close()


def test_a_line_longer_than_the_most_kept_is_shown_in_pieces(tmp_path, monkeypatch):
    monkeypatch.setattr(joboutput, "LINE_MAX", 4)
    log = tmp_path / "job-1.1.log"
    log.write_bytes(b"abcdefgh")
    assert JobOutput().read([view(1, "running", log)]) == ["[1] abcdefgh"]


def test_logs_are_kept_whole_and_the_end_of_a_failed_job_is_shown_under_its_line(tmp_path):
    logs = tmp_path / "kept" / "logs"
    one, two = tmp_path / "job-1.1.log", tmp_path / "job-2.1.log"
    one.write_bytes(b"".join(b"line %d\n" % i for i in range(1, 26)) + b"\x1b[31mboom")
    two.write_bytes(b"fine\n")
    output = JobOutput(logs, tail=3)
    output.open()
    views = [{**view(1, "failed", one), "detail": "exited with code 3", "exit_code": 3},
             {**view(2, "completed", two), "exit_code": 0},
             {**view(3, "cancelled", ""), "detail": "cancelled by sched-4", "duration": None}]
    assert len(output.read(views)) == 27
    output.close()
    assert (logs / "job-1.log").read_bytes() == one.read_bytes()
    assert (logs / "job-2.log").read_bytes() == b"fine\n"
    assert output.failures(views) == [
        f"job 1 failed after 0.5s: exited with code 3; the last 3 lines of its output (all of "
        f"it in {logs / 'job-1.log'}):",
        "    line 24", "    line 25", "    \x1b[31mboom",
        "job 3 cancelled: cancelled by sched-4; it wrote no output"]
    assert JobOutput().failures(views[:1])[0].endswith("; it wrote no output")
    whole = JobOutput(tail=30)
    whole.read(views[:1])
    assert whole.failures(views[:1])[0].endswith("exited with code 3; its output:")

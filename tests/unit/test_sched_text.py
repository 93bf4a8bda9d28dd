"""What ``sched`` prints and reads, without a scheduler: durations, job lines and summaries,
the progress display in a terminal and in a pipe, a job's exit status as a shell reports it,
and the JOBFILE of ``sched run-local``."""

from __future__ import annotations

import io

import pytest

from dsched.cli.jobtext import duration, ended_line, progress_line, summary
from dsched.cli.progress import JobProgress
from dsched.jobfile import JobLine, parse_jobfile
from dsched.cli.jobtext import exit_status
from dsched.jobs import JobSpecError
from dsched.resources import Resources


@pytest.mark.parametrize("seconds, text", [
    (None, ""), (0.04, "0.0s"), (59.94, "59.9s"), (185, "3m05s"), (7380, "2h03m"),
    (100800, "1d04h")])
def test_durations_read_at_a_glance(seconds, text):
    assert duration(seconds) == text


@pytest.mark.parametrize("state, exit_code, status", [
    ("completed", 0, 0), ("failed", 3, 3), ("failed", -11, 139), ("failed", None, 1),
    ("timeout", -15, 124), ("cancelled", -15, 1), ("lost", None, 1)])
def test_a_jobs_exit_status_is_what_a_shell_would_report(state, exit_code, status):
    assert exit_status(state, exit_code) == status


def job(job_id: int, state: str, **fields) -> dict:
    return {"id": job_id, "name": "", "state": state, "reason": None, "detail": "",
            "duration": None, **fields}


def test_an_ended_job_is_one_line_with_how_long_and_why():
    assert ended_line(job(3, "completed", name="train", duration=2.0)) == \
        "job 3 (train) completed after 2.0s"
    assert ended_line(job(4, "cancelled", detail="cancelled by sched-2")) == \
        "job 4 cancelled: cancelled by sched-2"
    views = [job(1, "completed"), job(2, "failed"), job(3, "completed"), job(4, "queued")]
    assert summary(views) == "4 jobs: 2 completed, 1 failed, 1 queued"
    assert progress_line(views, 72) == "[1:12] 3/4 ended (2 completed, 1 failed); 1 queued"


def clock(times):
    return lambda: times.pop(0)


def test_progress_in_a_pipe_is_a_line_per_ended_job_then_a_summary():
    out = io.StringIO()
    progress = JobProgress(out, live=False)
    progress.update([job(1, "running"), job(2, "queued")])
    progress.update([job(1, "completed", duration=1.0), job(2, "running")])
    progress.update([job(1, "completed", duration=1.0), job(2, "running")])
    progress.finish([job(1, "completed", duration=1.0), job(2, "failed", duration=0.5)])
    assert out.getvalue() == ("job 1 completed after 1.0s\njob 2 failed after 0.5s\n"
                              "2 jobs: 1 completed, 1 failed\n")


def test_progress_in_a_terminal_rewrites_one_line_in_place_and_keeps_the_ended_jobs():
    out = io.StringIO()
    progress = JobProgress(out, live=True, clock=clock([0.0, 1.0, 2.0, 3.0]))
    progress.update([job(1, "running"), job(2, "queued")])
    first = out.getvalue()
    assert first == "\r[0:01] 0/2 ended; 1 running, 1 queued"
    progress.update([job(1, "completed", duration=1.0), job(2, "running")])
    progress.finish([job(1, "completed", duration=1.0), job(2, "completed", duration=1.0)])
    shown = out.getvalue()
    # The live line is overwritten (padded over) by the line of the job that ended.
    assert shown.startswith(first + "\rjob 1 completed after 1.0s" + " " * 11 + "\n\r[0:02]")
    # Once all ended: the live line is blanked out and the summary stays.
    assert shown.endswith("\r" + " " * len("[0:03] 2/2 ended (2 completed)") + "\r"
                          + "2 jobs: 2 completed\n")
    lines = [line.rstrip() for line in shown.replace("\r", "\n").split("\n")]
    assert "job 2 completed after 1.0s" in lines


def test_a_jobfile_is_one_command_a_line_with_an_optional_resources_prefix():
    text = """
    # the seed's GPU runs
    [gpu0=1] python op.py --run-id=aaa
    [gpu0=1 gpu1=1]   python op.py --run-id='c c'  # both GPUs

    sh -c 'echo "#1"; exit 0'
    """
    assert parse_jobfile(text) == [
        JobLine(3, ("python", "op.py", "--run-id=aaa"), Resources.parse("gpu0=1")),
        JobLine(4, ("python", "op.py", "--run-id=c c"), Resources.parse("gpu0=1 gpu1=1")),
        JobLine(6, ("sh", "-c", 'echo "#1"; exit 0'))]


@pytest.mark.parametrize("text, words", [
    ("true\n[gpu0=1 true\n", "jobs.txt:2: the resources in [...] have no closing ']'"),
    ("[foo=bar] true\n", "jobs.txt:1: invalid resource 'foo=bar'"),
    ("[GPU=1.5] true\n", "jobs.txt:1: invalid GPU request GPU=1.5"),
    ("[foo=1]\n", "jobs.txt:1: no command"),
    ("echo 'unclosed\n", "jobs.txt:1: cannot split the command line"),
])
def test_a_bad_jobfile_line_is_an_error_naming_it(text, words):
    with pytest.raises(JobSpecError) as error:
        parse_jobfile(text, name="jobs.txt")
    assert str(error.value).startswith(words)


def test_the_count_line_counts_every_job_and_says_which_a_page_shows():
    from dsched.cli.jobtext import count_line

    counts = {"queued": 1000, "running": 3, "completed": 2}
    assert count_line(counts, 1005, 1005) == "1005 jobs: 3 running, 1000 queued, 2 completed"
    assert count_line(counts, 1000, 1005).startswith(
        "1005 jobs: 3 running, 1000 queued, 2 completed (showing 1000 of 1005: those on "
        "workers first")

"""A flood of task failures costs the scheduler's INFO log a line per key prefix and a count
a minute; every traceback is kept at DEBUG only."""

import logging

from sched_story import Story, task

from dsched.scheduler import actions as act
from dsched.scheduler.outbox import gist
from dsched.scheduler.pacedlog import PacedLog


def traceback_of(message: str) -> str:
    return ("Traceback (most recent call last):\n  File \"job.py\", line 3, in fail\n"
            f"    raise ValueError(x)\nValueError: {message}\n")


def failures(n: int) -> list:
    """The Log actions of ``n`` failing tasks of prefix ``fail``, one of prefix ``other``,
    and one of prefix ``flaky`` that raises once, is retried, and raises again."""
    s = Story()
    s.worker("w", nthreads=n + 2)
    s.submit(*(task(f"fail-{i}") for i in range(n)), task("other-0"),
             task("flaky-0", retries=1))
    for i in range(n):
        s.err(f"fail-{i}", text=traceback_of(f"bad {i}"))
    s.err("other-0", text=traceback_of("other"))
    s.err("flaky-0", text=traceback_of("once"))
    s.err("flaky-0", text=traceback_of("twice"))
    return [a for a in s.log if isinstance(a, act.LogLine) and a.pace]


def test_a_thousand_failures_cost_the_info_log_a_line_a_prefix_and_a_count(caplog):
    logs = failures(1000)
    assert len(logs) == 1003
    paced = PacedLog(logging.getLogger("dsched.test.paced"), interval=60)
    with caplog.at_level(logging.INFO, logger="dsched.test.paced"):
        for i, log in enumerate(logs):
            paced.write(log, now=1000 + i * 0.01)  # ten seconds of failures
        paced.tick(1030)  # the minute is not over: nothing yet
        paced.tick(1061)
    info = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert info == [
        "Task fail-0 erred (exception): ValueError: bad 0",
        "Task other-0 erred (exception): ValueError: other",
        "Task flaky-0 raised on w; retrying (0 retries left): ValueError: once",
        "1000 more task failures in the last 61 s (each is logged at DEBUG level)",
    ]


def test_at_debug_every_failure_is_logged_with_its_traceback(caplog):
    paced = PacedLog(logging.getLogger("dsched.test.paced"), interval=60)
    with caplog.at_level(logging.DEBUG, logger="dsched.test.paced"):
        for log in failures(3):
            paced.write(log, now=0)
        paced.tick(5, stopping=True)  # the scheduler stops: the count is not lost
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 6 + 1 and messages[-1].startswith("3 more task failures in the last")
    assert all("Traceback (most recent call last)" in m for m in messages[:-1])
    assert "Task fail-2 erred (exception): ValueError: bad 2\nTraceback" in messages[2]


def test_a_new_minute_logs_the_first_failure_of_each_prefix_again(caplog):
    (first, second, *_) = failures(2)
    paced = PacedLog(logging.getLogger("dsched.test.paced"), interval=60)
    with caplog.at_level(logging.INFO, logger="dsched.test.paced"):
        paced.write(first, now=0)
        paced.write(second, now=1)
        paced.write(second, now=70)  # the first window is over: told, and a new one begins
    assert [r.getMessage() for r in caplog.records] == [
        "Task fail-0 erred (exception): ValueError: bad 0",
        "1 more task failure in the last 70 s (each is logged at DEBUG level)",
        "Task fail-1 erred (exception): ValueError: bad 1",
    ]


def test_the_gist_of_a_failure_is_one_line():
    assert gist(traceback_of("bad")) == "ValueError: bad"
    assert gist("dependency x-1 failed: " + traceback_of("bad")) == \
        "dependency x-1 failed: ValueError: bad"
    assert gist("2 worker(s) died while running this task") == \
        "2 worker(s) died while running this task"
    assert gist("a\nb") == "a b" and len(gist("x" * 10_000)) == 200

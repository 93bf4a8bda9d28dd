"""``sched history`` through click's CliRunner, with a stand-in for the client library: the
filters it passes on (``--since 2h`` as a time two hours ago, a date as local time), the table
with GPU-hours, utilisation and efficiency, an attempt that ran out of GPU memory, the totals,
``--json``, and a bad time refused before anything connects. (Against a real scheduler:
tests/integration/test_job_history.py.)"""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest
from click.testing import CliRunner

from dsched.cli import sched
from dsched.cli.historytext import COLUMNS, efficiency, history_table, totals_line, when

pytestmark = pytest.mark.usefixtures("home")

NOW = time.time()


def attempt(job: int, attempt: int = 1, **fields) -> dict:
    """An attempt as the scheduler's history gives it."""
    return {"id": job, "attempt": attempt, "array_id": None, "array_index": None,
            "name": "train", "state": "completed", "worker": "gpu-a", "started": NOW - 5400,
            "ended": NOW - 1800, "exit_code": 0, "error": "", "resources": "GPU=2",
            "gpus": 2.0, "gpu_uuids": ["GPU-a", "GPU-b"], "util_avg": 61.4, "util_peak": 99.0,
            "mem_avg": 30 * 10**9, "mem_peak": 41_200_000_000, "oom": False,
            "duration": 3600.0, "gpu_hours": 2.0, "efficiency": 0.614, **fields}


class StandIn:
    def __init__(self, *attempts: dict):
        self.attempts = list(attempts)
        self.calls: list = []

    def history(self, jobs=(), states=(), name="", since=None, until=None, limit=100):
        self.calls.append((tuple(jobs), tuple(states), name, since, until, limit))
        return self.attempts

    def close(self):
        pass


@pytest.fixture
def client(monkeypatch):
    made: list[StandIn] = []

    def install(*attempts: dict) -> StandIn:
        made.append(StandIn(*attempts))
        return made[-1]

    monkeypatch.setattr(sched, "connect", lambda cfg: made[-1])
    return install


def run(*args):
    return CliRunner().invoke(sched.main, ["-s", "h:1", "history", *args])


def test_the_filters_go_to_the_library_and_times_ago_become_wall_clock_times(client):
    stand_in = client()
    result = run("12", "7_3", "--state", "failed", "--state", "lost", "--name", "train-*",
                 "--since", "2h", "--until", "2024-05-01T14:30", "--limit", "20")
    assert result.exit_code == 0, result.output
    [(jobs, states, name, since, until, limit)] = stand_in.calls
    assert (jobs, states, name, limit) == ((12, "7_3"), ("failed", "lost"), "train-*", 20)
    assert since == pytest.approx(time.time() - 7200, abs=5)
    assert until == dt.datetime(2024, 5, 1, 14, 30).timestamp()  # local time
    assert result.output == "no ended attempts\n"


def test_the_table_shows_gpu_hours_use_and_efficiency_and_sums_them(client):
    client(attempt(12, 2),
           attempt(12, 1, state="failed", oom=True, exit_code=1, util_avg=20.0,
                   util_peak=35.0, mem_peak=80_000_000_000, efficiency=0.2, gpu_hours=1.0,
                   duration=1800.0),
           attempt(30, array_id=29, array_index=0, name="sweep", gpus=0.0, gpu_uuids=[],
                   util_avg=None, util_peak=None, mem_avg=None, mem_peak=None,
                   efficiency=None, gpu_hours=0.0, resources=""))
    result = run()
    assert result.exit_code == 0, result.output
    header, first, second, third, totals = result.output.splitlines()
    assert header.split() == ["JOB", "ATTEMPT", "NAME", "STATE", "WORKER", "ENDED", "DURATION",
                              "GPUS", "GPU-HOURS", "UTIL-AVG/PEAK", "MEM-PEAK", "EFFICIENCY"]
    ended = dt.datetime.fromtimestamp(NOW - 1800).strftime("%H:%M:%S")
    if dt.datetime.fromtimestamp(NOW - 1800).date() != dt.date.today():
        ended = dt.datetime.fromtimestamp(NOW - 1800).strftime("%m-%d %H:%M")
    assert first.split() == ["12", "2", "train", "completed", "gpu-a", *ended.split(), "1h00m",
                             "2", "2.00", "61%/99%", "41.2G", "61%"]
    assert second.split()[:5] == ["12", "1", "train", "failed", "(oom)"]
    assert second.split()[-5:] == ["2", "1.00", "20%/35%", "80.0G", "20%"]
    assert third.split()[:5] == ["29_0", "1", "sweep", "completed", "gpu-a"]
    assert third.split()[-1] == "1h00m"  # no GPU: nothing of GPUs shown
    # Each weighed by its GPU-hours: (2 x 61.4% + 1 x 20%) / 3 = 47.6%.
    assert totals == "3 attempts, 3.00 GPU-hours, efficiency 48%"


def test_json_is_the_list_of_attempts_as_the_library_gives_them(client):
    client(attempt(12))
    result = run("--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [attempt(12)]


@pytest.mark.parametrize("args", [["--since", "yesterday"], ["--until", "2024-13-01"],
                                  ["--limit", "0"], ["--state", "running"]])
def test_a_bad_filter_is_refused_before_anything_connects(monkeypatch, args):
    monkeypatch.setattr(sched, "connect", lambda cfg: pytest.fail("connected"))
    result = run(*args)
    assert result.exit_code == 2
    assert "Invalid value" in result.output


def test_times_ago_and_dates():
    assert when("90m", 10_000.0) == 4_600.0
    assert when("1d", 100_000.0) == 13_600.0
    assert when("2024-05-01", 0.0) == dt.datetime(2024, 5, 1).timestamp()
    assert when("2024-05-01T12:00+00:00", 0.0) == 1_714_564_800.0
    with pytest.raises(ValueError, match="neither a time ago"):
        when("soon", 0.0)


def test_efficiency_of_many_is_weighed_by_gpu_hours_and_none_without_samples():
    assert efficiency([attempt(1, efficiency=None)]) is None
    assert efficiency([attempt(1), attempt(2, efficiency=0.1, gpu_hours=8.0)]) == \
        pytest.approx((2 * 0.614 + 8 * 0.1) / 10)
    assert totals_line([attempt(1, efficiency=None)]) == "1 attempt, 2.00 GPU-hours"
    assert history_table([], NOW) == ["  ".join(COLUMNS)]

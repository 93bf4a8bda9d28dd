"""``sched``'s commands through click's CliRunner, with a stand-in for the client library: what
each passes to the library, what it prints, and its exit status. A bad option value is
refused before anything connects. (The commands against real daemons are in
tests/integration/test_sched_command.py and test_sched_seed.py.)"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from dsched.cli import sched
from dsched.errors import SchedulerLostError

pytestmark = pytest.mark.usefixtures("home")


def view(job: int, state: str = "queued", **fields) -> dict:
    """A job's view as the scheduler gives it."""
    return {"id": job, "name": "", "state": state, "reason": None, "detail": "",
            "command": ["true"], "resources": "", "priority": 0, "attempt": 1,
            "retries_left": 0, "requeue": False, "after_ok": [], "after_any": [],
            "time_limit": None, "worker": "", "address": "", "gpus": [], "pid": None, "log": "",
            "submitted": 1000.0, "started": None, "ended": None, "duration": None,
            "exit_code": None, "error": "", "cancelling": False, **fields}


class Acknowledged:
    def __init__(self, job: int):
        self.job = job

    def job_id(self, timeout=None) -> int:
        return self.job


#: In a StandIn's ``log``: the library says it waits for the job's worker to come back.
WAITING = object()
#: What the library raises when its scheduler was lost and not got back.
LOST = SchedulerLostError("lost the scheduler at h:1: connection reset; not back within 30 s")


class StandIn:
    """Answers as the client library would, from ``views`` (by id); records the calls.
    ``lost``: waiting raises it."""

    def __init__(self, *views: dict, answers: dict | None = None, log=(b"",), workers=(),
                 lost: Exception | None = None):
        self.lost = lost
        self.views = {v["id"]: v for v in views}
        self.answers = answers or {}
        self.log = log
        self.found_workers = list(workers)
        self.calls: list = []
        self.closed = False

    def submit_command(self, command, **options):
        self.calls.append(("submit", command, options))
        return Acknowledged(7)

    def resolve_jobs(self, refs):
        """As the library does for an array whose indices start at 0: ``12_3`` is 16."""
        numbers = []
        for ref in refs:
            if isinstance(ref, str):
                array, index = map(int, ref.split("_"))
                ref = array + 1 + index
            numbers.append(ref)
        return numbers

    def jobs(self, ids=(), states=(), offset=0, limit=1000, expand=False):
        self.calls.append(("jobs", tuple(ids), tuple(states)))
        chosen = [v for i, v in sorted(self.views.items(), reverse=True) if not ids or i in ids]
        return {"jobs": chosen, "total": len(chosen), "counts": {}, "recovering": False}

    def wait_for_jobs(self, jobs, on_update=None, timeout=None, interval=1.0):
        self.calls.append(("wait", tuple(jobs), timeout))
        if self.lost is not None:
            raise self.lost
        views = [self.views[job] for job in jobs]
        if on_update is not None:
            on_update(views)
        if timeout is not None:
            raise TimeoutError(f"1 of {len(views)} jobs had not ended within {timeout:g} s")
        return views

    def cancel_jobs(self, jobs):
        return {str(job): self.answers.get(job, "unknown job") for job in jobs}

    release_jobs = cancel_jobs

    def workers(self):
        return self.found_workers

    def read_job_log(self, job, follow=False, on_wait=None):
        self.calls.append(("log", job, follow))
        for data in self.log:
            if isinstance(data, Exception):
                raise data
            if data is WAITING:
                on_wait("w1")
                continue
            yield data

    def close(self):
        self.closed = True


@pytest.fixture
def client(monkeypatch):
    """Install a stand-in client: ``client(*views, ...)`` makes it; ``.configs`` lists the
    configs the command connected with."""
    made: list[StandIn] = []
    configs: list[dict] = []

    def install(*views, **kwargs) -> StandIn:
        stand_in = StandIn(*views, **kwargs)
        made.append(stand_in)
        return stand_in

    def connect(cfg):
        configs.append(cfg)
        return made[-1]

    monkeypatch.setattr(sched, "connect", connect)
    install.configs = configs
    return install


def run(*args):
    return CliRunner().invoke(sched.main, list(args))


def test_submit_passes_every_option_to_the_library_and_prints_the_job_number(client):
    stand_in = client()
    result = run("-s", "h:1", "submit", "--resources", "gpu0=1 gpu1=1", "--name", "train",
                 "--priority", "5", "--retries", "2", "--after-ok", "1,2", "--after-ok", "3",
                 "--after-any", "4", "--time", "15m", "--hold", "--env", "A=1",
                 "--env", "B=x=y", "--cwd", "/data", "--requeue", "--gpu-memory-retry", "--",
                 "python", "train.py", "--lr", "0.1")
    assert result.exit_code == 0, result.output
    assert result.output == "7\n"
    [(what, command, options)] = stand_in.calls
    assert command == ["python", "train.py", "--lr", "0.1"]
    assert str(options.pop("resources")) == "gpu0=1 gpu1=1"
    assert options == {"name": "train", "priority": 5, "retries": 2, "after_ok": [1, 2, 3],
                       "after_any": [4], "time_limit": 900.0, "hold": True,
                       "env": {"A": "1", "B": "x=y"}, "cwd": "/data", "requeue": True,
                       "array": None, "array_limit": None, "gpu_memory_retry": True}


@pytest.mark.parametrize("flags, value", [((), None), (("--gpu-memory-retry",), True),
                                          (("--no-gpu-memory-retry",), False)])
def test_submit_says_whether_a_job_is_retried_after_running_out_of_gpu_memory(client, flags,
                                                                              value):
    stand_in = client()
    result = run("-s", "h:1", "submit", *flags, "--", "true")
    assert result.exit_code == 0, result.output
    [(_, _, options)] = stand_in.calls
    assert options["gpu_memory_retry"] is value


def test_submit_refuses_both_gpu_memory_retry_flags(client):
    stand_in = client()
    result = run("-s", "h:1", "submit", "--gpu-memory-retry", "--no-gpu-memory-retry", "--",
                 "true")
    assert result.exit_code == 1
    assert "choose one" in result.output
    assert not stand_in.calls
    assert client.configs[0]["client"]["scheduler_address"] == "h:1" and stand_in.closed


def test_submit_options_end_where_the_command_starts(client):
    stand_in = client()
    result = run("submit", "--name", "x", "python", "train.py", "--name", "y", "--wait")
    assert result.exit_code == 0, result.output
    [(_, command, options)] = stand_in.calls
    assert command == ["python", "train.py", "--name", "y", "--wait"] and options["name"] == "x"


@pytest.mark.parametrize("option, value, words", [
    ("--resources", "foo=bar", "'bar' is not a number"),
    ("--resources", "GPU=1.5", "invalid GPU request GPU=1.5"),
    ("--time", "soon", "invalid duration 'soon'"),
    ("--time", "0", "must be positive"),
    ("--env", "NOVALUE", "'NOVALUE' is not NAME=VALUE"),
    ("--after-ok", "1,x", "not a list of jobs such as 3,4 or 12_3"),
    ("--array", "5-2", "invalid array range"),
    ("--array", "0-9%x", "invalid array limit"),
    ("--after-ok", "99999999999999999999", "is not in the range 1<=x<="),
    ("--priority", "-99999999999999999999", "is not in the range -9223372036854775808<=x<="),
    ("--retries", str(2**64), "is not in the range 0<=x<="),
])
def test_submit_refuses_a_bad_value_before_it_connects(client, option, value, words):
    result = run("submit", option, value, "--", "true")
    assert result.exit_code == 2 and words in result.output, result.output
    assert client.configs == []  # nothing connected, so nothing was queued


@pytest.mark.parametrize("end, status", [
    (dict(state="completed", exit_code=0), 0), (dict(state="failed", exit_code=3), 3),
    (dict(state="failed", exit_code=-9), 137), (dict(state="timeout", exit_code=-15), 124),
    (dict(state="failed", exit_code=None), 1), (dict(state="cancelled", exit_code=-15), 1),
])
def test_submit_wait_exits_as_the_job_did(client, end, status):
    stand_in = client(view(7, duration=1.5, **end))
    result = run("submit", "--wait", "--", "train")
    assert result.exit_code == status, result.output
    assert result.stdout == "7\n" and f"job 7 {end['state']} after 1.5s" in result.stderr
    assert ("wait", (7,), None) in stand_in.calls


def test_submit_json_prints_the_job_and_with_wait_its_end(client):
    client(view(7, state="queued", reason="no_workers", detail="no workers connected yet"))
    result = run("submit", "--json", "--", "train")
    assert result.exit_code == 0 and json.loads(result.output)["reason"] == "no_workers"
    client(view(7, state="failed", exit_code=2))
    result = run("submit", "--json", "--wait", "--", "train")
    assert result.exit_code == 2 and json.loads(result.output)["exit_code"] == 2


def test_status_shows_each_reason_in_words_and_fails_for_an_unknown_job(client):
    client(view(5, resources="bar=1 baz=1", reason="missing_resources",
                detail="requires resources no worker has: bar, baz"),
           view(4, "running", name="train", worker="w1", gpus=[0, 1], started=1001.0),
           view(3, "failed", exit_code=3, detail="exited with code 3", duration=2.0))
    result = run("status")
    assert result.exit_code == 0, result.output
    header, *rows = result.output.splitlines()
    assert header.split() == ["ID", "NAME", "STATE", "RESOURCES", "WORKER", "GPUS",
                              "SUBMITTED", "STARTED", "DURATION", "EXIT", "REASON"]
    assert rows[0].startswith("5") and rows[0].endswith(
        "requires resources no worker has: bar, baz")
    assert "train" in rows[1] and "w1" in rows[1] and "0,1" in rows[1]
    assert re.split(" {2,}", rows[2])[-3:] == ["2.0s", "3", "exited with code 3"]
    found = json.loads(run("status", "--json").output)
    assert [v["id"] for v in found["jobs"]] == [5, 4, 3] and found["total"] == 3
    result = run("status", "4", "9")
    assert result.exit_code == 1 and "sched: error: no job 9" in result.stderr


@pytest.mark.parametrize("command, answers, status", [
    ("cancel", {1: "cancelled", 2: "cancelling"}, 0),
    ("cancel", {1: "cancelled", 2: "already completed"}, 1),
    ("release", {1: "released", 2: "released"}, 0),
    ("release", {1: "released", 2: "not held (running)"}, 1),
])
def test_cancel_and_release_say_what_became_of_each_job(client, command, answers, status):
    client(answers=answers)
    result = run(command, "1", "2")
    assert result.exit_code == status
    assert result.output.splitlines() == [f"job {job}: {answer}" for job, answer in
                                          answers.items()]


def test_wait_prints_a_line_per_ended_job_then_a_summary_and_fails_if_one_failed(client):
    client(view(1, "completed", exit_code=0, duration=1.0),
           view(2, "failed", exit_code=1, duration=0.5, detail="exited with code 1"))
    result = run("wait", "1", "2")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "job 1 completed after 1.0s", "job 2 failed after 0.5s: exited with code 1",
        "2 jobs: 1 completed, 1 failed"]
    assert "\r" not in result.output  # not a terminal: no line rewritten in place


def test_wait_past_its_timeout_exits_124(client):
    client(view(1, "running"), view(2, "completed", duration=1.0))
    result = run("wait", "--timeout", "2", "1", "2")
    assert result.exit_code == 124
    assert result.stdout.splitlines() == ["job 2 completed after 1.0s",
                                          "2 jobs: 1 completed, 1 running"]
    assert "1 of 2 jobs had not ended within 2 s" in result.stderr


@pytest.mark.parametrize("args, env, says", [
    (["-s", "127.0.0.1"], {}, "address '127.0.0.1' is not of the form host:port"),
    (["-s", "127.0.0.1:0"], {}, "port 0 is not a scheduler's port"),
    ([], {"SCHED_CLIENT__SCHEDULER_ADDRESS": "node7"}, "'node7' is not of the form host:port"),
])
def test_a_scheduler_address_without_a_port_is_one_line_and_exit_2(client, args, env, says):
    # As sched-worker says of it (one rule, cli.address_problem): no default port is assumed.
    client()
    result = CliRunner().invoke(sched.main, [*args, "status"], env=env)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("sched: error: invalid scheduler address: ")
    assert says in result.stderr and result.stderr.count("\n") == 1
    assert client.configs == []  # refused before connecting


def test_logs_writes_the_bytes_as_they_come(client):
    stand_in = client(log=(b"epoch 1\n", b"\xffbinary\n"))
    result = run("logs", "-f", "3")
    assert result.exit_code == 0 and result.stdout_bytes == b"epoch 1\n\xffbinary\n"
    assert ("log", 3, True) in stand_in.calls


def test_logs_follow_says_once_that_it_waits_for_the_jobs_worker(client):
    client(log=(b"before\n", WAITING, b"after\n"))
    result = run("logs", "-f", "3")
    assert result.exit_code == 0 and result.stdout == "before\nafter\n"
    assert result.stderr == "sched: waiting for worker w1 to come back\n"


@pytest.mark.parametrize("args", [("wait", "1"), ("submit", "--wait", "--", "true"),
                                  ("logs", "-f", "1")])
def test_a_command_following_jobs_exits_75_when_its_scheduler_is_not_back(client, args):
    client(view(1), view(7), lost=LOST, log=(b"so far\n", LOST))
    result = run(*args)
    assert result.exit_code == sched.EXIT_SCHEDULER_LOST == 75, result.output
    assert result.stderr.endswith(f"sched: error: {LOST}\n")
    assert result.stderr.count("\n") == 1


def test_a_scheduler_lost_under_a_command_that_follows_nothing_is_exit_1(client):
    client(view(1), log=(LOST,))
    result = run("logs", "1")
    assert result.exit_code == 1 and result.stderr == f"sched: error: {LOST}\n"


def test_workers_prints_resources_used_of_total_free_and_gpus_with_their_jobs(client):
    client(workers=[{"name": "w1", "address": "127.0.0.1:5", "nthreads": 4, "busy": 2,
                     "draining": False, "jobs": [4, 6],
                     "resources": {"foo": {"total": 12, "used": 5, "free": 7},
                                   "gpu0": {"total": 1, "used": 1, "free": 0}},
                     "gpus": [{"index": 0, "jobs": [4], "utilization": 0.37},
                              {"index": 1, "jobs": [], "utilization": None}]}])
    header, row = run("workers").output.splitlines()
    assert header.split()[:4] == ["WORKER", "ADDRESS", "SLOTS", "RESOURCES"]
    assert row.split("  ")[0] == "w1" and "2/4" in row
    assert "foo=5/12 gpu0=1/1" in row and "foo=7 gpu0=0" in row
    assert "0: job 4 37% busy, 1: free" in row and row.endswith("4,6")
    assert json.loads(run("workers", "--json").output)[0]["name"] == "w1"
    client()
    assert run("workers").output == "no workers connected\n"


def test_workers_shows_gpu_memory_in_gb_and_a_fenced_device_with_its_fault(client):
    client(workers=[{"name": "g", "address": "127.0.0.1:6", "nthreads": 2, "busy": 1,
                     "draining": False, "jobs": [3],
                     "resources": {"GPU": {"total": 2, "used": 1, "free": 1},
                                   "GPU_MEMORY": {"total": 160e9, "used": 80e9, "free": 80e9}},
                     "gpus": [{"index": 0, "jobs": [3], "utilization": None, "fenced": ""},
                              {"index": 1, "jobs": [], "utilization": None,
                               "fenced": "gpu fault: Xid 79 on gpu1 (GPU-1)"}]}])
    _, row = run("workers").output.splitlines()
    assert "GPU=1/2 GPU_MEMORY=80G/160G" in row and "GPU=1 GPU_MEMORY=80G" in row
    assert "1: free FENCED (gpu fault: Xid 79 on gpu1 (GPU-1))" in row


def test_run_local_refuses_a_bad_jobfile_before_it_starts_anything(tmp_path, monkeypatch):
    from dsched.client import cluster

    monkeypatch.setattr(cluster, "LocalCluster", None)  # starting one would raise
    jobfile = tmp_path / "jobs.txt"
    for text, words in (("true\n\n[foo] true\n", "jobs.txt:3: invalid resource 'foo'"),
                        ("[foo=2] true\n", "needs foo=2, more than the worker offers (foo=1)"),
                        ("# only a comment\n", "no jobs")):
        jobfile.write_text(text)
        result = run("run-local", "--resources", "foo=1", "--log-dir", str(tmp_path / "logs"),
                     str(jobfile))
        assert result.exit_code == 2, result.output
        assert words in result.stderr and "nothing ran" in result.stderr
        assert not (tmp_path / "logs").exists()  # nothing made either
    result = run("run-local", str(tmp_path / "missing.txt"))
    assert result.exit_code == 2 and "does not exist" in result.output


@pytest.mark.parametrize("command", ["status", "cancel", "release", "wait", "logs"])
def test_a_job_number_the_wire_cannot_carry_is_a_usage_error(client, command):
    result = run(command, "99999999999999999999999")
    assert result.exit_code == 2 and "is not in the range 1<=x<=" in result.output
    assert client.configs == []

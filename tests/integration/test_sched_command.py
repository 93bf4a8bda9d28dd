"""``sched`` run as a subprocess against a real scheduler and worker (one cluster for the
module): what each option of ``submit`` does to a job, following a log to the job's end,
cancelling a running job, ``wait``'s exit status and progress lines, ``status --json``,
``workers``, a request larger than any worker waiting with its reason, an unreachable
scheduler, a scheduler lost while waiting and not back (said once, exit status 75), and a
standard output closed early."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys

from dashboard_helpers import request
from deadline import wait_until
from sched_helpers import sched, submit, views

CLUSTER_WORKERS = (("--name", "w", "--nthreads", "4", "--resources", "foo=12", "--no-nanny"),)


def state_of(client, job: int) -> str:
    return client.jobs([job])["jobs"][0]["state"]


def test_submit_wait_exits_with_the_jobs_exit_status_and_json_is_for_scripts(cluster, client):
    done = sched(cluster, "submit", "--wait", "--", "sh", "-c", "exit 3")
    assert done.returncode == 3, done.stderr
    job = int(done.stdout)
    assert f"job {job} failed after" in done.stderr and "exited with code 3" in done.stderr
    queued = json.loads(sched(cluster, "submit", "--json", "--hold", "--", "true").stdout)
    assert (queued["state"], queued["reason"]) == ("held", "held")
    sched(cluster, "cancel", str(queued["id"]))
    done = sched(cluster, "submit", "--wait", "--json", "--", "true")
    ended = json.loads(done.stdout)
    assert done.returncode == 0 and (ended["state"], ended["exit_code"]) == ("completed", 0)


def test_after_ok_runs_only_after_a_success_and_after_any_after_any_end(cluster, client):
    gate = submit(cluster, "--hold", "--", "true")  # nothing below starts before its release
    failing = submit(cluster, "--after-ok", str(gate), "--", "sh", "-c", "exit 1")
    never = submit(cluster, "--after-ok", str(failing), "--", "true")
    anyway = submit(cluster, "--after-any", str(failing), "--", "true")
    then = submit(cluster, "--after-ok", f"{gate},{anyway}", "--", "true")
    found = views(cluster, failing, anyway, then)
    assert {view["reason"] for view in found.values()} == {"dependency"}
    assert f"waiting for jobs {gate}, {anyway} to end" in found[then]["detail"]
    sched(cluster, "release", str(gate))
    assert sched(cluster, "wait", str(anyway), str(then)).returncode == 0
    found = views(cluster, failing, never, anyway)
    assert found[failing]["state"] == "failed"
    assert found[failing]["ended"] <= found[anyway]["started"]
    assert (found[never]["state"], found[never]["reason"]) == ("queued",
                                                               "dependency_never_satisfied")
    assert f"job {failing} ended failed" in sched(cluster, "status", str(never)).stdout
    assert sched(cluster, "cancel", str(never)).stdout == f"job {never}: cancelled\n"


def test_a_held_job_waits_until_it_is_released(cluster, client):
    job = submit(cluster, "--hold", "--", "true")
    assert "held at submission" in sched(cluster, "status", str(job)).stdout
    assert sched(cluster, "release", str(job)).stdout == f"job {job}: released\n"
    assert sched(cluster, "wait", str(job)).returncode == 0
    again = sched(cluster, "release", str(job))
    assert again.returncode == 1 and again.stdout == f"job {job}: not held (completed)\n"


def test_a_job_past_its_time_limit_is_killed_and_ends_timeout(cluster, client):
    done = sched(cluster, "submit", "--time", "1", "--wait", "--", "sleep", "60")
    assert done.returncode == 124, done.stderr
    view = views(cluster, int(done.stdout))[int(done.stdout)]
    assert view["state"] == "timeout" and "time limit of 1 s" in view["detail"]
    assert view["duration"] < 30


def test_the_job_sees_its_env_and_cwd(cluster, client, tmp_path):
    done = sched(cluster, "submit", "--wait", "--env", "GREETING=hello world",
                 "--env", "EMPTY=", "--cwd", str(tmp_path), "--",
                 "sh", "-c", 'echo "$GREETING|${EMPTY-unset}|$(pwd)"')
    assert done.returncode == 0, done.stderr
    log = sched(cluster, "logs", done.stdout.strip())
    assert log.stdout == f"hello world||{tmp_path}\n"


def test_a_running_job_is_cancelled_and_wait_says_so(cluster, client):
    job = submit(cluster, "--", "sh", "-c", "echo started; exec sleep 600")
    wait_until(lambda: state_of(client, job) == "running", what=f"job {job} to run")
    assert sched(cluster, "cancel", str(job)).stdout == f"job {job}: cancelling\n"
    done = sched(cluster, "wait", str(job))
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1] == "1 job: 1 cancelled"
    assert views(cluster, job)[job]["state"] == "cancelled"
    assert sched(cluster, "logs", str(job)).stdout.startswith("started\n")


def test_logs_follow_prints_the_output_as_it_comes_and_exits_once_the_job_ended(
        cluster, client, tmp_path):
    go = tmp_path / "go"  # the job writes its second line only once the test says so
    job = submit(cluster, "--", "sh", "-c",
                 f"echo line 1; while [ ! -e {go} ]; do sleep 0.05; done; echo line 2")
    follow = subprocess.Popen(
        [sys.executable, "-m", "dsched.cli.sched", "-s", cluster.address, "logs", "-f",
         str(job)], env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follow.stdout.readline() == "line 1\n"
        assert state_of(client, job) == "running"  # it was followed, not read at the end
        go.touch()
        rest = follow.stdout.read()
        assert follow.wait(60) == 0, follow.stderr.read()
    finally:
        follow.kill()
        follow.wait()
        follow.stdout.close()
        follow.stderr.close()
    assert rest == "line 2\n"
    assert state_of(client, job) == "completed"


def test_wait_exits_0_only_if_every_job_completed_printing_a_line_per_job(cluster, client):
    good = submit(cluster, "--name", "good", "--", "true")
    bad = submit(cluster, "--name", "bad", "--", "sh", "-c", "exit 5")
    done = sched(cluster, "wait", str(good))
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "1 job: 1 completed"
    done = sched(cluster, "wait", str(good), str(bad))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[-1] == "2 jobs: 1 completed, 1 failed"
    assert any(line.startswith(f"job {bad} (bad) failed after") and
               line.endswith("exited with code 5") for line in lines)
    unknown = sched(cluster, "wait", "9999")
    assert unknown.returncode == 1 and unknown.stderr == "sched: error: no job 9999\n"


def test_status_json_has_every_field_of_a_job(cluster, client):
    job = submit(cluster, "--name", "fields", "--resources", "foo=2", "--", "true")
    sched(cluster, "wait", str(job))
    view = views(cluster, job)[job]
    assert {"id", "name", "state", "reason", "detail", "resources", "worker", "gpus",
            "submitted", "started", "ended", "duration", "exit_code", "command"} <= set(view)
    assert (view["name"], view["state"], view["resources"], view["worker"],
            view["exit_code"]) == ("fields", "completed", "foo=2", "w", 0)
    assert view["submitted"] <= view["started"] <= view["ended"]


def test_workers_shows_resources_used_and_free_and_the_jobs_running(cluster, client):
    job = submit(cluster, "--resources", "foo=5", "--", "sleep", "600")
    try:
        wait_until(lambda: state_of(client, job) == "running", what=f"job {job} to run")
        header, row = sched(cluster, "workers").stdout.splitlines()
        assert header.split()[:3] == ["WORKER", "ADDRESS", "SLOTS"]
        assert row.startswith("w ") and "foo=5/12" in row and "foo=7" in row
        assert row.endswith(str(job))
        [w] = json.loads(sched(cluster, "workers", "--json").stdout)
        assert w["resources"]["foo"] == {"total": 12, "used": 5, "free": 7}
        assert w["jobs"] == [job] and w["nthreads"] == 4
    finally:
        sched(cluster, "cancel", str(job))


def test_a_request_larger_than_any_worker_offers_is_queued_and_says_why(cluster, client):
    job = submit(cluster, "--resources", "foo=20", "--", "true")
    view = views(cluster, job)[job]
    assert (view["state"], view["reason"]) == ("queued", "too_large")
    assert "needs foo=20 but the largest worker offers foo=12" in sched(
        cluster, "status", str(job)).stdout
    assert sched(cluster, "cancel", str(job)).returncode == 0


def test_an_unreachable_scheduler_is_one_line_and_exit_status_1(cluster):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run([sys.executable, "-m", "dsched.cli.sched", "-s",
                           f"127.0.0.1:{port}", "status"], env=cluster.env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"sched: error: cannot connect to the scheduler at "
                                  f"127.0.0.1:{port}") and done.stderr.count("\n") == 1


def test_wait_past_its_timeout_names_the_timeout_and_exits_124(cluster, client):
    job = submit(cluster, "--hold", "--", "true")
    try:
        done = sched(cluster, "wait", "--timeout", "1", str(job))
    finally:
        sched(cluster, "cancel", str(job))
    assert done.returncode == 124
    assert done.stderr == "sched: error: 1 of 1 jobs had not ended within 1 s\n"


def test_a_closed_standard_output_ends_the_command_quietly(cluster, client):
    # The reader is gone before sched writes a byte, as head's is once it has its lines; the
    # status is 128 + SIGPIPE, what a shell reports for git in `git log | head`.
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "dsched.cli.sched", "-s", cluster.address,
                               "status"], env=cluster.env, stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (128 + signal.SIGPIPE, "")


def test_a_scheduler_lost_while_waiting_is_said_once(daemons):
    daemons.scheduler()
    job = submit(daemons, "--hold", "--", "true")
    waiting = subprocess.Popen(
        [sys.executable, "-m", "dsched.cli.sched", "-s", daemons.address, "wait", str(job)],
        env={**daemons.env, "SCHED_CLIENT__CONNECT_TIMEOUT": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        def clients() -> float:
            _, _, body = request(daemons.dashboard, "metrics")
            return float(re.search(rb"^dsched_clients_connected (\S+)$", body, re.M).group(1))
        wait_until(lambda: clients() == 1, what="sched wait to connect")
        daemons.scheduler_process.send_signal(signal.SIGTERM)  # its drain ends the connection
        _, stderr = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
        waiting.communicate()
    # Not back within client.connect_timeout: a status of its own, not a job's failure (1).
    assert waiting.returncode == 75
    # The library's log line ("Lost the scheduler ...") is not said again before it.
    assert stderr.startswith(f"sched: error: lost the scheduler at {daemons.address}")
    assert stderr.endswith("; not back within 1 s\n")
    assert stderr.count("\n") == 1, stderr

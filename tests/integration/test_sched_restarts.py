"""``sched`` and the client across the restarts of the daemons under them (real daemons on
127.0.0.1, OS-chosen ports): a job's log read after the nanny restarted its worker on a new
port, by ``sched logs`` (once, and following while the worker comes back), the library and the
dashboard; ``sched wait``, ``submit --wait`` and ``logs -f`` carrying on through a scheduler
killed with -9 and started again on its port and state directory."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from dashboard_helpers import get_json, request
from deadline import wait_until
from sched_helpers import sched, submit, views


def worker_address(client, name: str) -> str | None:
    """Where the connected worker ``name`` listens (None: it is not connected)."""
    found = [a for a, w in client.scheduler_info()["workers"].items() if w["name"] == name]
    return found[0] if found else None


def worker_process(nanny: subprocess.Popen) -> psutil.Process:
    """The nanny's worker process (the nanny runs one)."""
    (child,) = [p for p in psutil.Process(nanny.pid).children()
                if "dsched.cli.worker" in p.cmdline()]
    return child


def popen(daemons, *args: str, **env: str) -> subprocess.Popen:
    """``sched -s ADDRESS ARGS...`` in the background, its output as text in pipes."""
    return subprocess.Popen([sys.executable, "-m", "dsched.cli.sched", "-s", daemons.address,
                             *args], env={**daemons.env, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen, timeout: float = 90.0) -> tuple[int, str, str]:
    """The exit status, stdout and stderr of ``process``, killed if it outlives ``timeout``."""
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, out, err


def test_a_log_is_read_from_the_worker_its_nanny_restarted_on_a_new_port(daemons):
    daemons.scheduler()
    nanny = daemons.worker("--name", "w1", "--nthreads", "1", "--gpus", "none")
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    job = client.submit_command(["sh", "-c", "echo hello; echo world"]).job_id(timeout=30)
    assert sched(daemons, "wait", str(job)).returncode == 0
    view = views(daemons, job)[job]
    recorded = view["address"]
    assert recorded == worker_address(client, "w1")
    # What the worker kept (it may add a line of its own to a job's output).
    kept = Path(view["log"]).read_bytes()
    assert kept.startswith(b"hello\nworld\n")

    victim = worker_process(nanny)
    victim.kill()
    victim.wait(10)
    wait_until(lambda: worker_address(client, "w1") not in (None, recorded),
               what="w1 back on a new port")
    assert views(daemons, job)[job]["address"] == recorded  # the job still names the old one

    done = sched(daemons, "logs", str(job))
    assert (done.returncode, done.stdout, done.stderr) == (0, kept.decode(), "")
    assert client.job_log(job).data == kept
    assert b"".join(client.read_job_log(job)) == kept
    log = get_json(daemons.dashboard, f"api/v1/jobs/{job}/log")
    assert log["text"] == kept.decode(), log
    status, _, page = request(daemons.dashboard, f"jobs/{job}")
    assert status == 200 and b"world" in page and b"cannot be reached" not in page


def test_logs_follow_waits_for_a_worker_that_is_coming_back(daemons):
    daemons.scheduler()
    nanny = daemons.worker("--name", "w1", "--nthreads", "1", "--gpus", "none")
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    job = client.submit_command(["echo", "kept"]).job_id(timeout=30)
    assert sched(daemons, "wait", str(job)).returncode == 0
    kept = Path(views(daemons, job)[job]["log"]).read_text()
    assert kept.startswith("kept\n")

    nanny.send_signal(signal.SIGSTOP)  # it restarts its worker only once the test says so
    try:
        victim = worker_process(nanny)
        victim.kill()
        wait_until(lambda: worker_address(client, "w1") is None, what="w1 to leave")
        once = sched(daemons, "logs", str(job))  # without -f: the worker is away, an error
        assert once.returncode == 1 and once.stderr.count("\n") == 1
        assert once.stderr.startswith(f"sched: error: cannot read the log of job {job}")
        follow = popen(daemons, "logs", "-f", str(job))
        said = follow.stderr.readline()
        nanny.send_signal(signal.SIGCONT)
        status, out, err = finish(follow)
    finally:
        nanny.send_signal(signal.SIGCONT)
    assert said == "sched: waiting for worker w1 to come back\n", said + err
    assert (status, out, err) == (0, kept, ""), err


def clients_connected(daemons) -> float:
    _, _, body = request(daemons.dashboard, "metrics")
    return float(re.search(rb"^dsched_clients_connected (\S+)$", body, re.M).group(1))


def test_wait_submit_wait_and_logs_follow_carry_on_through_a_scheduler_restart(daemons,
                                                                              tmp_path):
    state = str(tmp_path / "scheduler-state")
    daemons.scheduler("--state-dir", state)
    port = int(daemons.address.rsplit(":", 1)[1])
    daemons.worker("--no-nanny", "--name", "w", "--nthreads", "2", "--gpus", "none")
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    gate = tmp_path / "gate"  # the jobs end only once the test has restarted the scheduler
    gated = f"echo started; while [ ! -e {gate} ]; do sleep 0.05; done; echo done"
    job = submit(daemons, "--", "sh", "-c", gated)
    waiting = popen(daemons, "wait", str(job))
    following = popen(daemons, "logs", "-f", str(job))
    submitting = popen(daemons, "submit", "--wait", "--", "sh", "-c", gated + "; exit 4")
    processes = (waiting, following, submitting)
    try:
        assert following.stdout.readline() == "started\n"
        second = int(submitting.stdout.readline())
        wait_until(lambda: clients_connected(daemons) == 4, what="the three commands to connect")
        wait_until(lambda: {v["state"] for v in client.jobs([job, second])["jobs"]} ==
                   {"running"}, what="both jobs to run")
        client.close()  # it would reconnect too, and its requests meanwhile would fail

        daemons.scheduler_process.send_signal(signal.SIGKILL)
        daemons.scheduler_process.wait()
        daemons.scheduler("--state-dir", state, port=port)

        def reconnected() -> bool:
            ended = [(p.args[5:], p.returncode) for p in processes if p.poll() is not None]
            assert not ended, f"gave up instead: {ended}"
            return clients_connected(daemons) == 3
        wait_until(reconnected, what="the commands to reconnect")
        gate.touch()
        results = [finish(process) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    (wait_status, wait_out, wait_err), (log_status, log_out, log_err), \
        (submit_status, submit_out, submit_err) = results
    assert (wait_status, wait_err) == (0, ""), wait_err
    assert wait_out.splitlines()[-1] == "1 job: 1 completed"
    assert (log_status, log_err) == (0, ""), log_err
    log_out = "started\n" + log_out  # its first line was read above
    assert log_out == Path(views(daemons, job)[job]["log"]).read_text()
    assert log_out.startswith("started\ndone\n")
    assert (submit_status, submit_out) == (4, ""), submit_err  # its number was read above
    assert f"job {second} failed after" in submit_err and "exited with code 4" in submit_err
    final = json.loads(sched(daemons, "status", "--json", str(job), str(second)).stdout)
    assert sorted(v["state"] for v in final["jobs"]) == ["completed", "failed"]

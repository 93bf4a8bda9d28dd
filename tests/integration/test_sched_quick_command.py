"""``sched submit`` and ``sched status`` through the console script against a real scheduler:
the fast path (``cli/quick.py``, no click or asyncio) queues and shows jobs as the click
command does, and a wrong token or an unreachable scheduler is the same one line and exit
status either way (the fast path hands those to the click command)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

CLUSTER_WORKERS = ()

#: The ``sched`` an installed dsched gives a user; the module where there is none.
SCRIPT = Path(sys.executable).parent / "sched"
ENTRY = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "dsched.cli.quick"]
CLICK = [sys.executable, "-m", "dsched.cli.sched"]


def run(command: list[str], cluster, *args: str, env: dict | None = None,
        address: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*command, "-s", address or cluster.address, *args],
                          env=env or cluster.env, capture_output=True, text=True, timeout=90)


def test_submit_and_status_through_the_console_script(cluster, client):
    done = run(ENTRY, cluster, "submit", "--hold", "--name", "fast", "--", "echo", "hi")
    assert done.returncode == 0, done.stderr
    job = int(done.stdout)
    array = int(run(ENTRY, cluster, "submit", "--hold", "--array", "0-9999", "--", "echo",
                    "{}").stdout)
    views = json.loads(run(ENTRY, cluster, "status", "--json", str(job), f"{array}_7").stdout)
    assert [(v["id"], v["name"], v["state"]) for v in views["jobs"]] == [
        (array + 8, "", "held"), (job, "fast", "held")]
    assert client.jobs([array])["jobs"][0]["array"]["size"] == 10000
    table = run(ENTRY, cluster, "status", str(job))
    assert table.returncode == 0 and "fast" in table.stdout
    missing = run(ENTRY, cluster, "status", "999999")
    assert (missing.returncode, missing.stderr) == (1, "sched: error: no job 999999\n")
    client.cancel_jobs([job, array])


#: Loaded by no ``sched`` call: each costs several milliseconds of one.
HEAVY = {"click", "asyncio", "ssl", "re", "socket", "selectors", "hashlib", "_hashlib", "hmac",
         "copy", "weakref", "contextlib", "decimal", "importlib", "tomllib", "pathlib"}


def test_the_fast_path_loads_no_click_event_loop_tls_or_heavy_module(cluster, tmp_path):
    code = ("import sys\nstarted = set(sys.modules)\nfrom dsched.cli.quick import run\n"
            "assert run(sys.argv[1:]) == 0\n"
            "print(' '.join(sorted(set(sys.modules) - started)))")
    # As in a plain shell: the cluster's environment sets settings for its daemons.
    plain = {name: value for name, value in cluster.env.items()
             if not name.startswith("SCHED_") or name == "SCHED_TOKEN"}
    # As on a cluster's machines: the config file we ship, naming the scheduler, and a
    # setting in the environment.
    config = tmp_path / "config" / "sched" / "config.toml"
    config.parent.mkdir(parents=True)
    shipped = (Path(__file__).resolve().parents[2] / "deploy" / "config.toml").read_text()
    config.write_text(f'{shipped}\n[client]\nscheduler_address = "{cluster.address}"\n')
    configured = {**plain, "XDG_CONFIG_HOME": str(tmp_path / "config"),
                  "SCHED_CLIENT__CONNECT_TIMEOUT": "30"}
    submit = ["submit", "--hold", "--resources", "GPU=1 MEMORY=2GiB", "--", "true"]
    for args, env, heavy in ((["-s", cluster.address, *submit], plain, HEAVY | {"enum"}),
                             (submit, configured, HEAVY | {"enum"}),  # naming no state
                             (["-s", cluster.address, "status"], plain, HEAVY),
                             (["status"], configured, HEAVY)):
        done = subprocess.run([sys.executable, "-c", code, *args], env=env,
                              capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stderr
        loaded = set(done.stdout.splitlines()[-1].split())
        assert "dsched.client.plain" in loaded and not heavy & loaded, (args, heavy & loaded)


def test_a_wrong_token_and_an_unreachable_scheduler_say_what_the_click_command_says(cluster):
    with socket.socket() as probe:  # a port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        nowhere = f"127.0.0.1:{probe.getsockname()[1]}"
    wrong = {**cluster.env, "SCHED_TOKEN": "not-the-token"}
    for args, env, address in ((("status",), wrong, None), (("submit", "true"), wrong, None),
                               (("status",), None, nowhere), (("submit", "true"), None, nowhere)):
        fast = run(ENTRY, cluster, *args, env=env, address=address)
        slow = run(CLICK, cluster, *args, env=env, address=address)
        assert (fast.returncode, fast.stdout, fast.stderr) == (
            slow.returncode, slow.stdout, slow.stderr) and fast.returncode == 1
        assert fast.stderr.startswith("sched: error: ") and fast.stderr.count("\n") == 1


def test_a_submission_the_scheduler_refuses_is_said_as_the_click_command_says_it(cluster):
    # Refused there, not here: the job it runs after is unknown. Nothing was queued.
    for command in (ENTRY, CLICK):
        done = run(command, cluster, "submit", "--after-ok", "999999", "--", "true")
        assert (done.returncode, done.stdout) == (1, ""), (command, done.stderr)
        assert done.stderr == ("sched: error: the scheduler refused the job: nothing queued: "
                               "a job depends on unknown job 999999\n"), (command, done.stderr)


#: ``sched ARGS...`` by the fast path, its scheduler (pid argv[1]) frozen for argv[2] seconds
#: as soon as the command has connected: a reply slower than the connect timeout.
FROZEN_AFTER_CONNECT = """
import os, signal, sys, threading
from dsched.cli import quick
pid, seconds = int(sys.argv[1]), float(sys.argv[2])
connect = quick.connect
def frozen(cfg):
    client = connect(cfg)
    os.kill(pid, signal.SIGSTOP)
    threading.Timer(seconds, os.kill, (pid, signal.SIGCONT)).start()
    return client
quick.connect = frozen
sys.argv[1:] = sys.argv[3:]
quick.main()
"""


def test_a_submission_waits_for_a_slow_scheduler_as_long_as_it_takes(cluster, client):
    # Its reply comes after the connect timeout: the job is queued once, and said so.
    env = {**cluster.env, "SCHED_CLIENT__CONNECT_TIMEOUT": "1"}
    pid = str(cluster.scheduler_process.pid)
    try:
        done = subprocess.run([sys.executable, "-c", FROZEN_AFTER_CONNECT, pid, "2.5", "-s",
                               cluster.address, "submit", "--hold", "--name", "slow", "--",
                               "true"], env=env, capture_output=True, text=True, timeout=90)
    finally:
        os.kill(int(pid), signal.SIGCONT)
    assert done.returncode == 0, done.stderr
    job = int(done.stdout)
    assert [v["id"] for v in client.jobs(states=["held"])["jobs"] if v["name"] == "slow"] == [job]


def test_a_submission_with_standard_output_closed_queues_the_job_and_says_nothing(cluster,
                                                                                  client):
    command = " ".join([*map(shlex.quote, ENTRY), "-s", cluster.address, "submit", "--hold",
                        "--name", "no-stdout", "--", "true", ">&-"])
    done = subprocess.run(["bash", "-c", command], env=cluster.env, capture_output=True,
                          text=True, timeout=90)
    assert (done.returncode, done.stderr) == (0, "")
    assert [v["name"] for v in client.jobs(states=["held"])["jobs"]].count("no-stdout") == 1

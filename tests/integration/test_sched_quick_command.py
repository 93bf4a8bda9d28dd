"""``sched submit`` and ``sched status`` through the console script against a real scheduler:
the fast path (``cli/quick.py``, no click or asyncio) queues and shows jobs as the click
command does, and a wrong token or an unreachable scheduler is the same one line and exit
status either way (the fast path hands those to the click command)."""

from __future__ import annotations

import json
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
    assert run(ENTRY, cluster, "status", "999999").stderr == "sched: error: no job 999999\n"
    client.cancel_jobs([job, array])


def test_the_fast_path_loads_no_click_event_loop_or_tls(cluster):
    code = ("import sys\nfrom dsched.cli.quick import run\n"
            f"assert run(sys.argv[1:]) == 0\n"
            "print(sorted({'click', 'asyncio', 'ssl'} & set(sys.modules)))")
    for args in (["submit", "--hold", "--", "true"], ["status"]):
        done = subprocess.run([sys.executable, "-c", code, "-s", cluster.address, *args],
                              env=cluster.env, capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == "[]"


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

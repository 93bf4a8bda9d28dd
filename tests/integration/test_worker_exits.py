"""A worker that cannot do its job says so in one line and exits non-zero, so that a service
manager sees it: a scheduler address without a port or with one out of range (2, a usage
error); a wrong token, a name already taken, a port already taken (78, EX_CONFIG, which the
nanny does not restart either). And a process says only what is true of the GPUs.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

import pytest

from dsched.daemon import EXIT_CONFIG

NO_GPUS_FOUND = {"SCHED_FAKE_NVML": json.dumps({"count": 0})}


def run_worker(daemons, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsched.cli.worker", *args],
                          env={**daemons.env, **(env or {})}, capture_output=True, text=True,
                          timeout=60)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize("address, says", [
    ("localhost", "'localhost' is not of the form host:port"),
    ("127.0.0.1:99999", "port 99999 is out of range"),
    ("127.0.0.1:0", "port 0 is not a scheduler's port"),
])
def test_a_bad_scheduler_address_is_a_one_line_usage_error(daemons, address, says):
    done = run_worker(daemons, address)

    assert done.returncode == 2
    assert says in one_line(done.stderr)


@pytest.mark.parametrize("nanny", ["--nanny", "--no-nanny"])
def test_a_wrong_token_is_refused_and_exits_78(daemons, nanny):
    address = daemons.scheduler()

    done = run_worker(daemons, address, nanny, "--log-level", "warning",
                      env={"SCHED_TOKEN": "not-the-token"})

    assert done.returncode == EXIT_CONFIG
    assert "refused this worker" in one_line(done.stderr)


@pytest.mark.parametrize("nanny", ["--nanny", "--no-nanny"])
def test_a_taken_name_is_refused_and_exits_78(daemons, nanny):
    address = daemons.scheduler()
    daemons.worker("--name", "w")
    daemons.wait_for_workers(daemons.client(), 1)

    done = run_worker(daemons, address, "--name", "w", nanny, "--log-level", "warning")

    assert done.returncode == EXIT_CONFIG
    line = one_line(done.stderr)
    assert "refused this worker" in line and "a worker named 'w' is already connected" in line


def test_a_refused_process_stops_its_nanny_and_the_other_processes(daemons):
    address = daemons.scheduler()
    daemons.worker("--name", "w-1")
    daemons.wait_for_workers(daemons.client(), 1)

    # w-0 and w-2 are welcome, w-1 is taken: the nanny stops all three rather than run two.
    done = run_worker(daemons, address, "--name", "w", "--nworkers", "3", "--log-level", "warning")

    assert done.returncode == EXIT_CONFIG
    assert "a worker named 'w-1' is already connected" in one_line(done.stderr)


def test_a_taken_port_exits_78(daemons):
    address = daemons.scheduler()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_worker(daemons, address, "--host", "127.0.0.1", "--port", str(port),
                          "--log-level", "warning")

    assert done.returncode == EXIT_CONFIG
    line = one_line(done.stderr)
    assert "Cannot start the worker" in line and "in use" in line


@pytest.mark.parametrize("args, env, says", [
    ((), {"SCHED_TOKEN": ""}, "/state/sched/token does not exist"),
    (("--tls-ca", "/nonexistent/ca.pem"), {}, "cannot load TLS file(s) /nonexistent/ca.pem"),
])
def test_a_nanny_checks_what_every_process_needs_before_starting_any(daemons, args, env, says):
    # Otherwise each process would fail alike, be restarted, and fail again, for ever.
    done = run_worker(daemons, "127.0.0.1:8786", "--nworkers", "2", "--log-level", "warning",
                      *args, env=env)

    assert done.returncode == 2
    assert says in one_line(done.stderr)


def test_nworkers_without_the_nanny_is_a_one_line_usage_error(daemons):
    done = run_worker(daemons, "127.0.0.1:8786", "--no-nanny", "--nworkers", "2")

    assert done.returncode == 2
    assert "--nworkers needs the nanny" in one_line(done.stderr)


@pytest.mark.parametrize("option, said", [
    ((), "No GPUs: NVML found no GPU"),
    (("--gpus", "none"), "GPUs are turned off (--gpus none)"),
])
def test_worker_processes_say_once_what_is_true_of_the_gpus(daemons, option, said):
    daemons.scheduler()
    nanny = daemons.worker("--nworkers", "2", *option, env=NO_GPUS_FOUND,
                           stderr=subprocess.PIPE, text=True)
    daemons.wait_for_workers(daemons.client(), 2)

    nanny.send_signal(signal.SIGTERM)
    _, log = nanny.communicate(timeout=60)

    assert nanny.returncode == 0
    # Said once, by the nanny, and nothing else about GPUs, true or not.
    assert [line for line in log.splitlines() if "GPU" in line] == [
        line for line in log.splitlines() if said in line], log
    assert log.count(said) == 1, log

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


TWO_GPUS = {"SCHED_FAKE_NVML": json.dumps({"count": 2})}


@pytest.mark.parametrize("args, env, says", [
    (("--resources", "gpu0=2"), TWO_GPUS, "gpu0=2: gpu0 stands for device 0, one device"),
    (("--resources", "gpu5=1"), TWO_GPUS, "device 5 is not one this worker may use (it may use "
                                          "0, 1"),
    (("--resources", "gpu0=1"), {**TWO_GPUS, "CUDA_VISIBLE_DEVICES": "1"},
     "device 0 is not one this worker may use (it may use 1"),
    (("--resources", "gpu0=1 gpu1=1", "--nworkers", "2"), TWO_GPUS,
     "device 1 is not one this worker may use (it may use 0"),
    (("--resources", "gpu0=1", "--nworkers", "3"), TWO_GPUS,  # each process would pin gpu0
     "device 0 is not one this worker may use (it may use 1"),
])
def test_a_device_named_gpu_n_has_one_owner_or_the_worker_exits_2(daemons, args, env, says):
    done = run_worker(daemons, "127.0.0.1:8786", "--log-level", "warning", *args, env=env)
    assert done.returncode == 2
    assert says in one_line(done.stderr)


# -- the job directory: one worker process each, this user's alone, said with the setting ------

JOB_DIRECTORY = "SCHED_WORKER__JOB_DIRECTORY"


def addresses(client) -> dict[str, str]:
    return {w["name"]: address for address, w in client.scheduler_info()["workers"].items()}


@pytest.mark.parametrize("nanny", ["--nanny", "--no-nanny"])
def test_a_second_worker_on_a_job_directory_in_use_exits_78_naming_the_holder(daemons, tmp_path,
                                                                            nanny):
    jobs = tmp_path / "jobs"
    address = daemons.scheduler()
    first = daemons.worker("--no-nanny", "--name", "a", env={JOB_DIRECTORY: repr(str(jobs))})
    daemons.wait_for_workers(client := daemons.client(), 1)

    done = run_worker(daemons, address, nanny, "--name", "b", "--log-level", "warning",
                      env={JOB_DIRECTORY: repr(str(jobs))})

    assert done.returncode == EXIT_CONFIG
    assert one_line(done.stderr).endswith(
        f"Cannot start the worker: the job directory {jobs} is in use by another worker process "
        f"(pid {first.pid}, worker a at {addresses(client)['a']}): give each worker its own "
        "--name or worker.job_directory")
    assert first.poll() is None and list(addresses(client)) == ["a"]


def test_nworkers_processes_each_hold_a_job_directory_of_their_own(daemons, tmp_path):
    jobs = tmp_path / "jobs"
    address = daemons.scheduler()
    daemons.worker("--name", "w", "--nworkers", "2", env={JOB_DIRECTORY: repr(str(jobs))})
    daemons.wait_for_workers(client := daemons.client(), 2)
    at = addresses(client)
    for name in ("w-0", "w-1"):
        assert (jobs / name / "worker.lock").read_text().endswith(
            f", worker {name} at {at[name]}\n")

    done = run_worker(daemons, address, "--no-nanny", "--name", "x", "--log-level", "warning",
                      env={JOB_DIRECTORY: repr(str(jobs / "w-1"))})

    assert done.returncode == EXIT_CONFIG
    assert f"in use by another worker process (pid " in one_line(done.stderr)
    assert f", worker w-1 at {at['w-1']})" in one_line(done.stderr)


def test_a_job_directory_others_may_write_to_is_refused_in_one_line_naming_the_setting(
        daemons, tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    jobs.chmod(0o777)  # anyone could plant a record for the worker to run
    address = daemons.scheduler()

    done = run_worker(daemons, address, "--log-level", "warning",
                      env={JOB_DIRECTORY: repr(str(jobs))})

    assert done.returncode == EXIT_CONFIG
    assert one_line(done.stderr).endswith(
        f"Cannot start the worker: the job directory {jobs} may be written by other users (mode "
        "0777): chmod 700 it, or set worker.job_directory to a directory of this user's")

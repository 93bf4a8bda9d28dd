"""sched-scheduler as a program: it starts, tells systemd, logs placements, drains, and fails
clearly when it cannot start. (tests/integration/test_systemd.py has the watchdog and the
units.)"""

import os
import signal
import socket
import subprocess
import sys
import time

import cloudpickle
import pytest

from deadline import wait_until

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def slow(seconds, value):
    import time

    time.sleep(seconds)
    return value


def scheduler_command(*args):
    return [sys.executable, "-m", "dsched.cli.scheduler", "--host", "127.0.0.1", *args]


def test_it_tells_systemd_it_is_ready_once_listening_and_stopping_on_sigterm(daemons, notify,
                                                                           tmp_path):
    with open(tmp_path / "scheduler.log", "wb") as log:
        # Not daemons.scheduler(), which waits for the line printed after READY.
        process = subprocess.Popen(
            scheduler_command("--port", "0", "--state-dir", str(tmp_path / "state")),
            env={**daemons.env, "NOTIFY_SOCKET": notify.name},
            stdout=subprocess.DEVNULL, stderr=log)
    daemons.processes.append(process)
    ready = notify.until(lambda fields: "READY" in fields, what="READY=1")
    # Right after READY, before anything else: the port is already bound.
    host, port = ready["STATUS"].removeprefix("Listening at ").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10):
        pass
    assert notify.received[:2] == [{"STATUS": "Starting: loading the job journal"},
                                   {"STATUS": "Starting: listening on 127.0.0.1:0"}]
    assert ready == {"READY": "1", "STATUS": f"Listening at {host}:{port}"}
    process.send_signal(signal.SIGTERM)
    stopping = notify.until(lambda fields: "STOPPING" in fields, what="STOPPING=1")
    assert stopping == {"STOPPING": "1", "STATUS": "Received SIGTERM: draining"}
    assert process.wait(30) == 0


def test_a_taken_port_is_a_clear_error_and_a_non_zero_exit(daemons):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(scheduler_command("--port", str(port)), env=daemons.env,
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 78  # EX_CONFIG: starting it again unchanged would fail again
    assert f"Cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "in use" in result.stderr


def test_an_invalid_config_file_is_a_clear_error(daemons, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[scheduler]\nprot = 8786\n")
    result = subprocess.run(scheduler_command("--config", str(bad)), env=daemons.env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "prot" in result.stderr and "port" in result.stderr and str(bad) in result.stderr


def test_a_placement_is_logged_with_its_demand_at_debug(daemons):
    daemons.scheduler("--log-level", "debug")
    daemons.worker("--resources", "GPU=1", "--name", "gpu-worker")
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    assert client.submit(slow, 0, 7, resources={"GPU": 1}).result(timeout=30) == 7
    daemons.scheduler_process.send_signal(signal.SIGTERM)
    daemons.scheduler_process.wait(30)
    log = daemons.scheduler_log()
    assert "(requires GPU=1) on worker gpu-worker" in log


def test_the_log_is_quiet_at_info_one_line_per_operator_event_not_per_task(daemons):
    daemons.scheduler()  # --log-level info
    daemons.worker("--name", "w", "--nthreads", "2")
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    assert client.gather(client.map(slow, [0] * 500, range(500))) == list(range(500))
    client.submit(slow, 0, 1, resources={"GPU": 1})  # cannot run: that is worth a line
    wait_until(lambda: "cannot run: no worker offers resource GPU" in daemons.scheduler_log(),
               what="the unrunnable line")
    lines = daemons.scheduler_log().splitlines()
    assert len(lines) < 10, "\n".join(lines)


def test_sigterm_lets_running_tasks_finish_then_exits(daemons):
    daemons.scheduler()
    daemons.worker("--nthreads", "1")
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    running = client.submit(slow, 1.0, "done")
    wait_until(lambda: client.scheduler_info()["tasks"].get("processing"), what="task running")
    daemons.scheduler_process.send_signal(signal.SIGTERM)
    assert running.result(timeout=30) == "done"
    assert daemons.scheduler_process.wait(30) == 0


def test_a_second_signal_exits_at_once(daemons):
    daemons.scheduler()
    daemons.worker("--nthreads", "1")
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    never = client.submit(slow, 60, "never")  # held, so it is not released and cancelled
    wait_until(lambda: client.scheduler_info()["tasks"].get("processing"), what="task running")
    started = time.monotonic()
    daemons.scheduler_process.send_signal(signal.SIGTERM)
    wait_until(lambda: "draining" in daemons.scheduler_log(), what="drain")
    daemons.scheduler_process.send_signal(signal.SIGTERM)
    assert daemons.scheduler_process.wait(30) == 128 + signal.SIGTERM
    assert time.monotonic() - started < 20
    assert not never.done() or never.status == "lost"


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux only")
def test_the_help_names_every_option():
    result = subprocess.run([sys.executable, "-m", "dsched.cli.scheduler", "--help"],
                            capture_output=True, text=True, timeout=60)
    for option in ("--host", "--port", "--token-file", "--tls-cert", "--state-dir", "--config",
                   "--log-level"):
        assert option in result.stdout


def test_an_unusable_state_directory_is_one_line_and_a_non_zero_exit(daemons, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = subprocess.run(scheduler_command("--state-dir", str(blocker / "state")),
                            env=daemons.env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    (line,) = [line for line in result.stderr.splitlines() if "error" in line]
    assert line.startswith("sched-scheduler: error: cannot create the state directory")
    assert "Traceback" not in result.stderr


def test_the_address_it_gives_clients_is_one_they_can_connect_to():
    from types import SimpleNamespace

    from dsched.scheduler.server import Scheduler
    from dsched.settings import CommConfig, SchedulerConfig

    scheduler = Scheduler(SchedulerConfig(host="0.0.0.0", port=0), CommConfig(), token="t")
    scheduler.listener = SimpleNamespace(host="0.0.0.0", port=8786)  # as if listening
    host, port = scheduler.address.rsplit(":", 1)
    assert port == "8786" and host not in ("0.0.0.0", "")

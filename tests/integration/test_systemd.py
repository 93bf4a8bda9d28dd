"""The daemons under systemd: the watchdog, a worker's readiness and status through its nanny,
and the units in deploy/systemd/, checked by systemd's own tools. (The scheduler's READY and
STOPPING are in test_scheduler_daemon.py.)"""

import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import cloudpickle
import pytest

cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
#: What systemd-analyze is asked to check, and the name it checks each unit file under.
CHECKED = {"sched-scheduler.service": "sched-scheduler.service",
           "sched-worker@.service": "sched-worker@gpu.service",
           "sched.target": "sched.target"}


def has(key):
    return lambda fields: key in fields


def notify_socket_seen_by_task(_):
    import os

    return os.environ.get("NOTIFY_SOCKET", "unset"), os.environ.get("WATCHDOG_USEC", "unset")


# -- the notify protocol ------------------------------------------------------------------------


def test_the_scheduler_pings_the_watchdog_repeatedly_when_asked(daemons, notify):
    daemons.scheduler(env={"NOTIFY_SOCKET": notify.name, "WATCHDOG_USEC": "200000"})
    notify.until(has("READY"), what="READY=1")
    for _ in range(3):  # every 0.1 s, half of WATCHDOG_USEC
        notify.until(has("WATCHDOG"), timeout=10, what="WATCHDOG=1")


def test_a_worker_is_ready_once_started_says_when_registered_and_stops_on_sigterm(
        daemons, notify):
    daemons.scheduler()
    nanny = daemons.worker("--name", "gpu-a", "--nthreads", "1", "--resources", "GPU=1",
                           env={"NOTIFY_SOCKET": notify.name, "WATCHDOG_USEC": "2000000"})
    ready = notify.until(has("READY"), what="READY=1")
    assert ready["STATUS"] == f"Started; connecting to the scheduler at {daemons.address}"
    notify.until(lambda f: f.get("STATUS") ==
                 f"Registered with the scheduler at {daemons.address} as gpu-a",
                 what="the registered status")
    notify.until(has("WATCHDOG"), what="the nanny's WATCHDOG=1")
    # Neither a thread task nor a GPU task (a child process) can speak for the worker.
    client = daemons.client()
    seen = [client.submit(notify_socket_seen_by_task, 0).result(timeout=30),
            client.submit(notify_socket_seen_by_task, 1, resources={"GPU": 1}).result(timeout=30)]
    assert seen == [("unset", "unset")] * 2
    nanny.send_signal(signal.SIGTERM)
    stopping = notify.until(has("STOPPING"), what="STOPPING=1")
    assert stopping == {"STOPPING": "1", "STATUS": "Received SIGTERM: draining"}
    assert nanny.wait(60) == 0


def test_a_worker_is_ready_without_its_scheduler_once_all_its_processes_have_started(
        daemons, notify):
    with socket.socket() as closed:  # bound, not listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        address = "127.0.0.1:%d" % closed.getsockname()[1]
        daemons.worker("--nworkers", "2", "--nthreads", "1", address=address,
                       env={"NOTIFY_SOCKET": notify.name})
        ready = notify.until(has("READY"), what="READY=1")
        for name in ("worker-0", "worker-1"):
            assert f"{name}: Started; connecting to the scheduler at {address}" in \
                ready["STATUS"] or f"{name}: Cannot reach" in ready["STATUS"]
        notify.until(lambda f: f.get("STATUS", "").count("Cannot reach the scheduler") == 2,
                     what="a status line that says both processes cannot reach it")


# -- the units ----------------------------------------------------------------------------------

needs_systemd_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze is not installed (Debian: apt-get install systemd)")


def system_unit_directory():
    for candidate in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")):
        if (candidate / "sysinit.target").is_file():
            return candidate
    pytest.skip("no system unit directory with sysinit.target to check the units against")


def executables(unit_text):
    return re.findall(r"^Exec\w+=[-+!:@]*(/\S+)", unit_text, flags=re.MULTILINE)


@pytest.fixture(scope="module")
def unit_root(tmp_path_factory):
    """A root for ``systemd-analyze --root``: the system's own units (the targets ours depend
    on), ours, and stand-ins for the programs they start, which live in /opt/dsched."""
    root = tmp_path_factory.mktemp("root")
    shutil.copytree(system_unit_directory(), root / "usr/lib/systemd/system", symlinks=True)
    installed = root / "etc/systemd/system"
    installed.mkdir(parents=True)
    for unit in CHECKED:
        text = (UNITS / unit).read_text()
        (installed / unit).write_text(text)
        for program in executables(text):
            stand_in = root / program.lstrip("/")
            stand_in.parent.mkdir(parents=True, exist_ok=True)
            stand_in.write_text("#!/bin/sh\n")
            stand_in.chmod(0o755)
    return root


def verify(root, unit):
    return subprocess.run(["systemd-analyze", "verify", "--man=no", f"--root={root}",
                           f"/etc/systemd/system/{unit}"],
                          capture_output=True, text=True, timeout=60)


@needs_systemd_analyze
@pytest.mark.parametrize("unit", CHECKED)
def test_every_unit_passes_systemd_analyze_verify_without_a_word(unit_root, unit):
    result = verify(unit_root, CHECKED[unit])
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


@needs_systemd_analyze
def test_verify_as_run_here_does_report_a_mistake(unit_root):
    # So that the silence above means something: an unknown key warns, with exit status 0.
    broken = (UNITS / "sched-worker@.service").read_text().replace(
        "KillMode=mixed", "KillMode=mixed\nKillModus=mixed")
    (unit_root / "etc/systemd/system/broken@.service").write_text(broken)
    result = verify(unit_root, "broken@gpu.service")
    assert "Unknown key 'KillModus'" in result.stdout + result.stderr


@needs_systemd_analyze
def test_the_scheduler_unit_is_rated_2_0_or_better_by_systemd_analyze_security():
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--threshold=20", "--no-pager",
         str(UNITS / "sched-scheduler.service")],
        capture_output=True, text=True, timeout=60)
    rating = re.search(r"Overall exposure level for \S+: (\d+\.\d)", result.stdout)
    assert rating, result.stdout + result.stderr
    assert float(rating.group(1)) <= 2.0 and result.returncode == 0, result.stdout

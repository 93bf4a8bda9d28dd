"""No process outlives its job, its task or its worker: what a shell-command job or a GPU task
starts in a session of its own (a double fork and ``setsid``, as a daemonizing server does) is
killed when the job's command exits, when it is cancelled, and when its worker is killed with
-9; the same for a GPU task. Each test runs in both containment modes (``worker.containment``):
cgroup where this machine lets a process make cgroups, subreaper everywhere on Linux. The worker
says its mode once in its log and to the scheduler, which ``sched workers`` shows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile

import cloudpickle
import psutil
import pytest

from deadline import wait_until
from dsched.errors import SchedError
from dsched.worker import containment

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="sessions, subreapers and cgroups (Linux)")

ONE_GPU = {"SCHED_FAKE_NVML": json.dumps({"count": 1})}
#: What each escapee runs: ``sleep`` with this argument, so that a clean-up kills nothing else.
SLEEP = "1000"


def escape(pidfile: str) -> str:
    """Shell that starts a process in a new session whose parent exits at once (so it is
    orphaned, as a daemon is), which writes its pid to ``pidfile`` and sleeps."""
    return f"(setsid sh -c 'echo $$ > {pidfile}.tmp && mv {pidfile}.tmp {pidfile}; " \
           f"exec sleep {SLEEP}' &)"


def cgroup_unavailable() -> str:
    with tempfile.TemporaryDirectory() as directory:
        try:
            containment.choose("cgroup", "test-probe", directory)
        except OSError as error:
            return str(error)
    return ""


@pytest.fixture(params=[containment.CGROUP, containment.SUBREAPER])
def mode(request) -> str:
    if request.param == containment.CGROUP and (why := cgroup_unavailable()):
        pytest.skip(f"cgroup mode is not possible on this machine: {why}")
    return request.param


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def escapees(tmp_path):
    """Where escapees write their pids; any still alive at the end (a test failed) is killed."""
    yield tmp_path
    for path in tmp_path.glob("escapee*"):
        try:
            pid = int(path.read_text())
            if psutil.Process(pid).cmdline() == ["sleep", SLEEP]:
                os.kill(pid, signal.SIGKILL)
        except (ValueError, OSError, psutil.Error):
            pass


def in_a_cgroup_of_its_own(pid: int, mode: str) -> bool:
    """In cgroup mode, whether ``pid`` is in a cgroup the worker made; True in other modes."""
    with open(f"/proc/{pid}/cgroup") as file:
        return mode != containment.CGROUP or "/dsched-w-" in file.read()


def read_pid(path) -> int:
    return int(wait_until(lambda: path.exists() and path.read_text(), 30,
                          what=f"{path.name} written"))


def start(daemons, mode: str, *args: str, env: dict | None = None):
    daemons.scheduler()
    log = daemons.tmp_path / "worker.log"
    with open(log, "wb") as stderr:
        worker = daemons.worker("--no-nanny", "--name", "w", *args, stderr=stderr,
                                env={"SCHED_WORKER__CONTAINMENT": mode, **(env or {})})
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    return worker, client, log


# -- jobs -------------------------------------------------------------------------------------


def test_the_worker_says_its_mode_in_its_log_and_to_the_scheduler(daemons, mode):
    _, client, log = start(daemons, mode)
    (info,) = client.scheduler_info()["workers"].values()
    assert info["containment"] == mode
    assert [w["containment"] for w in client.workers()] == [mode]
    said = [line for line in log.read_text().splitlines() if "Containment:" in line]
    assert len(said) == 1 and f"Containment: {mode} (" in said[0] and "INFO" in said[0]


def test_a_job_that_ends_at_once_has_only_its_own_output_in_its_log(daemons, mode):
    """A command that had ended before its supervisor looked showed no cgroup of its own, and
    was said not to be in it: the log got a false line about it."""
    _, client, _ = start(daemons, mode)
    jobs = [client.submit_command(["echo", f"hello {i}"]) for i in range(10)]
    for i, job in enumerate(jobs):
        result = job.result(timeout=60).check()
        with open(result.log) as log:
            assert log.read() == f"hello {i}\n"


def test_what_a_job_starts_in_another_session_dies_when_the_job_exits(daemons, mode, escapees):
    _, client, _ = start(daemons, mode)
    pidfile = escapees / "escapee"
    job = client.submit_command(["sh", "-c", f"{escape(pidfile)}; {wait_for(pidfile)}; exit 0"])
    assert job.result(timeout=60).exit_code == 0
    pid = read_pid(pidfile)
    wait_until(lambda: not alive(pid), 10, what="what the job started to die with it")


NESTED = r"""
import os, subprocess, sys
from dsched.worker.cgroups import own_cgroup
mine = own_cgroup()
if sys.argv[1]:  # a cgroup of its own below its job's (root may), and a process left in it
    nested = os.path.join(mine, "nested")
    os.mkdir(nested)
    left = subprocess.Popen(["sleep", sys.argv[2]], start_new_session=True)
    with open(os.path.join(nested, "cgroup.procs"), "w") as procs:
        procs.write(str(left.pid))
    with open(sys.argv[1] + ".tmp", "w") as file:
        file.write(str(left.pid))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
print(mine)
"""


def test_a_cgroup_a_job_made_below_its_own_goes_and_job_cgroups_serve_later_attempts(
        daemons, mode, escapees):
    # A spare supervisor keeps its attempt's cgroup, emptied, for its next attempt (a cgroup
    # made and removed per attempt cost the kernel a tenth of a millisecond); what a job made
    # below it goes with the job, and what runs there dies.
    if mode != containment.CGROUP:
        pytest.skip("cgroups of jobs: cgroup mode only")
    _, client, _ = start(daemons, mode, "--nthreads", "1")
    pidfile = escapees / "escapee"
    first = client.submit_command([sys.executable, "-c", NESTED, str(pidfile), SLEEP])
    result = first.result(timeout=60).check()
    with open(result.log) as log:
        cgroup = log.read().strip()
    pid = read_pid(pidfile)
    wait_until(lambda: not alive(pid), 10, what="what ran in the job's own cgroup to die")
    wait_until(lambda: not os.path.exists(os.path.join(cgroup, "nested")), 10,
               what="the cgroup the job made to go")
    used = {cgroup}
    for _ in range(8):  # one after another, each on a supervisor back from an attempt
        done = client.submit_command([sys.executable, "-c", NESTED, "", ""]).result(timeout=60)
        with open(done.check().log) as log:
            used.add(log.read().strip())
    # one per supervisor (two spares and one per thread), not one per attempt
    assert len(used) <= 4, used


def test_a_cgroup_is_removed_with_the_cgroups_below_it_and_what_runs_there(tmp_path):
    # A job that may write to cgroups (root) can make some below its own: its cgroup was then
    # never removed (rmdir says busy while a cgroup is below), nor was the supervisor used again.
    from dsched.worker import cgroups

    if why := cgroup_unavailable():
        pytest.skip(f"cgroup mode is not possible on this machine: {why}")
    top = containment.choose("cgroup", "test-below", str(tmp_path)).cgroup_for("below")
    os.makedirs(os.path.join(top, "a", "b"))
    sleeper = subprocess.Popen(["sleep", SLEEP])
    try:
        with open(os.path.join(top, "a", "b", "cgroup.procs"), "w") as procs:
            procs.write(str(sleeper.pid))
        assert cgroups.cgroup_pids(top) == [sleeper.pid]  # listed from two cgroups below
        assert cgroups.remove_cgroup(top, timeout=10)
        assert cgroups.cgroup_pids(top) == []
        assert not os.path.exists(top)
        assert sleeper.wait(10) == -signal.SIGKILL
    finally:
        sleeper.kill()
        sleeper.wait()
        for path in (os.path.join(top, "a", "b"), os.path.join(top, "a"), top):
            if os.path.isdir(path):
                os.rmdir(path)


def wait_for(pidfile) -> str:
    """Shell that waits until ``pidfile`` exists (so the escapee runs before the job goes on)."""
    return f"while [ ! -e {pidfile} ]; do sleep 0.01; done"


def test_what_a_cancelled_job_started_in_another_session_dies(daemons, mode, escapees):
    _, client, _ = start(daemons, mode)
    pidfile = escapees / "escapee"
    job = client.submit_command(["sh", "-c", f"{escape(pidfile)}; sleep {SLEEP}"])
    pid = read_pid(pidfile)
    assert alive(pid) and in_a_cgroup_of_its_own(pid, mode)
    job.cancel()
    (ended,) = client.wait_for_jobs([job.job_id(30)], timeout=60, interval=0.05)
    assert ended["state"] == "cancelled"
    wait_until(lambda: not alive(pid), 10, what="what the cancelled job started to die")


def test_what_a_job_started_in_another_session_dies_with_a_worker_killed_by_9(daemons, mode,
                                                                               escapees):
    worker, client, _ = start(daemons, mode)
    pidfile = escapees / "escapee"
    client.submit_command(["sh", "-c", f"{escape(pidfile)}; sleep {SLEEP}"])
    pid = read_pid(pidfile)
    assert alive(pid)
    worker.kill()
    worker.wait(30)
    wait_until(lambda: not alive(pid), 30, what="what the job started to die with its worker")


# -- GPU tasks --------------------------------------------------------------------------------


def leave_an_escapee(pidfile: str, then_sleep: bool) -> int:
    import subprocess
    import time

    subprocess.run(["sh", "-c", escape(pidfile)], check=True)
    pid = int(wait_until(lambda: os.path.exists(pidfile) and open(pidfile).read(), 30))
    if then_sleep:
        time.sleep(float(SLEEP))
    return pid


def test_what_a_gpu_task_starts_in_another_session_dies_when_the_task_ends(daemons, mode,
                                                                            escapees):
    _, client, _ = start(daemons, mode, env=ONE_GPU)
    pid = client.submit(leave_an_escapee, str(escapees / "escapee"), False,
                        resources={"GPU": 1}).result(timeout=60)
    wait_until(lambda: not alive(pid), 10, what="what the GPU task started to die with it")
    # The child that ran it lives on for the next task on that GPU.
    pid = client.submit(leave_an_escapee, str(escapees / "escapee2"), False,
                        resources={"GPU": 1}).result(timeout=60)
    wait_until(lambda: not alive(pid), 10, what="what the next GPU task started to die")


def test_what_a_cancelled_gpu_task_started_in_another_session_dies(daemons, mode, escapees):
    _, client, _ = start(daemons, mode, env=ONE_GPU)
    pidfile = escapees / "escapee"
    future = client.submit(leave_an_escapee, str(pidfile), True, resources={"GPU": 1})
    pid = read_pid(pidfile)
    assert alive(pid) and in_a_cgroup_of_its_own(pid, mode)
    future.cancel()
    wait_until(lambda: not alive(pid), 30, what="what the cancelled GPU task started to die")
    # The GPU is free again, and a task runs on it.
    assert client.submit(os.getpid, resources={"GPU": 1}).result(timeout=60) > 0


def test_what_a_gpu_task_started_in_another_session_dies_with_a_worker_killed_by_9(
        daemons, mode, escapees):
    worker, client, _ = start(daemons, mode, env=ONE_GPU)
    pidfile = escapees / "escapee"
    future = client.submit(leave_an_escapee, str(pidfile), True, resources={"GPU": 1})
    pid = read_pid(pidfile)
    assert alive(pid)
    worker.kill()
    worker.wait(30)
    wait_until(lambda: not alive(pid), 30, what="what the GPU task started to die with its "
                                                "worker")
    assert not future.done()  # nobody was left to say how it ended


def test_what_a_gpu_task_started_dies_when_its_process_dies_in_cgroup_mode(daemons, mode,
                                                                           escapees):
    if mode != containment.CGROUP:
        pytest.skip("subreaper mode cannot: a GPU task process that dies by itself hands what "
                    "it started to init (docs/jobs.md)")
    _, client, _ = start(daemons, mode, env=ONE_GPU)
    pidfile = escapees / "escapee"
    future = client.submit(leave_then_die, str(pidfile), resources={"GPU": 1})
    with pytest.raises(SchedError, match="process"):
        future.result(timeout=60)
    pid = read_pid(pidfile)
    wait_until(lambda: not alive(pid), 30, what="what the dead GPU task started to die")


def leave_then_die(pidfile: str) -> None:
    leave_an_escapee(pidfile, False)
    os._exit(1)


def test_descendants_are_found_in_other_sessions_and_not_zombies():
    # sh starts a process in a new session and waits for it.
    shell = subprocess.Popen(["sh", "-c", "setsid sleep 600 & wait"])
    try:
        (sleeper,) = wait_until(lambda: containment.descendants(shell.pid), 10,
                                what="the shell's child")
        assert os.getsid(sleeper) == sleeper != os.getsid(shell.pid)
        assert shell.pid in containment.descendants(os.getpid())
        assert containment.signal_tree(shell.pid, signal.SIGKILL) == [sleeper]
        wait_until(lambda: not containment.descendants(shell.pid), 10,
                   what="the killed child to be a zombie or gone")
    finally:
        shell.kill()
        shell.wait()

"""A child dies with its parent, a guarded process group dies with the worker or with its
leader, and a child's end is said in words."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest

from deadline import wait_until
from dsched.worker.lifeline import Lifeline, describe_exit

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="needs the parent-death signal (Linux)")

#: A stand-in worker: starts its argv as a guarded group leader, prints the leader's pid and
#: waits to be killed.
GUARDING_PARENT = """
import subprocess, sys, time
from dsched.worker.lifeline import Lifeline
lifeline = Lifeline()
leader = subprocess.Popen(lifeline.wrap(sys.argv[1:]), start_new_session=True,
                          pass_fds=(lifeline.fd,))
print(leader.pid, flush=True)
time.sleep(600)
"""

#: A stand-in nanny: starts a child that dies with it, prints the child's pid, waits.
PLAIN_PARENT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import sys, time; from dsched.worker.lifeline import die_with_parent; "
    "die_with_parent(int(sys.argv[1])); time.sleep(600)", str(os.getpid())])
print(child.pid, flush=True)
time.sleep(600)
"""


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def background_sleep(tmp_path, first: str = "") -> list[str]:
    """A shell that starts ``sleep 600`` in the background, writes its pid, and waits."""
    return ["sh", "-c", f"{first}sleep 600 & echo $! > {tmp_path / 'sleeper'}; wait"]


def read_pid(path) -> int:
    # The shell writes the line in one go: a line that ends is a whole one.
    text = wait_until(lambda: path.exists() and path.read_text().endswith("\n") and
                      path.read_text(), 30, what=f"{path.name} written")
    return int(text)


@pytest.fixture
def spawned():
    """Processes a test starts; whatever survives the test is killed."""
    started: list = []
    yield started
    for item in started:
        try:
            if isinstance(item, subprocess.Popen):
                item.kill()
                item.wait(10)
            else:
                item.kill()
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass


def test_an_end_is_said_in_words():
    assert describe_exit(0) == "exited with code 0"
    assert describe_exit(3) == "exited with code 3"
    assert describe_exit(-9) == "was killed by signal 9 (SIGKILL)"
    assert describe_exit(-11) == "was killed by signal 11 (SIGSEGV)"
    assert describe_exit(-200) == "was killed by signal 200"


@linux_only
def test_a_child_dies_with_its_parent(spawned):
    parent = subprocess.Popen([sys.executable, "-c", PLAIN_PARENT], stdout=subprocess.PIPE,
                              text=True)
    spawned.append(parent)
    child = psutil.Process(int(parent.stdout.readline()))
    spawned.append(child)
    assert alive(child)

    parent.kill()

    wait_until(lambda: not alive(child), 30, what="the child to die with its parent")


def test_a_child_whose_parent_is_already_gone_stops_at_once():
    # Expecting a parent it does not have is how a child finds it was orphaned before it could
    # ask for the parent-death signal.
    done = subprocess.run([sys.executable, "-c",
                           "from dsched.worker.lifeline import die_with_parent; "
                           "die_with_parent(1); import time; time.sleep(60)"], timeout=60)
    assert done.returncode == -signal.SIGKILL


def test_a_guarded_group_dies_with_the_worker_even_its_leaders_children(tmp_path, spawned):
    worker = subprocess.Popen([sys.executable, "-c", GUARDING_PARENT,
                               *background_sleep(tmp_path)], stdout=subprocess.PIPE, text=True)
    spawned.append(worker)
    leader = psutil.Process(int(worker.stdout.readline()))
    sleeper = psutil.Process(read_pid(tmp_path / "sleeper"))
    spawned += [leader, sleeper]
    guard, = [p for p in leader.children() if p.pid != sleeper.pid]
    assert os.getpgid(sleeper.pid) == os.getpgid(guard.pid) == leader.pid

    worker.kill()

    wait_until(lambda: not any(map(alive, (leader, sleeper, guard))), 30,
               what="the whole group to die with the worker")


@linux_only
def test_a_guarded_group_dies_with_its_leader(tmp_path, spawned):
    lifeline = Lifeline()
    try:
        leader = subprocess.Popen(lifeline.wrap(background_sleep(tmp_path)),
                                  start_new_session=True, pass_fds=(lifeline.fd,))
        spawned.append(leader)
        sleeper = psutil.Process(read_pid(tmp_path / "sleeper"))
        spawned.append(sleeper)

        leader.kill()
        leader.wait(10)

        wait_until(lambda: not alive(sleeper), 30, what="the leader's child to die with it")
    finally:
        lifeline.close()


def test_sigterm_to_a_guarded_group_leaves_its_guard_on_duty(tmp_path, spawned):
    # A job's cancellation sends its group SIGTERM and allows a grace period: the guard must not
    # die of it. This job ignores SIGTERM, so only a guard still on duty can end it.
    worker = subprocess.Popen([sys.executable, "-c", GUARDING_PARENT,
                               *background_sleep(tmp_path, first="trap '' TERM; ")],
                              stdout=subprocess.PIPE, text=True)
    spawned.append(worker)
    leader = psutil.Process(int(worker.stdout.readline()))
    sleeper = psutil.Process(read_pid(tmp_path / "sleeper"))
    spawned += [leader, sleeper]
    guard, = [p for p in leader.children() if p.pid != sleeper.pid]

    os.killpg(leader.pid, signal.SIGTERM)
    worker.kill()

    wait_until(lambda: not any(map(alive, (leader, sleeper, guard))), 30,
               what="the group to die with the worker")


def test_only_a_group_leader_may_hold_a_group():
    done = subprocess.run([sys.executable, "-m", "dsched.worker.lifeline", str(os.getpid()),
                           "0", "--", "true"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "process-group leader" in done.stderr

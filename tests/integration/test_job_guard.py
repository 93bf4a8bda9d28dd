"""A job's command is spawned with no Python between fork and exec (``os.posix_spawn``):
its guard is forked by the supervisor before the spawn and moved into the job's group after,
and a guard that was never moved (its supervisor killed in between) still takes the job down.
The spawner, whose memory every supervisor copies, loads no asyncio and no worker core."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import psutil
import pytest

from deadline import wait_until
from dsched.protocol import ops
from dsched.worker import containment
from dsched.worker.jobrecords import (
    log_path, new_record, open_locked_log, record_path, write_record,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="process groups and sessions (Linux)")

#: A stand-in supervisor killed between its job's spawn and its guard's move: a session leader
#: that forks a guard, spawns a job (in a group of its own, which backgrounds a sleeper) and
#: never moves the guard; it prints the job's pid and the guard's, and waits to be killed.
UNMOVED = """
import subprocess, sys, time
from dsched.worker.lifeline import Lifeline, fork_job_guard
guard = fork_job_guard(Lifeline())
job = subprocess.Popen(["sh", "-c", "sleep 600 & echo $! > " + sys.argv[1] + "; wait"],
                       process_group=0)
print(job.pid, guard, flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def first_line(stream) -> str:
    wait_until(lambda: select.select([stream], [], [], 0)[0], 30, what="a line")
    return stream.readline()


def read_pid(path) -> int:
    return int(wait_until(lambda: path.exists() and path.read_text().endswith("\n") and
                          path.read_text(), 30, what=f"{path.name} written"))


def test_the_guard_is_the_supervisors_child_in_the_jobs_group(tmp_path):
    key = "job-5.1"
    directory = str(tmp_path)
    record, log = record_path(directory, key), log_path(directory, key)
    write_record(record, new_record(key, {"command": ["sleep", "600"]}, (), log, "w1"))
    lock = open_locked_log(log)
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "dsched.worker.jobsupervisor", record, str(lock), "0.2",
         repr(time.monotonic() + 60)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(lock,), start_new_session=True)
    os.close(lock)
    try:
        started = ops.decode(json.loads(first_line(supervisor.stdout)))
        assert type(started) is ops.AttemptStarted
        job = psutil.Process(started.pid)
        assert job.ppid() == supervisor.pid  # spawned by the supervisor itself
        assert os.getpgid(job.pid) == job.pid  # leading a group of its own
        guard, = [child for child in psutil.Process(supervisor.pid).children()
                  if child.pid != job.pid]
        assert guard.name() == "sched-guard"
        assert os.getpgid(guard.pid) == job.pid  # moved into the job's group
        assert job.children() == []  # no guard forked in the job's process before its exec
    finally:
        supervisor.stdin.close()  # end of file: the supervisor kills its job and ends
        assert supervisor.wait(30) == 0
        supervisor.stdout.close()


def test_a_guard_not_yet_moved_kills_the_job_when_its_supervisor_dies(tmp_path):
    stand_in = subprocess.Popen([sys.executable, "-c", UNMOVED, str(tmp_path / "sleeper")],
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
    pids: list[int] = []
    try:
        job, guard = map(int, first_line(stand_in.stdout).split())
        pids += [job, guard, read_pid(tmp_path / "sleeper")]
        assert os.getpgid(guard) != os.getpgid(job)  # not moved
        stand_in.kill()
        wait_until(lambda: not any(map(alive, pids)), 30,
                   what="the job, what it started and the guard to die")
    finally:
        stand_in.kill()
        stand_in.wait(30)
        stand_in.stdout.close()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_guard_is_refused_to_a_process_that_leads_no_session():
    # Its guard, never moved, would kill the session of whoever started it.
    code = ("from dsched.worker.lifeline import Lifeline, fork_job_guard\n"
            "try:\n    fork_job_guard(Lifeline())\nexcept RuntimeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert "needs a session leader" in out


def test_the_spawner_loads_no_asyncio_and_the_worker_package_no_core():
    code = ("import sys\nimport dsched.worker.jobspawner, dsched.worker.jobsupervisor\n"
            "print(sorted(m for m in ('asyncio', 'dsched.worker.state', 'dsched.policy')"
            " if m in sys.modules))\n"
            "from dsched.worker import WorkerState\nfrom dsched.worker.jobspawner import Spawner\n"
            "print(WorkerState.__name__, Spawner.__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split("\n")
    assert out[:2] == ["[]", "WorkerState Spawner"]


#: As UNMOVED, the job forking sleepers as fast as it can: some are born while the guard walks.
FORKING = UNMOVED.replace('"sleep 600 & echo $! > " + sys.argv[1] + "; wait"',
                          '"while :; do sleep 600 & done"')


def in_session(session: int) -> list[int]:
    found = []
    for process in psutil.process_iter(["pid"]):
        try:
            if os.getsid(process.pid) == session and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process.pid)
        except (OSError, psutil.Error):
            continue
    return found


def test_a_guard_not_yet_moved_kills_what_the_job_forks_while_the_guard_looks(tmp_path):
    assert FORKING != UNMOVED
    stand_in = subprocess.Popen([sys.executable, "-c", FORKING, "unused"],
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
    session = stand_in.pid
    try:
        first_line(stand_in.stdout)
        wait_until(lambda: len(in_session(session)) > 100, 30, what="the job to fork sleepers")
        stand_in.kill()
        wait_until(lambda: not in_session(session), 30,
                   what="every process of the job's session to die")
    finally:
        stand_in.kill()
        stand_in.wait(30)
        stand_in.stdout.close()
        for pid in in_session(session):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


#: Supervisors prepared one after another, as a spare prepares for each attempt (run as the
#: leader of a session of its own): what their guard is told (each line wakes it).
TOLD = """
import json
from dsched.worker import lifeline
from dsched.worker.jobguard import Prepared
told = []
say = lifeline.Lifeline.say
lifeline.Lifeline.say = lambda self, line: (told.append(line), say(self, line))[1]
first = Prepared("")
again = Prepared("", kept=first)
kept = again.guard == first.guard
again.tell("/sys/fs/cgroup/a")
again.tell("/sys/fs/cgroup/a")
later = Prepared("", kept=again)
again.retire()
print(json.dumps([kept, told]))
"""


def test_a_kept_guard_is_told_a_cgroup_only_when_it_changes():
    out = subprocess.run([sys.executable, "-c", TOLD], capture_output=True, text=True,
                         timeout=60, start_new_session=True)
    assert json.loads(out.stdout) == [True, ["/sys/fs/cgroup/a", ""]], out.stderr


#: A guard and what it ignores: a session leader, with signals blocked, that forks one and
#: prints its pid.
IGNORING = """
import signal, sys
from dsched.worker.lifeline import Lifeline, fork_job_guard
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGCONT})  # inherited
print(fork_job_guard(Lifeline()), flush=True)
sys.stdin.read()
"""


def signal_mask(pid: int, name: str) -> set[int]:
    """A signal mask of the process ``pid`` from /proc (``SigIgn``, ``SigBlk``)."""
    line, = [line for line in open(f"/proc/{pid}/status") if line.startswith(f"{name}:")]
    mask = int(line.split()[1], 16)
    return {signum for signum in range(1, 65) if mask >> (signum - 1) & 1}


def ignored(pid: int) -> set[int]:
    return signal_mask(pid, "SigIgn")


def blocked(pid: int) -> set[int]:
    return signal_mask(pid, "SigBlk")


def test_a_guard_outlives_every_signal_its_job_may_send_its_group_but_sigkill():
    # ``kill -USR1 0``, say, to its own workers: it must not end the guard with them.
    leader = subprocess.Popen([sys.executable, "-c", IGNORING], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        guard = int(first_line(leader.stdout))
        # Cleared last, after the guard has set what it ignores: a signal blocked would stay
        # pending, though ignored, and a guard with a signal pending is never kept.
        wait_until(lambda: not blocked(guard), 30, what="the guard's signal mask cleared")
        sendable = set(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP,
                                                   signal.SIGCHLD}
        assert ignored(guard) >= sendable
    finally:
        leader.kill()
        leader.wait()


#: A guard signalled in its first instant, before it has set what it ignores: a hook that
#: runs in the forked child first thing sends it SIGUSR1 and SIGTERM, as a job's
#: ``kill -USR1 0`` just after its spawn would. Forked by a supervisor (``fork_job_guard``)
#: or by a GPU task's process (``hold_group``).
SIGNALLED_AT_BIRTH = """
import os, signal, sys
from dsched.worker.lifeline import Lifeline, fork_job_guard, hold_group

def signalled():
    for signum in (signal.SIGUSR1, signal.SIGTERM):
        os.kill(os.getpid(), signum)

os.register_at_fork(after_in_child=signalled)
lifeline = Lifeline()
if sys.argv[1] == "job":
    guard = fork_job_guard(lifeline)
else:
    guard = hold_group(os.getppid(), lifeline.fd)
print(guard, flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("forked_by", ["job", "group"])
def test_a_guard_is_not_ended_by_a_signal_sent_before_it_ignores_it(forked_by):
    leader = subprocess.Popen([sys.executable, "-c", SIGNALLED_AT_BIRTH, forked_by],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        guard = int(first_line(leader.stdout))
        wait_until(lambda: not alive(guard) or signal.SIGUSR1 in ignored(guard), 30,
                   what="the guard ignoring signals, or its end")
        wait_until(lambda: not alive(guard) or not blocked(guard), 30,
                   what="the guard's signal mask cleared, or its end")
        assert alive(guard), "a signal sent before the guard ignored it ended it"
        assert not containment.doomed(guard)  # nothing pending: a supervisor keeps it
    finally:
        leader.kill()
        leader.wait()


def test_a_guard_that_cannot_be_forked_leaves_its_parents_signal_mask_as_it_was(monkeypatch):
    # A Python handler that raises runs as the mask changes (CPython checks for signals
    # there): the mask blocked for the fork must not stay blocked in the parent.
    from dsched.worker import lifeline

    real = signal.pthread_sigmask
    before = real(signal.SIG_BLOCK, ())

    def raising(how, mask):
        changed = real(how, mask)
        if how == signal.SIG_BLOCK and set(mask):  # the block for the fork
            raise KeyboardInterrupt("a handler raised as the mask changed")
        return changed

    monkeypatch.setattr(signal, "pthread_sigmask", raising)
    with pytest.raises(KeyboardInterrupt):
        lifeline._fork_guard()
    assert real(signal.SIG_BLOCK, ()) == before


def test_a_status_says_a_signal_pending_to_the_process_or_to_one_of_its_threads():
    status = b"Name:\tsched-guard\nSigQ:\t0/1\nSigPnd:\t%s\nShdPnd:\t%s\nSigBlk:\t0"
    quiet = b"0000000000000000"
    assert not containment._pending(status % (quiet, quiet), b"\nSigPnd:")
    assert not containment._pending(status % (quiet, quiet), b"\nShdPnd:")
    assert containment._pending(status % (b"0000000000000100", quiet), b"\nSigPnd:")
    assert containment._pending(status % (quiet, b"0000000000004000"), b"\nShdPnd:")
    assert containment._pending(b"Name:\tx\nShdPnd:\t0000000000000001", b"\nShdPnd:")
    assert not containment._pending(b"Name:\tx\n", b"\nShdPnd:")  # an older kernel


def test_doomed_sees_a_signal_sent_that_has_not_yet_acted_and_an_end():
    # A child that blocks the signal holds it pending, as a process not yet run since would.
    child = subprocess.Popen(
        [sys.executable, "-c", "import signal, sys; signal.pthread_sigmask(signal.SIG_BLOCK, "
         "{signal.SIGUSR1}); print('ready', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        first_line(child.stdout)
        assert not containment.doomed(child.pid)
        os.kill(child.pid, signal.SIGUSR1)
        assert containment.doomed(child.pid)
    finally:
        child.kill()
    wait_until(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, 30,
               what="its end")
    assert containment.doomed(child.pid)  # ended, not yet reaped
    child.wait()


#: A kept guard found doomed (its last job killed its group: it has not run since) is killed,
#: reaped and replaced; one not doomed is kept.
REPLACED = """
import json, os
from dsched.worker import containment
from dsched.worker.jobguard import Prepared
first = Prepared("")
kept = Prepared("", kept=first).guard == first.guard
containment.doomed = lambda pid: True
again = Prepared("", kept=first)
try:
    os.waitpid(first.guard, os.WNOHANG)
    reaped = False
except ChildProcessError:
    reaped = True
print(json.dumps([kept, again.guard != first.guard, reaped, again.guard_alive()]))
again.retire()
"""


def test_a_kept_guard_that_a_signal_is_about_to_end_is_replaced():
    out = subprocess.run([sys.executable, "-c", REPLACED], capture_output=True, text=True,
                         timeout=60, start_new_session=True)
    assert json.loads(out.stdout) == [True, True, True, True], out.stderr

"""How long a worker's child processes live, and how their ends are said in words.

A child (a worker process under its nanny, a GPU task's process) dies with its parent:
``die_with_parent`` asks the kernel for a signal when the parent goes (``PR_SET_PDEATHSIG``)
and checks that the parent has not gone already. A child that leads a process group of its own
(a GPU task's process; a shell-command job) also gets a guard, a small process in its group that
kills the whole group when the worker goes (end of file on the worker's ``Lifeline`` pipe, at
once) or when the leader dies (the guard is handed to another parent; it looks twice a second).
The guard is a process of its own so that it acts even when task code holds the leader's GIL or
is stuck in C, and it reaches the leader's own children, which no parent-death signal covers.
Where the leader was put in a cgroup (``containment``), the guard kills and removes that too; a
leader that is a child subreaper (a GPU child) is stopped, not killed, when the worker dies, and
its guard kills all its descendants, whatever their sessions, before the group. Python
children call ``hold_group`` first thing; other commands run under ``python -m
dsched.worker.lifeline PARENT FD -- COMMAND...`` (see ``Lifeline.wrap``), which does the same
and then runs the command. A shell-command job's guard is forked by its supervisor before the
job (``fork_job_guard``), so that the job is spawned without Python between fork and exec,
and moved into the job's group after; it acts on end of file of its lifeline alone (the
supervisor's), and one not in a job's group then kills the supervisor's session, which holds
the job. The supervisor tells it each attempt's cgroup on the lifeline (``Lifeline.say``), and
moves it back into its own group before it kills the job's, so one guard serves each of its
attempts.

Linux is the target. Elsewhere there is no parent-death signal: guarded groups still die with
the worker, but a process that leads no group outlives a parent killed with SIGKILL.

Nothing here may import asyncio or dsched's heavier modules: it runs at the start of fresh
child processes. It holds no scheduling decisions.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

from . import cgroups, containment

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
#: Seconds between the guard's looks at whether the leader is still its parent.
_LEADER_CHECK_INTERVAL = 0.5
#: Seconds a guard keeps killing what is left before it kills its group (and itself): whoever
#: is left after that is the supervisor's, or the next worker start's, to kill.
_GUARD_SWEEP_TIMEOUT = 5.0


def describe_exit(returncode: int) -> str:
    """A child's end in words: ``exited with code 3``, ``was killed by signal 11 (SIGSEGV)``."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        return f"was killed by signal {-returncode}"
    return f"was killed by signal {-returncode} ({name})"


def set_parent_death_signal(signum: int) -> bool:
    """Have the kernel send ``signum`` to this process when its parent dies; False where it
    cannot (not Linux). The "parent" is the thread that started this process, so parents start
    children from a thread that lives as long as they do (the event loop's)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return containment.libc().prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(expected_parent: int, signum: int = signal.SIGKILL) -> bool:
    """Get ``signum`` when the parent dies; get it now if the parent is already gone (this
    process was then handed to another, and the kernel would never send it). Returns whether
    the kernel will send it."""
    armed = set_parent_death_signal(signum)
    if os.getppid() != expected_parent:
        os.kill(os.getpid(), signum)
    return armed


class Lifeline:
    """The parent's side: guarded children live while this process holds the pipe's write end.

    Only this process ever holds the write end (both ends are close-on-exec, and only the read
    end is passed on), so the kernel closes it, and every guard sees end of file, however this
    process ends, ``kill -9`` included.
    """

    def __init__(self) -> None:
        self.fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)  # ``say`` never waits for a guard that is stuck

    def arguments(self) -> list[str]:
        """What a guarded child is told: ``PARENT_PID LIFELINE_FD`` (pass ``fd`` in pass_fds)."""
        return [str(os.getpid()), str(self.fd)]

    def wrap(self, command: list[str]) -> list[str]:
        """``command`` run as the leader of a guarded group (start it with
        ``start_new_session=True`` and ``pass_fds=(lifeline.fd,)``)."""
        return [sys.executable, "-m", "dsched.worker.lifeline", *self.arguments(), "--",
                *command]

    def say(self, line: str) -> None:
        """Tell the guards a line (a job's guard: the cgroup of the attempt to come);
        BlockingIOError where the pipe is full (its guard reads no more), OSError once
        closed."""
        os.write(self._write_fd, line.encode() + b"\n")

    def close(self) -> None:
        """Close both ends (once: a number closed twice may be another file's by then)."""
        for fd in (self.fd, self._write_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.fd = self._write_fd = -1


def hold_group(parent: int, lifeline_fd: int, cgroup: str = "", subreaper: bool = False) -> int:
    """In a new process-group leader, before any thread starts: die with ``parent``, and start
    the guard that takes the whole group down with the worker or with this process; its pid.

    ``cgroup``: the cgroup this process was put in (``containment``), which the guard kills too.
    ``subreaper``: this process adopts what its descendants orphan (a GPU child), so the guard
    can find all of them: the worker's death then stops this process (SIGSTOP, not SIGKILL,
    which would hand its orphans to init before the guard could see them), and the guard kills
    every descendant before the group."""
    if os.getpgid(0) != os.getpid():
        # The guard would kill the group of whoever started us: refuse rather than do that.
        raise RuntimeError("hold_group needs a process-group leader (start_new_session=True)")
    if subreaper:
        containment.become_subreaper()
    else:
        die_with_parent(parent)
    leader = os.getpid()
    guard = _fork_guard() if hasattr(os, "fork") else -1
    if guard == 0:
        try:
            _guard(leader, lifeline_fd, cgroup, subreaper)
        finally:
            os._exit(0)
    if subreaper:  # after the fork: stopped at once if the parent is gone, the guard is there
        die_with_parent(parent, signal.SIGSTOP)
    os.close(lifeline_fd)
    return guard


def _fork_guard() -> int:
    """``os.fork`` for a guard: the child is born with every signal blocked, so that none sent
    to it before it has set what it ignores (``_become_guard``, which then unblocks them all,
    and a signal pending that it ignores is discarded) can end it: its job's ``kill -USR1 0``
    in its first instant, say. The parent's mask is as it was."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())  # as it is, changed in the ``try``:
    pid = -1  # a handler that raises as the mask changes must not leave it all blocked
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        pid = os.fork()
    finally:
        if pid != 0:  # the parent, forked or not
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return pid


def _become_guard(lifeline_fd: int) -> select.poll:
    """What every guard does first; the poll of its lifeline, the one descriptor it keeps."""
    containment.name_guard()
    # A job's cancellation signals its whole group with SIGTERM and allows a grace period; the
    # guard must not turn that into SIGKILL. Its end comes with the leader's or the worker's.
    # Nor may what a job signals its group for its own processes (``kill -USR1 0``) end it, or
    # stop it (``kill -TSTP 0``): stopped, it guards nothing. It ignores every signal Python
    # may set (SIGCHLD, ignored by default, is left as it is; the C library keeps two of the
    # real-time ones): SIGKILL ends it, SIGSTOP stops it. Born blocking all (``_fork_guard``),
    # it then blocks none: a signal blocked stays pending though ignored, and a guard with a
    # signal pending is not kept (``containment.doomed``).
    for signum in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD}:
        try:
            signal.signal(signum, signal.SIG_IGN)
        except OSError:  # one this system does not let a process ignore
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    # The worker reads the leader's stdout until end of file: the guard must not hold it open,
    # nor the supervisor's pipes or the log's lock.
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.closerange(3, lifeline_fd)
    os.closerange(lifeline_fd + 1, os.sysconf("SC_OPEN_MAX"))
    # Polling, rather than a parent-death signal with a handler, leaves no moment at which a
    # signal could cut the guard short before it has killed the group.
    lifeline = select.poll()  # not select(): the worker's descriptor may be numbered past 1024
    lifeline.register(lifeline_fd, select.POLLIN)
    return lifeline


def _guard(leader: int, lifeline_fd: int, cgroup: str, subreaper: bool) -> None:
    lifeline = _become_guard(lifeline_fd)
    parent_gone = False
    while os.getppid() == leader:
        if lifeline.poll(_LEADER_CHECK_INTERVAL * 1000) and not os.read(lifeline_fd, 1):
            parent_gone = True
            break
    if subreaper and parent_gone:
        # The leader's stop may not have come yet (the kernel closes the dead parent's files
        # first): stopped, it forks nothing more, and its orphans still come to it.
        try:
            os.kill(leader, signal.SIGSTOP)
        except OSError:
            pass
        containment.sweep(leader, cgroup, timeout=_GUARD_SWEEP_TIMEOUT)
    if cgroup:
        # Out of the cgroup, the guard can kill all of it at once and remove it: nobody else
        # may be left to (the worker is gone, or the supervisor).
        if cgroups.leave_cgroup(cgroup):
            cgroups.remove_cgroup(cgroup, timeout=_GUARD_SWEEP_TIMEOUT)
        else:
            containment.sweep(leader, cgroup, timeout=_GUARD_SWEEP_TIMEOUT)
    os.killpg(os.getpgid(0), signal.SIGKILL)


def fork_job_guard(lifeline: Lifeline) -> int:
    """Fork the guard of the job groups that this process (a job's supervisor, a session
    leader) is about to start; its pid. For each job the caller says its cgroup ("" none) on
    the ``lifeline``, spawns the job's leader in a new group of its session and moves the guard
    into that group (``os.setpgid(guard, leader)``), so the leader is spawned without running
    Python between fork and exec (``os.posix_spawn``), and the guard is there before
    the leader runs; to keep it for the next job, the caller moves it back into its own group
    before it kills the job's. When this process ends, however it ends, the guard kills the
    cgroup it was told last and its group. A guard that is not in a job's group then (this
    process was killed between the leader's spawn and the move, or between jobs) kills every
    other process of the session: the leader, if spawned, and all in its group are there."""
    if os.getsid(0) != os.getpid():
        # An unmoved guard would kill the session of whoever started us: refuse.
        raise RuntimeError("fork_job_guard needs a session leader (start_new_session=True)")
    guard = _fork_guard()
    if guard == 0:
        try:
            _job_guard(lifeline.fd)
        finally:
            os._exit(0)
    return guard


def _job_guard(lifeline_fd: int) -> None:
    lifeline = _become_guard(lifeline_fd)
    cgroup, pending = "", b""
    while True:
        lifeline.poll()
        data = os.read(lifeline_fd, 4096)
        if not data:  # end of file: the supervisor is gone
            break
        *said, pending = (pending + data).split(b"\n")
        if said:  # the cgroup of its latest attempt
            cgroup = said[-1].decode()
    if os.getpgid(0) == os.getsid(0):  # not in a job's group
        _kill_session()
    if cgroup:  # born outside it: it can kill all of it at once and remove it
        cgroups.remove_cgroup(cgroup, timeout=_GUARD_SWEEP_TIMEOUT)
    os.killpg(os.getpgid(0), signal.SIGKILL)


def _kill_session() -> None:
    """SIGKILL every other process of this session (walking /proc: a rare end). A process may
    fork while a walk goes, so each walk stops what it finds before it kills it (a stopped
    process forks no more), and the walks go on until one finds none, for up to the guard's
    sweep timeout."""
    session, me = os.getsid(0), os.getpid()
    deadline = time.monotonic() + _GUARD_SWEEP_TIMEOUT
    while True:
        found = containment.session_members(session, me)
        for signum in (signal.SIGSTOP, signal.SIGKILL):
            for pid in found:
                try:
                    os.kill(pid, signum)
                except OSError:  # gone meanwhile
                    pass
        if not found or time.monotonic() > deadline:
            return


def main(argv: list[str]) -> None:
    """``PARENT_PID LIFELINE_FD -- COMMAND...``: run COMMAND as the leader of a guarded group."""
    if len(argv) < 4 or argv[2] != "--":
        sys.exit("usage: python -m dsched.worker.lifeline PARENT_PID LIFELINE_FD -- COMMAND...")
    hold_group(int(argv[0]), int(argv[1]))
    os.execvp(argv[3], argv[3:])


if __name__ == "__main__":
    main(sys.argv[1:])

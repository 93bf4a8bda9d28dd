"""What a job's supervisor does before it knows its job (``Prepared``): its place as a child
subreaper, the guard of its jobs' groups (``lifeline.fork_job_guard``), kept across its
attempts, and the attempt's cgroup, entered ahead. A spawner has it done for its spares
(``jobspawner``); a supervisor started as a program does it itself (``jobsupervisor``).

Nothing here may import asyncio or dsched's heavier modules: it runs in every supervisor.
"""

from __future__ import annotations

import os
import signal

from . import cgroups, containment
from .lifeline import Lifeline, fork_job_guard


class Prepared:
    """What a supervisor does before it knows its job, so that a spawner can have it done
    ahead (``jobspawner``): in a session of its own, it becomes a child subreaper (orphans
    among the job's descendants come to it, wherever they are, so it finds, kills and reaps
    them, cgroup or not), has the guard of the job's group (``lifeline.fork_job_guard``:
    ``kept``'s, from its last attempt, if it is still there, else a new one), makes the job's
    ``cgroup`` (or keeps ``kept``'s, emptied, where it is the same), enters it (a process's
    first move into a cgroup in a while waits for the kernel for milliseconds) and tells the
    guard its name. The guard is forked outside the cgroup, so that it outlives it."""

    def __init__(self, cgroup: str = "", kept: Prepared | None = None):
        if kept is None:  # else it is one already
            containment.become_subreaper()
        self.cgroup, self.problem, self.entered = cgroup, "", False
        self.ended = False  # its guard was found ended (and reaped): its number is not used
        #: ``kept`` while this process is still in its cgroup (its last job left nothing
        #: there): it leaves before it forks a guard, which must be born outside.
        self._inside = kept if kept is not None and kept.entered else None
        # A guard its last job killed with its group may not have run since: it is not kept.
        if kept is not None and kept.guard_alive() and not containment.doomed(kept.guard):
            self.lifeline, self.guard, self.told = kept.lifeline, kept.guard, kept.told
        else:
            if kept is not None:
                kept.retire()
            self._fork_guard()
        # Told before the cgroup is made: a guard left alone removes it, made or not.
        if not self.tell(cgroup):  # it reads no more (stopped): another takes its place
            self.retire()
            self._fork_guard()
            self.tell(cgroup)
        if cgroup:
            try:
                # Else kept, emptied, from its last attempt, and still in it unless that
                # attempt left processes behind (its supervisor then left it to kill them).
                inside = self._inside is not None and self._inside.entered
                if kept is None or kept.cgroup != cgroup or not (inside or _entered(cgroup)):
                    cgroups.make_cgroup(cgroup)
                    cgroups.enter_cgroup(cgroup)
                self.entered = True
            except OSError as error:
                self.problem = (f"cannot use the cgroup {cgroup} ({error.strerror or error}); "
                                "what it starts is tracked as this supervisor's descendants "
                                "instead")
                self.tell("")
        self._inside = None  # a chain of them would keep every attempt's alive

    def _fork_guard(self) -> None:
        if self._inside is not None:  # the guard is born outside the cgroup, to outlive it
            self._inside.leave()
        # The lifeline's write end, held until this process ends, is the guard's life.
        self.lifeline, self.ended = Lifeline(), False
        self.guard = fork_job_guard(self.lifeline)
        self.told = ""  # the cgroup the guard knows of: none yet

    def tell(self, cgroup: str) -> bool:
        """Tell the guard the cgroup it is to remove if this process dies ("" none), unless
        it knows it already (a line wakes it: without cgroups, a guard kept is told nothing
        more); False if it cannot take it (it has not read what it was told before, or is
        retired)."""
        if cgroup == self.told:
            return True
        try:
            self.lifeline.say(cgroup)
        except OSError:
            return False
        self.told = cgroup
        return True

    def guard_alive(self) -> bool:
        """Whether the guard still runs. One found ended is reaped here, and never signalled
        nor looked at again: its number may be another's. (Until then it is a zombie, kept:
        the job's orphans are reaped sparing it.)"""
        if self.ended:
            return False
        try:
            running = os.waitid(os.P_PID, self.guard,
                                os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:
            running = False
        if not running:
            self.ended = True
            try:
                os.waitpid(self.guard, os.WNOHANG)
            except ChildProcessError:
                pass
        return running

    def recall(self) -> bool:
        """Move the guard back into this process's group, out of the job's, which is about to
        be killed, and continue it (the job may have stopped its group): whether it is there
        to guard the next attempt. (If this process dies meanwhile, the guard, in no job's
        group, kills all of the session.)"""
        if not self.guard_alive():
            return False
        try:
            os.setpgid(self.guard, os.getpid())
        except OSError:
            return False
        os.kill(self.guard, signal.SIGCONT)  # an unreaped child: the number is its own
        return True

    def leave(self) -> bool:
        """Leave the cgroup (what the job left is to be killed, or no job comes): whoever
        kills it must be out. Whether this process is out of it."""
        if self.entered:
            self.entered = not cgroups.leave_cgroup(self.cgroup)
        return not self.entered

    def retire(self) -> None:
        """This process runs no more attempts: its guard goes (it would walk the session).
        Killed only while it is an unreaped child: its number is not another's."""
        if self.guard_alive():
            os.kill(self.guard, signal.SIGKILL)
            os.waitpid(self.guard, 0)
            self.ended = True
        self.lifeline.close()

    def discard(self) -> bool:
        """No job comes: the guard is killed and this process leaves the cgroup (for its
        removal); whether it is out of it."""
        self.retire()
        return self.leave()


def _entered(cgroup: str) -> bool:
    """Enter the cgroup ``cgroup`` if it is there; whether it was."""
    try:
        cgroups.enter_cgroup(cgroup)
        return True
    except FileNotFoundError:
        return False

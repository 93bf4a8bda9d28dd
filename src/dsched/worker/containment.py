"""Every process a job or a GPU task starts dies with it: how the worker finds them all.

A process group is not enough: anything started in a new session (``setsid``, a daemonizing
server, dataloader workers) leaves it, and would outlive its job holding a GPU that dsched
counts as free. So each worker runs in one of two modes, chosen once at its start
(``worker.containment``: ``auto`` takes the first that works here):

- ``cgroup``: each job attempt and each GPU child process gets a cgroup v2 of its own, made in
  the worker's own cgroup (which needs root, or a cgroup delegated to the worker's user, e.g.
  systemd's ``Delegate=yes``). No process can leave it unless it may write to cgroups itself,
  so the whole of it is killed (``cgroup.kill``, or SIGKILL to each process in
  ``cgroup.procs`` until it is empty) and removed. No controller is enabled: nothing is
  limited, only tracked.
- ``subreaper``: the job's supervisor and the GPU child are child subreapers
  (``PR_SET_CHILD_SUBREAPER``): an orphan among their descendants is handed to them rather than
  to init, so walking /proc from them finds every descendant, however it was started, as long
  as they live. They live until they have killed the rest.
- ``group`` (not Linux): process groups only, as before.

The names of a worker's cgroups start with a prefix made of its name and its job directory
(which only one live worker process can hold), so a worker that starts again kills and removes
what an earlier process under that identity left (``clean_leftovers``). The cgroups
themselves (made, entered, killed, removed) are ``cgroups.py``'s; the mode, and the sweeps of
process trees that work without them, are this module's.

Nothing here may import asyncio or dsched's heavier modules: supervisors, GPU children and their
guards use it. It holds no scheduling decisions.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import signal
import sys
import time
from dataclasses import dataclass

from .cgroups import SWEEP_TIMEOUT, cgroup_pids, own_cgroup, probe, remove_cgroup

logger = logging.getLogger("dsched.worker")

CGROUP, SUBREAPER, GROUP = "cgroup", "subreaper", "group"
#: What ``worker.containment`` may say.
SETTINGS = ("auto", CGROUP, SUBREAPER)
_PR_SET_CHILD_SUBREAPER = 36  # from <linux/prctl.h>
_PR_SET_NAME = 15
#: The name (comm) a group's guard (``lifeline``) takes, so that a sweep from outside can spare
#: it while it kills the rest (the guard itself then kills the group).
GUARD_NAME = b"sched-guard"


@dataclass(frozen=True)
class Containment:
    """The worker's mode; in cgroup mode, where its cgroups are made and how they are named."""

    mode: str
    parent: str = ""
    prefix: str = ""

    def cgroup_for(self, what: str) -> str:
        """The path of the cgroup of ``what`` (``job-12.3``, ``gpu-4``); "" unless in cgroup
        mode."""
        return os.path.join(self.parent, self.prefix + what) if self.mode == CGROUP else ""

    def describe(self) -> str:
        """The mode and what it means, for the worker's log."""
        if self.mode == CGROUP:
            return (f"cgroup (each job and each task child process runs in a cgroup of its own "
                    f"under {self.parent}, killed as a whole when it ends)")
        if self.mode == SUBREAPER:
            return ("subreaper (each job's supervisor and each task child process adopts what "
                    "its job or task leaves in other sessions, and kills it when it ends)")
        return "group (only each job's and task child process's group is killed when it ends)"


def choose(setting: str, name: str, job_directory: str) -> Containment:
    """The mode ``setting`` asks for, as far as this machine allows; OSError, saying why, when
    the mode asked for by name cannot be had."""
    if setting not in SETTINGS:
        raise ValueError(f"worker.containment must be one of {', '.join(SETTINGS)}")
    if setting in ("auto", CGROUP):
        import hashlib  # here: supervisors and guards import this module, and never choose

        try:
            parent = own_cgroup()
            safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:64]
            digest = hashlib.sha1(os.path.abspath(job_directory).encode()).hexdigest()[:8]
            found = Containment(CGROUP, parent, f"dsched-{safe}-{digest}-")
            probe(found.cgroup_for(f"probe-{os.getpid()}"))
            return found
        except OSError as error:
            if setting == CGROUP:
                raise OSError(f"worker.containment is cgroup, but {error}") from None
    if sys.platform.startswith("linux"):
        return Containment(SUBREAPER)
    if setting == SUBREAPER:
        raise OSError("worker.containment is subreaper, which needs Linux")
    return Containment(GROUP)


def settle(setting: str, name: str, job_directory: str) -> Containment:
    """The worker's mode (``choose``), said in its log; the cgroups an earlier process of it
    left are killed and removed. Only once the job directory is locked: they are no live
    worker's then."""
    chosen = choose(setting, name, job_directory)
    logger.info("Containment: %s", chosen.describe())
    left = clean_leftovers(chosen)
    if left:
        logger.info("Killed and removed %d cgroup(s) an earlier worker process left: %s",
                    len(left), ", ".join(left))
    return chosen


def clean_leftovers(containment: Containment) -> list[str]:
    """Kill and remove the cgroups an earlier process of this worker left; their names."""
    if containment.mode != CGROUP:
        return []
    try:
        names = [n for n in os.listdir(containment.parent) if n.startswith(containment.prefix)]
    except OSError:
        return []
    return [n for n in names if remove_cgroup(os.path.join(containment.parent, n), 10.0)]


# -- processes ------------------------------------------------------------------------------


def become_subreaper() -> bool:
    """Have orphans among this process's descendants handed to it; False where it cannot."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def name_guard() -> None:
    _prctl(_PR_SET_NAME, ctypes.c_char_p(GUARD_NAME))


def _prctl(option: int, value) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return libc().prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


#: The kernel's flag of a process on its way out (``PF_EXITING``, <linux/sched.h>).
_PF_EXITING = 0x4


def doomed(pid: int) -> bool:
    """Whether the process ``pid`` (a child not yet reaped) is on its way out, or has a
    signal pending: one sent a signal that ends it may not have run since, and looks alive to
    ``wait`` until it has. For a process that ignores every signal it can and blocks none (a
    guard), a signal pending is one that ends or stops it. True where /proc cannot say."""
    try:
        stat, status = _read(f"/proc/{pid}/stat"), _read(f"/proc/{pid}/status")
    except OSError:
        return True
    if int(stat[stat.rindex(b")") + 2:].split()[6]) & _PF_EXITING:
        return True
    return _pending(status, b"\nSigPnd:") or _pending(status, b"\nShdPnd:")


def _pending(status: bytes, field: bytes) -> bool:
    """Whether the signal set ``field`` of a /proc status has a signal in it: found in the
    text, not line by line (a kept guard is looked at before each attempt)."""
    at = status.find(field)
    if at < 0:
        return False
    start = at + len(field)
    end = status.find(b"\n", start)
    return int(status[start:end if end >= 0 else len(status)], 16) != 0


def _read(path: str) -> bytes:
    """A small file of /proc, read in one call (a third of what ``open`` costs)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 65536)
    finally:
        os.close(fd)


_LIBC: list = []


def libc() -> ctypes.CDLL:
    """The C library, loaded once: the job spawner loads it before it forks, so that no
    supervisor or guard pays a tenth of a millisecond or more to load it again."""
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def _processes() -> dict[int, tuple[int, str, int, str, int]]:
    """Every process now: pid -> (parent, state letter, group, name, session)."""
    table: dict[int, tuple[int, str, int, str, int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:  # no /proc (not Linux): process groups only
        return table
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as file:
                    stat = file.read()
            except OSError:  # gone meanwhile
                continue
            # The name is in parentheses and may hold anything, parentheses included.
            name = stat[stat.index(b"(") + 1:stat.rindex(b")")]
            fields = stat[stat.rindex(b")") + 2:].split()
            table[int(entry)] = (int(fields[1]), fields[0].decode(), int(fields[2]),
                                 name.decode(errors="replace"), int(fields[3]))
    return table


def descendants(root: int, table: dict | None = None) -> list[int]:
    """The live (not zombie) descendants of ``root``."""
    table = _processes() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (parent, *_) in table.items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, ()))
        if table[pid][1] not in "ZX":
            found.append(pid)
    return found


def session_members(session: int, spare: int) -> list[int]:
    """The live (not zombie) processes of ``session``, but ``spare``."""
    return [pid for pid, (_, state, _, _, sid) in _processes().items()
            if sid == session and pid != spare and state not in "ZX"]


def guards_of(root: int, table: dict | None = None) -> set[int]:
    """The guard of ``root``'s group: its child in its group named GUARD_NAME."""
    table = _processes() if table is None else table
    return {pid for pid, (parent, _, group, name, _) in table.items()
            if parent == root and group == root and name == GUARD_NAME.decode()}


def signal_tree(root: int, signum: int, cgroup: str = "", spare: frozenset | set = frozenset(),
                table: dict | None = None) -> list[int]:
    """Send ``signum`` to every live descendant of ``root`` and every process of ``cgroup``,
    but for ``root``, this process and ``spare``; the processes signalled."""
    table = _processes() if table is None else table
    targets = set(descendants(root, table))
    if cgroup:
        targets.update(pid for pid in cgroup_pids(cgroup)
                       if pid in table and table[pid][1] not in "ZX")
    targets -= {root, os.getpid(), *spare}
    _signal(targets, signum)
    return sorted(targets)


def sweep(root: int, cgroup: str = "", spare: frozenset | set = frozenset(),
          timeout: float = SWEEP_TIMEOUT, dying: float | None = None) -> list[int]:
    """SIGKILL what ``signal_tree`` reaches, again and again, until nothing is left (or
    ``timeout`` has passed: then what is left). When ``root`` is this process, its children
    that ended (but ``spare``) are reaped on the way: adopted orphans must not stay zombies.
    ``dying``: the seconds its children just killed may take to end before /proc is walked
    for what is left (by default ``CHILDLESS_WAIT`` where nothing is spared, else none: a
    caller that spares a child and killed the others says so)."""
    if dying is None:
        dying = 0.0 if spare else CHILDLESS_WAIT
    if root == os.getpid() and _nothing_left(cgroup, spare, dying):
        return []  # the usual end of a task: no walk of /proc
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        table = _processes()
        left = signal_tree(root, signal.SIGKILL, cgroup, spare, table)
        if root == os.getpid():  # never another's children: their parent reaps them
            reap(spare)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _nothing_left(cgroup: str, spare: frozenset | set, dying: float) -> bool:
    """Whether this process (a child subreaper) has no child but ``spare`` and its cgroup no
    process but it and ``spare``, waiting up to ``dying`` for children just killed to end
    (``_childless``): then it has no descendant at all, since a subreaper is the parent of
    every orphan below it. Asks the kernel, or reads /proc/self/task/*/children where a child
    is spared (and cgroup.procs), not every process's stat. False when unsure."""
    if not _childless(dying, spare):
        return False
    return not cgroup or not set(cgroup_pids(cgroup)) - {os.getpid(), *spare}


#: Seconds a subreaper waits for the children it has just killed to end, before it walks /proc
#: to find what is left. A job's group (its guard included) dies within a moment of SIGKILL.
CHILDLESS_WAIT = 0.02


def _childless(timeout: float, spare: frozenset | set = frozenset()) -> bool:
    """Reap this process's ended children (but ``spare``); whether it then has none but
    ``spare``, waiting up to ``timeout`` for those still dying. The kernel says so (ECHILD)
    without a walk of /proc, which costs milliseconds a process: what a job's end would
    otherwise spend most on; with a child spared, its children are read from /proc/self. Each
    child's end wakes the wait (SIGCHLD, held back meanwhile so that none is missed)."""
    deadline = time.monotonic() + timeout
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    try:
        while True:
            if _reap_ended(spare) is None:
                return True
            if spare:
                children = _children()
                if children is not None and not children - set(spare):
                    return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            signal.sigtimedwait({signal.SIGCHLD}, left)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _reap_ended(spare: frozenset | set) -> int | None:
    """Reap this process's children that have ended, one call each (orphans may end by the
    thousand), up to the first of ``spare`` that has: its pid (its end is another's to take,
    and the zombies behind it are found by a walk), else 0; None when it has no child."""
    while True:
        try:
            ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return None
        if ended is None:
            return 0
        if ended.si_pid in spare:
            return ended.si_pid
        try:
            os.waitpid(ended.si_pid, os.WNOHANG)
        except ChildProcessError:
            pass


def _children() -> set[int] | None:
    """This process's children (zombies included), from /proc/self; None if unreadable."""
    found: set[int] = set()
    try:
        for thread in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{thread}/children") as file:
                found.update(map(int, file.read().split()))
    except OSError:
        return None
    return found


def reap(spare: frozenset | set = frozenset(), table: dict | None = None) -> None:
    """Reap this process's children that have ended, but ``spare`` (whose end is awaited
    elsewhere): orphans handed to a subreaper must not stay zombies. Only a subreaper calls it:
    it takes any child's end."""
    if not _reap_ended(spare):  # else a spared one is first in line, and staying: walk
        return
    me = os.getpid()
    table = _processes() if table is None else table
    for pid, (parent, state, *_) in table.items():
        if parent == me and state in "ZX" and pid not in spare:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def _signal(pids, signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

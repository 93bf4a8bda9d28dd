"""A worker's cgroups (v2): its own found, one made per job attempt or GPU task child,
entered between fork and exec, listed, killed as a whole and removed. Which mode a worker runs
in, and the process-tree sweeps that do without cgroups, are ``containment.py``'s.

Plain system calls and files: nothing here may import asyncio or dsched's heavier modules
(supervisors, GPU children and their guards use it). It holds no scheduling decisions.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import time

#: Seconds a sweep waits for what it killed to be gone: a process inside the kernel (a GPU
#: driver tearing down a context) dies only when it leaves it.
SWEEP_TIMEOUT = 60.0


def own_cgroup() -> str:
    """The directory of this process's cgroup v2; OSError when there is none to be had."""
    if not sys.platform.startswith("linux"):
        raise OSError("cgroups need Linux")
    with open("/proc/self/cgroup") as file:
        path = next((line.strip()[3:] for line in file if line.startswith("0::")), None)
    if path is None:
        raise OSError("this process is in no cgroup v2 hierarchy")
    with open("/proc/self/mountinfo") as file:
        for line in file:
            fields = line.split()
            dash = fields.index("-")
            if fields[dash + 1] == "cgroup2":
                root, mount = fields[3], fields[4]
                if path == root or path.startswith(root.rstrip("/") + "/"):
                    inside = path[len(root.rstrip("/")):].lstrip("/")
                    return os.path.join(mount, inside) if inside else mount
    raise OSError("no cgroup v2 file system is mounted where this process's cgroup is")


def probe(path: str) -> None:
    """Make a cgroup, move a process into it and remove it, or say why that cannot be done."""
    import subprocess

    try:
        os.mkdir(path)
    except FileExistsError:
        pass
    except OSError as error:
        raise OSError(f"cannot make a cgroup in {os.path.dirname(path)}: "
                      f"{error.strerror or error}") from None
    probe = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        with open(os.path.join(path, "cgroup.procs"), "w") as procs:
            procs.write(str(probe.pid))
        if not in_cgroup(probe.pid, path):
            raise OSError(f"a process moved to {path} is not there")
    except OSError as error:
        raise OSError(f"cannot move a process into a cgroup in {os.path.dirname(path)}: "
                      f"{error.strerror or error}") from None
    finally:
        probe.kill()
        probe.communicate()
        remove_cgroup(path, timeout=5.0)


def make_cgroup(path: str) -> None:
    os.makedirs(path, exist_ok=True)


def enter_cgroup(path: str) -> None:
    """Move this process into the cgroup at ``path``: plain system calls, so that it may run
    between fork and exec."""
    fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY)
    try:
        os.write(fd, b"0")
    finally:
        os.close(fd)


def leave_cgroup(path: str) -> bool:
    """Move this process from the cgroup at ``path`` to the one above it; whether it could."""
    try:
        enter_cgroup(os.path.dirname(path.rstrip("/")))
        return True
    except OSError:
        return False


def in_cgroup(pid: int, path: str) -> bool:
    try:
        with open(f"/proc/{pid}/cgroup") as file:
            line = next((line for line in file if line.startswith("0::")), "")
    except OSError:
        return False
    return bool(line) and path.rstrip("/").endswith(line.strip()[3:].rstrip("/") or "/")


def cgroup_pids(path: str) -> list[int]:
    """The processes in the cgroup at ``path`` and in those below it (zombies are not). Plain
    calls, not ``os.walk``: a supervisor looks at its job's cgroup at each job's end, where
    this took half as long again."""
    found: list[int] = []
    try:
        fd = os.open(os.path.join(path, "cgroup.procs"), os.O_RDONLY)
        try:
            # In pieces well under the allocator's threshold for a mapping of its own: a
            # megabyte asked of read() at once cost a map and an unmap of memory each call.
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
            found.extend(map(int, b"".join(chunks).split()))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        pass
    try:
        with os.scandir(path) as entries:
            below = [entry.path for entry in entries if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return found
    for directory in below:
        found.extend(cgroup_pids(directory))
    return found


def kill_cgroup(path: str) -> None:
    """SIGKILL every process in the cgroup at once where the kernel can (5.14 on), else each
    process in it (the caller looks again, for any forked meanwhile)."""
    try:
        with open(os.path.join(path, "cgroup.kill"), "w") as file:
            file.write("1")
        return
    except OSError:
        pass
    for pid in cgroup_pids(path):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def remove_below(path: str, timeout: float = SWEEP_TIMEOUT) -> bool:
    """Remove the cgroups below the one at ``path`` (a job may make some where it may write
    to cgroups), killing what is in them, and keep that one: whether none is left."""
    try:
        below = [entry.path for entry in os.scandir(path) if entry.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return True
    deadline = time.monotonic() + timeout
    return all([remove_cgroup(child, max(0.0, deadline - time.monotonic())) for child in below])


def remove_cgroup(path: str, timeout: float = SWEEP_TIMEOUT) -> bool:
    """Kill what is in the cgroup until it is empty, and remove it with the cgroups below it;
    whether it is gone."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError as error:
            # Busy: processes remain (or are dying), or cgroups below it. Anything else will
            # not pass.
            if error.errno != errno.EBUSY or time.monotonic() > deadline:
                return False
        if not remove_below(path, max(0.0, deadline - time.monotonic())):
            return False
        kill_cgroup(path)
        time.sleep(pause)
        pause = min(pause * 2, 0.05)

"""An exclusive lock on a daemon's directory, held for the life of the process.

A daemon that owns a directory (the scheduler its state directory, a worker process its job
directory) takes ``fcntl.flock`` on a lock file inside it and keeps the descriptor open until
it exits: the kernel lets go when the process ends, however it ends (``kill -9`` included), so
a lock is never left stale, and a second daemon given the same directory finds it held at once.
The holder writes a line about itself into the file (its pid, later its address), which the
refused one reads back, so its error can say who has the directory.

The descriptor is close-on-exec, so the programs a daemon starts do not inherit the lock.
This is I/O: it decides nothing. Light to import (the job supervisor imports ``jobrecords``,
which uses it).
"""

from __future__ import annotations

import fcntl
import os


class LockHeld(Exception):
    """The lock file ``path`` is locked by another process, which says of itself ``holder``
    ("" when it has not written that yet)."""

    def __init__(self, path: str, holder: str):
        super().__init__(f"{path} is locked by {holder or 'another process'}")
        self.path, self.holder = path, holder


class DirectoryLock:
    """The lock file at ``path``, locked by this process (see :func:`take`)."""

    def __init__(self, path: str, fd: int):
        self.path, self.fd = path, fd

    def note(self, holder: str) -> None:
        """Say ``holder`` (one line about this process) in the lock file, replacing what was
        there. Best effort: the lock, not this line, is what keeps others out."""
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, holder.encode("utf-8", "replace") + b"\n", 0)
        except OSError:
            pass

    def release(self) -> None:
        """Let go (closing the descriptor is enough; the file stays)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def take(path: str, holder: str) -> DirectoryLock:
    """Lock the file at ``path`` (created, mode 0600, when missing) for this process and say
    ``holder`` in it; :class:`LockHeld` when another process has it, OSError when the file
    cannot be opened."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            said = os.pread(fd, 1024, 0).decode("utf-8", "replace").strip()
        except OSError:
            said = ""
        finally:
            os.close(fd)
        raise LockHeld(path, said.splitlines()[0] if said else "") from None
    except BaseException:
        os.close(fd)
        raise
    lock = DirectoryLock(path, fd)
    lock.note(holder)
    return lock

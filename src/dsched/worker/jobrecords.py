"""A worker's job directory on disk: one record and one log per job attempt it started.

``job-<id>.<attempt>.json`` says what the attempt runs, its devices and log (a line written by
the worker before it asks for a supervisor), then, once its supervisor has spawned it, its pid
and start time, and once it has ended, its AttemptEnded as on the wire (lines the supervisor
appends, each in one write: a reader finds a line whole or passes over it). No temporary files,
no renames, no fsync: a job's records cost it no wait for the disk. They survive every process
of the worker but not a restart of the machine: ``machine.boot`` names the start of the machine
that a scheduler last heard of from this directory's worker, and a worker that finds another
tells the scheduler, which then counts an attempt the worker does not list as one that may have
run (``reconcile``).

``job-<id>.<attempt>.log`` holds the job's output; it stays after the record is forgotten. The
supervisor of a running attempt holds an exclusive ``flock`` on its log file (taken by the
worker before it starts the supervisor), so a worker process that starts can tell a live
supervisor from a dead one without trusting a pid. The worker process itself holds one on
``worker.lock`` for as long as it lives (``dirlock``, the pid and address of the holder written
in it): two worker processes never share a job directory. The directory is private to the
worker's user: made mode 0700, and refused at start when another user owns it or others may
write to it (a planted record would be run).

Only keys made by ``dsched.jobs.job_key`` become file names; nothing here decides what to run or
what to report (``WorkerState`` does). Light to import: the job supervisor imports it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import stat
import time

from ..dirlock import LockHeld, take
from ..jobs import parse_job_key
from ..protocol.ops import AttemptEnded

logger = logging.getLogger("dsched.worker")

RECORD_SUFFIX = ".json"
LOG_SUFFIX = ".log"
LOCK_NAME = "worker.lock"
#: What a worker name may keep in a directory name; anything else becomes "_".
_UNSAFE = re.compile(r"[^A-Za-z0-9._:@+-]")

#: How a worker process that starts finds an attempt of an earlier one without an outcome.
DIED_WHILE_RUNNING = "its worker process ended while it ran"
DIED_WHILE_STARTING = "its worker process ended as it was starting it (it may have started)"


def default_directory(local_directory: str | None, worker_name: str) -> str:
    """``sched-jobs/<worker name>`` under ``local_directory``; without one, ``jobs/<worker
    name>`` in this user's state directory (``$XDG_STATE_HOME/sched``, that is
    ``~/.local/state/sched``, where the scheduler keeps its journal): private to the user, and
    kept across reboots, which a temp dir shared by every account is not."""
    safe = _UNSAFE.sub("_", worker_name)
    if set(safe) <= {"."}:  # "", "." and ".." name no directory of their own
        safe = "_" * len(safe) or "worker"
    if local_directory:
        return os.path.join(local_directory, "sched-jobs", safe)
    from ..auth import default_state_dir  # here: the job supervisor imports this module

    return os.path.join(default_state_dir(), "jobs", safe)


def record_path(directory: str, key: str) -> str:
    return os.path.join(directory, _checked(key) + RECORD_SUFFIX)


def log_path(directory: str, key: str) -> str:
    return os.path.join(directory, _checked(key) + LOG_SUFFIX)


def _checked(key: str) -> str:
    if parse_job_key(key) is None:
        raise ValueError(f"{key!r} is not the key of a job attempt")
    return key


# -- records ------------------------------------------------------------------------------------


def new_record(key: str, job: dict, gpus: tuple[int, ...], log: str, worker: str) -> dict:
    """The record of an attempt about to be started."""
    return {"key": key, "job": job, "gpus": list(gpus), "log": log, "worker": worker,
            "pid": None, "started": None, "ended": None}


def write_record(path: str, record: dict) -> None:
    """Write the record at ``path`` afresh: one line of JSON. Records live in the page cache:
    they survive this process, and every process of the worker, but not a restart of the
    machine, which the worker then tells the scheduler (``machine_restarted``). A job's
    records cost it no wait for the disk (the scheduler's journal holds what must survive the
    machine)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, json_line(record))
    finally:
        os.close(fd)


def add_to_record(path: str, fields: dict) -> None:
    """Add ``fields`` to the record at ``path`` (its pid and start, its outcome): a line
    appended, in one write, which a reader finds whole or not at all. A record forgotten
    already (the scheduler has the outcome) stays forgotten: nothing is written."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        os.write(fd, json_line(fields))
    finally:
        os.close(fd)


def json_line(fields: dict) -> bytes:
    """``fields`` as one line of compact JSON: a record's line, or a supervisor's report."""
    return json.dumps(fields, separators=(",", ":")).encode() + b"\n"


#: Where Linux says which start of the machine this is (a new random id at each boot).
BOOT_ID = "/proc/sys/kernel/random/boot_id"
#: The boot id a scheduler last heard of from the directory's worker (``mark_boot``).
BOOT_NAME = "machine.boot"


def machine_restarted(directory: str) -> bool:
    """Whether the machine has started again since a scheduler last heard a worker of
    ``directory`` say so (``mark_boot``); True where that cannot be told (no boot id, a
    directory never marked). Records are written without waiting for the disk, so after a
    restart of the machine the record of an attempt may be missing."""
    boot = _boot()
    try:
        with open(os.path.join(directory, BOOT_NAME)) as file:
            return not boot or file.read().strip() != boot
    except OSError:
        return True


def mark_boot(directory: str) -> None:
    """A scheduler has heard that the machine restarted (or that it did not): mark the
    directory with this start of the machine, on the disk. Not before: a worker process that
    ends before it is heard leaves the next one to say it again. A mark cut short by a crash
    names no start, and so counts as a restart, which is safe."""
    boot = _boot()
    if not boot:
        return
    path = os.path.join(directory, BOOT_NAME)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, boot.encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    _sync_directory(directory)


def _boot() -> str:
    """This start of the machine's id ("" where the system does not say)."""
    try:
        with open(BOOT_ID) as file:
            return file.read().strip()
    except OSError:
        return ""


def read_record(path: str) -> dict:
    """The record at ``path``: its first line, updated by each line added since (a line
    that is not whole, cut short by a crash as it was written, is passed over); OSError or
    ValueError (not JSON, or not a record) if none."""
    with open(path, "rb") as file:
        lines = file.read().split(b"\n")
    record = json.loads(lines[0])
    if not isinstance(record, dict) or parse_job_key(record.get("key", "")) is None:
        raise ValueError(f"{path} is not a job attempt record")
    for line in lines[1:]:
        try:
            fields = json.loads(line) if line else None
        except ValueError:
            continue
        if isinstance(fields, dict):
            record.update(fields)
    return record


def remove_record(directory: str, key: str) -> None:
    """Forget an attempt the scheduler has acknowledged (its log stays). Not synced to the
    disk: a record that comes back after a power loss is reported again, and the scheduler,
    which has its end already, acknowledges it again."""
    try:
        os.unlink(record_path(directory, key))
    except FileNotFoundError:
        return


def ended_of(record: dict) -> AttemptEnded | None:
    ended = record.get("ended")
    return AttemptEnded.from_wire(ended) if ended else None


def _sync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- locks ----------------------------------------------------------------------------------------


#: What every error about the job directory ends with: where to choose another.
_CHOOSE = "set worker.job_directory to a directory of this user's"


def prepare_directory(directory: str) -> None:
    """Make the job directory (mode 0700) when missing, and check that it is this user's alone:
    OSError, naming the directory and ``worker.job_directory``, when it cannot be made, another
    user owns it, or others may write to it (they could plant a record for us to run)."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        found = os.stat(directory)
    except OSError as error:
        raise OSError(error.errno, f"cannot create the job directory {directory}: "
                                   f"{error.strerror or error}; {_CHOOSE}") from None
    if not stat.S_ISDIR(found.st_mode):
        raise OSError(errno.ENOTDIR, f"the job directory {directory} is not a directory; "
                                     f"{_CHOOSE}")
    if found.st_uid != os.geteuid():
        owner, me = _user(found.st_uid), _user(os.geteuid())
        raise OSError(errno.EPERM, f"the job directory {directory} belongs to {owner}, not to "
                                   f"this user ({me}); {_CHOOSE}")
    if found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise OSError(errno.EPERM, f"the job directory {directory} may be written by other users "
                                   f"(mode {stat.S_IMODE(found.st_mode):04o}): chmod 700 it, or "
                                   f"{_CHOOSE}")


def _user(uid: int) -> str:
    try:
        import pwd

        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def lock_directory(directory: str, holder: str = "") -> int:
    """Prepare the directory (``prepare_directory``) and lock it for this process, saying
    ``pid N, holder`` in the lock file: the descriptor, held until the process ends; OSError
    (EBUSY, naming the holder) when another process has it."""
    prepare_directory(directory)
    about = f"pid {os.getpid()}" + (f", {holder}" if holder else "")
    try:
        return take(os.path.join(directory, LOCK_NAME), about).fd
    except LockHeld as held:
        raise OSError(errno.EBUSY, f"the job directory {directory} is in use by another worker "
                                   f"process ({held.holder or 'which has not said who it is'}): "
                                   "give each worker its own --name or worker.job_directory"
                                   ) from None
    except OSError as error:
        raise OSError(error.errno, f"cannot lock the job directory {directory}: "
                                   f"{error.strerror or error}; {_CHOOSE}") from None


def open_locked_log(path: str) -> int:
    """Create (or open) a log for appending, locked: the descriptor to hand its supervisor."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise OSError(errno.EBUSY, f"{path} is held by a running supervisor") from None
    return fd


def supervisor_alive(log: str) -> bool:
    """Whether a supervisor still holds the lock on ``log``."""
    try:
        fd = os.open(log, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


# -- a worker process that starts ------------------------------------------------------------


def recover(directory: str, wait: float) -> list[AttemptEnded]:
    """The attempts an earlier worker process left in ``directory``, each ended.

    A supervisor of that process may still be ending its attempt (it kills the job at once
    when its worker goes): wait up to ``wait`` seconds for it. An attempt with no outcome then
    is lost: its worker process died under it (or before its supervisor could say it had
    started it); the outcome is written to its record, to be kept until acknowledged. One
    still held for the scheduler's commit (``hold``, never told to go) never ran: its record
    goes, and it is not listed.
    """
    found: list[AttemptEnded] = []
    deadline = time.monotonic() + wait
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.startswith(".") and name.endswith(".tmp"):
            os.unlink(path)  # a record write cut short: its old version (if any) stands
            continue
        if not name.endswith(RECORD_SUFFIX):
            continue
        try:
            record = read_record(path)
            while record.get("ended") is None and supervisor_alive(record["log"]) \
                    and time.monotonic() < deadline:
                time.sleep(0.02)
                record = read_record(path)
            ended = ended_of(record)
        except (OSError, ValueError, KeyError, TypeError) as error:
            logger.warning("Ignoring %s: %s", path, error)
            continue
        if ended is None and record.get("hold") and not supervisor_alive(record["log"]):
            os.unlink(path)  # sent ahead of its commit, never told to go: it never ran, and
            continue  # is not listed (the scheduler puts it back, or never had it)
        if ended is None:
            if supervisor_alive(record["log"]):
                logger.warning("The supervisor of %s did not end within %.0fs; reporting the "
                               "attempt lost", record["key"], wait)
            ended = AttemptEnded(
                record["key"], "lost", None,
                DIED_WHILE_RUNNING if record.get("pid") else DIED_WHILE_STARTING,
                record["log"], record.get("started"), time.time())
            add_to_record(path, {"ended": ended.to_wire()})
        found.append(ended)
    return found


# -- logs ---------------------------------------------------------------------------------------


def read_log(path: str, offset: int, limit: int) -> tuple[bytes, int]:
    """Up to ``limit`` bytes of the log at ``path`` from ``offset``, and its size now;
    FileNotFoundError when there is none."""
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        file.seek(offset)
        data = file.read(limit)
    return data, max(size, offset + len(data)) if data else size


def read_tail(path: str, limit: int) -> str:
    """The last ``limit`` bytes of the log at ``path``, as text ("" when it cannot be read)."""
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            file.seek(max(0, size - limit))
            return file.read(limit).decode(errors="replace")
    except OSError:
        return ""

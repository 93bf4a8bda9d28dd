"""A job's command as its supervisor starts it (``jobsupervisor``): its environment, where the
program is looked for, its directory, descriptors and signals, and why it cannot start, in
words.

``spawn`` uses ``os.posix_spawn``: the C library starts the child in the supervisor's memory,
copying no page of it, and execs at once, with no Python between, and the environment is
handed over whole. A fork of the supervisor cost milliseconds a job, and ``subprocess``, which
walks the environment in Python and looks for the program again, a tenth of one. The command
reads /dev/null and writes to the job's log; the supervisor's other descriptors are all
close-on-exec (the log's lock is made so where a supervisor receives it), so the job inherits
0, 1 and 2 only.

Nothing here may import asyncio or dsched's heavier modules: it runs in every supervisor.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
from typing import Callable, Mapping

from ..environ import JOB_ATTEMPT_ENV, JOB_ID_ENV, PATH_ENV, WORKER_NAME_ENV
from ..gpu_ids import task_environment
from ..jobs import parse_job_key

#: Signals that Python ignores, given back their default action in the command (as a shell
#: starts it: a job writing to a closed pipe ends, as it expects).
_RESTORED_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)

#: This process's environment (the worker's), read once: a supervisor is forked from the
#: spawner, which reads it before it forks, and a copy of it per attempt costs microseconds
#: where reading ``os.environ`` again would cost a tenth of a millisecond.
_ENVIRONMENT: dict[str, str] = {}


def worker_environment() -> dict[str, str]:
    """This process's environment as it was when first asked (the worker's: nothing here
    changes it)."""
    if not _ENVIRONMENT:
        _ENVIRONMENT.update(os.environ)
    return _ENVIRONMENT


def job_environment(base: Mapping[str, str], key: str, job: dict, gpus: tuple[int, ...],
                    worker: str) -> dict[str, str]:
    """The worker's environment, plus the job's own, plus what dsched tells every job: its
    GPUs (``CUDA_VISIBLE_DEVICES``, empty for none, in PCI bus order), id, attempt and worker."""
    job_id, attempt = parse_job_key(key) or (0, 0)
    env = task_environment(gpus, {**base, **job.get("env", {})})
    env.update({JOB_ID_ENV: str(job_id), JOB_ATTEMPT_ENV: str(attempt), WORKER_NAME_ENV: worker})
    return env


def start_problem(command: list[str], cwd: str | None) -> str:
    """Why ``command`` cannot be started in ``cwd``, in words; "" when it can be tried (the
    program is looked for by its spawn: ``spawn_problem``). An array's element may start with
    an empty word: its value put in place of ``{}``."""
    if not command[0]:
        return "its command's first word is empty"
    if cwd is not None and not os.path.isdir(cwd):
        return f"its working directory {cwd} does not exist"
    return ""


def spawn_problem(program: str, error: OSError | ValueError) -> str:
    """Why ``program`` could not be spawned, in words, from the error of its spawn."""
    if not isinstance(error, OSError):  # what no process can be given (checked before)
        return f"{program}: {error}"
    if error.errno == errno.ENOENT:
        return f"{program}: no such file" if os.sep in program else f"{program}: command not found"
    if error.errno == errno.EACCES:
        return f"{program}: permission denied"
    return f"{program}: {error.strerror or error}"


class CannotStart(Exception):
    """Why a command could not be started, in words (its message)."""


def spawn(command: list[str], cwd: str | None, env: dict[str, str], log: str,
          note: Callable[[str], None]) -> int:
    """Start ``command`` in ``cwd`` (None: this process's directory) with ``env``, leading a
    new process group of this session, stdin /dev/null, stdout and stderr appended to
    ``log``; its pid. CannotStart where it cannot be. The program is looked for on PATH by the
    spawn itself, or, where the job's PATH is not this process's, on the job's. ``note`` gets
    a line for the job's log where this process could not come back to its own directory."""
    program = command[0]
    try:
        out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise CannotStart(f"cannot open its log {log}: {error.strerror or error}") from None
    here = -1
    try:
        if cwd is not None:  # the command starts there; this process comes back after
            here = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            os.chdir(cwd)
    except OSError as error:
        os.close(out)
        if here >= 0:
            os.close(here)
        raise CannotStart(f"its working directory {cwd}: {error.strerror or error}") from None
    try:
        start, path = os.posix_spawn, program
        if os.sep not in program:
            if env.get(PATH_ENV) == os.environ.get(PATH_ENV):  # looked for as we would
                start = os.posix_spawnp
            else:  # looked for on the job's own PATH
                path = shutil.which(program, path=env.get(PATH_ENV, os.defpath)) or ""
                if not path:
                    raise CannotStart(f"{program}: command not found")
        return start(path, command, env, setpgroup=0, setsigdef=_RESTORED_SIGNALS,
                     file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                   (os.POSIX_SPAWN_DUP2, out, 1), (os.POSIX_SPAWN_DUP2, out, 2)])
    except (OSError, ValueError) as error:  # not found, not executable, its exec failed
        raise CannotStart(spawn_problem(program, error)) from None
    finally:
        os.close(out)
        if here >= 0:
            _come_back(here, note)


def _come_back(here: int, note: Callable[[str], None]) -> None:
    """Back to this process's own directory (``here``, open) after a job's spawn there, else to
    / (the next job that names none then starts there, and ``note`` says why): the job is
    spawned by now, and must not be lost for it."""
    try:
        os.fchdir(here)
    except OSError as error:
        os.chdir("/")
        note(f"its supervisor could not go back to its own directory "
             f"({error.strerror or error}); later jobs without one start in /")
    finally:
        os.close(here)

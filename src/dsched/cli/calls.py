"""What ``sched submit`` and ``sched status`` do with a client once their command line is
read, click-free: the click commands (``sched.py``) and the fast path (``quick.py``) both run
these, with the library's Client or the plain connection, so the two say the same things.
Each returns the exit status; ``echo(text, err=False)`` prints a line.
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:
    from typing import Any, Callable

    Echo = Callable[..., None]

#: The exit status of a command that follows jobs (wait, submit --wait, logs -f) when its
#: scheduler was lost and not back within client.connect_timeout: EX_TEMPFAIL of sysexits.h,
#: since the jobs go on and the command may be run again. Not 1, which says a job failed.
EXIT_SCHEDULER_LOST = 75


def stdout_closed() -> int:
    """Standard output's reader is gone: end quietly, with 128 + SIGPIPE, what a shell reports
    for ``git log | head``'s git (``sched status | head``). Python flushes stdout again at exit
    and would complain that it cannot, so what is left goes to /dev/null. (``signal`` is
    loaded here: it builds enums, which a command that ends well need not pay for.)"""
    import signal

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (a test's captured stdout)
        pass
    return 128 + signal.SIGPIPE


def fail(echo: Echo, message: str) -> int:
    echo(f"sched: error: {message}", err=True)
    return 1


def submit(client: Any, echo: Echo, command: tuple[str, ...], options: dict, after_ok: tuple,
           after_any: tuple, wait: bool = False, as_json: bool = False) -> int:
    """Queue the job and print its number (its view, ``as_json``); ``wait``: follow it to its
    end and exit as it did."""
    retry, no_retry = options.pop("gpu_memory_retry"), options.pop("no_gpu_memory_retry")
    if retry and no_retry:
        return fail(echo, "--gpu-memory-retry and --no-gpu-memory-retry: choose one")
    options["gpu_memory_retry"] = True if retry else False if no_retry else None
    options.update(after_ok=client.resolve_jobs(j for jobs in after_ok for j in jobs),
                   after_any=client.resolve_jobs(j for jobs in after_any for j in jobs))
    job = client.submit_command(list(command), **options).job_id()
    if not wait:
        if as_json:
            print_json(echo, client.jobs([job])["jobs"][0])
        else:
            echo(job)
        return 0
    from .jobtext import ended_line, exit_status

    if not as_json:
        echo(job)
    [view] = client.wait_for_jobs([job])
    if as_json:
        print_json(echo, view)
    else:
        echo(ended_line(view), err=True)
    return exit_status(view["state"], view["exit_code"])


def status(client: Any, echo: Echo, job_ids: tuple, states: tuple[str, ...], expand: bool,
           as_json: bool) -> int:
    """Print the jobs asked for (all: none named), and fail for a job named that is not."""
    from .jobtext import count_line, job_table

    numbers = client.resolve_jobs(job_ids)
    found = client.jobs(numbers, states, expand=expand)
    views = found["jobs"]
    if as_json:
        print_json(echo, found)
    elif views:
        echo("\n".join(job_table(views, time.time())))
        echo(count_line(found["counts"], len(views), found["total"]))
    else:
        echo("no jobs")
    if found.get("recovering") and not as_json:
        echo("(the scheduler is recovering: queued jobs wait for the workers that ran jobs to "
             "return)")
    shown = {view["id"] for view in views}
    unknown = [str(ref) for ref, n in zip(job_ids, numbers) if n not in shown]
    if unknown and not states:
        return fail(echo, f"no job {', '.join(unknown)}")
    return 0


def print_json(echo: Echo, value: Any) -> None:
    import json

    echo(json.dumps(value, indent=1))

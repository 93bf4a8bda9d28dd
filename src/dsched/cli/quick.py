"""The ``sched`` console script's entry point: ``sched submit``, ``sched status`` and ``sched
--version`` without click or asyncio, for scripts that run them by the thousand.

Loading click and the full Client took several times as long as what such a command does
(connect, authenticate, send one op, read its reply), so a plain case is done here: the
command line read by ``options.parse`` (the same tables the click commands are built from),
the config and token as the click command finds them, the plain connection of
``client/plain.py``, and the same calls (``calls.py``). Everything else goes to the click
command (``sched.py``) unchanged, which then behaves and errs exactly as it always did: help,
any other command, ``--wait``, ``--array-file``, an option or value the fast parser does not
take, a config or address that is wrong, TLS, a scheduler that cannot be reached, any answer
not expected. Handing over is safe while nothing was queued. Said here instead, in the click
command's words: a refusal of the scheduler, a scheduler slower than the connect timeout to
answer a question (the click command would wait as long again), and, once a submission has
left, whatever goes wrong (``plain.py`` never queues a job twice; it waits for the reply to a
submission as long as the scheduler takes).
"""

from __future__ import annotations

import os
import sys

from .options import address_problem, load_config, parse

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:
    from typing import Any

    from .options import Parsed


def main(at_once: bool = False) -> None:
    """``sched``: the fast path where it applies, else the click command. ``at_once`` (the
    ``sched`` script): a command done on the fast path ends the process at once, without the
    interpreter's teardown of its modules (about 5 ms of CPU a call, a tenth of it): nothing
    else is left to end there, no thread and no file but stdout and stderr, flushed first."""
    try:
        status = run(sys.argv[1:])
    except KeyboardInterrupt:  # as the click command ends on Ctrl-C
        _echo("Aborted!", err=True)
        sys.exit(1)
    if status is None:
        from .sched import main as click_main

        click_main()  # reads sys.argv itself, as it does as the console script
        return
    if at_once:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # None: closed before the program started
                try:
                    stream.flush()
                except (OSError, ValueError):  # closed meanwhile: what it said is lost
                    status = status or 120  # as the interpreter ends when it cannot flush
        os._exit(status)
    sys.exit(status)


def connect(cfg: dict) -> Any:
    """The plain connection to the scheduler ``cfg`` names (tests put a stand-in here)."""
    from ..client.settings import plain_client_from_config

    return plain_client_from_config(cfg)


def run(argv: list[str]) -> int | None:
    """Do what ``argv`` asks and return the exit status, or None, having done nothing, where
    the click command is to do it."""
    parsed = parse(argv)
    if parsed is None or parsed.command == "submit" and parsed.params["wait"]:
        return None
    if parsed.command == "version":
        from .. import __version__

        _echo(f"sched, version {__version__}")
        return 0
    from ..errors import SchedError
    from . import calls

    try:
        cfg = load_config(parsed.group["config_file"], {
            "client.scheduler_address": parsed.group["scheduler_address"],
            "client.token_file": parsed.group["token_file"]})
        from ..client.settings import DEFAULT_SCHEDULER

        if address_problem(cfg["client"]["scheduler_address"] or DEFAULT_SCHEDULER):
            return None
        client = connect(cfg)
    except Exception:  # noqa: BLE001 - the click command does it again, and says what failed
        return None
    try:
        try:
            return _call(client, parsed)
        finally:
            client.close()
    except BrokenPipeError:
        return calls.stdout_closed()
    except TimeoutError:  # a scheduler too slow to answer: the click command would wait again
        return calls.fail(_echo, f"the scheduler at {client.address} did not answer within "
                                 f"{client.timeout:g} s")
    except Exception as error:  # noqa: BLE001 - handed over unless a job may have been queued
        if not getattr(client, "submitted", False) and not isinstance(error, SchedError):
            return None
        # Once a submission has left, whatever went wrong is said here, in one line: handed
        # over, it would be sent again.
        return calls.fail(_echo, str(error) or type(error).__name__)


def _call(client: Any, parsed: Parsed) -> int:
    from ..jobs import ArraySpec
    from . import calls

    params = parsed.params
    if parsed.command == "status":
        return calls.status(client, _echo, params["job_ids"], params["states"],
                            params["expand"], params["as_json"])
    # What the click command does with its parameters before it connects (sched.submit).
    options = {key: params[key] for key in ("resources", "name", "priority", "retries",
                                            "time_limit", "hold", "cwd", "requeue",
                                            "gpu_memory_retry", "no_gpu_memory_retry")}
    text = params["array_text"]
    options.update(env=dict(params["env"]), array=None if text is None else ArraySpec.parse(text),
                   array_limit=params["array_limit"])
    return calls.submit(client, _echo, params["command"], options, params["after_ok"],
                        params["after_any"], params["wait"], params["as_json"])


def _echo(text: Any, err: bool = False) -> None:
    """As click.echo: a line, flushed at once (a closed pipe is found here, as there)."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:  # closed before the program started (sched submit >&-)
        return
    stream.write(f"{text}\n")
    stream.flush()


if __name__ == "__main__":
    main()

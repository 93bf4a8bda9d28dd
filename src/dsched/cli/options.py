"""The options of ``sched``, ``sched submit`` and ``sched status``, declared once, click-free:
the click commands (``sched.py``) are built from these tables, and the fast path
(``quick.py``) parses a command line by them without loading click.

The fast parser understands a part of what click does, and says so by returning None for
anything else (help, an unknown or malformed option, a value it does not convert itself, any
other command), which then goes to the click command unchanged: click stays the one judge of a
command line, and says every error. What the fast parser does accept, it must read as click
does: ``tests/unit/test_sched_fastpath.py`` runs many command lines through both and compares
the calls each makes.
"""

from __future__ import annotations

from collections import namedtuple

from ..environ import ARRAY_INDEX_ENV, CONFIG_ENV
from ..protocol.ints import INT_MAX, INT_MIN

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:
    from typing import Any, Callable

# The records below are ``collections.namedtuple``s, not ``typing.NamedTuple``s: the same
# tuples, without loading ``typing`` for every ``sched`` call.


class Opt(namedtuple("Opt", ("names", "dest", "kind", "help", "extra"), defaults=({},))):
    """An option: its ``names``, the parameter it sets (``dest``), its ``kind`` (the click
    type and the fast converter are looked up by it; ``flag``: takes no value), its ``help``,
    and what click is told besides (``extra``: default, multiple, metavar, show_default)."""

    __slots__ = ()


def _opt(*names: str, dest: str = "", kind: str = "text", help: str, **extra: Any) -> Opt:
    return Opt(names, dest or names[-1].lstrip("-").replace("-", "_"), kind, help, extra)


CONFIG_HELP = (f"TOML config file [default: ${CONFIG_ENV}, else ~/.config/sched/config.toml, "
               "else /etc/sched/config.toml, the first that exists].")

#: ``sched``'s own options, before the command (and ``--version``, ``-h``).
GROUP = (
    _opt("-s", "--scheduler", dest="scheduler_address", metavar="ADDRESS",
         help="Scheduler to talk to, HOST:PORT [client.scheduler_address; default "
         "127.0.0.1:8786]."),
    _opt("--token-file", metavar="FILE",
         help="Shared token file [client.token_file; default: the scheduler's on this "
         "machine]."),
    _opt("--config", dest="config_file", metavar="FILE", help=CONFIG_HELP),
)

SUBMIT = (
    _opt("--resources", kind="resources",
         help='Resources the job needs, e.g. "GPU=1" or "gpu0=1 gpu1=1". A request larger '
         "than any worker offers is queued and waits, saying why."),
    _opt("--name", default="", help="Job name shown by status and logs."),
    _opt("--priority", kind="priority", default=0, show_default=True, help="Higher runs first."),
    _opt("--retries", kind="retries", default=0, show_default=True,
         help="Times to run it again when its command exits non-zero."),
    _opt("--after-ok", kind="jobs", multiple=True,
         help="Start only once these jobs have completed (never, if one does not)."),
    _opt("--after-any", kind="jobs", multiple=True,
         help="Start only once these jobs have ended, however they ended."),
    _opt("--time", dest="time_limit", kind="duration", metavar="DURATION",
         help="Time limit: killed when it runs longer, and ends 'timeout' (90, 15m, 2h, "
         "2:00:00, 1-12:00:00)."),
    _opt("--hold", kind="flag", help="Queue it held: it waits for sched release."),
    _opt("--env", kind="env", multiple=True,
         help="Set NAME to VALUE in the job's environment (repeatable)."),
    _opt("--cwd", metavar="DIR",
         help="Working directory of the job on its worker [default: the worker's]."),
    _opt("--requeue", kind="flag",
         help="Queue it again if its worker is lost while it runs (it may then have run "
         "twice); without it such a job ends 'lost'."),
    _opt("--gpu-memory-retry", kind="flag",
         help="If it fails for want of GPU memory, run it once more with a larger "
         "GPU_MEMORY [default: so for a job that asks GPU_MEMORY]."),
    _opt("--no-gpu-memory-retry", kind="flag",
         help="Do not run it again after it fails for want of GPU memory."),
    _opt("--array", dest="array_text", metavar="INDICES",
         help=f"An array: one job per index, {{}} in COMMAND replaced by it, ${ARRAY_INDEX_ENV} "
         "set to it (0-999, 1,3,5-7 or 0-30:10; %N: at most N at once). Its elements are "
         "named 12_3 (array 12, index 3)."),
    _opt("--array-file", kind="file", metavar="FILE",
         help="An array of one job per line of FILE (blank and # lines skipped), the line in "
         "place of {} in COMMAND, its line number from 0 the index."),
    _opt("--array-limit", kind="count", metavar="N",
         help="Run at most N elements of the array at once (the %N of --array)."),
    _opt("--wait", kind="flag",
         help="Follow the job to its end and exit with its exit status (75: the scheduler "
         "was lost for longer than client.connect_timeout)."),
    _opt("--json", dest="as_json", kind="flag",
         help="Print the job as JSON (as status --json does), at its end with --wait."),
)

STATUS = (
    _opt("--state", dest="states", kind="state", multiple=True,
         help="Only jobs in this state (repeatable)."),
    _opt("--expand", kind="flag",
         help="List the elements of each array, after it (an array is one line without)."),
    _opt("--json", dest="as_json", kind="flag", help="Print the jobs as JSON, for scripts."),
)


# -- the values' rules, click-free: the click types (params.py) call these too -------------


def env_var(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` for a job's environment: a (name, value) pair."""
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise ValueError(f"{text!r} is not NAME=VALUE")
    return name, value


def duration(text: str) -> float:
    """A time limit (``90``, ``15m``, ``2h``, ``1-12:00:00``) in seconds, which must be
    positive; ValueError (a JobSpecError) saying why not."""
    from ..jobs import parse_duration

    seconds = parse_duration(text)
    if not seconds > 0:
        raise ValueError(f"a time limit must be positive, not {text!r}")
    return seconds


def is_element_ref(text: str) -> bool:
    """Whether ``text`` names an array's element as ``12_3`` (digits on each side)."""
    first, underscore, second = text.partition("_")
    return bool(underscore) and _is_number(first) and _is_number(second)


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _int_in(low: int, high: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        body = text[1:] if text.startswith("-") else text
        if not _is_number(body) or not low <= int(text) <= high:
            raise ValueError(text)
        return int(text)

    return convert


def _job_ref(text: str) -> int | str:
    if is_element_ref(text):
        return text
    return _int_in(1, INT_MAX)(text)


def _job_list(text: str) -> tuple:
    return tuple(_job_ref(part.strip()) for part in text.split(","))


def _resources(text: str) -> Any:
    from ..resources import Resources, check_demand

    return check_demand(Resources.parse(text))


def _state(text: str) -> str:
    from ..jobstates import JobState

    return JobState(text).value


#: The fast path's converter of each kind (raises on a value it does not take: click is
#: then asked). ``file`` is not here: ``--array-file`` goes to click.
FAST = {
    "text": str, "resources": _resources, "priority": _int_in(INT_MIN, INT_MAX),
    "retries": _int_in(0, INT_MAX), "jobs": _job_list, "duration": duration, "env": env_var,
    "count": _int_in(1, INT_MAX), "state": _state, "job": _job_ref,
}


class Parsed(namedtuple("Parsed", ("command", "group", "params"))):
    """A command line the fast path understood: the ``command`` (``version``, ``submit``,
    ``status``), ``sched``'s own options (``group``) and the command's ``params``, each by the
    name the click command gives it."""

    __slots__ = ()


def parse(argv: list[str]) -> Parsed | None:
    """``argv`` (without the program) as the click command would read it, or None when the
    fast path does not understand it all."""
    try:
        group, rest = _options(GROUP, argv, interspersed=False, version=True)
        if group.pop("version", False):
            return Parsed("version", group, {})
        if not rest or rest[0] not in ("submit", "status"):
            return None
        command = rest[0]
        params, rest = _options(SUBMIT if command == "submit" else STATUS, rest[1:],
                                interspersed=command == "status")
        if command == "submit":
            if not rest or params["array_limit"] is not None and params["array_text"] is None:
                return None
            if params["array_text"] is not None:
                from ..jobs import ArraySpec

                ArraySpec.parse(params["array_text"])  # a bad one: click says why
            params["command"] = tuple(rest)
        else:
            params["job_ids"] = tuple(_job_ref(arg) for arg in rest)
        return Parsed(command, group, params)
    except (_NotUnderstood, ValueError, TypeError, LookupError, ArithmeticError):
        return None


class _NotUnderstood(Exception):
    pass


def _options(table: tuple[Opt, ...], argv: list[str], interspersed: bool,
             version: bool = False) -> tuple[dict, list[str]]:
    """The options of ``table`` in ``argv`` (by dest, unset ones at their defaults), and the
    arguments left: from the first that is not an option (``interspersed``: all of them)."""
    by_name = {name: opt for opt in table for name in opt.names}
    values: dict[str, Any] = {opt.dest: _default(opt) for opt in table}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--" and not version:
            rest += argv[i:]
            break
        if arg == "--version" and version:
            values["version"] = True
            continue
        if not arg.startswith("-") or arg == "-":
            if not interspersed:
                rest += argv[i - 1:]
                break
            rest.append(arg)
            continue
        name, equals, value = arg.partition("=") if arg.startswith("--") else (arg[:2], "", arg[2:])
        opt = by_name.get(name)
        if opt is None:
            raise _NotUnderstood(arg)
        if opt.kind == "flag":
            if equals or value:
                raise _NotUnderstood(arg)
            values[opt.dest] = True
            continue
        if not equals and not value:
            if i == len(argv):
                raise _NotUnderstood(arg)
            value = argv[i]
            i += 1
        converted = FAST[opt.kind](value)
        if opt.extra.get("multiple"):
            values[opt.dest] += (converted,)
        else:
            values[opt.dest] = converted
    return values, rest


def _default(opt: Opt) -> Any:
    if opt.kind == "flag":
        return False
    return () if opt.extra.get("multiple") else opt.extra.get("default")


def address_problem(address: str) -> str | None:
    """What is wrong with a scheduler's address (``host:port``; no default port), checked as
    a worker or ``sched`` will connect to it; None when nothing is."""
    from ..comm.addresses import parse_address

    try:
        _, port = parse_address(address)
    except ValueError as error:
        return str(error)
    return f"address {address!r}: port 0 is not a scheduler's port" if port == 0 else None


def load_config(config_file: str | None, options: dict[str, Any]) -> dict:
    """``config.load`` with the options the user gave (None = not given) over everything
    else; ConfigError for a bad file, variable or value."""
    from .. import config

    given = {key: value for key, value in options.items() if value is not None}
    return config.load(config_file, overrides=given, source="command line")

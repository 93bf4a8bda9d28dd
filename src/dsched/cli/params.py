"""What the click commands share: option types checked by the config's and the jobs' rules,
common options, and turning options into a config.

Each command module parses its options, builds the config with :func:`build_config`, and calls
one library function. Nothing else belongs here: no daemon logic, no networking, no logging setup.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import click

from .. import config
from ..errors import ConfigError, ResourceSpecError
from ..jobstates import JobState
from ..protocol.ints import INT_MAX, INT_MIN
from ..resources import Resources, check_demand
from ..settings import help_of
# address_problem: the commands' one check of an address, click-free for the fast path
from .options import (CONFIG_HELP, Opt, address_problem, duration, env_var,  # noqa: F401
                      load_config)

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


class ConfigValue(click.ParamType):
    """An option value checked by the config's own rule for ``key``, so both say the same.

    The value is read as a TOML literal when it is one (``0.5`` is a number), as environment
    variables are, and passed on unconverted: ``config.load`` normalizes it, and a value that
    normalizes to None (``--memory-limit none``) still counts as given.
    """

    name = "value"

    def __init__(self, key: str, metavar: str):
        self.key = key
        self.metavar = metavar

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return self.metavar

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        literal = config.parse_literal(value) if isinstance(value, str) else value
        try:
            config.check_value(self.key, literal)
        except ConfigError as e:
            self.fail(str(e), param, ctx)
        return literal


class ResourceSpec(click.ParamType):
    """A task's resource demand (``"GPU=1 MEMORY=8e9"``), parsed by ``Resources.parse`` and
    refused when no worker could ever grant it (``check_demand``)."""

    name = "spec"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "NAME=VALUE ..."

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return check_demand(Resources.parse(value))
        except ResourceSpecError as e:
            self.fail(str(e), param, ctx)


class Duration(click.ParamType):
    """A time limit (``90``, ``15m``, ``2h``, ``1-12:00:00``) in seconds, by ``parse_duration``."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return duration(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


class EnvVar(click.ParamType):
    """``NAME=VALUE`` for a job's environment: a (name, value) pair."""

    name = "NAME=VALUE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        try:
            return env_var(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


class JobRef(click.ParamType):
    """A job as a user names it: its number (an int), or an array's element as ``12_3`` (the
    text, which the client resolves: ``AsyncClient.resolve_jobs``)."""

    name = "JOB"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int) or (isinstance(value, str) and "_" in value
                                      and value.replace("_", "").isascii()
                                      and value.replace("_", "").isdigit()):
            return value if isinstance(value, int) else value.strip()
        return _JOB_NUMBER.convert(value, param, ctx)


class JobIds(click.ParamType):
    """Jobs separated by commas (``3,4`` or ``12_0,12_1``): a tuple of them (``JobRef``)."""

    name = "JOB[,JOB...]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        parts = [part.strip() for part in value.split(",")]
        if not all(part.isascii() and part.replace("_", "", 1).isdigit() for part in parts):
            self.fail(f"{value!r} is not a list of jobs such as 3,4 or 12_3", param, ctx)
        return tuple(JOB_ID.convert(part, param, ctx) for part in parts)


#: A job number, as far as the wire carries one.
_JOB_NUMBER = click.IntRange(1, INT_MAX)
JOB_ID = JobRef()
#: A priority, as far as the wire carries one.
PRIORITY = click.IntRange(INT_MIN, INT_MAX)


def config_option() -> Decorator:
    return click.option("--config", "config_file", metavar="FILE", help=CONFIG_HELP)


def log_level_option(section: str) -> Decorator:
    return click.option(
        "--log-level", type=click.Choice(["debug", "info", "warning", "error", "critical"],
                                         case_sensitive=False),
        help=help_of(f"{section}.log_level"),
    )


def tls_options(section: str) -> Decorator:
    """--tls-cert, --tls-key and --tls-ca for the ``tls`` table of ``section``."""
    options = [
        click.option("--tls-cert", metavar="FILE", help=help_of(f"{section}.tls.cert")),
        click.option("--tls-key", metavar="FILE", help=help_of(f"{section}.tls.key")),
        click.option("--tls-ca", metavar="FILE", help=help_of(f"{section}.tls.ca")),
    ]

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


def build_config(config_file: str | None, options: Mapping[str, Any]) -> dict:
    """``config.load`` with the options the user gave (None = not given) over everything else.

    A bad config file, variable or value is a usage error: one line naming the bad part, exit 2.
    """
    try:
        return load_config(config_file, options)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None


#: The click type of each kind of option in ``options.py``'s tables (none: text, or a flag).
CLICK_TYPES: dict[str, Any] = {
    "resources": ResourceSpec(), "priority": PRIORITY, "retries": click.IntRange(0, INT_MAX),
    "jobs": JobIds(), "duration": Duration(), "env": EnvVar(), "file": click.File("r"),
    "count": click.IntRange(1, INT_MAX), "state": click.Choice([s.value for s in JobState]),
}


def options_of(table: tuple[Opt, ...]) -> Decorator:
    """The click options of a table of ``options.py``, in its order."""
    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        for opt in reversed(table):
            kwargs = dict(opt.extra, help=opt.help)
            if opt.kind == "flag":
                kwargs["is_flag"] = True
            elif opt.kind in CLICK_TYPES:
                kwargs["type"] = CLICK_TYPES[opt.kind]
            f = click.option(*opt.names, opt.dest, **kwargs)(f)
        return f

    return decorate

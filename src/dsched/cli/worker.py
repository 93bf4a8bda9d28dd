"""``sched-worker``: parse the options into a config and run a worker daemon (or a nanny).

Thin on purpose: the worker lives in ``dsched.worker``; this module only turns the command line
into a config (``dsched.config``) and calls one function.
"""

from __future__ import annotations

from typing import Any

import click

from .. import __version__
from ..environ import setting_variable
from ..settings import help_of
from .params import (CONTEXT_SETTINGS, ConfigValue, address_problem, build_config, config_option,
                     log_level_option, tls_options)


def run_worker(cfg: dict) -> int:
    from ..worker.main import run_worker as run

    return run(cfg)


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("scheduler_address", required=False)
@click.option("--resources", type=ConfigValue("worker.resources", "NAME=VALUE ..."),
              help=help_of("worker.resources", "; replaces the config's whole table"))
@click.option("--nthreads", type=ConfigValue("worker.nthreads", "N|none"),
              help=help_of("worker.nthreads"))
@click.option("--nanny/--no-nanny", default=None, help=help_of("worker.nanny"))
@click.option("--nworkers", type=click.IntRange(min=1), help=help_of("worker.nworkers"))
@click.option("--name", help=help_of(
    "worker.name", " (with --no-nanny); under the nanny, HOST-NANNYPID-I, which a process keeps "
    "when the nanny starts it again, so that it finds its job records (give a name that "
    "outlives the nanny where jobs must survive its restart too)"))
@click.option("--host", metavar="HOST", help=help_of("worker.host"))
@click.option("--port", type=click.IntRange(0, 65535), help=help_of("worker.port"))
@click.option("--gpus", type=ConfigValue("worker.gpus", "auto|none|0,1,..."),
              help=help_of("worker.gpus"))
@click.option("--memory-limit", type=ConfigValue("worker.memory_limit", "auto|none|SIZE|FRACTION"),
              help=help_of("worker.memory_limit"))
@click.option("--local-directory", metavar="DIR", help=help_of("worker.local_directory"))
@click.option("--token-file", metavar="FILE", help=help_of("worker.token_file"))
@tls_options("worker")
@config_option()
@log_level_option("worker")
@click.version_option(__version__, prog_name="sched-worker")
@click.pass_context
def main(ctx: click.Context, scheduler_address: str | None, config_file: str | None,
         **options: Any) -> None:
    """Run a dsched worker that connects to SCHEDULER_ADDRESS (host:port).

    Without SCHEDULER_ADDRESS, worker.scheduler_address from the config is used.
    """
    # Each option is named for its key in the worker section (tls_cert is worker.tls.cert).
    cfg = build_config(config_file, {"worker.scheduler_address": scheduler_address, **{
        "worker." + name.replace("tls_", "tls."): value for name, value in options.items()}})
    address = cfg["worker"]["scheduler_address"]
    if address is None:
        raise click.UsageError("missing SCHEDULER_ADDRESS (or set worker.scheduler_address in "
                               "the config or "
                               f"{setting_variable('worker.scheduler_address')})")
    problem = address_problem(address)
    if problem:
        # One line, not click's usage block: the daemon's log is where this is read.
        click.echo(f"sched-worker: error: invalid SCHEDULER_ADDRESS: {problem}", err=True)
        ctx.exit(2)
    ctx.exit(run_worker(cfg))


if __name__ == "__main__":
    main()

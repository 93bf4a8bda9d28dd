"""``sched-scheduler``: parse the options into a config and run the scheduler daemon.

Thin on purpose: the daemon itself lives in ``dsched.scheduler``; this module only turns the
command line into a config (``dsched.config``) and calls one function.
"""

from __future__ import annotations

import click

from .. import __version__
from ..settings import help_of
from . import (CONTEXT_SETTINGS, build_config, config_option, log_level_option,
               tls_options)


def run_scheduler(cfg: dict) -> int:
    from ..scheduler.main import run_scheduler as run

    return run(cfg)


@click.command(context_settings=CONTEXT_SETTINGS)
@click.option("--host", metavar="HOST", help=help_of("scheduler.host"))
@click.option("--port", type=click.IntRange(0, 65535), help=help_of("scheduler.port"))
@click.option("--dashboard-port", type=click.IntRange(0, 65535),
              help=help_of("scheduler.dashboard_port"))
@click.option("--token-file", metavar="FILE", help=help_of("scheduler.token_file"))
@tls_options("scheduler")
@click.option("--state-dir", metavar="DIR", help=help_of("scheduler.state_dir"))
@config_option()
@log_level_option("scheduler")
@click.version_option(__version__, prog_name="sched-scheduler")
@click.pass_context
def main(ctx: click.Context, host: str | None, port: int | None, dashboard_port: int | None,
         token_file: str | None, tls_cert: str | None, tls_key: str | None, tls_ca: str | None,
         state_dir: str | None, config_file: str | None, log_level: str | None) -> None:
    """Run the dsched scheduler: it tracks workers and places tasks on them."""
    cfg = build_config(config_file, {
        "scheduler.host": host, "scheduler.port": port, "scheduler.dashboard_port": dashboard_port,
        "scheduler.token_file": token_file, "scheduler.tls.cert": tls_cert,
        "scheduler.tls.key": tls_key, "scheduler.tls.ca": tls_ca,
        "scheduler.state_dir": state_dir, "scheduler.log_level": log_level,
    })
    ctx.exit(run_scheduler(cfg))


if __name__ == "__main__":
    main()

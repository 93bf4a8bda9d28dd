"""``sched-scheduler``: parse the options into a config and run the scheduler daemon.

Thin on purpose: the daemon itself lives in ``dsched.scheduler``; this module only turns the
command line into a config (``dsched.config``) and calls one function.
"""

from __future__ import annotations

import click

from .. import __version__, config
from ..settings import help_of
from .params import (CONTEXT_SETTINGS, ConfigValue, build_config, config_option, log_level_option,
                     tls_options)


def run_scheduler(cfg: dict) -> int:
    from ..scheduler.main import run_scheduler as run

    return run(cfg)


def show_dashboard_token(cfg: dict) -> int:
    from ..scheduler.main import print_dashboard_token as run

    return run(cfg)


@click.command(context_settings=CONTEXT_SETTINGS)
@click.option("--host", metavar="HOST", help=help_of("scheduler.host"))
@click.option("--port", type=click.IntRange(0, 65535), help=help_of("scheduler.port"))
@click.option("--dashboard-port", type=ConfigValue("scheduler.dashboard_port", "PORT|none"),
              help=help_of("scheduler.dashboard_port"))
@click.option("--dashboard-host", metavar="HOST", help=help_of("scheduler.dashboard_host"))
@click.option("--dashboard-prefix", metavar="PATH",
              type=ConfigValue("scheduler.dashboard_prefix", "PATH"),
              help=help_of("scheduler.dashboard_prefix"))
@click.option("--no-dashboard", is_flag=True,
              help="Serve no dashboard, API or metrics (scheduler.dashboard_port = none).")
@click.option("--print-dashboard-token", is_flag=True,
              help="Print the read-only dashboard token derived from the cluster token, and "
              "exit.")
@click.option("--token-file", metavar="FILE", help=help_of("scheduler.token_file"))
@tls_options("scheduler")
@click.option("--state-dir", metavar="DIR", help=help_of("scheduler.state_dir"))
@config_option()
@log_level_option("scheduler")
@click.version_option(__version__, prog_name="sched-scheduler")
@click.pass_context
def main(ctx: click.Context, host: str | None, port: int | None,
         dashboard_port: int | str | None, dashboard_host: str | None,
         dashboard_prefix: str | None, no_dashboard: bool,
         print_dashboard_token: bool, token_file: str | None, tls_cert: str | None,
         tls_key: str | None, tls_ca: str | None, state_dir: str | None,
         config_file: str | None, log_level: str | None) -> None:
    """Run the dsched scheduler: it tracks workers and places tasks on them."""
    # --dashboard-port none says what --no-dashboard says; any port contradicts it.
    port_given = config.check_value("scheduler.dashboard_port", dashboard_port)
    if no_dashboard and port_given is not None:
        raise click.UsageError("--no-dashboard and --dashboard-port contradict each other")
    cfg = build_config(config_file, {
        "scheduler.host": host, "scheduler.port": port,
        "scheduler.dashboard_port": "none" if no_dashboard else dashboard_port,
        "scheduler.dashboard_host": dashboard_host,
        "scheduler.dashboard_prefix": dashboard_prefix,
        "scheduler.token_file": token_file, "scheduler.tls.cert": tls_cert,
        "scheduler.tls.key": tls_key, "scheduler.tls.ca": tls_ca,
        "scheduler.state_dir": state_dir, "scheduler.log_level": log_level,
    })
    if print_dashboard_token:
        ctx.exit(show_dashboard_token(cfg))
    ctx.exit(run_scheduler(cfg))


if __name__ == "__main__":
    main()

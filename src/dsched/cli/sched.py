"""``sched``: the command-line client (submit, status, workers, cancel, logs, wait).

Thin on purpose: each subcommand parses its options, builds the config (``dsched.config``) and
calls one function of the client library. The group itself loads nothing, so that
``sched SUBCOMMAND --help`` works even with a broken config.
"""

from __future__ import annotations

from typing import Any

import click

from .. import __version__
from . import CONTEXT_SETTINGS, ResourceSpec, build_config, config_option, not_implemented


def run_command(name: str, cfg: dict, arguments: dict[str, Any]) -> int:
    """Placeholder for the client library's side of ``sched NAME`` (issue 5); the exit status."""
    return not_implemented(f"sched {name}")


def _run(ctx: click.Context, **arguments: Any) -> None:
    obj = ctx.find_object(dict) or {}
    cfg = build_config(obj.get("config_file"), obj.get("options", {}))
    ctx.exit(run_command(ctx.command.name or "", cfg, arguments))


@click.group(context_settings=CONTEXT_SETTINGS)
@click.option("-s", "--scheduler", "scheduler_address", metavar="ADDRESS",
              help="Scheduler to talk to [client.scheduler_address; default 127.0.0.1:8786].")
@click.option("--token-file", metavar="FILE",
              help="Shared token file "
              "[client.token_file; default: the scheduler's on this machine].")
@config_option()
@click.version_option(__version__, prog_name="sched")
@click.pass_context
def main(ctx: click.Context, scheduler_address: str | None, token_file: str | None,
         config_file: str | None) -> None:
    """Submit and inspect jobs on a dsched scheduler."""
    ctx.obj = {"config_file": config_file, "options": {
        "client.scheduler_address": scheduler_address, "client.token_file": token_file}}


@main.command(context_settings={"ignore_unknown_options": True})
@click.option("--resources", type=ResourceSpec(), help='Resources the job needs, e.g. "GPU=1".')
@click.option("--name", help="Job name shown by status and logs.")
@click.option("--priority", type=int, default=0, show_default=True, help="Higher runs first.")
@click.option("--retries", type=click.IntRange(min=0), default=0, show_default=True,
              help="Times to rerun the job when it fails.")
@click.option("--worker", "workers", multiple=True, help="Run only on this worker (repeatable).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def submit(ctx: click.Context, **arguments: Any) -> None:
    """Queue a shell command as a job.

    Example: sched submit --resources "GPU=1" -- python train.py --lr 0.1
    """
    _run(ctx, **arguments)


@main.command()
@click.argument("job_ids", nargs=-1, metavar="[JOB_ID]...")
@click.pass_context
def status(ctx: click.Context, job_ids: tuple[str, ...]) -> None:
    """Show jobs, and why each waiting one waits."""
    _run(ctx, job_ids=job_ids)


@main.command()
@click.pass_context
def workers(ctx: click.Context) -> None:
    """List workers with their resources and GPUs."""
    _run(ctx)


@main.command()
@click.argument("job_ids", nargs=-1, required=True, metavar="JOB_ID...")
@click.pass_context
def cancel(ctx: click.Context, job_ids: tuple[str, ...]) -> None:
    """Cancel jobs; running ones are killed."""
    _run(ctx, job_ids=job_ids)


@main.command()
@click.argument("job_id")
@click.option("-f", "--follow", is_flag=True, help="Keep printing output as it is written.")
@click.pass_context
def logs(ctx: click.Context, job_id: str, follow: bool) -> None:
    """Print a job's output (stdout and stderr)."""
    _run(ctx, job_id=job_id, follow=follow)


@main.command()
@click.argument("job_ids", nargs=-1, required=True, metavar="JOB_ID...")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Give up after this long (exit status 124).")
@click.pass_context
def wait(ctx: click.Context, job_ids: tuple[str, ...], timeout: float | None) -> None:
    """Wait for jobs to end; fail if any failed."""
    _run(ctx, job_ids=job_ids, timeout=timeout)

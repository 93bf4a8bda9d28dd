"""``sched``: shell-command jobs from the terminal (submit, status, history, workers, logs,
wait, cancel, release, run-local).

Thin on purpose: each subcommand parses its options, connects a Client made from the config
(``dsched.config``), calls the client library, and prints what it got (``jobtext``,
``progress``); the library does the work. The group itself loads nothing, so that ``sched
SUBCOMMAND --help`` works even with a broken config. Exit status: 0 when all went as asked; 1
when the scheduler refused, could not be reached, or a job did not complete; 2 for a bad
command line (a scheduler address without a port among them, as for sched-worker);
``submit --wait`` exits as the job did (``jobtext.exit_status``); a wait that times out, 124;
a command that follows jobs (``wait``, ``submit --wait``, ``logs -f``) and lost its scheduler
for longer than ``client.connect_timeout``, 75; 141, silently, when standard output is closed
early (``sched status | head``). Errors are one
line on stderr, said once: the library's own error log records are not shown.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import click

from .. import __version__
from ..errors import SchedError, SchedulerLostError
from ..jobs import ArraySpec, JobSpecError
from ..jobstates import ENDED
from . import calls
from .calls import EXIT_SCHEDULER_LOST, stdout_closed
from .options import GROUP, STATUS, SUBMIT
from .params import (CONTEXT_SETTINGS, JOB_ID, ConfigValue, address_problem, build_config,
                     options_of)
from .jobtext import worker_table
from .progress import JobProgress

def connect(cfg: dict) -> Any:
    """The client of the scheduler the config names (tests put a stand-in here)."""
    from ..client.settings import client_from_config

    return client_from_config(cfg)


def fail(message: str) -> int:
    return calls.fail(click.echo, message)


class _CommandLog(logging.Handler):
    """How the library's log records reach the terminal while a command uses the client: a
    warning as one ``sched: warning:`` line; an error not at all, since each error the client
    logs also fails the call the command made, which the command says once (``fail``). A
    record with a traceback (a bug) is shown whole."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR and not record.exc_info:
            return
        text = f"sched: {record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        click.echo(text, err=True)


def _with_client(ctx: click.Context, work: Callable[[Any], int], lost: int = 1) -> None:
    """Exit with ``work(client)``, or 1 with the error's one line when it raises one of ours
    or the scheduler cannot be reached (``lost`` when the scheduler was lost and the client
    did not get it back); 2 for an address that cannot be one, as sched-worker says of it."""
    from ..client.settings import DEFAULT_SCHEDULER

    obj = ctx.find_object(dict) or {}
    cfg = build_config(obj.get("config_file"), obj.get("options", {}))
    problem = address_problem(cfg["client"]["scheduler_address"] or DEFAULT_SCHEDULER)
    if problem:
        fail(f"invalid scheduler address: {problem}")
        ctx.exit(2)
    library = logging.getLogger("dsched")
    handler = _CommandLog(logging.WARNING)
    library.addHandler(handler)
    try:
        client = connect(cfg)
        try:
            status = work(client)
        finally:
            client.close()
    except BrokenPipeError:  # stdout (a socket's never reaches here: the comm layer has it)
        status = stdout_closed()
    except SchedulerLostError as error:
        fail(str(error))
        status = lost
    except (SchedError, OSError) as error:
        status = fail(str(error))
    finally:
        library.removeHandler(handler)
    ctx.exit(status)


def _stdout_is_a_terminal() -> bool:
    return sys.stdout.isatty()


@click.group(context_settings=CONTEXT_SETTINGS)
@options_of(GROUP)
@click.version_option(__version__, prog_name="sched")
@click.pass_context
def main(ctx: click.Context, scheduler_address: str | None, token_file: str | None,
         config_file: str | None) -> None:
    """Submit and inspect shell-command jobs on a dsched scheduler."""
    ctx.obj = {"config_file": config_file, "options": {
        "client.scheduler_address": scheduler_address, "client.token_file": token_file}}


# Options stop at the command: what follows it (its own options included) is the command's.
@main.command(context_settings={"allow_interspersed_args": False})
@options_of(SUBMIT)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def submit(ctx: click.Context, command: tuple[str, ...], after_ok: tuple, after_any: tuple,
           env: tuple, wait: bool, as_json: bool, array_text: str | None, array_file: Any,
           array_limit: int | None, **options: Any) -> None:
    """Queue COMMAND as a job and print its number.

    Example: sched submit --resources "GPU=1" -- python train.py --lr 0.1

    An array: sched submit --array 0-99%8 -- python train.py --seed {}
    """
    if array_text is not None and array_file is not None:
        raise click.UsageError("--array and --array-file: choose one")
    try:
        array = (ArraySpec.parse(array_text) if array_text is not None else
                 ArraySpec.of_lines(array_file) if array_file is not None else None)
    except JobSpecError as error:
        raise click.BadParameter(str(error), param_hint="--array" if array_text is not None
                                 else "--array-file") from None
    if array_limit is not None and array is None:
        raise click.UsageError("--array-limit is for an array (--array or --array-file)")
    options.update(env=dict(env), array=array, array_limit=array_limit)

    def work(client: Any) -> int:
        return calls.submit(client, click.echo, command, options, after_ok, after_any, wait,
                            as_json)

    _with_client(ctx, work, EXIT_SCHEDULER_LOST if wait else 1)


@main.command()
@click.argument("job_ids", nargs=-1, type=JOB_ID, metavar="[JOB]...")
@options_of(STATUS)
@click.pass_context
def status(ctx: click.Context, job_ids: tuple[int, ...], states: tuple[str, ...],
           expand: bool, as_json: bool) -> None:
    """Show jobs and why each one waits.

    Jobs on workers come first, then those waiting, then those ended, each newest first;
    each one not running says why it is in its state. A last line counts them by state.
    """
    def work(client: Any) -> int:
        return calls.status(client, click.echo, job_ids, states, expand, as_json)

    _with_client(ctx, work)


@main.command()
@click.argument("job_ids", nargs=-1, type=JOB_ID, metavar="[JOB]...")
@click.option("--state", "states", multiple=True,
              type=click.Choice(sorted(state.value for state in ENDED)),
              help="Only attempts that ended so (repeatable).")
@click.option("--name", default="", metavar="GLOB",
              help="Only jobs whose name GLOB matches, as a shell matches file names "
              "(train-*, eval-[0-9]).")
@click.option("--since", metavar="WHEN",
              help="Only attempts that ended at or after WHEN: a time ago (90m, 2h, 1d) or a "
              "date or time (2024-05-01, 2024-05-01T14:30; local time).")
@click.option("--until", metavar="WHEN", help="Only attempts that ended before WHEN.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True,
              metavar="N", help="The newest N.")
@click.option("--json", "as_json", is_flag=True, help="Print the attempts as JSON, for scripts.")
@click.pass_context
def history(ctx: click.Context, job_ids: tuple[int, ...], states: tuple[str, ...], name: str,
            since: str | None, until: str | None, limit: int, as_json: bool) -> None:
    """Show ended job attempts, newest first, with their GPU-hours and efficiency.

    Each attempt that ended is a line: every retry of a job, and one given up with its worker.
    GPUS are those it held (a fraction of one, or of its memory, for a share), GPU-HOURS its
    duration times them; UTIL-AVG/PEAK and MEM-PEAK are its GPUs' use as its worker sampled
    it, and EFFICIENCY the GPU-hours it used of those it held. A last line sums them. Jobs
    (JOB: an array's elements, or 12_3) and times filter it.
    """
    from .historytext import history_table, totals_line, when

    now = time.time()
    bounds = []
    for option, text in (("--since", since), ("--until", until)):
        try:
            bounds.append(None if text is None else when(text, now))
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint=option) from None

    def work(client: Any) -> int:
        views = client.history(job_ids, states, name, *bounds, limit)
        if as_json:
            calls.print_json(click.echo, views)
        elif views:
            click.echo("\n".join(history_table(views, now)))
            click.echo(totals_line(views))
        else:
            click.echo("no ended attempts")
        return 0

    _with_client(ctx, work)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the workers as JSON, for scripts.")
@click.pass_context
def workers(ctx: click.Context, as_json: bool) -> None:
    """List workers: resources used and free, GPUs and their jobs."""
    def work(client: Any) -> int:
        found = client.workers()
        if as_json:
            calls.print_json(click.echo, found)
        else:
            click.echo("\n".join(worker_table(found)) if found else "no workers connected")
        return 0

    _with_client(ctx, work)


@main.command()
@click.argument("job_id", type=JOB_ID, metavar="JOB")
@click.option("-f", "--follow", is_flag=True,
              help="Keep printing output as it is written, until the job ends; wait out a "
              "restart of the scheduler or of the job's worker, for up to "
              "client.connect_timeout each (exit status 75 when the scheduler is not back).")
@click.pass_context
def logs(ctx: click.Context, job_id: int, follow: bool) -> None:
    """Print a job's output (stdout and stderr), from its worker.

    The worker is asked where it is connected now, by its name: one restarted on a new port
    still serves the logs it kept.
    """
    def waiting(worker: str) -> None:
        click.echo(f"sched: waiting for worker {worker} to come back", err=True)

    def work(client: Any) -> int:
        out = sys.stdout.buffer
        [number] = client.resolve_jobs([job_id])
        for data in client.read_job_log(number, follow, on_wait=waiting):
            out.write(data)
            out.flush()
        return 0

    _with_client(ctx, work, EXIT_SCHEDULER_LOST if follow else 1)


@main.command()
@click.argument("job_ids", nargs=-1, required=True, type=JOB_ID, metavar="JOB...")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Give up after this long (exit status 124).")
@click.pass_context
def wait(ctx: click.Context, job_ids: tuple[int, ...], timeout: float | None) -> None:
    """Wait for jobs to end, showing progress.

    Exits 0 if they all completed, 1 if any did not, 124 on --timeout. A restart of the
    scheduler is waited out (the jobs go on); 75 if it is not back within
    client.connect_timeout.
    """
    def work(client: Any) -> int:
        progress = JobProgress(sys.stdout, _stdout_is_a_terminal())
        last: list = []

        def update(views: list) -> None:
            last[:] = views
            progress.update(views)

        try:
            views = client.wait_for_jobs(job_ids, on_update=update, timeout=timeout)
        except TimeoutError as error:
            progress.finish(last)
            fail(str(error))
            return 124
        progress.finish(views)
        return 0 if all(view["state"] == "completed" for view in views) else 1

    _with_client(ctx, work, EXIT_SCHEDULER_LOST)


def _answer(ctx: click.Context, job_ids: tuple[int, ...], ask: str, good: tuple[str, ...]) -> None:
    def work(client: Any) -> int:
        numbers = client.resolve_jobs(job_ids)
        answers = getattr(client, ask)(numbers)
        for job, number in zip(job_ids, numbers):
            click.echo(f"job {job}: {answers[str(number)]}")
        return 0 if all(answers[str(number)] in good for number in numbers) else 1

    _with_client(ctx, work)


@main.command()
@click.argument("job_ids", nargs=-1, required=True, type=JOB_ID, metavar="JOB...")
@click.pass_context
def cancel(ctx: click.Context, job_ids: tuple[int, ...]) -> None:
    """Cancel jobs, queued or running (running ones are killed)."""
    _answer(ctx, job_ids, "cancel_jobs", ("cancelled", "cancelling"))


@main.command()
@click.argument("job_ids", nargs=-1, required=True, type=JOB_ID, metavar="JOB...")
@click.pass_context
def release(ctx: click.Context, job_ids: tuple[int, ...]) -> None:
    """Let held jobs (submit --hold) run."""
    _answer(ctx, job_ids, "release_jobs", ("released",))


@main.group()
def gpu() -> None:
    """Act on workers' GPUs."""


@gpu.command("release")
@click.argument("worker")
@click.argument("device", type=click.IntRange(0))
@click.pass_context
def gpu_release(ctx: click.Context, worker: str, device: int) -> None:
    """Let a fenced GPU take work again.

    A GPU that reported a fatal fault (a critical Xid, a double-bit ECC error) is fenced: it
    gets no new work until released here, or until its worker starts again. WORKER is the
    worker's name; DEVICE its NVML index, as `sched workers` shows it.
    """
    def work(client: Any) -> int:
        client.release_gpu(worker, device)
        click.echo(f"GPU {device} of worker {worker} released")
        return 0

    _with_client(ctx, work)


@main.command("run-local")
@click.argument("jobfile", type=click.Path(exists=True, dir_okay=False))
@click.option("--resources", type=ConfigValue("worker.resources", "NAME=VALUE ..."),
              help='What the local worker offers, e.g. "gpu0=1 gpu1=1" [default: nothing, '
              "so only jobs that need nothing can run].")
@click.option("--nworkers", type=click.IntRange(min=1),
              help="Jobs that may run at once: the local worker's slots, which share "
              "--resources (they do not multiply them) [default: the number of CPUs].")
@click.option("--log-dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Keep each job's output in DIR/job-N.log (DIR is made if missing; a log "
              "of the same name is replaced) [default: not kept].")
@click.option("-q", "--quiet", is_flag=True,
              help="Do not print the jobs' output as it comes (the end of a job that did not "
              "complete is still shown).")
@click.pass_context
def run_local(ctx: click.Context, jobfile: str, resources: Any, nworkers: int | None,
              log_dir: str | None, quiet: bool) -> None:
    """Run a file of jobs on a cluster of its own.

    A scheduler and one worker are started for the run, and stopped after it.

    JOBFILE has one command line per line, split as a shell would, with an optional
    [resources] prefix: "[gpu0=1 gpu1=1] python train.py". Blank lines and lines starting
    with # are skipped. Each line of the jobs' output (stdout and stderr) is printed as it
    comes, after its job's number: "[3] epoch 1". At the end, each job that did not complete
    is shown with its last 20 lines. Fails if any job did not complete.
    """
    from ..client.runlocal import run_jobfile
    from ..resources import Resources
    from .joboutput import INTERVAL, JobOutput

    output = JobOutput(Path(log_dir) if log_dir else None)
    progress = JobProgress(sys.stdout, _stdout_is_a_terminal())

    def update(views: list) -> None:
        lines = output.read(views)
        progress.update(views, () if quiet else lines)

    try:  # the log directory is made once the cluster runs: the JOBFILE was good
        views = run_jobfile(jobfile, Resources.parse(resources or {}),
                            nworkers or os.cpu_count() or 1, on_update=update,
                            on_cluster=lambda _: output.open(), interval=INTERVAL)
        progress.finish(views)
        for line in output.failures(views):
            click.echo(line)
    except JobSpecError as error:  # a bad JOBFILE is a bad command line
        fail(f"{error}; nothing ran")
        ctx.exit(2)
    except BrokenPipeError:
        ctx.exit(stdout_closed())
    except (SchedError, OSError, RuntimeError) as error:
        ctx.exit(fail(str(error)))
    finally:
        output.close()
    ctx.exit(0 if all(view["state"] == "completed" for view in views) else 1)


if __name__ == "__main__":
    main()

"""``sched-scheduler`` as a program: from a loaded config to a running scheduler daemon.

Prepares what the daemon needs before it listens (its state directory, locked for this
process, the token, TLS, the job journal, whose jobs it loads), then runs it, with its
dashboard, until a signal drains it; a daemon that cannot do its job says why in one line and
exits non-zero (2: a setting that cannot work, or a journal it cannot read; 78: the state
directory is another scheduler's, the journal cannot be written, or the port, or the
dashboard's, is taken; 1: the journal cannot be written any more). The worker's counterpart is
``worker/main.py``; both use ``daemon.py`` for logging, signals and systemd.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time

from ..daemon import ServiceNotifier
from ..dirlock import DirectoryLock, LockHeld, take
from ..errors import ConfigError
from ..protocol.fields import build_all
from ..settings import CommConfig, SchedulerConfig, build
from .journal import FILENAME as JOURNAL, Journal, JournalNotWritable
from .server import Scheduler

logger = logging.getLogger("dsched.scheduler")

#: The lock file in the state directory: held by the scheduler that uses it.
LOCK_NAME = "scheduler.lock"


class StateDirInUse(Exception):
    """Another scheduler holds the state directory."""


def prepare_state_dir(path: str) -> None:
    """Create the state directory (mode 0700) or say in one line why it cannot be used."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        writable = os.access(path, os.W_OK | os.X_OK)
    except OSError as error:
        raise ConfigError(f"cannot create the state directory {path}: "
                          f"{error.strerror or error}; choose another with --state-dir or "
                          "scheduler.state_dir") from None
    if not writable:
        raise ConfigError(f"the state directory {path} is not writable by this user; choose "
                          "another with --state-dir or scheduler.state_dir")


def lock_state_dir(path: str) -> DirectoryLock:
    """Lock the state directory for this process, for its whole life: two schedulers on one
    journal would both run its jobs. StateDirInUse, naming the holder, when another has it."""
    try:
        return take(os.path.join(path, LOCK_NAME), f"pid {os.getpid()}, starting")
    except LockHeld as held:
        raise StateDirInUse(f"the state directory {path} is in use by another scheduler "
                            f"({held.holder or 'which has not said who it is'}): give each "
                            "scheduler its own --state-dir (scheduler.state_dir)") from None
    except OSError as error:
        raise ConfigError(f"cannot lock the state directory {path}: {error.strerror or error}; "
                          "choose another with --state-dir or scheduler.state_dir") from None


def run_scheduler(cfg: dict) -> int:
    """Run the scheduler daemon from a loaded config until it is drained; the exit status."""
    from ..auth import ensure_token
    from ..daemon import EXIT_CONFIG, install_signal_handlers, setup_logging, ssl_contexts

    config = build(SchedulerConfig, cfg["scheduler"])
    setup_logging(config.log_level)
    build_all()  # the op classes: compiled now, not at the first op of each kind
    service = ServiceNotifier.from_environment()
    try:
        prepare_state_dir(config.state_dir)
        lock = lock_state_dir(config.state_dir)  # held until the process ends
        token = ensure_token(token_file=config.token_file)
        ssl = ssl_contexts(config.tls, server=True)
        journal = Journal(os.path.join(config.state_dir, JOURNAL))
    except (StateDirInUse, JournalNotWritable) as error:
        print(f"sched-scheduler: error: {error}", file=sys.stderr)
        return EXIT_CONFIG
    except ConfigError as error:
        print(f"sched-scheduler: error: {error}", file=sys.stderr)
        return 2

    async def main() -> int:
        scheduler = Scheduler(config, build(CommConfig, cfg["comm"]), token=token, ssl=ssl,
                              journal=journal)
        watchdog = service.start_watchdog()
        try:
            await start_scheduler(scheduler, service)
        except ConfigError as error:  # a journal it cannot read
            print(f"sched-scheduler: error: {error}", file=sys.stderr)
            return 2
        except OSError as error:
            logger.error("Cannot listen on %s:%s: %s", config.host, config.port,
                         error.strerror or error)
            return EXIT_CONFIG
        try:
            dashboard = await start_dashboard(scheduler, config, token)
        except OSError as error:
            logger.error("Cannot serve the dashboard on %s:%s: %s; choose another port with "
                         "--dashboard-port (0: any free one) or turn it off with --no-dashboard",
                         config.dashboard_host, config.dashboard_port, error.strerror or error)
            await scheduler.close()
            return EXIT_CONFIG
        stopped = asyncio.get_running_loop().create_future()

        async def drain() -> None:
            try:
                await scheduler.drain(config.drain_timeout)
                if dashboard is not None:
                    await dashboard.close()
            finally:
                if not stopped.done():
                    stopped.set_result(None)

        install_signal_handlers(drain, service=service)
        lock.note(f"pid {os.getpid()}, listening at {scheduler.address}")
        service.ready(f"Listening at {scheduler.address}")
        # A line on stdout for whoever started us (tests, LocalCluster): where we listen, and
        # where the dashboard is (one line: a reader may stop reading after it).
        served = f" with its dashboard at {dashboard.url}" if dashboard is not None else ""
        print(f"sched-scheduler listening at {scheduler.address}{served}", flush=True)
        await asyncio.wait((stopped, scheduler.fatal), return_when=asyncio.FIRST_COMPLETED)
        watchdog.cancel()
        if scheduler.fatal.done():
            await scheduler.close(f"scheduler failed: {scheduler.fatal.result()}")
            return 1
        return 0

    try:
        return asyncio.run(main())
    finally:
        journal.close()


async def start_scheduler(scheduler: Scheduler, service: ServiceNotifier) -> None:
    """Everything the scheduler does before it serves, in order; READY=1 follows it: load the
    job journal (recovery then starts), then listen.

    A step that takes a while says what it is doing with ``service.status`` (``systemctl
    status`` shows it), and must not hold the event loop past half of the unit's
    ``WatchdogSec=``: the watchdog is pinged from the loop.
    """
    service.status("Starting: loading the job journal")
    started = time.perf_counter()
    loaded = scheduler.load_jobs()
    if loaded:
        logger.info("Loaded %d job(s) from the journal in %.2f s", loaded,
                    time.perf_counter() - started)
    service.status(f"Starting: listening on {scheduler.config.host}:{scheduler.config.port}")
    await scheduler.start()


async def start_dashboard(scheduler: Scheduler, config: SchedulerConfig, token: str):
    """The scheduler's dashboard, serving (None when turned off); OSError when its port cannot
    be had."""
    if config.dashboard_port is None:
        return None
    from .http import Dashboard

    dashboard = Dashboard(scheduler, config, token)
    await dashboard.start()
    return dashboard


def print_dashboard_token(cfg: dict) -> int:
    """Print the read-only dashboard token of the cluster token the scheduler would use."""
    from ..auth import load_token
    from .http import dashboard_token

    config = build(SchedulerConfig, cfg["scheduler"])
    try:
        token = load_token(token_file=config.token_file)
    except ConfigError as error:
        print(f"sched-scheduler: error: {error}", file=sys.stderr)
        return 2
    print(dashboard_token(token))
    return 0

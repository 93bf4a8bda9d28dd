"""``sched-scheduler`` as a program: from a loaded config to a running scheduler daemon.

Prepares what the daemon needs before it listens (its state directory, the token, TLS), then
runs it until a signal drains it; a daemon that cannot do its job says why in one line and
exits non-zero (2: a setting that cannot work; 78: the port is taken). The worker's
counterpart is ``worker/main.py``; both use ``daemon.py`` for logging, signals and systemd.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from ..daemon import ServiceNotifier
from ..errors import ConfigError
from ..settings import CommConfig, SchedulerConfig, build
from .server import Scheduler

logger = logging.getLogger("dsched.scheduler")


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


def run_scheduler(cfg: dict) -> int:
    """Run the scheduler daemon from a loaded config until it is drained; the exit status."""
    from ..auth import ensure_token
    from ..daemon import EXIT_CONFIG, install_signal_handlers, setup_logging, ssl_contexts

    config = build(SchedulerConfig, cfg["scheduler"])
    setup_logging(config.log_level)
    service = ServiceNotifier.from_environment()
    try:
        prepare_state_dir(config.state_dir)
        token = ensure_token(token_file=config.token_file)
        ssl = ssl_contexts(config.tls, server=True)
    except ConfigError as error:
        print(f"sched-scheduler: error: {error}", file=sys.stderr)
        return 2

    async def main() -> int:
        scheduler = Scheduler(config, build(CommConfig, cfg["comm"]), token=token, ssl=ssl)
        watchdog = service.start_watchdog()
        try:
            await start_scheduler(scheduler, service)
        except OSError as error:
            logger.error("Cannot listen on %s:%s: %s", config.host, config.port,
                         error.strerror or error)
            return EXIT_CONFIG
        stopped = asyncio.Event()

        async def drain() -> None:
            try:
                await scheduler.drain(config.drain_timeout)
            finally:
                stopped.set()

        install_signal_handlers(drain, service=service)
        service.ready(f"Listening at {scheduler.address}")
        # A line on stdout for whoever started us (tests, LocalCluster): where we listen.
        print(f"sched-scheduler listening at {scheduler.address}", flush=True)
        await stopped.wait()
        watchdog.cancel()
        return 0

    return asyncio.run(main())


async def start_scheduler(scheduler: Scheduler, service: ServiceNotifier) -> None:
    """Everything the scheduler does before it serves, in order; READY=1 follows it.

    Add what else must be done first here (loading the job journal, reconciling it), not a
    second READY. A step that takes a while says what it is doing with ``service.status``
    (``systemctl status`` shows it), and must not hold the event loop past half of the unit's
    ``WatchdogSec=``: the watchdog is pinged from the loop (run blocking work in a thread).
    """
    service.status(f"Starting: listening on {scheduler.config.host}:{scheduler.config.port}")
    await scheduler.start()

"""``sched-worker`` as a program: from a loaded config to a running worker, or to a nanny.

GPUs are found once here, before the worker process hides them from itself. With
``--nworkers N`` the devices are divided among N worker processes, each started as
``sched-worker --nworkers 1 --gpus <its share>`` under a :class:`Nanny`, with the nanny's
merged settings in its environment. Under a nanny, only the nanny applies "a second signal
stops at once"; its processes drain on the first signal and ignore the rest.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

import psutil

from ..errors import ConfigError, ResourceSpecError
from ..resources import Resources
from .gpus import detect_gpus, gpus_option, ledger_devices, resources_with_gpus, split_gpus

logger = logging.getLogger("dsched.worker")

#: Set (to the nanny's pid) in the environment of the worker processes a nanny starts.
NANNY_ENV = "SCHED_NANNY_PID"


def gpus_text(value) -> str:
    """The ``worker.gpus`` config value (``"auto"``, ``"none"``, a list) as ``--gpus`` text."""
    if isinstance(value, (list, tuple)):
        return ",".join(str(item) for item in value) or "none"
    return str(value)


def default_nthreads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def memory_limit(value, nworkers: int) -> int | None:
    total = psutil.virtual_memory().total
    if value is None:
        return None
    if value == "auto":
        return total // nworkers
    if isinstance(value, float) and value <= 1:
        return int(total * value)
    return int(value)


def run_worker(cfg: dict) -> int:
    """Run one worker, or a nanny over ``nworkers`` of them; the exit status."""
    from ..daemon import setup_logging

    w = cfg["worker"]
    setup_logging(w["log_level"])
    try:
        inventory = detect_gpus(select=gpus_text(w["gpus"]))
        if w["nworkers"] > 1:
            return _run_nanny(cfg, inventory.devices)
        return _run_one(cfg, inventory.devices)
    except (ResourceSpecError, ConfigError) as error:
        print(f"sched-worker: error: {error}", file=sys.stderr)
        return 2


def _run_one(cfg: dict, devices) -> int:
    from ..auth import load_token
    from ..daemon import install_signal_handlers, ssl_contexts
    from .server import Worker, WorkerSettings

    w, c = cfg["worker"], cfg["comm"]
    resources = resources_with_gpus(Resources.parse(w["resources"]), devices)
    indices = ledger_devices(resources, devices)
    used = tuple(device for device in devices if device.index in indices)
    settings = WorkerSettings(
        scheduler_address=w["scheduler_address"],
        token=load_token(token_file=w["token_file"]),
        nthreads=w["nthreads"] or default_nthreads(), resources=resources, gpus=used,
        ledger_indices=indices if devices else None, name=w["name"], host=w["host"],
        port=w["port"],
        memory_limit=memory_limit(w["memory_limit"], 1),
        local_directory=w["local_directory"], heartbeat_interval=w["heartbeat_interval"],
        reconnect_min=w["reconnect_backoff_min"], reconnect_max=w["reconnect_backoff_max"],
        drain_timeout=w["drain_timeout"], death_timeout=w["death_timeout"],
        connect_timeout=c["connect_timeout"],
        comm_limits={"max_frame_size": c["max_frame_size"],
                     "max_message_size": c["max_message_size"], "outbox_limit": c["outbox_limit"]},
        ssl_client=ssl_contexts(w["tls"], server=False),
        ssl_server=ssl_contexts({**w["tls"], "require_client_cert": False}, server=True),
    )

    async def main() -> int:
        worker = Worker(settings)
        await worker.start()
        if os.environ.get(NANNY_ENV):
            _drain_on_signals(worker.drain)
        else:
            install_signal_handlers(worker.drain)
        await worker.stopped.wait()
        await worker.close()
        if not worker.state.is_idle():
            # Tasks on threads cannot be stopped, and the interpreter would wait for them at
            # exit, past the drain deadline: leave without them.
            logger.warning("Exiting with tasks still running on threads; they are abandoned")
            sys.stderr.flush()
            os._exit(0)
        return 0

    return asyncio.run(main())


def _run_nanny(cfg: dict, devices) -> int:
    from ..daemon import EXIT_AT_ONCE
    from .nanny import Nanny

    w = cfg["worker"]
    n = w["nworkers"]
    env = {**os.environ, **_settings_env(cfg), NANNY_ENV: str(os.getpid())}
    shares = split_gpus(list(devices), n)
    commands = []
    for i, share in enumerate(shares):
        command = [sys.executable, "-m", "dsched.cli.worker", w["scheduler_address"],
                   "--nworkers", "1", "--gpus", gpus_option(share) if devices else "none",
                   "--log-level", w["log_level"], "--host", w["host"],
                   # A fixed port is the first of a range: process i serves on port + i.
                   "--port", str(w["port"] + i if w["port"] else 0)]
        resources = Resources.parse(w["resources"])
        if resources:
            command += ["--resources", str(resources)]
        if w["nthreads"]:
            command += ["--nthreads", str(w["nthreads"])]
        if w["name"]:
            command += ["--name", f"{w['name']}-{i}"]
        for option, key in (("--token-file", "token_file"), ("--local-directory", "local_directory")):
            if w[key]:
                command += [option, str(w[key])]
        for part in ("cert", "key", "ca"):
            if w["tls"].get(part):
                command += [f"--tls-{part}", str(w["tls"][part])]
        limit = memory_limit(w["memory_limit"], n)
        if limit:
            command += ["--memory-limit", str(limit)]
        commands.append((f"worker-{i}", command, env))

    async def main() -> int:
        nanny = Nanny(commands)
        loop = asyncio.get_running_loop()
        stops: list[asyncio.Task] = []

        # The nanny owns the "second signal stops at once" rule for its processes (they
        # ignore repeated signals, see _drain_on_signals): first SIGTERM/SIGINT, each process
        # drains; a second, they are killed.
        def on_signal(signum: int) -> None:
            name = signal.Signals(signum).name
            if not stops:
                logger.info("Received %s: draining the worker processes (send again to stop "
                            "them at once)", name)
                stops.append(loop.create_task(nanny.stop(deadline=w["drain_timeout"] + 5)))
            elif len(stops) == 1:
                logger.warning("Received %s again: killing the worker processes", name)
                stops.append(loop.create_task(nanny.stop(deadline=0, at_once=True)))

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_signal, signum)
        await nanny.run()
        await asyncio.gather(*stops)
        return EXIT_AT_ONCE if len(stops) > 1 else 0

    return asyncio.run(main())


def _drain_on_signals(drain) -> None:
    """A worker under a nanny: the first SIGTERM or SIGINT drains it; later ones are ignored.

    A terminal's Ctrl-C (or systemd stopping the unit) signals the nanny and its processes
    together, and the nanny then sends each process SIGTERM. Counted as a second signal, that
    would stop the running tasks at once; the nanny decides "at once", with SIGKILL.
    """
    loop = asyncio.get_running_loop()
    draining: list[asyncio.Task] = []

    def on_signal(signum: int) -> None:
        if draining:
            logger.info("Received %s: already draining", signal.Signals(signum).name)
            return
        logger.info("Received %s: draining", signal.Signals(signum).name)
        draining.append(loop.create_task(drain()))

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)


def _settings_env(cfg: dict) -> dict[str, str]:
    """The merged settings a worker process gets no option for, as ``SCHED_*`` variables.

    The nanny's config may come from a ``--config`` file that the processes it starts would
    not read; handing them the merged values keeps every process on the nanny's config.
    """
    w = cfg["worker"]
    env = {f"SCHED_WORKER__{key.upper()}": _literal(w[key]) for key in (
        "heartbeat_interval", "reconnect_backoff_min", "reconnect_backoff_max",
        "drain_timeout", "death_timeout")}
    env.update({f"SCHED_COMM__{key.upper()}": _literal(value)
                for key, value in cfg["comm"].items()})
    return env


def _literal(value) -> str:
    return "none" if value is None else repr(value)

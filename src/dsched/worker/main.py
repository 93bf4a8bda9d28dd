"""``sched-worker`` as a program: from a loaded config to a nanny over its worker processes, or
(``--no-nanny``) to one worker in this process.

Everything that would make every worker process fail alike is checked once, before any starts:
the token, the TLS files, the resources against the GPUs. GPUs are found once, here, before a
worker process hides them from itself, and said once: a nanny divides them among its processes
and starts each as ``sched-worker --no-nanny --gpus <its share> --name <its name>``, with the
nanny's merged settings in its environment and ``NANNY_PID_ENV`` naming the nanny. That variable
tells a process that it dies with the nanny, that the nanny has already said which GPUs there
are, and that the nanny owns "a second signal stops at once". A process keeps its name when
the nanny starts it again, so that it finds the job records it left.

A worker process tells the service manager it is ready once started (its data port open), not
once registered: it waits for its scheduler by itself, so a scheduler that is down must not
fail the worker's start; how the connection stands goes in its status line instead. Under a
nanny these notifications go to the nanny, which speaks for all its processes (``nanny.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import sys
from typing import Any

import psutil

from ..daemon import ServiceNotifier
from ..environ import NANNY_PID_ENV, PREVIOUS_EXIT_ENV, setting_variable
from ..errors import ConfigError, ResourceSpecError
from ..protocol.fields import build_all
from ..resources import Resources
from .gpus import (GpuDevice, check_division, detect_gpus, gpus_option, ledger_devices,
                   resources_with_gpus, split_gpus, with_gpu_memory)
from .lifeline import die_with_parent
from ..settings import CommConfig, WorkerConfig, build

logger = logging.getLogger("dsched.worker")


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
    """Run a nanny over ``nworkers`` worker processes, or one worker here; the exit status."""
    from ..daemon import setup_logging

    w = build(WorkerConfig, cfg["worker"])
    setup_logging(w.log_level)
    build_all()  # the op classes: compiled now, not at the first op of each kind
    # Read once, and kept from the tasks, which inherit this process's environment.
    nanny = os.environ.pop(NANNY_PID_ENV, None)
    previous_exit = os.environ.pop(PREVIOUS_EXIT_ENV, None) or None
    service = ServiceNotifier.from_environment()
    if nanny:
        die_with_parent(int(nanny))
    try:
        if w.nanny and not nanny:
            return _run_nanny(w, cfg, detect_gpus(select=gpus_text(w.gpus)).devices, service)
        if w.nworkers > 1:
            raise ConfigError("--nworkers needs the nanny: drop --no-nanny "
                              "(or worker.nanny = false)")
        # The nanny has said what it found; "none" from it may mean "none found".
        quiet = nanny and gpus_text(w.gpus) == "none"
        devices = () if quiet else detect_gpus(select=gpus_text(w.gpus),
                                               announce=not nanny).devices
        return _run_one(w, build(CommConfig, cfg["comm"]), devices, supervised=bool(nanny),
                        previous_exit=previous_exit, service=service)
    except (ResourceSpecError, ConfigError) as error:
        print(f"sched-worker: error: {error}", file=sys.stderr)
        return 2


def _credentials(w: WorkerConfig) -> tuple[str, Any, Any]:
    """The token and the client and server TLS contexts, or a ConfigError saying what is wrong."""
    from ..auth import load_token
    from ..daemon import ssl_contexts

    return (load_token(token_file=w.token_file), ssl_contexts(w.tls, server=False),
            ssl_contexts(w.tls, server=True))


def _advertised(resources: Resources, devices) -> tuple[Resources, tuple[int, ...]]:
    """What a worker with ``devices`` offers, and the device indices behind its GPU resource."""
    resources = resources_with_gpus(resources, devices)
    indices = ledger_devices(resources, devices)
    return with_gpu_memory(resources, [d for d in devices if d.index in indices]), indices


def _run_one(w: WorkerConfig, comm: CommConfig, devices: tuple[GpuDevice, ...], *,
             supervised: bool, previous_exit: str | None, service: ServiceNotifier) -> int:
    from ..daemon import EXIT_CONFIG, install_signal_handlers
    from .server import Worker, WorkerSetup

    token, ssl_client, ssl_server = _credentials(w)
    resources, indices = _advertised(Resources.parse(w.resources), devices)
    setup = WorkerSetup(
        token=token, nthreads=w.nthreads or default_nthreads(), resources=resources,
        gpus=tuple(device for device in devices if device.index in indices),
        ledger_indices=indices if devices else None, memory_limit=memory_limit(w.memory_limit, 1),
        ssl_client=ssl_client, ssl_server=ssl_server, previous_exit=previous_exit)

    async def main() -> int:
        worker = Worker(w, comm, setup)
        watchdog = service.start_watchdog()
        try:
            await worker.start()
        except OSError as error:  # a port taken, a scratch directory that cannot be made
            logger.error("Cannot start the worker: %s", error.strerror or error)
            shutil.rmtree(worker.local_directory, ignore_errors=True)
            return EXIT_CONFIG
        # Thread tasks run in this process and read its environment; the Worker tells its
        # child processes explicitly and leaves this one to the program that owns it. Done
        # before this coroutine yields: tasks come through the session, which starts after.
        os.environ.update(worker.task_variables())
        # Under a nanny this process dies with it: its GPU children then die with this one.
        install_signal_handlers(worker.drain, supervised=supervised, service=service)
        # Ready once started, not once registered (see above).
        worker.session.on_status = service.status
        service.ready(f"Started; connecting to the scheduler at {w.scheduler_address}")
        await worker.stopped.wait()
        watchdog.cancel()
        await worker.close()
        # A failure (logged with its traceback when it happened) exits 1: the nanny restarts
        # the process, as it does one that crashed.
        status = EXIT_CONFIG if worker.refusal else 1 if worker.failure else 0
        if not worker.state.is_idle():
            # Tasks on threads cannot be stopped, and the interpreter would wait for them at
            # exit, past the drain deadline: leave without them.
            logger.warning("Exiting with tasks still running on threads; they are abandoned")
            sys.stderr.flush()
            os._exit(status)
        return status

    return asyncio.run(main())


def _run_nanny(w: WorkerConfig, cfg: dict, devices: tuple[GpuDevice, ...],
               service: ServiceNotifier) -> int:
    from ..daemon import install_signal_handlers
    from .nanny import Nanny

    _credentials(w)
    commands = process_commands(w, cfg, devices)

    # A draining process gives its tasks drain_timeout, then its jobs their kill grace.
    deadline = w.drain_timeout + w.job_kill_grace + 5

    async def main() -> int:
        nanny = Nanny(commands, stop_deadline=deadline, service=service)

        async def drain() -> None:
            await nanny.stop(deadline=deadline)

        install_signal_handlers(drain, at_once=nanny.kill, service=service)
        watchdog = service.start_watchdog()
        status = await nanny.run()
        watchdog.cancel()
        return status

    return asyncio.run(main())


def process_commands(w: WorkerConfig, cfg: dict,
                     devices: tuple[GpuDevice, ...]) -> list[tuple[str, list[str], dict]]:
    """(name, command line, environment) of each worker process the nanny runs."""
    n = w.nworkers
    resources = Resources.parse(w.resources)
    shares = split_gpus(list(devices), n)
    check_division(resources, devices, shares)
    for share in shares:  # each process's share: a device named gpu<N> is in one of them
        ledger_devices(resources_with_gpus(resources, share), share, detected=bool(devices))
    env = {**os.environ, **_settings_env(cfg), NANNY_PID_ENV: str(os.getpid())}
    limit = memory_limit(w.memory_limit, n)
    commands = []
    for i, share in enumerate(shares):
        name = process_name(w.name, n, i)
        if w.job_directory and n > 1:  # one job directory per process: each locks its own
            env = {**env, setting_variable("worker.job_directory"): _literal(
                os.path.join(w.job_directory, name))}
        command = [sys.executable, "-m", "dsched.cli.worker", w.scheduler_address,
                   "--no-nanny", "--gpus", gpus_option(share),
                   "--log-level", w.log_level, "--host", w.host,
                   # A fixed port is the first of a range: process i serves on port + i.
                   "--port", str(w.port + i if w.port else 0),
                   "--memory-limit", str(limit) if limit else "none",
                   "--name", name]
        if resources:
            command += ["--resources", str(resources)]
        if w.nthreads:
            command += ["--nthreads", str(w.nthreads)]
        for option, value in (("--token-file", w.token_file),
                              ("--local-directory", w.local_directory),
                              ("--tls-cert", w.tls.cert), ("--tls-key", w.tls.key),
                              ("--tls-ca", w.tls.ca)):
            if value:
                command += [option, str(value)]
        commands.append((f"worker-{i}", command, env))
    return commands


def process_name(name: str | None, nworkers: int, i: int) -> str:
    """The name of the nanny's process ``i``. A process the nanny starts again keeps it (a new
    port would otherwise make it a new worker), so it finds its job records; without a name
    given, ``HOST-NANNYPID-I``, stable for the nanny's life."""
    if name:
        return name if nworkers == 1 else f"{name}-{i}"
    return f"{socket.gethostname()}-{os.getpid()}-{i}"


def _settings_env(cfg: dict) -> dict[str, str]:
    """The merged settings a worker process gets no option for, as ``SCHED_*`` variables.

    The nanny's config may come from a ``--config`` file that the processes it starts would
    not read; handing them the merged values keeps every process on the nanny's config.
    """
    env = {setting_variable(f"worker.{key}"): _literal(value)
           for key, value in cfg["worker"].items() if key not in _AS_OPTIONS}
    env.update({setting_variable(f"comm.{key}"): _literal(value)
                for key, value in cfg["comm"].items()})
    return env


#: The worker settings the nanny gives its processes as options; the rest go as variables.
_AS_OPTIONS = frozenset((
    "scheduler_address", "nanny", "nworkers", "gpus", "log_level", "host", "port",
    "memory_limit", "resources", "nthreads", "name", "token_file", "local_directory", "tls"))


def _literal(value) -> str:
    """``value`` as a TOML literal, as a ``SCHED_*`` variable is read (a tuple as a list)."""
    return "none" if value is None else repr(list(value) if isinstance(value, tuple) else value)

"""LocalCluster: a scheduler and workers as real processes on 127.0.0.1, for one machine.

The scheduler listens on a port the OS chooses and prints it, and so does its dashboard
(``dashboard_link``); the workers are ordinary ``sched-worker`` processes. A fresh random
token is handed to every process through ``SCHED_TOKEN``, so a LocalCluster needs no files
and no other user on the machine can submit to it. Worker settings not given as arguments
come from ``dsched.config`` in this process, ``dsched.config.set({"worker.resources.GPU":
2})`` included. ``prefetch`` sets the scheduler's ``scheduler.prefetch`` (resource-free
tasks queued on a worker beyond its threads): raise it for many tiny tasks. ``close()`` stops
everything it started, and a finalizer does the same if the program forgets.
"""

from __future__ import annotations

import asyncio
import os
import re
import select
import subprocess
import sys
import tempfile
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import config
from ..auth import generate_token
from ..environ import CUDA_VISIBLE_DEVICES_ENV, TOKEN_ENV, setting_variable
from ..resources import SCALE, Resources, check_offer
from ..worker.gpus import detect_gpus, gpus_option, load_nvml, split_gpus
from ..worker.ledger import GPU
from .bridge import running_loop

_LISTENING = re.compile(r"listening at (\S+)")
_DASHBOARD = re.compile(r"dashboard at (\S+)")


def _stop(processes: list[subprocess.Popen], timeout: float = 10.0) -> None:
    """SIGTERM the workers and wait, then the scheduler; kill what outlives ``timeout``."""
    for group in (processes[:-1], processes[-1:]):
        for process in group:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + timeout
        for process in group:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class LocalCluster:
    """A scheduler and ``n_workers`` workers on this machine, each in its own process."""

    def __init__(self, n_workers: int | None = None, threads_per_worker: int | None = None,
                 resources: Any = None, processes: bool = True, *, log_level: str = "warning",
                 gpus: str = "auto", timeout: float = 60.0, env: dict[str, str] | None = None,
                 prefetch: int | None = None):
        if not processes:
            raise NotImplementedError("LocalCluster runs workers as processes only "
                                      "(processes=True)")
        cpus = os.cpu_count() or 1
        self.n_workers = n_workers if n_workers is not None else max(1, min(4, cpus))
        self.threads_per_worker = threads_per_worker or max(1, cpus // max(self.n_workers, 1))
        # Checked by the worker's own rule, here: a worker that refuses its --resources would
        # only print its usage text, and the cluster would fail with a vaguer error later.
        self.resources = check_offer(Resources.parse(
            resources if resources is not None else config.get("worker.resources")))
        self.token = generate_token()
        self.log_level = log_level
        self.gpus = gpus
        self.timeout = timeout
        self._state_dir = tempfile.TemporaryDirectory(prefix="sched-local-")
        self._env = {**os.environ, **(env or {}), TOKEN_ENV: self.token}
        if prefetch is not None:  # for many tiny tasks: keep more queued on each worker
            self._env[setting_variable("scheduler.prefetch")] = str(int(prefetch))
        # The machine's GPUs, found once here and handed out so that no two workers share a
        # device (each worker would otherwise find and claim them all).
        found = () if gpus == "none" else detect_gpus(
            visible=self._env.get(CUDA_VISIBLE_DEVICES_ENV), select=gpus,
            backend=load_nvml(self._env)).devices
        self._machine_has_gpus = bool(found)
        self._unassigned_gpus = list(found)
        self.scheduler: subprocess.Popen | None = None
        #: The URL of the scheduler's dashboard (on a port the OS chose).
        self.dashboard_link: str | None = None
        self.workers: list[subprocess.Popen] = []
        # Every process, workers first so they go before the scheduler they report to.
        self._processes: list[subprocess.Popen] = []
        self._finalizer = weakref.finalize(self, _stop, self._processes, 5.0)
        try:
            self._start_scheduler()
            if self.n_workers:
                shares = split_gpus(self._unassigned_gpus, self.n_workers)
                self._unassigned_gpus = []
                for share in shares:
                    self.start_worker(wait=False, gpus=share)
            self.wait_for_workers(self.n_workers)
        except BaseException:
            self.close()
            raise

    def _start_scheduler(self) -> None:
        self.scheduler = subprocess.Popen(
            [sys.executable, "-m", "dsched.cli.scheduler", "--host", "127.0.0.1", "--port", "0",
             "--state-dir", self._state_dir.name, "--dashboard-port", "0",
             "--log-level", self.log_level],
            env=self._env, stdout=subprocess.PIPE, text=True,
        )
        self._processes.append(self.scheduler)
        assert self.scheduler.stdout is not None
        deadline = time.monotonic() + self.timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.scheduler.poll() is not None:
                raise RuntimeError("the local scheduler did not start (see its log above)")
            ready, _, _ = select.select([self.scheduler.stdout], [], [], remaining)
            if ready:
                line = self.scheduler.stdout.readline()
                dashboard = _DASHBOARD.search(line)
                if dashboard:  # on the listening line
                    self.dashboard_link = dashboard.group(1)
                match = _LISTENING.search(line)
                if match:
                    self.scheduler_address = match.group(1)
                    return

    def start_worker(self, resources: Any = None, nthreads: int | None = None,
                     name: str | None = None, wait: bool = True,
                     gpus: list | None = None) -> subprocess.Popen:
        """Start one more worker, optionally with its own resources (``"GPU=2"``).

        On a machine with GPUs, a worker whose resources name ``GPU=N`` takes N devices no
        other worker of this cluster holds (an error when fewer are left); without GPUs,
        ``GPU=N`` is abstract (devices 0..N-1 as far as tasks can tell).
        """
        spec = check_offer(Resources.parse(resources)) if resources is not None else self.resources
        if gpus is None:
            gpus = self._take_gpus(spec)
        index = len(self.workers)
        # On a machine without GPUs, "none" would have the worker say that GPUs were turned
        # off, which nobody did: let it find none and say why.
        option = gpus_option(gpus) if self._machine_has_gpus else self.gpus
        command = [sys.executable, "-m", "dsched.cli.worker", self.scheduler_address,
                   "--nthreads", str(nthreads or self.threads_per_worker),
                   "--name", name or f"local-{index}", "--gpus", option,
                   "--host", "127.0.0.1", "--log-level", self.log_level,
                   "--resources", str(spec),
                   # Job records under the cluster's own directory, not a machine-wide one
                   # that another cluster's "local-0" would also claim.
                   "--local-directory", self._state_dir.name]
        process = subprocess.Popen(command, env=self._env)
        self.workers.append(process)
        self._processes.insert(0, process)
        if wait:
            self.wait_for_workers(len(self.workers))
        return process

    def _take_gpus(self, spec: Resources) -> list:
        if not self._machine_has_gpus or GPU not in spec:
            return []
        units = spec[GPU]
        wanted = -(-units // SCALE)  # a fractional GPU resource still needs a whole device
        if wanted > len(self._unassigned_gpus):
            raise ValueError(f"a worker offering GPU={spec.quantity(GPU)} needs {wanted} GPU(s), "
                             f"but only {len(self._unassigned_gpus)} of this machine's are left")
        taken, self._unassigned_gpus = (self._unassigned_gpus[:wanted],
                                        self._unassigned_gpus[wanted:])
        return taken

    def wait_for_workers(self, n: int, timeout: float | None = None) -> None:
        """Block until ``n`` workers are registered with the scheduler."""
        def wait() -> None:
            asyncio.run(self._wait_for_workers(n, timeout or self.timeout))

        if running_loop() is None:
            return wait()
        # Called from a coroutine (a notebook, an async program): wait on a thread of its own.
        with ThreadPoolExecutor(1, thread_name_prefix="dsched-local-cluster") as pool:
            return pool.submit(wait).result()

    async def _wait_for_workers(self, n: int, timeout: float) -> None:
        from .client import AsyncClient

        deadline = time.monotonic() + timeout
        async with AsyncClient(self.scheduler_address, token=self.token, name="local-cluster") as c:
            # The scheduler says when enough have registered; a process of ours that exits
            # meanwhile is seen here, where the processes are.
            enough = asyncio.ensure_future(c.wait_for_workers(n))
            try:
                while not enough.done():
                    dead = [p.args for p in self._processes if p.poll() is not None]
                    if dead:
                        raise RuntimeError(f"a local process exited early: {dead[0]}")
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"fewer than {n} workers registered within {timeout}s")
                    await asyncio.wait((enough,), timeout=0.05)
                enough.result()
            finally:
                enough.cancel()
                await asyncio.gather(enough, return_exceptions=True)

    @property
    def address(self) -> str:
        return self.scheduler_address

    def close(self) -> None:
        """Stop the workers (they drain), then the scheduler."""
        self._finalizer()
        self._state_dir.cleanup()

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        address = getattr(self, "scheduler_address", "starting")
        return f"<LocalCluster {address}, {len(self.workers)} workers>"

"""The nanny that runs a ``sched-worker``'s worker processes (one, or ``--nworkers N``) and
keeps them up.

Each worker process registers with the scheduler on its own, with the resources given (applied
to each process separately) and its own share of the GPUs; the nanny only supervises. A process
that dies is restarted after a back-off that grows while it keeps dying quickly and resets once
it has stayed up; how it died is logged in words and handed to the process started next (in
``PREVIOUS_EXIT_ENV``), which tells the scheduler. A process that stops of its own accord (exit
0: it drained, or its scheduler stayed away past the death timeout) is not restarted; nor is one
that exits with ``EXIT_CONFIG`` (refused by the scheduler, or a configuration that cannot work):
the nanny then stops the others and ends with that status. ``stop()`` sends SIGTERM to every
process (they drain), waits up to a deadline, then kills what is left; ``kill()`` kills at once.

It makes no scheduling decisions and does not decide what its processes run: it is given their
command lines. The processes die with the nanny however it ends; they see to that themselves
(``lifeline.die_with_parent``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

import psutil

from ..daemon import EXIT_CONFIG
from .lifeline import describe_exit

logger = logging.getLogger(__name__)

#: How the previous process of a worker ended, in words, in the environment of the next one.
PREVIOUS_EXIT_ENV = "SCHED_PREVIOUS_EXIT"


@dataclass
class Child:
    """One supervised worker process and its restart history."""

    name: str
    command: list[str]
    env: dict[str, str]
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    started_at: float = 0.0
    backoff: float = 0.0
    ended: str = ""  # how its last process ended, in words; "" before any has


class Nanny:
    def __init__(
        self,
        commands: Sequence[tuple[str, Sequence[str], Mapping[str, str]]],
        *,
        min_backoff: float = 0.5,
        max_backoff: float = 30.0,
        stable_after: float = 30.0,
        stop_deadline: float = 30.0,
    ):
        self.children = [Child(name, list(cmd), dict(env)) for name, cmd, env in commands]
        self._min_backoff = min_backoff
        self._max_backoff = max_backoff
        self._stable_after = stable_after
        self._stop_deadline = stop_deadline
        self._stopping = asyncio.Event()
        self._status = 0

    async def run(self) -> int:
        """Supervise until :meth:`stop` or until no process is left to run; the exit status
        for the nanny: ``EXIT_CONFIG`` when a process ended with it, else 0."""
        supervisors = [asyncio.ensure_future(self._supervise(child)) for child in self.children]
        try:
            await asyncio.gather(*supervisors)
        finally:
            for supervisor in supervisors:
                supervisor.cancel()
        return self._status

    async def _start(self, child: Child) -> None:
        env = {**child.env, PREVIOUS_EXIT_ENV: child.ended} if child.ended else child.env
        child.process = await asyncio.create_subprocess_exec(*child.command, env=env)
        child.started_at = time.monotonic()
        logger.info("Started worker process %s (pid %d)", child.name, child.process.pid)

    async def _supervise(self, child: Child) -> None:
        while not self._stopping.is_set():
            await self._start(child)
            assert child.process is not None
            code = await child.process.wait()
            if self._stopping.is_set():
                return
            child.ended = f"worker process {child.name} (pid {child.process.pid}) " \
                          f"{describe_exit(code)}"
            if code == 0:
                logger.info("%s: it stopped of its own accord, so it is not restarted",
                            child.ended)
                return
            if code == EXIT_CONFIG:
                # The process has said why; starting it again would only fail again.
                logger.info("%s (refused, or a configuration that cannot work): stopping",
                            child.ended)
                self._status = EXIT_CONFIG
                await self.stop(self._stop_deadline)
                return
            lived = time.monotonic() - child.started_at
            if lived >= self._stable_after:
                child.backoff = 0.0
            child.backoff = min(self._max_backoff, max(self._min_backoff, child.backoff * 2))
            child.restarts += 1
            logger.warning("%s after %.1fs; restarting it in %.1fs", child.ended, lived,
                           child.backoff)
            try:
                await asyncio.wait_for(self._stopping.wait(), child.backoff)
            except asyncio.TimeoutError:
                pass

    async def stop(self, deadline: float = 30.0) -> None:
        """Stop every process: SIGTERM (drain), then SIGKILL after ``deadline`` seconds."""
        self._stopping.set()
        running = self._running()
        for process in running:
            _signal(process, signal.SIGTERM)
        if not running:
            return
        waits = asyncio.gather(*(process.wait() for process in running))
        try:
            await asyncio.wait_for(waits, deadline)
        except asyncio.TimeoutError:
            for process in running:
                _signal(process, signal.SIGKILL)
            await asyncio.gather(*(process.wait() for process in running))

    def kill(self) -> None:
        """Kill every process at once; return when they are dead (or after a few seconds).

        Synchronous, for a caller about to exit: once the nanny has exited, so have they.
        """
        self._stopping.set()
        running = self._running()
        for process in running:
            _signal(process, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while any(map(_alive, running)) and time.monotonic() < deadline:
            time.sleep(0.01)

    def pids(self) -> list[int]:
        return [process.pid for process in self._running()]

    def _running(self) -> list[asyncio.subprocess.Process]:
        return [c.process for c in self.children if c.process and c.process.returncode is None]


def _signal(process: asyncio.subprocess.Process, signum: int) -> None:
    try:
        os.kill(process.pid, signum)
    except ProcessLookupError:
        pass


def _alive(process: asyncio.subprocess.Process) -> bool:
    # Not reaped yet (the event loop reaps), but a zombie has stopped all the same.
    try:
        return psutil.Process(process.pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False

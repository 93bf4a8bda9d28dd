"""The nanny behind ``sched-worker --nworkers N``: starts N worker processes and keeps them up.

Each worker process registers with the scheduler on its own, with the resources given (applied
to each process separately) and its own share of the GPUs; the nanny only supervises. A process
that dies is restarted after a back-off that grows while it keeps dying quickly and resets once
it has stayed up. ``stop()`` sends SIGTERM to every process (they drain), waits up to a
deadline, then kills what is left.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

logger = logging.getLogger(__name__)


@dataclass
class Child:
    """One supervised worker process and its restart history."""

    name: str
    command: list[str]
    env: dict[str, str]
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    started_at: float = 0.0
    backoff: float = field(default=0.0)


class Nanny:
    def __init__(
        self,
        commands: Sequence[tuple[str, Sequence[str], Mapping[str, str]]],
        *,
        min_backoff: float = 0.5,
        max_backoff: float = 30.0,
        stable_after: float = 30.0,
    ):
        self.children = [Child(name, list(cmd), dict(env)) for name, cmd, env in commands]
        self._min_backoff = min_backoff
        self._max_backoff = max_backoff
        self._stable_after = stable_after
        self._stopping = asyncio.Event()

    async def run(self) -> int:
        """Supervise until :meth:`stop`; returns 0."""
        supervisors = [asyncio.ensure_future(self._supervise(child)) for child in self.children]
        try:
            await asyncio.gather(*supervisors)
        finally:
            for supervisor in supervisors:
                supervisor.cancel()
        return 0

    async def _start(self, child: Child) -> None:
        child.process = await asyncio.create_subprocess_exec(*child.command, env=child.env)
        child.started_at = time.monotonic()
        logger.info("Started worker process %s (pid %d)", child.name, child.process.pid)

    async def _supervise(self, child: Child) -> None:
        while not self._stopping.is_set():
            await self._start(child)
            assert child.process is not None
            code = await child.process.wait()
            if self._stopping.is_set():
                return
            lived = time.monotonic() - child.started_at
            if lived >= self._stable_after:
                child.backoff = 0.0
            child.backoff = min(self._max_backoff, max(self._min_backoff, child.backoff * 2))
            child.restarts += 1
            logger.warning(
                "Worker process %s exited with code %s after %.1fs; restarting in %.1fs",
                child.name, code, lived, child.backoff,
            )
            try:
                await asyncio.wait_for(self._stopping.wait(), child.backoff)
            except asyncio.TimeoutError:
                pass

    async def stop(self, deadline: float = 30.0, *, at_once: bool = False) -> None:
        """Stop every process: SIGTERM (drain), then SIGKILL after ``deadline`` seconds."""
        self._stopping.set()
        running = [c.process for c in self.children if c.process and c.process.returncode is None]
        for process in running:
            _signal(process, signal.SIGKILL if at_once else signal.SIGTERM)
        if not running:
            return
        waits = asyncio.gather(*(process.wait() for process in running))
        try:
            await asyncio.wait_for(waits, deadline)
        except asyncio.TimeoutError:
            for process in running:
                _signal(process, signal.SIGKILL)
            await asyncio.gather(*(process.wait() for process in running))

    def pids(self) -> list[int]:
        return [c.process.pid for c in self.children if c.process and c.process.returncode is None]


def _signal(process: asyncio.subprocess.Process, signum: int) -> None:
    try:
        os.kill(process.pid, signum)
    except ProcessLookupError:
        pass

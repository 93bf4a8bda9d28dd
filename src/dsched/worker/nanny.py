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

Under a service manager the nanny is the unit's main process, the one that may notify it. Its
processes notify the nanny instead (``NotifyRelay``), which tells the service manager it is
ready once every process has said so, and keeps one status line for them all.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
import tempfile
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

import psutil

from ..daemon import EXIT_CONFIG, ServiceNotifier
from ..environ import NOTIFY_SOCKET_ENV, PREVIOUS_EXIT_ENV
from .lifeline import describe_exit

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
    backoff: float = 0.0
    #: How its last process ended, "" before any has: "was killed by signal 9 (SIGKILL)", no
    #: subject, since the scheduler it is told to names the process itself ("... it was ...").
    ended: str = ""


class Nanny:
    def __init__(
        self,
        commands: Sequence[tuple[str, Sequence[str], Mapping[str, str]]],
        *,
        min_backoff: float = 0.5,
        max_backoff: float = 30.0,
        stable_after: float = 30.0,
        stop_deadline: float = 30.0,
        service: ServiceNotifier | None = None,
    ):
        self.children = [Child(name, list(cmd), dict(env)) for name, cmd, env in commands]
        self.relay: NotifyRelay | None = None
        if service is not None and service.socket_path:
            self.relay = NotifyRelay(service, [child.name for child in self.children])
        self._min_backoff = min_backoff
        self._max_backoff = max_backoff
        self._stable_after = stable_after
        self._stop_deadline = stop_deadline
        self._stopping = asyncio.Event()
        self._status = 0

    async def run(self) -> int:
        """Supervise until :meth:`stop` or until no process is left to run; the exit status
        for the nanny: ``EXIT_CONFIG`` when a process ended with it, else 0."""
        if self.relay is not None and not self.relay.open():
            self.relay = None
        supervisors = [asyncio.ensure_future(self._supervise(child)) for child in self.children]
        try:
            await asyncio.gather(*supervisors)
        finally:
            for supervisor in supervisors:
                supervisor.cancel()
            if self.relay is not None:
                self.relay.close()
        return self._status

    async def _start(self, child: Child) -> None:
        env = {**child.env, PREVIOUS_EXIT_ENV: child.ended} if child.ended else child.env
        if self.relay is not None:
            env = {**env, NOTIFY_SOCKET_ENV: self.relay.path(child.name)}
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
            child.ended = describe_exit(code)
            ended = f"worker process {child.name} (pid {child.process.pid}) {child.ended}"
            if code == 0:
                logger.info("%s: it stopped of its own accord, so it is not restarted", ended)
                self._note(child, "stopped of its own accord")
                return
            if code == EXIT_CONFIG:
                # The process has said why; starting it again would only fail again.
                logger.info("%s (refused, or a configuration that cannot work): stopping",
                            ended)
                self._note(child, "refused, or a configuration that cannot work")
                self._status = EXIT_CONFIG
                await self.stop(self._stop_deadline)
                return
            lived = time.monotonic() - child.started_at
            if lived >= self._stable_after:
                child.backoff = 0.0
            child.backoff = min(self._max_backoff, max(self._min_backoff, child.backoff * 2))
            child.restarts += 1
            logger.warning("%s after %.1fs; restarting it in %.1fs", ended, lived,
                           child.backoff)
            self._note(child, f"{describe_exit(code)}; restarting")
            try:
                await asyncio.wait_for(self._stopping.wait(), child.backoff)
            except asyncio.TimeoutError:
                pass

    def _note(self, child: Child, status: str) -> None:
        if self.relay is not None:
            self.relay.note(child.name, status)

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


class NotifyRelay:
    """Where a nanny's processes send their service notifications, and what the nanny makes of
    them: one datagram socket per process, in a private directory (``path(name)`` is its
    ``NOTIFY_SOCKET``). The service manager hears ``READY=1`` once every process has said it
    (once only: a restarted process does not make the unit ready again), and one status line
    for them all. Other fields (a process's ``STOPPING=1``) stay with the nanny, which speaks
    for itself on those.
    """

    def __init__(self, service: ServiceNotifier, names: Sequence[str]):
        self.service = service
        self.names = list(names)
        self.statuses = {name: "starting" for name in self.names}
        self._ready: set[str] = set()
        self._announced = False
        self._directory = ""
        self._sockets: list[socket.socket] = []

    def path(self, name: str) -> str:
        return os.path.join(self._directory, name)

    def open(self) -> bool:
        """Bind the sockets and read them on the running loop; whether that could be done.
        If not, say so and tell the service manager the nanny is ready now: its processes
        then get no socket and stay mute."""
        loop = asyncio.get_running_loop()
        try:
            self._directory = tempfile.mkdtemp(prefix="sched-nanny-")
            for name in self.names:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sockets.append(sock)
                sock.setblocking(False)
                sock.bind(self.path(name))
                loop.add_reader(sock.fileno(), self._receive, name, sock)
        except OSError as error:
            logger.warning("Cannot relay the worker processes' notifications (%s); telling the "
                           "service manager the worker is ready now", error)
            self.close()
            self.service.ready("Started; the worker processes' status is not relayed")
            return False
        return True

    def close(self) -> None:
        loop = asyncio.get_running_loop()
        for sock in self._sockets:
            if sock.fileno() >= 0:
                loop.remove_reader(sock.fileno())
            sock.close()
        self._sockets.clear()
        if self._directory:
            shutil.rmtree(self._directory, ignore_errors=True)

    def _receive(self, name: str, sock: socket.socket) -> None:
        while True:
            try:
                message = sock.recv(4096)
            except (BlockingIOError, InterruptedError):
                return
            self.take(name, message)

    def take(self, name: str, message: bytes) -> None:
        """One notification from the process ``name``."""
        fields = dict(line.split("=", 1) for line in
                      message.decode("utf-8", "replace").splitlines() if "=" in line)
        if fields.get("READY") == "1":
            self._ready.add(name)
        if "STATUS" in fields:
            self.statuses[name] = fields["STATUS"]
        if "READY" in fields or "STATUS" in fields:
            self._tell()

    def note(self, name: str, status: str) -> None:
        """The nanny's own word on a process (it died, it is being restarted)."""
        self.statuses[name] = status
        self._tell()

    def status_line(self) -> str:
        if len(self.names) == 1:
            return self.statuses[self.names[0]]
        return "; ".join(f"{name}: {self.statuses[name]}" for name in self.names)

    def _tell(self) -> None:
        if not self._announced and self._ready.issuperset(self.names):
            self._announced = True
            self.service.ready(self.status_line())
        else:
            self.service.status(self.status_line())

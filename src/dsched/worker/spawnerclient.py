"""The worker's side of its job spawner (``jobspawner``): ``Spawner`` starts the spawner process,
sends it a request per attempt and hands back a ``Spawned`` (the supervisor's pid, our ends of
its pipes, its end). Kept apart from ``jobspawner`` so that the spawner process, whose memory each
supervisor copies, loads no asyncio.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import signal
import socket
import sys
from typing import Any, Callable

from .jobspawner import FDS_PER_REQUEST, MAX_MESSAGE
from .sparesupervisor import DONE

logger = logging.getLogger("dsched.worker")


class OrderPipe:
    """A supervisor's stdin, our end: each line is written at once (a few bytes into a pipe the
    supervisor reads as they come), and what the pipe cannot take yet once it can."""

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop):
        os.set_blocking(fd, False)
        self.fd, self._loop, self._pending = fd, loop, b""

    def is_closing(self) -> bool:
        return self.fd < 0

    def write(self, data: bytes) -> None:
        if self.fd < 0:
            return
        if self._pending:
            self._pending += data
            return
        try:
            data = data[os.write(self.fd, data):]
        except BlockingIOError:
            pass
        except OSError:  # the supervisor closed its end: it is gone, or done with the attempt
            return self.close()
        if data:
            self._pending = data
            self._loop.add_writer(self.fd, self._flush)

    def _flush(self) -> None:
        try:
            self._pending = self._pending[os.write(self.fd, self._pending):]
        except BlockingIOError:
            return
        except OSError:
            return self.close()
        if not self._pending:
            self._loop.remove_writer(self.fd)

    def close(self) -> None:
        """End of file to the supervisor (what it was not sent yet is not sent)."""
        if self.fd >= 0:
            if self._pending:
                self._loop.remove_writer(self.fd)
            os.close(self.fd)
            self.fd, self._pending = -1, b""


class ReportPipe:
    """A supervisor's stdout, our end: its lines as they come (``async for``), until it closes
    it; the descriptor is closed then. A spare's last line, ``done`` (``sparesupervisor.DONE``),
    is not one of them: it calls ``on_done``."""

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop):
        os.set_blocking(fd, False)
        self.fd, self._loop = fd, loop
        self._lines: collections.deque[bytes] = collections.deque()
        self._partial = b""
        self._waiter: asyncio.Future | None = None
        self.on_done: Callable[[], None] | None = None
        loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            *lines, self._partial = (self._partial + data).split(b"\n")
            if lines and lines[-1] + b"\n" == DONE:
                del lines[-1]
                if self.on_done is not None:
                    self.on_done()
            self._lines.extend(line + b"\n" for line in lines)
        else:
            self._loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
            if self._partial:
                self._lines.append(self._partial)
                self._partial = b""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def __aiter__(self) -> ReportPipe:
        return self

    async def __anext__(self) -> bytes:
        while not self._lines:
            if self.fd < 0:
                raise StopAsyncIteration
            self._waiter = self._loop.create_future()
            await self._waiter
        return self._lines.popleft()

    async def read(self) -> bytes:
        """All it says until it closes its end."""
        return b"".join([line async for line in self])


class Spawned:
    """A supervisor the spawner forked: its pid, its pipes (``OrderPipe``, ``ReportPipe``),
    and its end."""

    def __init__(self, stdin: OrderPipe, stdout: ReportPipe):
        self.stdin, self.stdout = stdin, stdout
        self.pid: int | None = None  # once the spawner says it
        self.cgroup = ""  # the cgroup it runs its job in, once the spawner says it
        self._ended: asyncio.Future | None = None
        self.returncode: int | None = None
        #: A spare said it is done with the attempt (nothing of it is left; it keeps its
        #: cgroup for the next): its end, known without the spawner.
        self.done = False
        if stdout is not None:
            stdout.on_done = self._said_done

    def forked(self, pid: int, cgroup: str, ended: asyncio.Future) -> None:
        """The spawner said its ``pid`` and ``cgroup``; ``ended``: its end, as the spawner
        says it (or "done", said already, or later)."""
        self.pid, self.cgroup, self._ended = pid, cgroup, ended
        if self.done:  # said before the spawner's answer came
            self._said_done()

    def _said_done(self) -> None:
        self.done = True
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(0)

    async def wait(self) -> int | None:
        """Its exit status; None when the spawner went before it could say."""
        if self._ended is None:  # never forked, or the spawner went before it said
            return None
        # shielded: one waiter cancelled (its task group closing) must not cancel the end
        # another waits for (the runner's close)
        self.returncode = await asyncio.shield(self._ended)
        self.stdin.close()  # done with the attempt: no order is for it any more
        return self.returncode

    def kill(self) -> None:
        if self.pid is None:  # not known: its stdin, closed, ends it all the same
            self.stdin.close()
            return
        if self._ended is not None and self._ended.done():  # it may run another attempt now
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Spawner:
    """The worker's handle on its spawner process: ``await start()``, then ``await
    spawn(args, lock_fd)`` per attempt; ``close()`` at the end. ``env``: the environment of the
    spawner, and so of every supervisor and job (None: this process's)."""

    def __init__(self, env: dict[str, str] | None = None):
        self.env = env
        self._sock: socket.socket | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._ready: asyncio.Future | None = None  # True once it listens; False: gone
        self._pids: dict[str, asyncio.Future] = {}  # by record path, until the pid comes
        #: By attempt (its record's path), until its supervisor is done with it: it exited,
        #: or, a spare, went back to wait for the next attempt (``jobspawner._Spares``).
        self._ends: dict[str, asyncio.Future] = {}

    async def start(self) -> bool:
        """Start the spawner; False (and a line in the log) where it cannot be."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "dsched.worker.jobspawner", str(theirs.fileno()),
                str(os.getpid()), stdin=asyncio.subprocess.DEVNULL, pass_fds=(theirs.fileno(),),
                start_new_session=True, env=self.env)
        except OSError as error:
            ours.close()
            logger.warning("Cannot start the job spawner (%s); each job attempt starts its "
                           "supervisor as a program instead", error.strerror or error)
            return False
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        loop.add_reader(ours.fileno(), self._read)
        return True

    async def ready(self) -> bool:
        """Wait until the spawner listens (it imports the supervisor first, once); False when
        there is none. An attempt's arguments are made after this, so that the lease deadline
        it is given is the latest, not one that aged while the spawner started."""
        if self._sock is None or self._ready is None:
            return False
        return await asyncio.shield(self._ready)

    def prepare(self, cgroups: str, keep: int = 0) -> None:
        """Have the spawner keep a supervisor forked ahead of the next attempt, its cgroup
        named ``cgroups`` plus a number of the spawner's ("": none, not in cgroup mode), and
        keep up to ``keep`` more back from their attempts (the attempts run at once)."""
        if self._sock is not None:
            try:
                self._sock.send(json.dumps({"cgroups": cgroups, "keep": keep}).encode())
            except OSError:  # gone: found by its reader
                pass

    async def spawn(self, args: list[str], lock_fd: int,
                    opened: Callable[[Spawned], None]) -> Spawned:
        """Fork a supervisor with the arguments of ``jobsupervisor``'s command line (``args``:
        RECORD LOCK_FD KILL_GRACE LEASE_UNTIL CGROUP). ``opened`` gets its handle before the
        request is sent: what is written to its stdin from then on (a stop) is there before the
        supervisor looks, so a stop given while it is being forked is never missed. OSError
        when the request could not be sent or forked (nothing was started). Once sent, the
        supervisor may run even if the spawner goes before it says its pid (then None): its
        reports still come on its pipe, so an attempt is never started twice. Its cgroup is
        the one asked for (CGROUP), or the spare's it was handed to."""
        sock = self._sock
        if sock is None:
            raise OSError("the job spawner is not running")
        loop = asyncio.get_running_loop()
        key = args[0]
        orders_r, orders_w = os.pipe()
        reports_r, reports_w = os.pipe()
        # Our ends as plain descriptors on the loop, not asyncio's pipe transports and streams:
        # those cost a tenth of a millisecond of the worker's time an attempt.
        spawned = Spawned(OrderPipe(orders_w, loop), ReportPipe(reports_r, loop))
        try:  # the supervisor's ends go with the request (or nowhere)
            opened(spawned)
            waiting = self._pids[key] = loop.create_future()
            spawned.cgroup = args[4]
            try:
                socket.send_fds(sock, [json.dumps(args).encode()],
                                [orders_r, reports_w, lock_fd])
            except OSError:
                del self._pids[key]
                spawned.stdin.close()
                raise
        finally:
            os.close(orders_r)
            os.close(reports_w)
        try:
            said = await waiting  # (pid, cgroup), or None: the spawner went
        except OSError:  # it could not fork: nothing started
            spawned.stdin.close()
            raise
        except asyncio.CancelledError:  # its stdin ends: a supervisor, if started, ends its job
            spawned.stdin.close()
            raise
        if said is not None:
            spawned.forked(*said, self._ends.setdefault(key, loop.create_future()))
        return spawned

    def _read(self) -> None:
        sock = self._sock
        assert sock is not None
        while True:
            try:
                data = sock.recv(MAX_MESSAGE)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._lost()
                return
            message: dict[str, Any] = json.loads(data)
            if "ready" in message:
                if self._ready is not None and not self._ready.done():
                    self._ready.set_result(True)
            elif "pid" in message or "error" in message:
                pid = message.get("pid")
                if pid is not None:  # its end is awaited from now, even if the spawner goes
                    self._ends.setdefault(message["key"],
                                          asyncio.get_running_loop().create_future())
                waiting = self._pids.pop(message["key"], None)
                if waiting is not None and not waiting.done():
                    if pid is None:
                        waiting.set_exception(OSError(message["error"]))
                    else:
                        waiting.set_result((pid, message.get("cgroup", "")))
            else:  # awaited since its pid came (a spare's "done" may have settled it)
                ended = self._ends.get(message["key"])
                if ended is not None and not ended.done():
                    ended.set_result(message["code"])

    def _lost(self) -> None:
        """The spawner is gone: what waits for it hears so; the next attempt starts without."""
        sock, self._sock = self._sock, None
        if sock is not None:
            asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()
            logger.warning("The job spawner ended; job attempts start their supervisor as a "
                           "program from now on")
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(False)
        for waiting in self._pids.values():
            if not waiting.done():
                waiting.set_result(None)
        self._pids.clear()
        for ended in self._ends.values():
            if not ended.done():
                ended.set_result(None)

    def forget(self, key: str) -> None:
        """Attempt ``key`` (its record's path) is over: nothing more is awaited of it."""
        self._ends.pop(key, None)

    async def close(self) -> None:
        sock, self._sock = self._sock, None
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(False)
        if sock is not None:
            asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()  # end of file: the spawner ends
        if self._process is not None:
            try:
                await asyncio.wait_for(self._process.wait(), 5)
            except asyncio.TimeoutError:
                self._process.kill()
                await self._process.wait()
        self._process = None

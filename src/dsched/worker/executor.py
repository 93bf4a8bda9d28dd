"""Where the worker runs Python tasks: a thread pool, or pinned child processes for GPU tasks.

Tasks granted no GPU run on the worker's thread pool (``--nthreads`` wide) inside the worker
process, which itself sees no GPU. Tasks granted GPUs run in a child process (``child.py``)
started with ``CUDA_VISIBLE_DEVICES`` naming exactly their devices and
``CUDA_DEVICE_ORDER=PCI_BUS_ID``; an idle child for the same devices is reused, and a cancelled
task's child is killed with everything its task started. Each child leads a process group tied
to the worker's life by ``lifeline``: when the worker dies, however it dies, so do the children
and whatever their tasks started. What a task started in other sessions is found through the
child's cgroup in the worker's cgroup mode, else as the child's descendants (it is a child
subreaper; see ``containment``): a cancelled child is stopped first, so that it starts nothing
more while what it started is killed.

This is I/O: it holds no scheduling decisions, which live in ``WorkerState``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import queue
import signal
import sys
import threading
import time
from itertools import count
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .. import serialize
from ..gpu_ids import task_environment
from . import cgroups, containment, unpickling
from .child import HEADER
from .lifeline import Lifeline, describe_exit

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """How a task ended: ``value`` on success, else the exception's pickle and traceback."""

    ok: bool
    start: float
    stop: float
    value: Any = None
    exception: bytes = b""
    traceback: str = ""
    peak_memory: int = 0


class TaskKilled(Exception):
    """The task's process was killed (cancelled, or the worker is stopping)."""


class ThreadRunner:
    """Runs tasks on ``nthreads`` threads in the worker process.

    Finished tasks wake the event loop in batches: a thread that finds a wake-up already
    scheduled only appends its outcome, so a busy worker pays one loop wake-up (a self-pipe
    write and a context switch) per batch of tasks instead of one per task.
    """

    def __init__(self, nthreads: int):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._done: collections.deque = collections.deque()
        self._wake_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._functions: dict[bytes, Any] = {}
        self._threads = [threading.Thread(target=self._work, name=f"sched-task-{i}", daemon=True)
                         for i in range(nthreads)]
        for thread in self._threads:
            thread.start()

    def function(self, function_bytes: bytes) -> Any:
        function = self._functions.get(function_bytes)
        if function is None:
            if len(self._functions) >= 256:
                self._functions.clear()
            function = self._functions[function_bytes] = unpickling.loads(function_bytes)
        return function

    def submit(self, function_bytes: bytes, args: tuple, kwargs: dict,
               done: Callable[[Outcome], Any]) -> None:
        """Queue a call; ``done(outcome)`` runs on this event loop when it ends. No task or
        future per call: the worker's hot path is a callback."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        self._queue.put((done, function_bytes, args, kwargs))

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            done, function_bytes, args, kwargs = item
            self._done.append((done, self._call(function_bytes, args, kwargs)))
            if not self._wake_scheduled:
                self._wake_scheduled = True
                try:
                    self._loop.call_soon_threadsafe(self._deliver)
                except RuntimeError:  # the loop is closed: the worker is gone
                    return

    def _deliver(self) -> None:
        self._wake_scheduled = False  # before draining, so a later outcome schedules again
        finished = self._done
        while finished:
            done, outcome = finished.popleft()
            done(outcome)

    def _call(self, function_bytes: bytes, args: tuple, kwargs: dict) -> Outcome:
        start = time.time()
        try:
            value = self.function(function_bytes)(*args, **kwargs)
            return Outcome(True, start, time.time(), value=value)
        except BaseException as exc:  # the task's error is data to report
            payload, text = serialize.dumps_exception(exc)
            return Outcome(False, start, time.time(), exception=payload, traceback=text)

    def close(self) -> None:
        for _ in self._threads:
            self._queue.put(None)


class GpuChild:
    """One child process pinned to a set of devices; runs one task at a time."""

    def __init__(self, gpus: tuple[int, ...], process: asyncio.subprocess.Process,
                 cgroup: str = ""):
        self.gpus = gpus
        self.process = process
        self.cgroup = cgroup  # "" in subreaper mode: all is found from it, a subreaper
        self._sweeping: threading.Thread | None = None

    @classmethod
    async def start(cls, gpus: tuple[int, ...], base_env: Mapping[str, str],
                    lifeline: Lifeline, cgroup: str = "") -> "GpuChild":
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dsched.worker.child", *lifeline.arguments(),
            *((cgroup,) if cgroup else ()),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            env=task_environment(gpus, base_env), start_new_session=True,
            pass_fds=(lifeline.fd,),
        )
        return cls(gpus, process, cgroup)

    async def run(self, key: str, function_bytes: bytes, argument_bytes: bytes) -> Outcome:
        request = serialize.dumps((key, function_bytes, argument_bytes))
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(HEADER.pack(len(request)) + request)
            await self.process.stdin.drain()
            (length,) = HEADER.unpack(await self.process.stdout.readexactly(HEADER.size))
            reply = serialize.loads(await self.process.stdout.readexactly(length))
        except (asyncio.IncompleteReadError, ConnectionError, BrokenPipeError) as exc:
            raise TaskKilled(f"task process for GPUs {self.gpus} {await self.ended()}") from exc
        if reply[0] == "ok":
            _, result, start, stop, peak = reply
            return Outcome(True, start, stop, value=serialize.loads(result), peak_memory=peak)
        _, payload, text, start, stop, peak = reply
        return Outcome(False, start, stop, exception=payload, traceback=text, peak_memory=peak)

    async def ended(self) -> str:
        """How the process ended, in words, once it has; what it started goes with it."""
        try:
            code = await asyncio.wait_for(self.process.wait(), 5)
        except asyncio.TimeoutError:  # its reply pipe broke, yet it runs on
            self.kill()
            code = await self.process.wait()
        self.kill()
        return describe_exit(code)

    def kill(self) -> None:
        """SIGKILL the process and all its task started: its group (which outlives the leader
        while members remain), and its cgroup or, without one, its descendants."""
        if self.cgroup:
            cgroups.kill_cgroup(self.cgroup)
        if self.process.returncode is None:  # also where it could not enter its cgroup
            # Stopped, it starts nothing more, and what its task orphans still comes to it:
            # killed in a thread (it waits for them to be gone), the process last.
            try:
                os.kill(self.process.pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
            if self._sweeping is None:
                self._sweeping = threading.Thread(target=self._sweep, daemon=True,
                                                  name="sched-gpu-child-kill")
                self._sweeping.start()
            return
        self._kill_group()

    def _sweep(self) -> None:
        pid = self.process.pid
        try:
            # Its guard is spared: it would end the group if this process died meanwhile.
            containment.sweep(pid, spare=containment.guards_of(pid))
        finally:
            self._kill_group()

    def _kill_group(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # gone (its number may be reused)
            pass

    async def close(self) -> None:
        """Kill it and all its tasks started, wait for that, and remove its cgroup."""
        self.kill()
        await self.process.wait()
        if self._sweeping is not None:
            await asyncio.to_thread(self._sweeping.join)
        if self.cgroup:
            await asyncio.to_thread(cgroups.remove_cgroup, self.cgroup)


class GpuProcessPool:
    """Child processes keyed by device set; idle ones are reused for the same devices."""

    def __init__(self, base_env: Mapping[str, str] | None = None, max_idle: int = 8):
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._lifeline = Lifeline()
        self._idle: dict[tuple[int, ...], list[GpuChild]] = {}
        self._busy: dict[str, GpuChild] = {}
        self._starting: set[str] = set()  # keys whose child is being started
        self._stop_when_started: set[str] = set()  # ... and which were killed meanwhile
        self._max_idle = max_idle
        #: The worker's mode (set once it is known): a cgroup for each child, or none.
        self.containment = containment.Containment(containment.SUBREAPER)
        self._numbers = count(1)
        self._closed: asyncio.Future | None = None

    def pid_of(self, key: str) -> int | None:
        """The pid of the process running the task ``key`` (None: none runs it)."""
        child = self._busy.get(key)
        return None if child is None else child.process.pid

    async def run(self, key: str, gpus: tuple[int, ...], function_bytes: bytes,
                  argument_bytes: bytes) -> Outcome:
        idle = self._idle.get(gpus, [])
        # A child can die while idle (killed for memory, or by a thread its last task left).
        while idle and idle[-1].process.returncode is not None:
            await idle.pop().close()  # its group may hold what its last task started
        if idle:
            child = idle.pop()
        else:
            self._starting.add(key)
            try:
                cgroup = self.containment.cgroup_for(f"gpu-{os.getpid()}-{next(self._numbers)}")
                child = await GpuChild.start(gpus, self._base_env, self._lifeline, cgroup)
            finally:
                self._starting.discard(key)
            if key in self._stop_when_started:  # killed while its child was starting
                self._stop_when_started.discard(key)
                await child.close()
                raise TaskKilled(f"task {key} was stopped before its process started")
        self._busy[key] = child
        try:
            outcome = await child.run(key, function_bytes, argument_bytes)
        except BaseException:
            await child.close()
            raise
        finally:
            self._busy.pop(key, None)
        if sum(len(children) for children in self._idle.values()) < self._max_idle:
            self._idle.setdefault(gpus, []).append(child)
        else:
            await child.close()
        return outcome

    def set_env(self, name: str, value: str) -> None:
        """Set a variable for children started from now on."""
        self._base_env[name] = value

    def kill(self, key: str) -> bool:
        """Kill the child running ``key``; its ``run`` then raises TaskKilled."""
        if key in self._starting:
            self._stop_when_started.add(key)
            return True
        child = self._busy.get(key)
        if child is None:
            return False
        child.kill()
        return True

    async def close(self) -> None:
        # Once, whoever asks (a drain and the worker's own end both do): a second caller waits
        # for the first, so that the worker does not exit while children's cgroups remain.
        if self._closed is None:
            self._closed = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closed)

    async def _close(self) -> None:
        children = list(self._busy.values()) + [c for cs in self._idle.values() for c in cs]
        self._idle.clear()
        for child in children:
            await child.close()
        self._lifeline.close()

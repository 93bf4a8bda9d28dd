"""Where the worker runs Python tasks: a thread pool, or pinned child processes for GPU tasks.

Tasks granted no GPU run on the worker's thread pool (``--nthreads`` wide) inside the worker
process, which itself sees no GPU. Tasks granted GPUs run in a child process (``child.py``)
started with ``CUDA_VISIBLE_DEVICES`` naming exactly their devices and
``CUDA_DEVICE_ORDER=PCI_BUS_ID``; an idle child for the same devices is reused, and a cancelled
task's child is killed with its whole process group. Each child leads a process group tied to
the worker's life by ``lifeline``: when the worker dies, however it dies, so do the children
and whatever their tasks started.

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
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .. import serialize
from ..gpu_ids import task_environment
from . import unpickling
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

    def __init__(self, gpus: tuple[int, ...], process: asyncio.subprocess.Process):
        self.gpus = gpus
        self.process = process

    @classmethod
    async def start(cls, gpus: tuple[int, ...], base_env: Mapping[str, str],
                    lifeline: Lifeline) -> "GpuChild":
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dsched.worker.child", *lifeline.arguments(),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            env=task_environment(gpus, base_env), start_new_session=True,
            pass_fds=(lifeline.fd,),
        )
        return cls(gpus, process)

    async def run(self, function_bytes: bytes, argument_bytes: bytes) -> Outcome:
        request = serialize.dumps((function_bytes, argument_bytes))
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
        """SIGKILL the process and its group (which outlives the leader while members remain)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # gone (its number may be reused)
            pass

    async def close(self) -> None:
        if self.process.returncode is None:
            self.kill()
            await self.process.wait()


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

    async def run(self, key: str, gpus: tuple[int, ...], function_bytes: bytes,
                  argument_bytes: bytes) -> Outcome:
        idle = self._idle.get(gpus, [])
        # A child can die while idle (killed for memory, or by a thread its last task left).
        while idle and idle[-1].process.returncode is not None:
            idle.pop().kill()  # its group may hold what its last task started
        if idle:
            child = idle.pop()
        else:
            self._starting.add(key)
            try:
                child = await GpuChild.start(gpus, self._base_env, self._lifeline)
            finally:
                self._starting.discard(key)
            if key in self._stop_when_started:  # killed while its child was starting
                self._stop_when_started.discard(key)
                await child.close()
                raise TaskKilled(f"task {key} was stopped before its process started")
        self._busy[key] = child
        try:
            outcome = await child.run(function_bytes, argument_bytes)
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
        children = list(self._busy.values()) + [c for cs in self._idle.values() for c in cs]
        self._idle.clear()
        for child in children:
            await child.close()
        self._lifeline.close()

"""What attempts do with their GPUs, as the worker's shell reports it: the use of each attempt
holding devices, sampled at each heartbeat; the jobs that hold theirs idle, warned of or
cancelled; and, with an attempt's end, what it did with its devices and whether it ran out of
their memory.

A ``GpuReports`` is held by the ``Worker`` (``server.py``): each heartbeat reads the devices
through it on the heartbeat's thread (``read``), which hands the fold to the loop (``sample``),
and each attempt's end passes through it. This is the I/O side: it reads the clock, the process
trees (``gpusample``) and the tails of job logs, and it logs and kills; what the figures mean
and when a job is idle is ``gpuuse``'s to decide, and whether an attempt ran out of memory is
``dsched.oom``'s.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from ..oom import TAIL, out_of_memory
from ..protocol import ops
from ..resources import SCALE
from .gpus import GpuDevice, GpuUsage, gpu_usage
from .gpusample import ProcessTree, samples
from .gpuuse import WARN, GpuUse
from .jobrecords import read_tail
from .state import WorkerState
from .task import RUNNING

logger = logging.getLogger("dsched.worker")


class GpuReports:
    """The GPU use of the attempts of ``state``'s worker, on its ``gpus``. ``job_pid`` and
    ``task_pid`` find the root pid of a job attempt and of a GPU task (None: none yet);
    ``kill_idle(key, reason)`` cancels a job found idle (with ``idle_action = "cancel"``)."""

    def __init__(self, state: WorkerState, gpus: tuple[GpuDevice, ...],
                 job_pid: Callable[[str], int | None], task_pid: Callable[[str], int | None],
                 kill_idle: Callable[[str, str], Any], idle_timeout: float | None = None,
                 idle_action: str = WARN, heartbeat_interval: float | None = None):
        self.state, self.gpus = state, gpus
        self._job_pid, self._task_pid, self._kill_idle = job_pid, task_pid, kill_idle
        #: What each attempt holding GPUs does with them, sampled at each heartbeat.
        #: An idle stretch ends where three heartbeats in a row were not sampled.
        gap = None if heartbeat_interval is None else 3 * heartbeat_interval
        self.use = GpuUse(idle_timeout, idle_action, max_gap=gap)
        #: The worker's loop, once it runs: where the samples are folded.
        self.loop: Any = None

    def read(self, worker_pid: int) -> list[GpuUsage]:
        """On the heartbeat's thread: the devices as NVML sees them (what processes the worker
        ``worker_pid`` did not start use of each included), with the process table where NVML
        lists processes; their fold into each attempt's use is handed to the loop."""
        processes: dict[int, dict[int, int]] = {}
        tree = ProcessTree()

        def ours() -> set[int]:
            tree.scan()
            return tree.under(worker_pid)

        usage = gpu_usage(tuple(gpu.index for gpu in self.gpus), ours=ours, processes=processes)
        if usage and self.loop is not None:
            if any(processes.values()):
                tree.scan()
            self.loop.call_soon_threadsafe(self.sample, usage, processes, tree)
        return usage

    def sample(self, usage: list, processes: dict[int, dict[int, int]],
               tree: ProcessTree) -> None:
        """Fold one look at the devices (read on the heartbeat's thread) into each attempt's
        use, on the loop; warn of (or cancel) the jobs that ``use`` finds idle. Attempts being
        stopped are sampled to their end too."""
        holders = {t.key: (t.gpus, self._job_pid(t.key) if t.job is not None
                           else self._task_pid(t.key))
                   for t in self.state.tasks.values() if t.gpus and t.state in RUNNING}
        self.use.retain(holders)
        if not usage or not holders:
            return
        jobs = {key for key in holders if self.state.tasks[key].job is not None}
        uuids = {gpu.index: gpu.uuid for gpu in self.gpus}
        for idle in self.use.sampled(time.monotonic(),
                                     samples(usage, processes, holders, uuids, tree), jobs):
            then = "cancelling it" if idle.cancel else "it is left running"
            logger.warning("Job attempt %s %s; %s", idle.key, idle.reason, then)
            if idle.cancel:
                self._kill_idle(idle.key, idle.reason)

    def job_ended(self, report: Any) -> Any:
        """What a job's supervisor says, as the state should hear it: an attempt's end with
        what it did with its GPUs, and whether it ran out of their memory; anything else as
        it is."""
        if type(report) is ops.AttemptEnded:
            failed = report.outcome == "failed"
            gpu, oom = self._ended(report.key, report.outcome,
                                   lambda: read_tail(report.log, TAIL) if failed else "")
            if gpu is not None or oom:
                report = ops.AttemptEnded(report.key, report.outcome, report.exit_code,
                                          report.error, report.log, report.started,
                                          report.ended, gpu, oom)
        return report

    def task_failed(self, key: str, traceback_text: str) -> tuple[dict | None, bool]:
        """What the failed task ``key`` did with its GPUs (None: never sampled), and whether
        it ran out of their memory: its traceback says so, or its peak while its device was
        full reached what it held."""
        return self._ended(key, "failed", lambda: traceback_text)

    def _ended(self, key: str, outcome: str,
               output: Callable[[], str]) -> tuple[dict | None, bool]:
        """What ``key`` did with its GPUs, and whether it ran out of their memory (``output``:
        the end of what it printed, read only where it held devices); its samples are
        forgotten."""
        held = self.held_memory(key)  # None: no device (a task on a thread), never out of one
        peak, gpu = self.use.full_peak(key), self.use.ended(key)
        return gpu, held is not None and out_of_memory(outcome, output(), peak, held)

    def held_memory(self, key: str) -> int | None:
        """Bytes of device memory ``key`` holds (None: it holds no device)."""
        parts = self.state.slots.ledger.book.held.get(key)
        if not parts:
            return None
        return sum(memory for _, _, memory in parts) // SCALE

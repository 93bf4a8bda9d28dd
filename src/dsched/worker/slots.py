"""The slots of one worker: what it can run at once (``nthreads`` threads, its resources, the
GPU devices behind its ``GPU`` resource), what of that is in use, and the ready queue of the
tasks that wait for it.

A running task holds one thread, its resources and, for ``GPU=N``, its devices from the ledger,
until it is freed. The queue is scanned in priority order, and a task that does not fit now
does not hold back the ones behind it. Which tasks are queued, and what starting one means, is
``WorkerState``'s; this module only counts and never lets a count go over what the worker
offers.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import bisect
from typing import Iterable, Mapping

from ..devices import asks_devices, format_memory
from ..resources import EMPTY, Resources, demand_error, format_units, named_devices
from .ledger import GPU, SCALE, GpuLedger
from .task import WorkerTaskState, WorkerTask


class Slots:
    """Threads, resources and devices, used and free, and the queue of READY tasks."""

    def __init__(self, nthreads: int, resources: Resources = EMPTY,
                 gpus: Iterable[int] | None = None):
        if nthreads < 1:
            raise ValueError(f"a worker needs at least one thread, not {nthreads}")
        units = resources.get(GPU)
        if gpus is None:
            self.ledger = GpuLedger.abstract(units)
        else:
            self.ledger = GpuLedger(gpus)
            if self.ledger.capacity != units:
                raise ValueError(
                    f"the worker offers GPU={format_units(units)} but was given devices "
                    f"{self.ledger.devices}: the two must agree"
                )
        self.nthreads = nthreads
        self.total = resources
        self.used: Resources = EMPTY
        self.free_threads = nthreads
        self.ready: list[tuple[int, int, str]] = []  # sorted queue entries of READY tasks

    @property
    def available(self) -> Resources:
        return self.total - self.used

    def never_fits(self, resources: Resources) -> str:
        """Why a task with these resources can never run here; "" when it can."""
        error = demand_error(resources)
        if error:
            return error
        if resources.fits(self.total):
            if asks_devices(resources) and not self.ledger.book.could_fit(resources):
                return f"no device of this worker could grant {resources} ({self.devices()})"
            return ""
        absent = resources.missing_names(self.total.names())
        if absent:
            return f"this worker has no {', '.join(absent)} (it offers {self.total or 'nothing'})"
        return f"the task needs {resources} but this worker offers only {self.total}"

    def devices(self) -> str:
        """Its devices and their memory, in words."""
        memory = self.ledger.book.memory
        return ", ".join(f"device {d}: {format_memory(m)}" if m else f"device {d}"
                         for d, m in memory.items()) or "no devices"

    def queue(self, task: WorkerTask) -> None:
        task.state = WorkerTaskState.READY
        bisect.insort(self.ready, task.queue_entry)

    def unqueue(self, task: WorkerTask) -> None:
        self.ready.remove(task.queue_entry)

    def start_ready(self, tasks: Mapping[str, WorkerTask],
                    jobs_may_start: bool) -> list[WorkerTask]:
        """Take a thread, resources and devices for each queued task that fits now, in queue
        order; the tasks taken, each EXECUTING with its ``gpus``. Jobs are passed over unless
        ``jobs_may_start``."""
        if not self.ready or not self.free_threads:
            return []
        started = []
        available = self.available
        waiting = []
        for entry in self.ready:
            task = tasks[entry[2]]
            gpus = None
            if self.free_threads and task.resources.fits(available) \
                    and (task.job is None or jobs_may_start):
                gpus = (self.ledger.allocate(task.key, task.resources, task.granted)
                        if asks_devices(task.resources) else ())
            if gpus is None:
                waiting.append(entry)  # does not fit now; later tasks may
                continue
            available = available - task.resources
            self.used = self.used + task.resources
            self.free_threads -= 1
            task.state = WorkerTaskState.EXECUTING
            # gpu<N> resources stand for device N: pinned like the ledger's grant.
            task.gpus = tuple(sorted({*gpus, *named_devices(task.resources)}))
            started.append(task)
        self.ready = waiting
        return started

    def free(self, task: WorkerTask) -> None:
        """Give back what the running ``task`` held."""
        self.used = self.used - task.resources
        self.free_threads += 1
        self.ledger.release(task.key)

    def all_free(self) -> bool:
        return (self.free_threads == self.nthreads and self.used.is_empty()
                and self.ledger.in_use() == 0)

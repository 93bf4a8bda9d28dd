"""A job or a Python task whose attempt ran out of GPU memory is tried once more, asking for
more of it.

Its worker says the attempt ran out (``AttemptEnded.oom``, ``dsched.oom``). A job that asked
for ``GPU_MEMORY`` is retried so by default, any other where it was submitted with
``--gpu-memory-retry`` (``JobSpec.gpu_memory_retry``; ``--no-gpu-memory-retry`` turns it
off). The retry's spec asks ``GPU_MEMORY`` per device as ``oom.larger`` sizes it from what the
attempt held of its devices (the device rule's part: ``dsched.devices``) and its measured peak,
and no longer asks for a retry of its own: one retry per job. The retry does not spend the
job's ``--retries``. Where no worker has a device larger than what the attempt held, there is
none, and the job fails as it would have; nor is there for work that asks no ``GPU`` or
``GPU_MEMORY`` (a named device, ``gpu0=1``, holds no memory of its own to grow).

A Python task is retried so only where it was submitted with ``gpu_memory_retry=True``
(``Task.oom_retry``): its worker says its attempt ran out (``TaskErred.oom``), and it is queued
again at once with the larger demand, sized by the same arithmetic (``larger_demand``), without
spending its ``retries`` (``task_retried``); never more than the largest device of the workers
it may run on. Once only: a task that fails again ends erred, the words of its retry before its
traceback (``Task.oom_retried``).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ..devices import GPU_MEMORY, asks_devices, format_memory
from ..jobs import JobSpec
from ..oom import larger
from ..protocol import ops
from ..resources import SCALE, Resources
from .actions import INFO
from .budget import RAISED
from .fit import allows

if TYPE_CHECKING:
    from .events import WorkerTaskErred
    from .graph import TaskGraph
    from .job import Job
    from .jobbook import JobBook
    from .task import Task
    from .worker import WorkerInfo


def wanted(spec: JobSpec) -> bool:
    """Whether ``spec`` is retried after running out of GPU memory."""
    if spec.gpu_memory_retry is not None:
        return spec.gpu_memory_retry
    return bool(spec.resources.get(GPU_MEMORY, 0))


def larger_demand(asked: Resources, gpus: Iterable[int], gpu: dict | None,
                  worker: WorkerInfo | None, workers: Iterable[WorkerInfo],
                  ) -> tuple[Resources, str, str] | None:
    """The demand of the retry of work that asked for ``asked``, held the devices ``gpus`` of
    ``worker`` and ran out of their memory (``gpu``: its worker's summary of its samples,
    ``worker/gpuuse.py``), with the words of what it did ("ran out of GPU memory (peak 19 GB,
    18 GB held)") and of what the retry asks ("GPU_MEMORY=36 GB"); None where no larger
    request can be met."""
    if not asks_devices(asked):  # a named device (gpu0=1) is not a grant of GPU memory
        return None
    gpus = tuple(gpus)
    book = worker.room.devices if worker is not None else None
    devices = [d for d in gpus if book is not None and d in book.memory]
    if devices:  # what the device rule gave it, per device
        held = sum(book.part(asked, d)[2] for d in devices) // len(devices) // SCALE
    else:
        held = asked.get(GPU_MEMORY, 0) // SCALE
    peak = (gpu or {}).get("mem_peak", 0)
    peak = peak // max(1, len(gpus)) if type(peak) is int else 0
    largest = max((w.room.devices.sizes[0] for w in workers
                   if w.room.devices is not None and w.room.devices.sizes), default=0) // SCALE
    more = larger(held, peak, largest)
    if more is None:
        return None
    units = dict(asked.to_wire())
    units[GPU_MEMORY] = more * SCALE
    seen = f"peak {format_memory(peak * SCALE)}, " if peak else ""
    return (Resources.from_wire(units),
            f"ran out of GPU memory ({seen}{format_memory(held * SCALE)} held)",
            f"{GPU_MEMORY}={format_memory(more * SCALE)}")


def larger_spec(job: Job, e: ops.AttemptEnded, worker: WorkerInfo | None,
                workers: Iterable[WorkerInfo]) -> tuple[JobSpec, str] | None:
    """The spec of ``job``'s retry after its attempt ``e`` ran out of GPU memory on
    ``worker``, and the words that say so; None where it gets none."""
    spec = job.spec
    if not (e.oom and wanted(spec)):
        return None
    retry = larger_demand(spec.resources, job.gpus, e.gpu, worker, workers)
    if retry is None:
        return None
    resources, did, asks = retry
    bigger = spec.replace(resources=resources, gpu_memory_retry=False)
    return bigger, f"attempt {job.attempt} {did}; retrying once with {asks}"


def retried(book: JobBook, job: Job, e: ops.AttemptEnded) -> bool:
    """Queue ``job`` again, with its larger spec, where its failed attempt ``e`` ran out of
    GPU memory and it gets a retry for that; whether it did."""
    retry = larger_spec(job, e, book.workers.get(job.address), book.workers.values())
    if retry is None:
        return False
    job.spec, words = retry
    book.out.log(INFO, "Job %d: %s", job.id, words)
    book.requeue(job, words)
    return True


def task_retried(graph: TaskGraph, t: Task, e: WorkerTaskErred, worker: WorkerInfo,
                 gpus: tuple[int, ...]) -> bool:
    """Queue ``t`` again at once, asking for more GPU memory, where its attempt ``e`` ran out
    of it on ``worker`` (holding the devices ``gpus``), it was submitted with
    ``gpu_memory_retry=True`` and it has not had that retry yet; whether it did. The retry
    does not spend its ``retries``."""
    if not (e.oom and t.oom_retry):
        return False
    allowed = [w for w in graph.workers.values() if allows(t.restrict, w)]  # its largest
    retry = larger_demand(t.resources, gpus, e.gpu, worker, allowed)
    if retry is None:
        return False
    resources, did, asks = retry
    t.oom_retry = False
    t.oom_retried = f"{did}; retried once with {asks}"
    t.resources = graph.placer.queue.shape(resources)  # before it is queued: its new shape
    graph.out.log(INFO, "Task %s %s; retrying once with %s", t.key, did, asks)
    graph.attempt_failed(t, RAISED, e.text, worker.name, counted=False)
    return True

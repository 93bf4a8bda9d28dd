"""The row each ended job attempt leaves in the journal's ``attempts`` table, and what ``sched
history`` shows of one: the GPUs it held, its GPU-hours and its efficiency.

Every attempt that ends gets one row, written in the transaction that records its end on the
job's row: one whose worker reported its end (``ended``: ``JobBook.ended``, or reconciliation
when its worker comes back), and one given up without a report (``lost``: its worker did not
return within its lease, or came back without it). An attempt handed back before it started
(refused, never started, stopped while being sent) ran nothing, and gets none. A row is made
before the job book acts on the end, so it holds what the attempt asked for and held (a retry
may ask for more). A lost attempt's end is not known here: the journal stamps the time of its
commit (``ended`` None).

The GPUs an attempt held (``gpus``): its ``GPU`` count or fraction, and each ``gpu<N>`` device
it named (its quantity, at most one); for ``GPU_MEMORY`` alone, the part of its device's memory
it asked, 0 where that memory is not known (abstract GPUs, a worker gone). GPU-hours are its
duration times that, over 3600. Its efficiency is its devices' average utilisation as its
worker sampled it (each sample the busiest of its devices, the whole device's figure: work
sharing the device counts too): the GPU-hours it used of those it held. None where it held no
GPU or was not sampled.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from ..devices import GPU_MEMORY
from ..jobs import ArraySpec
from ..jobstates import ENDED, JobState
from ..protocol import ops
from ..protocol.ints import INT_MAX, INT_MIN
from ..resources import GPU, SCALE, Resources, device_index

if TYPE_CHECKING:
    from ..devices import DeviceBook
    from .job import Job
    from .worker import WorkerInfo

#: The columns of a row, in the table's order.
COLUMNS = ("job", "attempt", "array_id", "array_index", "name", "state", "worker", "started",
           "ended", "exit_code", "error", "resources", "gpus", "gpu_uuids", "util_avg",
           "util_peak", "mem_avg", "mem_peak", "oom")

COMPLETED, FAILED, TIMEOUT = JobState.completed.value, JobState.failed.value, JobState.timeout.value
CANCELLED, LOST = JobState.cancelled.value, JobState.lost.value
_ENDED = frozenset(state.value for state in ENDED)


def ended(job: Job, e: ops.AttemptEnded, w: WorkerInfo | None) -> dict[str, Any]:
    """The row of ``job``'s attempt that ended as ``e`` says, on ``w``; made before the job
    book acts on it."""
    gpu = e.gpu if isinstance(e.gpu, Mapping) else {}
    sampled = (_size(gpu.get("samples")) or 0) > 0
    uuids = gpu.get("uuids")
    return _row(job, state=_state(job, e.outcome), w=w,
                started=_number(e.started if e.started is not None else job.start_time),
                ended=_number(e.ended) or None, exit_code=_code(e.exit_code), error=e.error,
                gpu_uuids=",".join(u for u in uuids if type(u) is str)
                if isinstance(uuids, (list, tuple)) else "",
                util_avg=_number(gpu.get("util_avg")) if sampled else None,
                util_peak=_number(gpu.get("util_peak")) if sampled else None,
                mem_avg=_size(gpu.get("mem_avg")) if sampled else None,
                mem_peak=_size(gpu.get("mem_peak")) if sampled else None,
                oom=e.oom is True)


def lost(job: Job, why: str, w: WorkerInfo | None = None) -> dict[str, Any]:
    """The row of ``job``'s attempt, given up without a report (``why``); ``w``: its worker,
    where it is connected. Its end is the time the journal commits it."""
    return _row(job, state=CANCELLED if job.cancelling else LOST, w=w,
                started=_number(job.start_time), ended=None, exit_code=None, error=why,
                gpu_uuids="", util_avg=None, util_peak=None, mem_avg=None, mem_peak=None,
                oom=False)


def _row(job: Job, *, state: str, w: WorkerInfo | None, **end: Any) -> dict[str, Any]:
    parent = job.parent
    resources = job.spec.resources
    book = w.room.devices if w is not None else None
    return {"job": job.id, "attempt": job.attempt,
            "array_id": parent.id if parent is not None else None,
            "array_index": (parent.spec.array.index(job.position)
                            if parent is not None else None),
            "name": job.spec.name, "state": state, "worker": job.worker,
            "resources": str(resources) if resources else "",
            "gpus": gpu_amount(resources, job.gpus, book), **end}


def _state(job: Job, outcome: str) -> str:
    """What ended the attempt, in the words of a job's end, as ``JobBook.attempt_ended``
    reads ``outcome``."""
    if outcome == COMPLETED:
        return COMPLETED
    if job.cancelling or outcome == "idle":
        return CANCELLED
    return outcome if outcome in (FAILED, TIMEOUT) else LOST


def gpu_amount(resources: Resources, devices: Sequence[int], book: DeviceBook | None) -> float:
    """The GPUs a demand of ``resources`` held, granted ``devices`` of ``book``."""
    units = resources.get(GPU, 0)
    units += sum(min(resources.get(name), SCALE) for name in resources.names()
                 if device_index(name) is not None)
    if units:
        return units / SCALE
    memory = resources.get(GPU_MEMORY, 0)
    size = book.memory.get(devices[0], 0) if memory and book is not None and devices else 0
    return min(1.0, memory / size) if size else 0.0


def _number(value: Any) -> float | None:
    """A figure from a worker: a finite number, else None."""
    if type(value) in (int, float) and math.isfinite(value):
        return float(value)
    return None


def _code(value: Any) -> int | None:
    """An exit code from a worker: a signed 64-bit integer, else None."""
    return value if type(value) is int and INT_MIN <= value <= INT_MAX else None


def _size(value: Any) -> int | None:
    """A count or a size from a worker: a whole number from 0 to what a journal's column
    holds (a signed 64-bit integer), else None."""
    number = _number(value)
    return int(number) if number is not None and 0 <= number <= INT_MAX else None


# -- a journal of layout 1 ----------------------------------------------------------------


def backfilled(rows: Iterable[Mapping]) -> list[dict[str, Any]]:
    """The rows a journal of layout 1 (job rows only) is given when it is upgraded: one for
    the last attempt of each ended job that started, as its job row tells it. No samples were
    kept; a job lost without an end time ended, as far as it says, when it started."""
    rows = list(rows)
    arrays = {row["id"]: ArraySpec.from_wire(row["spec"]["array"])  # once each
              for row in rows if row["spec"].get("array")}
    made = []
    for row in rows:
        if row["state"] not in _ENDED or not row.get("started") or "block" in row:
            continue
        spec, parent = row["spec"], row.get("parent")
        resources = Resources.from_wire(spec["resources"])
        started, end = row.get("start_time"), row.get("end_time")
        if end is None:
            end = started if started is not None else row["submitted"]
        made.append({
            "job": row["id"], "attempt": row["attempt"], "array_id": parent,
            "array_index": (arrays[parent].index(row["position"])
                            if parent in arrays else None),
            "name": spec.get("name") or "", "state": row["state"], "worker": row["worker"],
            "started": _number(started), "ended": _number(end),
            "exit_code": _code(row.get("exit_code")), "error": row.get("error") or "",
            "resources": str(resources) if resources else "",
            "gpus": gpu_amount(resources, row.get("gpus") or (), None), "gpu_uuids": "",
            "util_avg": None, "util_peak": None, "mem_avg": None, "mem_peak": None,
            "oom": False})
    return made


# -- what sched history shows -------------------------------------------------------------


def view(values: Sequence[Any]) -> dict[str, Any]:
    """The attempt as ``sched history --json`` shows it, from its row's ``values`` (in
    ``COLUMNS`` order): the row, and its ``duration``, ``gpu_hours`` and ``efficiency``."""
    row = dict(zip(COLUMNS, values))
    started, end = row["started"], row["ended"]
    duration = max(0.0, end - started) if started is not None and end is not None else None
    gpus, util = row["gpus"] or 0.0, row["util_avg"]
    return {"id": row.pop("job"), **row, "gpu_uuids": [u for u in row["gpu_uuids"].split(",")
                                                        if u],
            "oom": bool(row["oom"]), "duration": duration,
            "gpu_hours": (duration or 0.0) * gpus / 3600,
            "efficiency": util / 100 if util is not None and gpus else None}

"""A shell-command job as the scheduler keeps it: the Job record, its journal row, its view.

A Job is mutable and owned by the JobBook (``jobbook.py``). Its row is what the journal stores:
everything needed to rebuild the job after a restart, as plain msgpack-able values. Its view
is what ``sched status --json``, the client and the dashboard show.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ..jobs import JobSpec, job_key
from ..jobstates import ENDED, JobState, Reason
from ..resources import Resources

if TYPE_CHECKING:
    from .jobarray import JobArray
    from .task import Task

QUEUED, HELD, ASSIGNED, RUNNING = JobState.queued, JobState.held, JobState.assigned, JobState.running
#: States in which an attempt is on a worker (or may be: its worker is unreachable).
ON_WORKER = frozenset((ASSIGNED, RUNNING))


class Job:
    """One job. ``attempt`` numbers its latest dispatch (0: never dispatched); ``started`` says
    whether that attempt is known to have started. ``wait`` is the reason the book itself
    keeps a queued or held job out of the queue (held, dependency, recovering), or the reason
    an ended job carries (worker_lost); a job in the queue has a ``task``, and its reason is
    the placer's (see ``jobviews.job_view``). ``worker`` is the name of the worker of its
    attempt; ``deadline`` is set while that worker is unreachable: the time after which the
    attempt is given up for lost. ``cancelling``: a cancel was asked while it was on a
    worker."""

    __slots__ = (
        "id", "spec", "state", "wait", "detail", "submitted", "attempt", "started", "worker",
        "address", "lease", "gpus", "pid", "log", "start_time", "end_time", "exit_code",
        "error", "retries_left", "rejections", "cancelling", "task", "deadline", "deps_left",
        "order", "array", "parent", "position",
    )

    def __init__(self, id: int, spec: JobSpec, submitted: float):
        self.id = id
        self.spec = spec
        self.state = QUEUED
        self.wait: Reason | None = None
        self.detail = ""
        self.submitted = submitted
        self.attempt = 0
        self.started = False
        self.worker = ""
        self.address = ""
        self.lease = 0.0
        self.gpus: tuple[int, ...] = ()
        self.pid: int | None = None
        self.log = ""
        self.start_time: float | None = None
        self.end_time: float | None = None
        self.exit_code: int | None = None
        self.error = ""
        self.retries_left = spec.retries
        #: Its place in the ready queue, taken by its first attempt and kept by the next ones.
        self.order: int | None = None
        self.rejections = 0
        self.cancelling = False
        self.task: Task | None = None
        self.deadline: float | None = None
        self.deps_left: dict[int, None] = {}
        #: An array job's elements (``jobarray.JobArray``); None for any other job.
        self.array: JobArray | None = None
        #: An element's array job, and its place there (0, 1, ...); None for other jobs.
        self.parent: Job | None = None
        self.position = 0

    def payload(self) -> dict[str, Any]:
        """What a worker is told to run (the same for every attempt)."""
        spec = self.spec
        return {"command": list(spec.command), "env": dict(spec.env), "cwd": spec.cwd,
                "time_limit": spec.time_limit, "name": spec.name}

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def key(self) -> str:
        """The key of its latest attempt."""
        return job_key(self.id, self.attempt)

    def __repr__(self) -> str:
        return f"<Job {self.id} {self.state.value} attempt {self.attempt}>"

    def view(self) -> dict[str, Any]:
        """The job as ``sched status --json`` shows it (a queued job's reason, when the
        placer knows it, is added by ``jobviews.job_view``)."""
        spec = self.spec
        start, end = self.start_time, self.end_time
        return {
            "id": self.id, "name": spec.name, "state": self.state.value,
            "reason": self.wait.value if self.wait is not None else None,
            "detail": self.detail, "command": list(spec.command),
            "resources": str(spec.resources) if spec.resources else "",
            "priority": spec.priority, "attempt": self.attempt,
            "retries_left": self.retries_left, "requeue": spec.requeue,
            "after_ok": list(spec.after_ok), "after_any": list(spec.after_any),
            "time_limit": spec.time_limit, "worker": self.worker, "address": self.address,
            "gpus": list(self.gpus), "pid": self.pid, "log": self.log,
            "submitted": self.submitted, "started": start, "ended": end,
            "duration": (end - start) if start is not None and end is not None else None,
            "exit_code": self.exit_code, "error": self.error, "cancelling": self.cancelling,
            "array_id": self.parent.id if self.parent is not None else None,
            "array_index": (self.parent.spec.array.index(self.position)
                            if self.parent is not None else None),
        }

    # -- the journal row ------------------------------------------------------------------

    _ROW = ("state", "wait", "detail", "submitted", "attempt", "started", "worker", "address",
            "lease", "gpus", "pid", "log", "start_time", "end_time", "exit_code", "error",
            "retries_left", "rejections", "cancelling")

    def to_row(self) -> dict[str, Any]:
        row = {name: getattr(self, name) for name in self._ROW}
        row["id"], row["spec"] = self.id, self.spec.to_wire()
        row["state"] = self.state.value
        row["wait"] = self.wait.value if self.wait is not None else None
        row["gpus"] = list(self.gpus)
        if self.parent is not None:
            row["parent"], row["position"] = self.parent.id, self.position
        if self.array is not None:  # the numbers of its elements follow its own
            row["block"] = self.array.size
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any], shapes: dict | None = None) -> "Job":
        """The job of a journal row; ``shapes`` (a dict kept across calls) shares one
        Resources per distinct demand."""
        wire = row["spec"]
        units = wire["resources"]
        if shapes is None:
            resources = Resources.from_wire(units)
        else:
            shape = tuple(sorted(units.items()))
            resources = shapes.get(shape)
            if resources is None:
                resources = shapes[shape] = Resources.from_wire(units)
        job = cls(row["id"], JobSpec.trusted(wire, resources), row["submitted"])
        for name in cls._ROW:
            if name in row:
                setattr(job, name, row[name])
        job.state = _STATES[row["state"]]
        wait = row.get("wait")
        job.wait = _REASONS[wait] if wait else None
        job.gpus = tuple(row.get("gpus") or ())
        return job


_STATES = {state.value: state for state in JobState}
_REASONS = {reason.value: reason for reason in Reason}

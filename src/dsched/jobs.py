"""Shell-command jobs: the words everyone uses for them, shared by the scheduler, the worker,
the client and the ``sched`` command.

A job is a command line with resource demands, queued durably by the scheduler and run on a
worker in a process group of its own. Its ``state`` is one of a few lowercase words, and a job
that is not running carries one ``reason`` from a fixed vocabulary, with a detail in words
("waiting for gpu0 on w1, reserved for job 12"). Each run of a job is an *attempt*, numbered
from 1; the attempt number fences messages about older attempts.

Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, Mapping

from .errors import SchedError
from .protocol.fields import checked_ids, checked_int
from .resources import EMPTY, Resources


class JobState(str, Enum):
    queued = "queued"  #: waits to be dispatched (``reason`` says why)
    held = "held"  #: waits for ``sched release``
    assigned = "assigned"  #: an attempt is on its way to a worker, not yet started
    running = "running"  #: an attempt runs
    completed = "completed"  #: its command exited 0
    failed = "failed"  #: it exited non-zero (with no retries left) or could not start
    cancelled = "cancelled"
    timeout = "timeout"  #: it ran past its time limit and was killed
    lost = "lost"  #: its worker was lost while it ran, and it is not to be queued again

    def __str__(self) -> str:
        return self.value


#: States a job does not leave.
ENDED = frozenset((JobState.completed, JobState.failed, JobState.cancelled, JobState.timeout,
                   JobState.lost))


class Reason(str, Enum):
    """Why a job that is not running is not running."""

    resources = "resources"  #: what it needs is in use (a worker that has it exists)
    priority = "priority"  #: other jobs are ahead of it
    dependency = "dependency"  #: a job it runs after has not ended
    dependency_never_satisfied = "dependency_never_satisfied"  #: an --after-ok job failed
    held = "held"
    no_workers = "no_workers"  #: no worker that takes work is connected
    missing_resources = "missing_resources"  #: no worker defines a resource it needs
    too_large = "too_large"  #: it needs more than any one worker offers
    refused = "refused"  #: a worker refused its last attempt; the next waits out a back-off
    recovering = "recovering"  #: the scheduler restarted and waits for its workers
    worker_lost = "worker_lost"  #: the worker running it went away
    starting = "starting"  #: assigned: on its way to a worker that starts it at once

    def __str__(self) -> str:
        return self.value


class JobSpecError(SchedError, ValueError):
    """A job cannot be submitted as given (an empty command, a bad duration, ...)."""


@dataclass(frozen=True)
class JobSpec:
    """A job as a client submits it. ``submission`` is chosen by the client (a fresh random
    id): a submit retried after a lost reply names the same job, not a second one."""

    submission: str
    command: tuple[str, ...]
    resources: Resources = EMPTY
    name: str = ""
    priority: int = 0
    retries: int = 0
    after_ok: tuple[int, ...] = ()
    after_any: tuple[int, ...] = ()
    time_limit: float | None = None
    hold: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    requeue: bool = False

    def __post_init__(self) -> None:
        if not self.command or not all(isinstance(part, str) for part in self.command):
            raise JobSpecError("a job needs a command: a non-empty list of strings")
        try:  # numbers the wire cannot carry are refused here, where they were given
            checked_int("priority", self.priority)
            checked_int("retries", self.retries, 0)
            checked_ids("a job it runs after", (*self.after_ok, *self.after_any))
        except (TypeError, ValueError) as error:
            raise JobSpecError(str(error)) from None
        if self.time_limit is not None and not self.time_limit > 0:
            raise JobSpecError(f"a time limit must be positive, not {self.time_limit}")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.env.items()):
            raise JobSpecError("the environment of a job maps names to strings")

    def to_wire(self) -> dict[str, Any]:
        wire = {f.name: getattr(self, f.name) for f in fields(self)}
        wire["command"] = list(self.command)
        wire["resources"] = self.resources.to_wire()
        wire["after_ok"], wire["after_any"] = list(self.after_ok), list(self.after_any)
        wire["env"] = dict(self.env)
        return wire

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> "JobSpec":
        """Rebuild from ``to_wire``; raises JobSpecError (or ResourceSpecError) when a field is
        not of its kind."""
        try:
            return cls(
                submission=_text(wire["submission"]), command=tuple(wire["command"]),
                resources=Resources.from_wire(wire.get("resources") or {}),
                name=_text(wire.get("name", "")), priority=_int(wire.get("priority", 0)),
                retries=_int(wire.get("retries", 0)),
                after_ok=tuple(map(_int, wire.get("after_ok", ()))),
                after_any=tuple(map(_int, wire.get("after_any", ()))),
                time_limit=_number(wire.get("time_limit")), hold=bool(wire.get("hold", False)),
                env=dict(wire.get("env") or {}), cwd=wire.get("cwd"),
                requeue=bool(wire.get("requeue", False)))
        except SchedError:  # said already: JobSpecError, ResourceSpecError
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as error:  # a peer's shapes
            raise JobSpecError(f"a malformed job: {error}") from None


    @classmethod
    def trusted(cls, wire: Mapping[str, Any], resources: Resources) -> "JobSpec":
        """Rebuild from ``to_wire`` without checks (a journal row this scheduler wrote):
        reloading a journal of many jobs must be quick."""
        spec = object.__new__(cls)
        put = object.__setattr__
        for name, value in wire.items():
            put(spec, name, value)
        put(spec, "command", tuple(wire["command"]))
        put(spec, "after_ok", tuple(wire["after_ok"]))
        put(spec, "after_any", tuple(wire["after_any"]))
        put(spec, "resources", resources)
        return spec


def _text(v: Any) -> str:
    if type(v) is not str:
        raise TypeError(f"expected a string, got {v!r:.40}")
    return v


def _int(v: Any) -> int:
    if type(v) is not int:
        raise TypeError(f"expected an integer, got {v!r:.40}")
    return v


def _number(v: Any) -> float | None:
    if v is None:
        return None
    if type(v) not in (int, float):
        raise TypeError(f"expected a number, got {v!r:.40}")
    return float(v)


_DURATION = re.compile(r"(?:(\d+)-)?(?:(\d+):)?(?:(\d+):)?(\d+(?:\.\d*)?)$")
_UNIT = re.compile(r"(\d+(?:\.\d*)?)\s*([smhd])$")


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``15m``, ``2h``, ``1d``, ``1:30`` (m:s), ``2:00:00``
    (h:m:s) or ``1-12:00:00`` (days-h:m:s, as Slurm writes a time limit)."""
    text = text.strip()
    unit = _UNIT.match(text)
    if unit:
        return float(unit.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit.group(2)]
    match = _DURATION.match(text)
    if not match or not text:
        raise JobSpecError(f"invalid duration {text!r}: use seconds (90), a unit (15m, 2h, 1d) "
                           "or [days-]hours:minutes:seconds (2:00:00)")
    days, first, second, last = match.groups()
    parts = [float(p) for p in (first, second) if p is not None] + [float(last)]
    seconds = 0.0
    for part in parts:  # h:m:s, m:s or s
        seconds = seconds * 60 + part
    return seconds + (int(days) * 86400 if days else 0)


def exit_status(state: str, exit_code: int | None) -> int:
    """The status a program that ran the job in the foreground exits with, as a shell reports
    one: 0 if it completed, its command's exit code if that was not 0, 128 + N if a signal N
    killed it, 124 if it ran past its time limit (as ``timeout`` says so), else 1 (it could
    not start, was cancelled or lost)."""
    if state == JobState.completed:
        return 0
    if state == JobState.timeout:
        return 124
    if state == JobState.failed and exit_code:
        return exit_code if exit_code > 0 else 128 - exit_code
    return 1


def job_key(job: int, attempt: int) -> str:
    """The key of a job's attempt as a task of the scheduler and a worker."""
    return f"job-{job}.{attempt}"


def parse_job_key(key: str) -> tuple[int, int] | None:
    """``(job, attempt)`` of a key made by ``job_key``, else None."""
    if not key.startswith("job-"):
        return None
    job, dot, attempt = key[4:].partition(".")
    if not (dot and job.isdigit() and attempt.isdigit()):
        return None
    return int(job), int(attempt)

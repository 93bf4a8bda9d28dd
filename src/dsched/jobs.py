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

from .environ import ARRAY_ID_ENV, ARRAY_INDEX_ENV, ARRAY_SIZE_ENV
from .errors import SchedError
from .protocol.ints import INT_MAX, checked_ids, checked_int
from .resources import EMPTY, Resources

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:
    from typing import Any, Mapping


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
    idle = "idle"  #: cancelled by its worker: it held its GPUs at 0% for too long

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
    #: Retry once, with more GPU memory, after running out of it (None: where it asks some).
    gpu_memory_retry: bool | None = None
    #: An array job: one element per index (``ArraySpec``); None for a single job.
    array: "ArraySpec | None" = None

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
        if self.cwd is not None and not isinstance(self.cwd, str):
            raise JobSpecError(f"a job's directory is a path, not {self.cwd!r:.40}")
        # What no process can be started with is refused here, not found by the worker.
        if any("\0" in text for text in (*self.command, *self.env, *self.env.values(),
                                          self.cwd or "")):
            raise JobSpecError("a job's command, environment and directory hold no NUL character")
        if any(not name or "=" in name for name in self.env):
            raise JobSpecError("an environment variable's name is not empty and holds no '='")

    def to_wire(self) -> dict[str, Any]:
        """The spec as the wire and the journal carry it. Made once per spec (it is
        immutable): the scheduler writes it into the job's row at every change of the job;
        the dict returned is shared, and must not be changed."""
        wire = self.__dict__.get("_wire")
        if wire is None:
            wire = {name: getattr(self, name) for name in _SPEC_FIELDS}
            wire["command"] = list(self.command)
            wire["resources"] = self.resources.to_wire()
            wire["after_ok"], wire["after_any"] = list(self.after_ok), list(self.after_any)
            wire["env"] = dict(self.env)
            wire["array"] = self.array.to_wire() if self.array is not None else None
            object.__setattr__(self, "_wire", wire)
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
                requeue=bool(wire.get("requeue", False)),
                gpu_memory_retry=_flag(wire.get("gpu_memory_retry")),
                array=ArraySpec.from_wire(wire["array"]) if wire.get("array") else None)
        except SchedError:  # said already: JobSpecError, ResourceSpecError
            raise
        except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError) as error:
            raise JobSpecError(f"a malformed job: {error}") from None  # a peer's shapes

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
        array = wire.get("array")
        put(spec, "array", ArraySpec.from_wire(array) if array else None)
        return spec

    def element(self, array_id: int, position: int) -> "JobSpec":
        """The job that element ``position`` of this array (job ``array_id``) runs: its value
        in place of each ``{}`` in the command, and its index, the array's id and size in the
        environment."""
        array = self.array
        assert array is not None
        value = array.value(position)
        env = {**self.env, ARRAY_ID_ENV: str(array_id),
               ARRAY_INDEX_ENV: str(array.index(position)), ARRAY_SIZE_ENV: str(array.size)}
        spec = object.__new__(JobSpec)
        for name in _SPEC_FIELDS:  # not the wire made for the array's own spec
            object.__setattr__(spec, name, getattr(self, name))
        put = object.__setattr__
        put(spec, "submission", f"{self.submission}/{position}")
        put(spec, "command", tuple(part.replace("{}", value) for part in self.command))
        put(spec, "env", env)
        put(spec, "after_ok", ())
        put(spec, "after_any", ())
        put(spec, "hold", False)
        put(spec, "array", None)
        return spec


#: The names of JobSpec's fields, in order (``dataclasses.fields`` is slow per call).
_SPEC_FIELDS = tuple(f.name for f in fields(JobSpec))

#: The most elements one array may have.
MAX_ARRAY = 10_000_000
#: The patterns below are compiled where first used (``re`` caches them): not by every program
#: that imports this module.
_RANGE = r"(\d+)(?:-(\d+)(?::(\d+))?)?$"


@dataclass(frozen=True)
class ArraySpec:
    """The elements of an array job: index values (``ranges``, from ``--array 0-999%8``), or
    lines (``--array-file``: element i has index i, and its line replaces ``{}``); ``limit``:
    at most this many run at once (None: no limit). Element ``position`` (0, 1, ...) is job
    ``array id + 1 + position``: an array's ids are taken in one block when it is submitted,
    so an element has its number before it runs. Queued elements cost nothing but this."""

    ranges: tuple[range, ...] = ()
    lines: tuple[str, ...] = ()
    limit: int | None = None

    def __post_init__(self) -> None:
        if bool(self.ranges) == bool(self.lines):
            raise JobSpecError("an array has index ranges or lines, one of the two")
        for r in self.ranges:  # before any len(): a range past sys.maxsize has none
            if not isinstance(r, range) or r.start < 0 or r.step < 1 or r.stop <= r.start:
                raise JobSpecError(f"an array's indices are ranges of whole numbers from 0 "
                                   f"up, in steps of 1 or more, not {r!r}")
            if r.stop > INT_MAX:
                raise JobSpecError(f"an array's indices are below 2**63, not {r.stop - 1}")
            if r.stop - r.start > MAX_ARRAY * r.step:
                raise JobSpecError(f"an array has at most {MAX_ARRAY:,} elements: "
                                   f"{r.start}-{r.stop - 1} is more")
        if not 0 < self.size <= MAX_ARRAY:
            raise JobSpecError(f"an array has 1 to {MAX_ARRAY:,} elements, not {self.size:,}")
        if self.limit is not None and not 0 < self.limit <= MAX_ARRAY:
            raise JobSpecError(f"an array's limit (%N) must be positive, not {self.limit}")
        if not all(isinstance(line, str) and "\0" not in line for line in self.lines):
            raise JobSpecError("the lines of an array are strings, with no NUL character")
        ends = sorted((r.start, r[-1]) for r in self.ranges)
        for (_, end), (start, _) in zip(ends, ends[1:]):
            if start <= end:
                raise JobSpecError(f"index {start} is given twice in the array")
        starts, total = [], 0
        for r in self.ranges:
            starts.append(total)
            total += len(r)
        object.__setattr__(self, "_starts", tuple(starts))

    @classmethod
    def parse(cls, text: str) -> "ArraySpec":
        """``0-999``, ``1,3,5-7``, ``0-30:10`` (every 10th), each with an optional ``%N``."""
        spec, percent, limit = text.strip().partition("%")
        ranges = []
        for part in spec.split(","):
            match = re.match(_RANGE, part.strip())
            if not match:
                raise JobSpecError(f"invalid array {text!r}: use indices and ranges such as "
                                   "0-999, 1,3,5-7 or 0-30:10, with %N to run at most N at once")
            first, last, step = match.groups()
            last_index = int(last) if last is not None else int(first)
            if last_index < int(first) or (step is not None and int(step) < 1):
                raise JobSpecError(f"invalid array range {part.strip()!r}")
            ranges.append(range(int(first), last_index + 1, int(step or 1)))
        if percent and not limit.strip().isdigit():
            raise JobSpecError(f"invalid array limit {limit!r}: %N takes a whole number")
        return cls(ranges=tuple(ranges), limit=int(limit) if percent else None)

    @classmethod
    def of_lines(cls, lines: Any, limit: int | None = None) -> "ArraySpec":
        """One element per line (blank lines and lines starting with ``#`` skipped)."""
        kept = tuple(line.strip() for line in lines
                     if line.strip() and not line.lstrip().startswith("#"))
        if not kept:
            raise JobSpecError("an array file needs at least one line")
        return cls(lines=kept, limit=limit)

    @property
    def size(self) -> int:
        return len(self.lines) if self.lines else sum(len(r) for r in self.ranges)

    def index(self, position: int) -> int:
        """The index of element ``position`` (what ``SCHED_ARRAY_INDEX`` says)."""
        if self.lines:
            return position
        from bisect import bisect_right

        i = bisect_right(self._starts, position) - 1  # type: ignore[attr-defined]
        return self.ranges[i][position - self._starts[i]]  # type: ignore[attr-defined]

    def value(self, position: int) -> str:
        """What replaces ``{}`` in element ``position``'s command."""
        return self.lines[position] if self.lines else str(self.index(position))

    def position(self, index: int) -> int | None:
        """The element with index ``index`` (the 3 of ``12_3``), or None."""
        if self.lines:
            return index if 0 <= index < len(self.lines) else None
        for start, r in zip(self._starts, self.ranges):  # type: ignore[attr-defined]
            if index in r:
                return start + r.index(index)
        return None

    def text(self) -> str:
        """The indices as ``--array`` takes them (``lines`` for an array of lines)."""
        if self.lines:
            indices = f"0-{len(self.lines) - 1}"
        else:
            indices = ",".join(
                str(r.start) if len(r) == 1 else
                f"{r.start}-{r[-1]}" + (f":{r.step}" if r.step != 1 else "") for r in self.ranges)
        return indices + (f"%{self.limit}" if self.limit is not None else "")

    def to_wire(self) -> dict[str, Any]:
        return {"indices": self.text() if self.ranges else None, "lines": list(self.lines),
                "limit": self.limit}

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> "ArraySpec":
        limit = wire.get("limit")
        if limit is not None and type(limit) is not int:
            raise JobSpecError(f"an array's limit is a whole number, not {limit!r:.40}")
        if wire.get("indices"):
            spec = cls.parse(_text(wire["indices"]))
            return cls(ranges=spec.ranges, limit=limit)
        return cls(lines=tuple(wire.get("lines") or ()), limit=limit)


def parse_job_ref(text: str) -> int | tuple[int, int]:
    """A job as a user names it: ``12`` (a job, or a whole array), or ``12_3`` (the element
    of array 12 with index 3, as Slurm writes it)."""
    first, underscore, second = text.strip().partition("_")
    digits = first.isascii() and first.isdigit() and (
        not underscore or (second.isascii() and second.isdigit()))
    if digits and int(first) > 0:
        return (int(first), int(second)) if underscore else int(first)
    raise JobSpecError(f"invalid job {text!r}: a job number (12), or an array element (12_3)")


def _text(v: Any) -> str:
    if type(v) is not str:
        raise TypeError(f"expected a string, got {v!r:.40}")
    return v


def _int(v: Any) -> int:
    if type(v) is not int:
        raise TypeError(f"expected an integer, got {v!r:.40}")
    return v


def _flag(v: Any) -> bool | None:
    if v is not None and type(v) is not bool:
        raise TypeError(f"expected true, false or none, got {v!r:.40}")
    return v


def _number(v: Any) -> float | None:
    if v is None:
        return None
    if type(v) not in (int, float):
        raise TypeError(f"expected a number, got {v!r:.40}")
    return float(v)


_DURATION = r"(?:(\d+)-)?(?:(\d+):)?(?:(\d+):)?(\d+(?:\.\d*)?)$"
_UNIT = r"(\d+(?:\.\d*)?)\s*([smhd])$"


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``15m``, ``2h``, ``1d``, ``1:30`` (m:s), ``2:00:00``
    (h:m:s) or ``1-12:00:00`` (days-h:m:s, as Slurm writes a time limit)."""
    text = text.strip()
    unit = re.match(_UNIT, text)
    if unit:
        return float(unit.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit.group(2)]
    match = re.match(_DURATION, text)
    if not match or not text:
        raise JobSpecError(f"invalid duration {text!r}: use seconds (90), a unit (15m, 2h, 1d) "
                           "or [days-]hours:minutes:seconds (2:00:00)")
    days, first, second, last = match.groups()
    parts = [float(p) for p in (first, second) if p is not None] + [float(last)]
    seconds = 0.0
    for part in parts:  # h:m:s, m:s or s
        seconds = seconds * 60 + part
    return seconds + (int(days) * 86400 if days else 0)


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

"""Shell-command jobs: what a job is, shared by the scheduler, the worker, the client and the
``sched`` command.

A job is a command line with resource demands (its ``JobSpec``), queued durably by the
scheduler and run on a worker in a process group of its own. Each run of a job is an
*attempt*, numbered from 1; the attempt number fences messages about older attempts. The
words for its state and the reason it waits are in ``jobstates.py``.

Pure: no I/O.
"""

from __future__ import annotations

from .arrayspec import MAX_ARRAY, ArraySpec  # noqa: F401 - theirs too
from .environ import ARRAY_ID_ENV, ARRAY_INDEX_ENV, ARRAY_SIZE_ENV
from .errors import JobSpecError, SchedError
from .frozen import Frozen
from .protocol.ints import checked_ids, checked_int
from .resources import EMPTY, Resources

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:
    from typing import Any, Mapping


class JobSpec(Frozen):
    """A job as a client submits it. ``submission`` is chosen by the client (a fresh random
    id): a submit retried after a lost reply names the same job, not a second one.

    ``gpu_memory_retry``: retry once, with more GPU memory, after running out of it (None:
    where it asks some); ``array``: an array job, one element per index (``ArraySpec``),
    None for a single job."""

    FIELDS = ("submission", "command", "resources", "name", "priority", "retries", "after_ok",
              "after_any", "time_limit", "hold", "env", "cwd", "requeue", "gpu_memory_retry",
              "array")

    submission: str
    command: tuple[str, ...]
    resources: Resources
    name: str
    priority: int
    retries: int
    after_ok: tuple[int, ...]
    after_any: tuple[int, ...]
    time_limit: float | None
    hold: bool
    env: Mapping[str, str]
    cwd: str | None
    requeue: bool
    gpu_memory_retry: bool | None
    array: "ArraySpec | None"

    def __init__(self, submission: str, command: tuple[str, ...], resources: Resources = EMPTY,
                 name: str = "", priority: int = 0, retries: int = 0,
                 after_ok: tuple[int, ...] = (), after_any: tuple[int, ...] = (),
                 time_limit: float | None = None, hold: bool = False,
                 env: Mapping[str, str] | None = None, cwd: str | None = None,
                 requeue: bool = False, gpu_memory_retry: bool | None = None,
                 array: "ArraySpec | None" = None):
        self.__dict__.update(
            submission=submission, command=command, resources=resources, name=name,
            priority=priority, retries=retries, after_ok=after_ok, after_any=after_any,
            time_limit=time_limit, hold=hold, env={} if env is None else env, cwd=cwd,
            requeue=requeue, gpu_memory_retry=gpu_memory_retry, array=array)
        self._check()

    def _check(self) -> None:
        if not self.command or not all(isinstance(part, str) for part in self.command):
            raise JobSpecError("a job needs a command: a non-empty list of strings")
        if not self.command[0]:
            raise JobSpecError("a job's command starts with the program to run, not an empty "
                               "word")
        try:  # numbers the wire cannot carry are refused here, where they were given
            self.__dict__.update(  # plain ints (a numpy one is not sent as it is)
                priority=checked_int("priority", self.priority),
                retries=checked_int("retries", self.retries, 0),
                after_ok=checked_ids("a job it runs after", self.after_ok),
                after_any=checked_ids("a job it runs after", self.after_any))
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
            wire = {name: getattr(self, name) for name in self.FIELDS}
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
        for name in self.FIELDS:  # not the wire made for the array's own spec
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
    import re  # here: loading it costs a ``sched`` call that gives no duration about 9 ms

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

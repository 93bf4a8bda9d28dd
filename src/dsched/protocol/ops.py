"""The ops that daemons and clients exchange: one frozen dataclass per op, named for the
outcome or command it carries (``TaskFinished`` from the executor to the worker core, from the
worker to the scheduler and from the scheduler to a client alike).

Each class has its wire name (``OP``), ``to_wire()`` for the dict that msgpack sends, and
``from_wire(d)`` that rebuilds the op from a peer's dict and checks the type of every field: a
wrong one raises :class:`BadOp`, a RemoteProtocolError, so the shell answers or closes that
connection with the reason, as it does for a bad frame. The field kinds are declared once, by
the annotations, and both functions are generated from them as straight-line code, so the hot
path pays a few type checks per op and no reflection. ``decode(d)`` finds the class by name.

Pure: no I/O; payloads stay opaque bytes (nothing here unpickles).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, Mapping

from ..errors import RemoteProtocolError, ResourceSpecError
from ..resources import EMPTY, Resources
from .messages import OOB_THRESHOLD, Payload


class BadOp(RemoteProtocolError):
    """A peer sent an op of the wrong shape: unknown name, missing field, wrong type."""


#: Every op class by wire name.
OPS: dict[str, type] = {}
#: What the annotations ``Spec`` and ``Task`` stand for: a task's (function, arguments) bytes,
#: and a submitted task as a checked map (see ``_TASK_FIELDS``).
Spec = tuple
Task = dict

_NOT_GIVEN = object()
_FACTORY = object()  # a map field left out: a fresh empty one


# -- field kinds: check a value from the wire (and convert it), and turn one back ------------


def _fail(what: str, value: Any) -> BadOp:
    return BadOp(f"expected {what}, got {type(value).__name__} {value!r:.60}")


def _str(v: Any) -> str:
    if type(v) is str:
        return v
    raise _fail("a string", v)


def _int(v: Any) -> int:
    if type(v) is int:
        return v
    raise _fail("an integer", v)


def _float(v: Any) -> float:
    if type(v) is float or type(v) is int:
        return v
    raise _fail("a number", v)


def _bool(v: Any) -> bool:
    if type(v) is bool:
        return v
    raise _fail("true or false", v)


def _bytes(v: Any) -> bytes | memoryview:
    if isinstance(v, (bytes, memoryview)):
        return v
    raise _fail("bytes", v)


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def optional(v: Any) -> Any:
        return None if v is None else check(v)

    return optional


def _strs(v: Any) -> tuple[str, ...]:
    if type(v) is list or type(v) is tuple:
        for item in v:
            if type(item) is not str:
                raise _fail("a list of strings", v)
        return tuple(v)
    raise _fail("a list of strings", v)


def _ints(v: Any) -> tuple[int, ...]:
    if (type(v) is list or type(v) is tuple) and all(type(item) is int for item in v):
        return tuple(v)
    raise _fail("a list of integers", v)


def _str_int(v: Any) -> dict[str, int]:
    if type(v) is dict:
        for name, value in v.items():
            if type(name) is not str or type(value) is not int:
                raise _fail("a map of strings to integers", v)
        return v
    raise _fail("a map of strings to integers", v)


def _str_str(v: Any) -> dict[str, str]:
    if type(v) is dict:
        for name, value in v.items():
            if type(name) is not str or type(value) is not str:
                raise _fail("a map of strings to strings", v)
        return v
    raise _fail("a map of strings to strings", v)


def _str_strs(v: Any) -> dict[str, tuple[str, ...]]:
    if type(v) is dict:
        out = {}
        for name, value in v.items():
            if type(name) is not str:
                raise _fail("a map of strings to lists of strings", v)
            out[name] = _strs(value)
        return out
    raise _fail("a map of strings to lists of strings", v)


def _str_bytes(v: Any) -> dict[str, bytes | memoryview]:
    if type(v) is dict:
        for name, value in v.items():
            if type(name) is not str or not isinstance(value, (bytes, memoryview)):
                raise _fail("a map of strings to bytes", v)
        return v
    raise _fail("a map of strings to bytes", v)


def _map(v: Any) -> dict:
    if type(v) is dict:
        return v
    raise _fail("a map", v)


def _maps(v: Any) -> tuple[dict, ...]:
    if (type(v) is list or type(v) is tuple) and all(type(item) is dict for item in v):
        return tuple(v)
    raise _fail("a list of maps", v)


def _resources(v: Any) -> Resources:
    if type(v) is not dict:
        raise _fail("resource units", v)
    if not v:
        return EMPTY
    try:
        return Resources.from_wire(v)
    except ResourceSpecError as error:
        raise BadOp(str(error)) from None


def _spec(v: Any) -> tuple:
    """A task as the worker reads it: a function and its arguments, each opaque bytes."""
    if (type(v) is list or type(v) is tuple) and len(v) == 2 \
            and all(isinstance(part, (bytes, memoryview)) for part in v):
        return tuple(v)
    raise _fail("a task spec: two byte strings", v)


def _spec_to_wire(spec: tuple) -> list:
    """Large parts go out of band, written from the holder's memory."""
    return [Payload(part) if type(part) is not Payload and len(part) >= OOB_THRESHOLD else part
            for part in spec]


def _any(v: Any) -> Any:
    return v


#: The task fields of a ``submit`` op: name -> (check, default; _NOT_GIVEN when required).
_TASK_FIELDS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "key": (_str, _NOT_GIVEN), "spec": (_spec, _NOT_GIVEN), "prefix": (_str, ""),
    "dependencies": (_strs, ()), "resources": (_resources, EMPTY), "priority": (_int, 0),
    "retries": (_int, 0), "workers": (_optional(_strs), None), "wanted": (_bool, True),
}


def _task(v: Any) -> dict:
    """One task of a submit, checked field by field (unknown fields are refused)."""
    if type(v) is not dict:
        raise _fail("a task (a map)", v)
    checked = {}
    for name, (check, default) in _TASK_FIELDS.items():
        value = v.get(name, default)
        if value is _NOT_GIVEN:
            raise BadOp(f"a submitted task has no {name!r}")
        try:
            checked[name] = check(value) if value is not default else value
        except BadOp as error:
            raise BadOp(f"task field {name!r}: {error}") from None
    if not v.keys() <= _TASK_FIELDS.keys():
        unknown = sorted(v.keys() - _TASK_FIELDS.keys())
        raise BadOp(f"a submitted task has unknown fields {unknown}")
    return checked


def _task_to_wire(task: dict) -> dict:
    resources = task.get("resources")
    if isinstance(resources, Resources):
        task = {**task, "resources": resources.to_wire()}
    return task


def _tasks(v: Any) -> tuple[dict, ...]:
    if type(v) is list or type(v) is tuple:
        return tuple(map(_task, v))
    raise _fail("a list of tasks", v)


#: Annotation text -> (check from the wire, turn back for the wire; None: as it is).
_KINDS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any] | None]] = {
    "str": (_str, None), "int": (_int, None), "float": (_float, None), "bool": (_bool, None),
    "bytes": (_bytes, None), "str | None": (_optional(_str), None),
    "int | None": (_optional(_int), None), "float | None": (_optional(_float), None),
    "tuple[str, ...]": (_strs, list), "tuple[int, ...]": (_ints, list),
    "dict[str, int]": (_str_int, None),
    "dict[str, str]": (_str_str, None), "dict[str, bytes]": (_str_bytes, None),
    "dict[str, tuple[str, ...]]": (_str_strs, lambda m: {k: list(v) for k, v in m.items()}),
    "dict": (_map, None), "dict | None": (_optional(_map), None),
    "tuple[dict, ...]": (_maps, list), "Any": (_any, None),
    "Resources": (_resources, lambda r: r.to_wire()), "Spec": (_spec, _spec_to_wire),
    "tuple[Task, ...]": (_tasks, lambda tasks: [_task_to_wire(t) for t in tasks]),
}


def op(name: str) -> Callable[[type], type]:
    """Make the decorated class an op named ``name`` on the wire: a frozen dataclass with
    generated ``to_wire`` and ``from_wire``. A field whose default is its kind's empty value
    is left off the wire when it has that value, so small ops stay small."""

    def decorate(cls: type) -> type:
        cls = dataclass(frozen=True, slots=True)(cls)
        params, sets, args, out = [], [], [], []
        env = {"cls": cls, "BadOp": BadOp, "_FACTORY": _FACTORY}
        for f in fields(cls):
            n = f.name
            check, back = _KINDS[f.type]
            env[f"check_{n}"], env[f"back_{n}"] = check, back
            env[f"set_{n}"] = cls.__dict__[n].__set__  # the slot itself: frozen stays frozen
            value = f"back_{n}(self.{n})" if back else f"self.{n}"
            if f.default_factory is not MISSING:  # an empty map: left off the wire
                env[f"factory_{n}"] = f.default_factory
                params.append(f"{n}=_FACTORY")
                sets.append(f"set_{n}(self, factory_{n}() if {n} is _FACTORY else {n})")
                args.append(f"check_{n}(d[{n!r}]) if {n!r} in d else _FACTORY")
                out.append(f"if self.{n}: w[{n!r}] = {value}")
            elif f.default is MISSING:
                params.append(n)
                sets.append(f"set_{n}(self, {n})")
                args.append(f"check_{n}(d[{n!r}])")
                out.append(f"w[{n!r}] = {value}")
            else:
                env[f"default_{n}"] = f.default
                params.append(f"{n}=default_{n}")
                sets.append(f"set_{n}(self, {n})")
                args.append(f"check_{n}(d[{n!r}]) if {n!r} in d else default_{n}")
                out.append(f"if self.{n} != default_{n}: w[{n!r}] = {value}")
        source = "\n".join([
            # Frozen dataclasses set each field through object.__setattr__, three times
            # slower than writing the slot: this __init__ writes the slots.
            "def __init__(self, " + ", ".join(params) + "):",
            *(f"    {line}" for line in sets or ["pass"]),
            "def from_wire(d):",
            "    try:",
            "        return cls(" + ", ".join(args) + ")",
            "    except KeyError as error:",
            f"        raise BadOp(f'a {name} op without {{error}}') from None",
            "    except BadOp as error:",
            f"        raise BadOp(f'a {name} op: {{error}}') from None",
            "def to_wire(self):",
            f"    w = {{'op': {name!r}}}",
            *(f"    {line}" for line in out),
            "    return w",
        ])
        exec(compile(source, f"<op {name}>", "exec"), env)  # noqa: S102 - our own text
        cls.__init__ = env["__init__"]
        cls.OP = name
        cls.from_wire = staticmethod(env["from_wire"])
        cls.to_wire = env["to_wire"]
        OPS[name] = cls
        return cls

    return decorate


def decode(d: Mapping[str, Any]) -> Any:
    """The op a peer sent, checked; BadOp for an unknown name or a malformed field."""
    name = d.get("op")
    cls = OPS.get(name) if type(name) is str else None
    if cls is None:
        raise BadOp(f"unknown op {d.get('op')!r}")
    return cls.from_wire(d)


# -- a worker and the scheduler -----------------------------------------------------------------


@op("register")
class Register:
    """A worker's first op: who it is, what it offers, and what it kept from an earlier session
    (``held`` results by size, ``running`` tasks). ``previous_exit`` says how its previous
    process ended, when its nanny restarted it after a crash. ``attempts``: the job attempts
    it knows of, each an AttemptStarted (still running) or AttemptEnded (not yet acknowledged)
    as on the wire; ``job_lease``: its ``worker.job_lease``."""

    name: str
    address: str
    nthreads: int
    resources: Resources = EMPTY
    gpus: tuple[dict, ...] = ()
    pid: int | None = None
    host: str = ""
    memory_limit: int | None = None
    held: dict[str, int] = field(default_factory=dict)
    running: tuple[str, ...] = ()
    previous_exit: str | None = None
    attempts: tuple[dict, ...] = ()
    job_lease: float = 1800.0


@op("registered")
class Registered:
    address: str


@op("heartbeat")
class Heartbeat:
    """Load, memory and GPU use; ``sent``: the worker's monotonic clock when it sent this,
    echoed back in a Lease."""

    cpu: float = 0.0
    memory: int = 0
    memory_limit: int | None = None
    gpus: tuple[dict, ...] = ()
    executing: int = 0
    sent: float = 0.0


@op("lease")
class Lease:
    """The scheduler heard the heartbeat the worker sent at ``sent`` (its own clock): the
    worker's jobs may run until ``sent + job_lease`` without hearing more."""

    sent: float


@op("execute")
class Execute:
    """Run ``key`` now; ``who_has`` names the workers holding each input, ``nbytes`` sizes.
    A shell-command job's attempt carries ``job`` (its command, ``env``, ``cwd``,
    ``time_limit``; see ``dsched.jobs``) and an empty ``spec``."""

    key: str
    spec: Spec
    resources: Resources = EMPTY
    priority: int = 0
    who_has: dict[str, tuple[str, ...]] = field(default_factory=dict)
    nbytes: dict[str, int] = field(default_factory=dict)
    job: dict | None = None


@op("stop-task")
class StopTask:
    """Nobody needs ``key`` any more: stop it (its process group) if it runs."""

    key: str


@op("free")
class Free:
    """Nobody needs these results any more: drop them."""

    keys: tuple[str, ...]


@op("replicate")
class Replicate:
    """Keep a copy of the result ``key``, fetched from one of ``who_has``."""

    key: str
    who_has: tuple[str, ...]
    nbytes: int = 0


@op("retire")
class Retire:
    """A draining worker may leave now."""


@op("draining")
class Draining:
    """This worker takes no new work."""


@op("replicated")
class Replicated:
    key: str
    nbytes: int = 0


@op("replicate-failed")
class ReplicateFailed:
    key: str
    reason: str = ""


@op("unregister")
class Unregister:
    reason: str = "worker unregistered"


# -- outcomes of a task, end to end ---------------------------------------------------------------


@op("task-finished")
class TaskFinished:
    """``key`` finished. From a worker: its result is held there (``nbytes``), computed between
    ``start`` and ``stop`` (``duration``: the function alone; negative: not timed). To a
    client: the workers holding the result (``who_has``)."""

    key: str
    nbytes: int = 0
    start: float = 0.0
    stop: float = 0.0
    duration: float | None = None
    peak_memory: int = 0
    gpus: tuple[int, ...] = ()
    who_has: tuple[str, ...] = ()


@op("task-erred")
class TaskErred:
    """``key`` raised (``exception``: its pickle, opaque; ``text``: the traceback). To a
    client, ``error`` says how it failed (see the scheduler's actions)."""

    key: str
    exception: bytes = b""
    text: str = ""
    start: float | None = None
    stop: float | None = None
    error: str = ""


@op("task-stopped")
class TaskStopped:
    """A worker stopped ``key`` as asked (``StopTask``): its thread and resources are free."""

    key: str
    reason: str = ""


@op("task-rejected")
class TaskRejected:
    """A worker will not run ``key`` (it never fits there, or the worker is closing)."""

    key: str
    reason: str = ""


@op("missing-data")
class MissingData:
    """``key`` cannot start: its input ``dependency`` was on none of ``tried`` (``reason``:
    the last fetch error; ``permanent``: the result cannot travel at all)."""

    key: str
    dependency: str
    tried: tuple[str, ...] = ()
    reason: str = ""
    permanent: bool = False


@op("task-cancelled")
class TaskCancelled:
    """To a client: its cancel (of ``key`` or of a task ``key`` depends on) took effect."""

    key: str
    reason: str = ""


@op("result-moved")
class ResultMoved:
    """To a client: the result of ``key``, already reported finished, is held by ``who_has``
    now (copied off a draining worker, or computed again after a loss)."""

    key: str
    who_has: tuple[str, ...]


@op("task-waiting")
class TaskWaiting:
    """To a client: ``keys`` cannot run on any connected worker because of ``reason``; no
    reason means they can run again."""

    keys: tuple[str, ...]
    reason: str | None = None


# -- attempts of shell-command jobs, between a worker and the scheduler ----------------------


@op("attempt-started")
class AttemptStarted:
    """The attempt ``key`` (``job-<id>.<attempt>``) runs: recorded on the worker's disk, its
    process group led by ``pid``, its output going to ``log`` on that worker."""

    key: str
    pid: int
    log: str
    gpus: tuple[int, ...] = ()
    started: float = 0.0


@op("attempt-ended")
class AttemptEnded:
    """The attempt ``key`` ended: ``outcome`` is ``completed``, ``failed`` (non-zero exit, or
    it could not start), ``timeout``, ``cancelled`` or ``lost`` (killed when the worker lost the
    scheduler for longer than its lease, or its worker process died under it). The worker
    keeps this until the scheduler acknowledges it (``AttemptAck``)."""

    key: str
    outcome: str
    exit_code: int | None = None
    error: str = ""
    log: str = ""
    started: float | None = None
    ended: float = 0.0


@op("attempt-ack")
class AttemptAck:
    """The scheduler has recorded how these attempts ended: the worker may forget them."""

    keys: tuple[str, ...]


# -- a client and the scheduler -----------------------------------------------------------------


@op("welcome")
class Welcome:
    client: str


@op("submit")
class Submit:
    """Tasks to run; dependencies may point inside the batch (checked field by field)."""

    tasks: tuple[Task, ...]
    id: int | None = None


@op("cancel")
class Cancel:
    keys: tuple[str, ...]


@op("release")
class Release:
    keys: tuple[str, ...]


@op("info")
class Info:
    """Ask for the scheduler's view of workers and tasks; answered by a Reply."""

    id: int


@op("who-has")
class WhoHas:
    id: int
    keys: tuple[str, ...]


@op("submit-jobs")
class SubmitJobs:
    """Queue shell-command jobs (``dsched.jobs.JobSpec`` as dicts); answered, once the
    journal holds them, by a Reply whose value lists their ids in order."""

    id: int
    jobs: tuple[dict, ...]


@op("query-jobs")
class QueryJobs:
    """Jobs by id (``jobs``; none: all) and state (``states``; none: any), newest first, from
    ``offset``, at most ``limit``; answered by a Reply: ``{"jobs": [...], "total": n}``."""

    id: int
    jobs: tuple[int, ...] = ()
    states: tuple[str, ...] = ()
    offset: int = 0
    limit: int = 1000


@op("cancel-jobs")
class CancelJobs:
    """Answered by a Reply mapping each id (as text) to what became of it."""

    id: int
    jobs: tuple[int, ...]


@op("release-jobs")
class ReleaseJobs:
    """Let held jobs be dispatched; answered like CancelJobs."""

    id: int
    jobs: tuple[int, ...]


@op("watch-jobs")
class WatchJobs:
    """Tell this client (JobEnded) when each of ``jobs`` ends, or at once if it has."""

    jobs: tuple[int, ...]


@op("job-ended")
class JobEnded:
    """To a client: how a job ended (``job``: the job as ``sched status --json`` shows it)."""

    job: dict


@op("reply")
class Reply:
    """The answer to the request ``id``."""

    id: int
    value: Any = None


@op("error")
class Error:
    """A request (``id``) or a submit (``keys``) was refused, and why."""

    reason: str
    id: int | None = None
    keys: tuple[str, ...] = ()


# -- a worker's data port -----------------------------------------------------------------------


@op("get-log")
class GetLog:
    """Up to ``limit`` bytes of the log of the attempt ``key`` from ``offset``; answered by Log."""

    id: int
    key: str
    offset: int = 0
    limit: int = 1 << 20


@op("log")
class Log:
    """The bytes of a log from the offset asked; ``size``: its length now; ``ended``: the
    attempt has ended (nothing more will be written); ``error``: why there is none."""

    id: int
    data: bytes = b""
    size: int = 0
    ended: bool = False
    error: str = ""


@op("get-data")
class GetData:
    id: int
    keys: tuple[str, ...]


@op("data")
class Data:
    """The answer to GetData ``id``: pickled results (``data``), keys not held here
    (``missing``), results that cannot be sent and why (``errors``); ``more``: another
    message completes this answer."""

    id: int
    data: dict[str, bytes] = field(default_factory=dict)
    missing: tuple[str, ...] = ()
    errors: dict[str, str] = field(default_factory=dict)
    more: bool = False


__all__ = ["BadOp", "OPS", "decode", "op"] + sorted(
    cls.__name__ for cls in OPS.values())

"""How an op is declared, checked, encoded and decoded: the machinery under ``ops.py``.

``@op("wire-name")`` makes a class a frozen, slotted op class (as a frozen dataclass would be)
with ``OP``, ``to_wire()`` (the dict that msgpack sends) and ``from_wire(d)`` (the op rebuilt
from a peer's dict, every field's type checked). The field kinds are declared once, in
``_KINDS``, keyed by the annotation's text, and both functions are generated from them as
straight-line code, so the hot path pays a few type checks per op and no reflection. A wrong
field raises :class:`BadOp`, a RemoteProtocolError, so the shell answers or closes that
connection with the reason, as it does for a bad frame. ``decode(d)`` finds the class by name
in ``OPS``. It declares no op itself.

Pure: no I/O; payloads stay opaque bytes (nothing here unpickles).
"""

from __future__ import annotations

from ..errors import RemoteProtocolError, ResourceSpecError
from ..resources import EMPTY, Resources
from .ints import INT_MAX, INT_MIN, checked_ids, checked_int  # noqa: F401 - theirs
from .messages import OOB_THRESHOLD, Payload

TYPE_CHECKING = False  # typing is for type checkers only (see ``ints.py``)
if TYPE_CHECKING:
    from typing import Any, Callable, Mapping


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
#: A field declared without a default (or a default factory).
MISSING = object()


class Field:
    """A field of an op class, as ``op`` reads it from the declaration: its ``name``, its
    annotation's text (``type``: the kind), and its ``default`` or ``default_factory``
    (MISSING where none). Not ``dataclasses.Field``: loading ``dataclasses`` (and the
    ``inspect`` it loads) cost the ``sched`` command more than its op classes did."""

    __slots__ = ("name", "type", "default", "default_factory")

    def __init__(self, default: Any = MISSING, default_factory: Any = MISSING):
        self.name, self.type = "", ""
        self.default, self.default_factory = default, default_factory

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.type!r})"


def field(*, default_factory: Callable[[], Any]) -> Any:
    """An op field whose default is a fresh ``default_factory()`` (an empty map)."""
    return Field(default_factory=default_factory)


class FrozenOpError(AttributeError):
    """An op's fields cannot be assigned or deleted."""


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


def _str_map(is_value: Callable[[Any], bool], words: str) -> Callable[[Any], dict]:
    """A check of a map of strings to values that ``is_value`` accepts, passed on as it is."""
    def check(v: Any) -> dict:
        if type(v) is dict:
            for name, value in v.items():
                if type(name) is not str or not is_value(value):
                    raise _fail(words, v)
            return v
        raise _fail(words, v)

    return check


_str_int = _str_map(lambda value: type(value) is int, "a map of strings to integers")
_str_str = _str_map(lambda value: type(value) is str, "a map of strings to strings")
_str_bytes = _str_map(lambda value: isinstance(value, (bytes, memoryview)),
                      "a map of strings to bytes")


def _str_strs(v: Any) -> dict[str, tuple[str, ...]]:
    if type(v) is dict:
        out = {}
        for name, value in v.items():
            if type(name) is not str:
                raise _fail("a map of strings to lists of strings", v)
            out[name] = _strs(value)
        return out
    raise _fail("a map of strings to lists of strings", v)


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
    "gpu_memory_retry": (_bool, False),
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
    """Make the decorated class an op named ``name`` on the wire: a frozen, slotted class with
    the methods a frozen dataclass has (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``),
    its fields in ``FIELDS`` (name: ``Field``), ``to_wire`` and ``from_wire``. A field whose
    default is its kind's empty value is left off the wire when it has that value, so small
    ops stay small.

    Not ``dataclass()``: it compiles several methods per class as the class is made, which for
    every op came to most of the cost of importing the ops (the ``sched`` command loads them to
    send two). Here the class is made with its slots and stand-in methods, and the first use of
    each compiles the real one, once: a program pays for the methods of the ops it uses."""

    def decorate(cls: type) -> type:
        own = cls.__dict__
        names = list(own.get("__annotations__", {}))
        namespace = {key: value for key, value in own.items()
                     if key not in names and key not in ("__dict__", "__weakref__")}
        namespace.update(__slots__=tuple(names), __match_args__=tuple(names),
                         __setattr__=_frozen_setattr, __delattr__=_frozen_delattr,
                         __getstate__=_getstate, __setstate__=_setstate, OP=name)
        new = type(cls)(cls.__name__, cls.__bases__, namespace)
        declared = {}
        for n in names:
            value = own.get(n, MISSING)
            f = value if isinstance(value, Field) else Field(default=value)
            f.name, f.type = n, own["__annotations__"][n]
            declared[n] = f
        new.FIELDS = declared
        for method in METHODS:
            stand_in = _stand_in(new, method)
            setattr(new, method, staticmethod(stand_in) if method == "from_wire" else stand_in)
        OPS[name] = new
        return new

    return decorate


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenOpError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise FrozenOpError(f"cannot delete field {name!r}")


def _getstate(self: Any) -> list:
    return [getattr(self, name) for name in self.__slots__]


def _setstate(self: Any, state: list) -> None:
    for name, value in zip(self.__slots__, state):
        object.__setattr__(self, name, value)


def _stand_in(cls: type, method: str) -> Callable[..., Any]:
    """A method of ``cls`` that puts the real one in place, then calls it."""
    def first_call(*args: Any, **kwargs: Any) -> Any:  # (self, ...), or a static method's
        _build(cls, (method,))
        return getattr(cls, method)(*args, **kwargs)
    return first_call


#: The methods ``_build`` makes, and the names they are called by (``from_wire`` is static).
METHODS = ("__init__", "__repr__", "__eq__", "__hash__", "to_wire", "from_wire")


def _build(cls: type, methods: tuple[str, ...] = METHODS) -> None:
    """Compile these methods of the op class ``cls`` from its fields' kinds, in one piece of
    text, and put them on it (threads that race here each put the same methods): a ``sched``
    call compiles the four it uses, a daemon all of them at start (``build_all``)."""
    name = cls.OP
    params, sets, args, out = [], [], [], []
    env = {"cls": cls, "BadOp": BadOp, "_FACTORY": _FACTORY, "MISSING": MISSING}
    declared = list(cls.FIELDS.values())
    for f in declared:
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
    mine = ", ".join(f"self.{f.name}" for f in declared) + ("," if declared else "")
    theirs = ", ".join(f"other.{f.name}" for f in declared) + ("," if declared else "")
    shown = ", ".join(f"{f.name}={{self.{f.name}!r}}" for f in declared)
    sources = {
        # Writing the slots: a frozen class's __setattr__ refuses, and object.__setattr__
        # (what dataclass() uses) is three times slower.
        "__init__": ["def __init__(self, " + ", ".join(params) + "):",
                     *(f"    {line}" for line in sets or ["pass"])],
        "__repr__": ["def __repr__(self):", f"    return f'{{type(self).__qualname__}}({shown})'"],
        "__eq__": ["def __eq__(self, other):",
                   "    if other.__class__ is self.__class__:",
                   f"        return ({mine}) == ({theirs})",
                   "    return NotImplemented"],
        "__hash__": ["def __hash__(self):", f"    return hash(({mine}))"],
        "from_wire": ["def from_wire(d):",
                      "    try:",
                      "        return cls(" + ", ".join(args) + ")",
                      "    except KeyError as error:",
                      f"        raise BadOp(f'a {name} op without {{error}}') from None",
                      "    except BadOp as error:",
                      f"        raise BadOp(f'a {name} op: {{error}}') from None"],
        "to_wire": ["def to_wire(self):", f"    w = {{'op': {name!r}}}",
                    *(f"    {line}" for line in out), "    return w"],
    }
    source = "\n".join(line for method in methods for line in sources[method])
    exec(compile(source, f"<op {name}>", "exec"), env)  # noqa: S102 - our own text
    for method in methods:
        made = env[method]
        made.__qualname__ = f"{cls.__qualname__}.{method}"
        setattr(cls, method, staticmethod(made) if method == "from_wire" else made)


def build_all() -> None:
    """Compile the methods of every op class now, as a daemon does at start (some 20 ms): the
    first op of each kind it serves is not late. (A ``sched`` call compiles the few it sends.)"""
    from . import ops  # noqa: F401 - declaring its classes puts them in OPS

    for cls in OPS.values():
        _build(cls)


def decode(d: Mapping[str, Any]) -> Any:
    """The op a peer sent, checked; BadOp for an unknown name or a malformed field."""
    name = d.get("op")
    cls = OPS.get(name) if type(name) is str else None
    if cls is None:
        raise BadOp(f"unknown op {d.get('op')!r}")
    return cls.from_wire(d)

"""From a call to a task message: options, key, pickled function and arguments, dependencies.

Explicit ``submit`` arguments win over the ``annotate`` blocks in force; invalid options
raise here, in the caller's thread, before anything is sent. Futures in the arguments (also
inside lists, tuples, sets and dicts) become :class:`~dsched.serialize.TaskRef` placeholders
and dependencies. Arguments made only of plain values (numbers, strings, bytes, None and
containers of them) are pickled with the standard pickler, several times faster than
cloudpickle for the small arguments of a big ``map``; anything else goes through cloudpickle. The pickled function and arguments are :class:`~dsched.protocol.Payload` values,
so large ones travel out of band, in as many frames as they need.

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import itertools
import pickle
import uuid
from typing import Any, Callable, Iterable

from .. import serialize
from ..protocol import Payload, ops
from ..protocol.fields import checked_int
from ..protocol.messages import any_out_of_band
from ..resources import Resources, check_demand
from ..serialize import TaskRef
from .annotations import current as current_annotations

_SCALARS = frozenset({int, float, str, bytes, bool, type(None), complex, TaskRef})
#: Room a submit op needs around a task's function and arguments, within the message limit.
OP_ROOM = 64 * 2**10
_CONTAINERS = frozenset({list, tuple, set, frozenset})


def task_options(resources: Any = None, priority: Any = None, retries: Any = None,
                 workers: Any = None, gpu_memory_retry: Any = None) -> dict[str, Any]:
    """The wire options of a task: explicit values over annotations; defaults left out.

    Raises ResourceSpecError for a bad ``resources``, TypeError or ValueError for the rest.
    """
    annotations = current_annotations()
    demand = (check_demand(Resources.parse(resources)) if resources is not None
              else annotations.get("resources"))
    if priority is None:
        priority = annotations.get("priority", 0)
    if retries is None:
        retries = annotations.get("retries", 0)
    if workers is None:
        workers = annotations.get("workers")
    if gpu_memory_retry is None:
        gpu_memory_retry = annotations.get("gpu_memory_retry", False)
    options: dict[str, Any] = {}
    if demand is not None and not demand.is_empty():
        options["resources"] = demand.to_wire()
    priority, retries = checked_int("priority", priority), checked_int("retries", retries, 0)
    if priority:
        options["priority"] = priority
    if retries:
        options["retries"] = retries
    if workers is not None:
        names = [workers] if isinstance(workers, str) else list(workers)
        bad = [name for name in names if not isinstance(name, str)]
        if bad or not names:
            raise TypeError(f"workers must be a worker name or address, or a non-empty list "
                            f"of them, not {workers!r}")
        options["workers"] = names
    if type(gpu_memory_retry) is not bool:
        raise TypeError(f"gpu_memory_retry must be True or False, not {gpu_memory_retry!r:.40}")
    if gpu_memory_retry:
        options["gpu_memory_retry"] = True
    return options


def task_prefix(fn: Callable) -> str:
    """The name a task's key starts with: the function's name (``lambda`` for lambdas)."""
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return "lambda" if name == "<lambda>" else name


class TaskBuilder:
    """Builds the tasks of one ``submit`` or ``map`` call: one function, one set of options."""

    def __init__(self, fn: Callable, options: dict[str, Any], is_future: Callable[[Any], bool],
                 keys: "KeyMaker", prefix: str | None = None):
        if not callable(fn):
            raise TypeError(f"submit() and map() need a callable, not {type(fn).__name__}")
        self.options = options
        self.prefix = prefix or task_prefix(fn)
        self.function = serialize.dumps(fn)
        # One Payload for every task of a map: a message carrying many of them sends it once.
        self._function_payload = Payload(self.function)
        self._is_future = is_future
        self._keys = keys
        self._digest: Any = None

    def build(self, args: tuple, kwargs: dict, key: str | None = None,
              pure: bool = True) -> dict[str, Any]:
        """The task message for ``fn(*args, **kwargs)``; its ``key`` is given, or derived from
        the function, arguments and options (``pure``), or unique."""
        dependencies: dict[str, None] = {}
        if not kwargs and all(type(arg) in _SCALARS for arg in args):
            call, plain = (args, kwargs), True  # the common case of a big map: nothing to walk
        else:
            call, plain = self._replace_futures((args, kwargs), dependencies)
        arguments = (pickle.dumps(call, protocol=serialize.PICKLE_PROTOCOL) if plain
                     else serialize.dumps(call))
        if key is None:
            key = self._pure_key(arguments) if pure else self._keys.unique(self.prefix)
        elif not isinstance(key, str):
            raise TypeError(f"key must be a str, not {key!r}")
        task = {"key": key, "spec": [self._function_payload, Payload(arguments)],
                "prefix": self.prefix,
                **self.options}
        if dependencies:
            task["dependencies"] = list(dependencies)
        return task

    def _pure_key(self, arguments: bytes) -> str:
        if self._digest is None:
            self._digest = hashlib.sha1(self.function)
            self._digest.update(repr(sorted(self.options.items())).encode())
        digest = self._digest.copy()
        digest.update(arguments)
        return f"{self.prefix}-{digest.hexdigest()[:32]}"

    def _replace_futures(self, value: Any, found: dict[str, None]) -> tuple[Any, bool]:
        """``value`` with futures replaced by TaskRefs (the same object when it has none),
        and whether it holds only plain values."""
        kind = type(value)
        if kind in _SCALARS:
            return value, True
        if self._is_future(value):
            found[value.key] = None
            return TaskRef(value.key), True
        if kind in _CONTAINERS:
            plain, changed, items = True, False, []
            for item in value:
                new, item_plain = self._replace_futures(item, found)
                plain = plain and item_plain
                changed = changed or new is not item
                items.append(new)
            return (kind(items) if changed else value), plain
        if kind is dict:
            plain, changed, items = True, False, {}
            for name, item in value.items():
                new, item_plain = self._replace_futures(item, found)
                plain = plain and item_plain and type(name) in _SCALARS
                changed = changed or new is not item
                items[name] = new
            return (items if changed else value), plain
        return value, False


class KeyMaker:
    """Unique keys for impure calls: random per client, then a counter."""

    def __init__(self) -> None:
        self._base = uuid.uuid4().hex[:20]
        self._count = itertools.count()

    def unique(self, prefix: str) -> str:
        return f"{prefix}-{self._base}{next(self._count):012x}"


def map_keys(key: str | Iterable[str] | None, n: int | None) -> list[str | None] | str | None:
    """``map``'s ``key=``: a list of explicit keys, or a str used as the prefix of each key."""
    if key is None or isinstance(key, str):
        return key
    keys = list(key)
    if n is not None and len(keys) != n:
        raise ValueError(f"map() got {len(keys)} keys for {n} calls")
    return keys


def task_size(task: dict[str, Any], max_message_size: int) -> int:
    """The bytes a task's function and arguments take; more than fits in one message is an
    error here, in the caller's thread, before anything is sent."""
    size = sum(len(part) for part in task["spec"])
    if size > max_message_size - OP_ROOM:
        raise ValueError(
            f"task {task['key']}: its function and arguments take {size} bytes, more than fits "
            f"in the message limit of {max_message_size} bytes (comm.max_message_size); load "
            "large data inside a task instead, or raise the limit")
    return size


def is_bulk(op: Any) -> bool:
    """Whether ``op`` submits a function or arguments large enough to travel out of band: it
    goes as bulk data (a message of its own, not held to the outbox limit)."""
    return type(op) is ops.Submit and any_out_of_band(
        part for task in op.tasks for part in task["spec"])

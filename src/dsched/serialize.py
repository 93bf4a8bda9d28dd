"""How functions, arguments, results and exceptions travel between client, worker and task.

A task travels as two opaque byte strings: the function (cloudpickled once per function, so a
``map`` over 10,000 items pickles it once) and the arguments (cloudpickled with every future
replaced by a :class:`TaskRef`). The worker unpickles them only after the scheduler and the
peer authenticated, swaps each ``TaskRef`` for the dependency's value, and runs the call.

An exception raised by a task comes back as its pickle plus the formatted remote traceback; the
client re-raises it with its original type and the remote traceback chained as its cause (the
way ``concurrent.futures`` reports errors from worker processes). So that the traceback names
the user's own file and shows its lines, a function that travels by value (defined in
``__main__``, a notebook cell, a test module) takes its file's name and its source lines with
it: the worker, which may not have the file, shows the lines the client sent, as a local call
would; cloudpickle alone (3.1.3 on) names every such file ``<dynamic-code>``.

No network, clock or logging; the only files it reads are the source files of functions sent by
value (through ``linecache``), on the client.
"""

from __future__ import annotations

import io
import linecache
import sys
import traceback
import types
from collections import ChainMap
from typing import Any, Callable, Mapping

import cloudpickle

from .errors import TaskExit

PICKLE_PROTOCOL = 5


class TaskRef:
    """A placeholder for the result of task ``key`` inside a task's arguments."""

    __slots__ = ("key",)

    def __init__(self, key: str):
        self.key = key

    def __reduce__(self):
        return (TaskRef, (self.key,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TaskRef) and other.key == self.key

    def __hash__(self) -> int:
        return hash(("TaskRef", self.key))

    def __repr__(self) -> str:
        return f"TaskRef({self.key!r})"


class RemoteTraceback(Exception):
    """Carries the traceback text of an exception raised on a worker."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return "\n" + self.text


class TaskError(Exception):
    """Stands in for a task's exception that could not be pickled; names its type."""

    def __init__(self, type_name: str, message: str):
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message

    def __reduce__(self):
        return (TaskError, (self.type_name, self.message))


def dumps(obj: Any) -> bytes:
    with io.BytesIO() as buffer:
        _Pickler(buffer, protocol=PICKLE_PROTOCOL).dump(obj)
        return buffer.getvalue()


def loads(data: bytes | memoryview) -> Any:
    return cloudpickle.loads(data)


# -- code objects keep their file and lines ----------------------------------------------------

#: The file name of a code object while cloudpickle pickles it for :func:`_reduce_code`.
_NAMELESS = "<dsched-code>"
_cloudpickle_code_reduce = cloudpickle.Pickler.dispatch_table[types.CodeType]


def _reduce_code(code: types.CodeType) -> tuple:
    """Pickle ``code`` as cloudpickle does, plus its file's name and its source lines.

    The lines are the code object's own (from its first line to its last), read where the
    function was defined (``linecache`` knows a script's file and a notebook's cells); nested
    functions and comprehensions are code objects of their own and carry their own lines."""
    if code.co_filename == _NAMELESS:
        return _cloudpickle_code_reduce(code)
    first = code.co_firstlineno
    last = max((line for _, _, line in code.co_lines() if line is not None), default=first)
    lines = linecache.getlines(code.co_filename)[first - 1:last]
    return _named_code, (code.replace(co_filename=_NAMELESS), code.co_filename, first, lines)


def _named_code(code: types.CodeType, filename: str, first: int,
                lines: list[str]) -> types.CodeType:
    """Unpickle a code object under its own file name, making its lines known to tracebacks."""
    if lines:
        known = list(linecache.getlines(filename))  # the file where this machine has one
        known.extend([""] * (first - 1 + len(lines) - len(known)))
        known[first - 1:first - 1 + len(lines)] = lines
        # No modification time: linecache.checkcache keeps the entry (and never rereads a file
        # of that name here, which may not be the one the function came from).
        linecache.cache[filename] = (sum(map(len, known)), None, known, filename)
    return code.replace(co_filename=filename)


class _Pickler(cloudpickle.Pickler):
    dispatch_table = ChainMap({types.CodeType: _reduce_code}, cloudpickle.Pickler.dispatch_table)


def replace_futures(obj: Any, to_ref: Callable[[Any], TaskRef | None]) -> tuple[Any, set[str]]:
    """Return ``obj`` with futures (as recognised by ``to_ref``) replaced, and their keys.

    Walks lists, tuples, sets and dicts, the containers users pass futures in; other objects
    are left alone (and so are pickled as they are).
    """
    keys: set[str] = set()

    def walk(value: Any) -> Any:
        ref = to_ref(value)
        if ref is not None:
            keys.add(ref.key)
            return ref
        kind = type(value)
        if kind in (list, tuple, set, frozenset):
            return kind(walk(item) for item in value)
        if kind is dict:
            return {key: walk(item) for key, item in value.items()}
        return value

    return walk(obj), keys


def substitute(obj: Any, data: Mapping[str, Any]) -> Any:
    """Replace each TaskRef in ``obj`` by ``data[ref.key]`` (the dependency's result)."""
    kind = type(obj)
    if kind is TaskRef:
        return data[obj.key]
    if kind in (list, tuple, set, frozenset):
        return kind(substitute(item, data) for item in obj)
    if kind is dict:
        return {key: substitute(item, data) for key, item in obj.items()}
    return obj


def dumps_exception(exc: BaseException) -> tuple[bytes, str]:
    """The exception's pickle (or a TaskError that names it) and its traceback text.

    Never raises: an exception that cannot be pickled, printed or formatted still gives a
    report, so the task's failure always reaches the client."""
    try:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:
        text = f"{type(exc).__qualname__} (its traceback could not be formatted)"
    try:
        payload = dumps(exc)
        loads(payload)  # some exceptions pickle but cannot be rebuilt
    except Exception:
        try:
            message = str(exc)
        except Exception:
            message = "<unprintable>"
        payload = dumps(TaskError(type(exc).__qualname__, message))
    return payload, text


def loads_exception(payload: bytes, text: str) -> Exception:
    """Rebuild a task's exception with the remote traceback chained as its cause."""
    try:
        exc = loads(payload)
        if not isinstance(exc, BaseException):
            raise TypeError(f"not an exception: {type(exc).__name__}")
    except Exception as err:  # the client lacks the exception's module, say
        exc = TaskError("UnpicklableError", f"{err}; remote traceback follows")
    if not isinstance(exc, Exception):  # SystemExit must not end the caller's program
        exc = TaskExit(exc)
    exc.__cause__ = RemoteTraceback(text)
    return exc


def sizeof(obj: Any) -> int:
    """A cheap estimate of an object's size in bytes, for locality decisions and reports."""
    nbytes = getattr(obj, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    if isinstance(obj, (bytes, bytearray, memoryview, str)):
        return len(obj)
    if isinstance(obj, (list, tuple, set, frozenset)) and len(obj) < 10_000:
        return sys.getsizeof(obj) + sum(sizeof(item) for item in obj)
    if isinstance(obj, dict) and len(obj) < 10_000:
        return sys.getsizeof(obj) + sum(sizeof(k) + sizeof(v) for k, v in obj.items())
    return sys.getsizeof(obj)

"""A node of a Dask graph as it travels to a worker, and what the worker runs for it.

Each node is pickled on its own into bytes that ride in its task's arguments, so the worker
unpickles it on the thread that runs it rather than on its event loop. The standard pickler
does it (several times faster than cloudpickle), except for the functions that must travel by
value (those of ``__main__``, lambdas, local functions, modules registered with cloudpickle to
travel by value): each of those is cloudpickled once per graph into a table that rides in
the task's *function*, a :class:`RunNode`, which a worker unpickles once and keeps. A node the
standard pickler still cannot take goes whole through cloudpickle.

Workers import this module by name when they unpickle a task's function, so it imports
nothing heavy; unpickling a node is what brings Dask into the worker.
"""

from __future__ import annotations

import io
import pickle
import sys
import types
from typing import Any, Iterable

import cloudpickle

from ..serialize import PICKLE_PROTOCOL

_TABLE = "dsched-function"


class NodePickler:
    """Pickles the nodes of one graph; collects the functions that travel by value."""

    def __init__(self) -> None:
        self.functions: list[bytes] = []
        self._index: dict[int, int] = {}
        self._kept: list[Any] = []  # the functions indexed by id stay alive, so ids stay theirs

    def dumps(self, node: Any) -> bytes:
        buffer = io.BytesIO()
        pickler = pickle.Pickler(buffer, protocol=PICKLE_PROTOCOL)
        pickler.persistent_id = self._by_value
        try:
            pickler.dump(node)
        except Exception:  # PicklingError, or whatever a __reduce__ raises: cloudpickle decides
            return cloudpickle.dumps(node, protocol=PICKLE_PROTOCOL)
        data = buffer.getvalue()
        if b"__main__" in data:  # a class or instance of __main__: a worker has another one
            return cloudpickle.dumps(node, protocol=PICKLE_PROTOCOL)
        return data

    def _by_value(self, obj: Any) -> tuple[str, int] | None:
        if type(obj) is not types.FunctionType or _importable(obj):
            return None
        index = self._index.get(id(obj))
        if index is None:
            index = self._index[id(obj)] = len(self.functions)
            self.functions.append(cloudpickle.dumps(obj, protocol=PICKLE_PROTOCOL))
            self._kept.append(obj)
        return (_TABLE, index)


def _importable(function: types.FunctionType) -> bool:
    """Whether a worker finds ``function`` by its module and name, as the standard pickler
    would send it."""
    module_name = function.__module__
    if module_name in (None, "__main__") or any(
            not name or module_name == name or module_name.startswith(name + ".")
            for name in _by_value_modules()):
        return False
    target: Any = sys.modules.get(module_name)
    for part in function.__qualname__.split("."):
        target = getattr(target, part, None)
    return target is function


def _by_value_modules() -> Iterable[str]:
    # The modules registered with cloudpickle.register_pickle_by_value; without that record
    # (a cloudpickle that keeps it elsewhere), every module counts as one: always safe.
    names = getattr(cloudpickle.cloudpickle, "_PICKLE_BY_VALUE_MODULES", None)
    return ("",) if names is None else tuple(names)


class RunNode:
    """The function of a graph's tasks: runs a pickled node, given the values of its inputs.

    ``functions`` holds the graph's functions that travel by value; a worker unpickles this
    object once per graph (it caches task functions) and each of those functions once."""

    def __init__(self, functions: tuple[bytes, ...] = ()):
        self.functions = functions
        self._loaded: dict[int, Any] = {}

    def __reduce__(self):
        return (RunNode, (self.functions,))

    def __call__(self, node: bytes, inputs: Iterable[tuple[Any, Any]]) -> Any:
        """``inputs`` pairs each Dask key the node depends on with that key's value (the
        worker put the values in place of the dsched keys)."""
        unpickler = pickle.Unpickler(io.BytesIO(node))
        unpickler.persistent_load = self._function
        return unpickler.load()(dict(inputs))

    def _function(self, pid: Any) -> Any:
        kind, index = pid
        if kind != _TABLE:
            raise pickle.UnpicklingError(f"unknown reference {pid!r} in a Dask node")
        function = self._loaded.get(index)
        if function is None:  # two threads may both load it: the same function either way
            function = self._loaded[index] = pickle.loads(self.functions[index])
        return function

"""A node of a Dask graph as it travels to a worker, and what the worker runs for it.

Each node is pickled on its own into bytes that ride in its task's arguments, so the worker
unpickles it on the thread that runs it rather than on its event loop. The standard pickler
does it (several times faster than cloudpickle), except for the functions that must travel by
value (those of ``__main__``, lambdas, local functions, modules registered with cloudpickle to
travel by value): each of those is cloudpickled once per graph into a table that rides in
the task's *function*, a :class:`RunNode`, which a worker unpickles once and keeps. A node the
standard pickler still cannot take goes whole through cloudpickle. A fused task's call of
Dask's inner-graph runner travels as a call of :func:`run_subgraph`, which runs the same graph
without ordering it anew at every run.

Workers import this module by name when they unpickle a task's function, so it imports
nothing heavy; unpickling a node is what brings Dask into the worker.
"""

from __future__ import annotations

import io
import pickle
import sys
import threading
import types
from typing import Any, Iterable

import cloudpickle

from .. import serialize
from ..serialize import PICKLE_PROTOCOL
from ..worker import unpickling


class NodePickler:
    """Pickles the nodes of one graph; collects the functions that travel by value."""

    def __init__(self) -> None:
        self.functions: list[bytes] = []
        #: Each function met, by id: its index in ``functions``, or None if it is importable.
        #: The functions are kept alive, so that the ids stay theirs.
        self._index: dict[int, int | None] = {}
        self._kept: list[Any] = []
        self.subgraph_runner = _dask_subgraph_runner()

    def dumps(self, node: Any) -> bytes:
        buffer = io.BytesIO()
        try:
            _GraphPickler(buffer, self).dump(node)
        except Exception:  # PicklingError, or whatever a __reduce__ raises: cloudpickle decides
            return serialize.dumps(node)
        data = buffer.getvalue()
        if b"__main__" in data:  # a class or instance of __main__: a worker has another one
            return serialize.dumps(node)
        return data

    def by_value(self, function: types.FunctionType) -> int | None:
        """The index in the table of ``function``, or None where it goes by reference."""
        key = id(function)
        if key in self._index:
            return self._index[key]
        index = None
        if not _importable(function):
            index = len(self.functions)
            self.functions.append(serialize.dumps(function))
        self._index[key] = index
        self._kept.append(function)
        return index


class _GraphPickler(pickle.Pickler):
    """The standard pickler, but a function that must travel by value becomes a reference to
    the graph's table. (``reducer_override`` is not asked about ints, strs, lists and the
    like, as ``persistent_id`` would be: a node holds hundreds of those.)"""

    def __init__(self, file: io.BytesIO, graph: NodePickler):
        super().__init__(file, protocol=PICKLE_PROTOCOL)
        self._graph = graph

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is types.FunctionType:
            if obj is self._graph.subgraph_runner:
                return _subgraph_runner, ()
            index = self._graph.by_value(obj)
            if index is not None:
                return _table_function, (index,)
        return NotImplemented


def _dask_subgraph_runner() -> Any:
    """The function Dask's fused tasks call, where :func:`run_subgraph` can stand in for it
    (the same parameters); None otherwise."""
    runner = getattr(sys.modules.get("dask._task_spec"), "_execute_subgraph", None)
    if runner is None or runner.__code__.co_varnames[:4] != (
            "inner_dsk", "outkey", "inkeys", "dependencies"):
        return None
    return runner


def run_subgraph(inner: dict, outkey: Any, inkeys: Iterable[Any], *dependencies: Any) -> Any:
    """Run a fused task's inner graph: each node after those it reads, given the values of
    ``inkeys`` (the fused task's inputs), and return the value of ``outkey``. What a fused
    task of Dask runs on a worker, in place of Dask's own runner, which puts each inner graph
    through ``dask.order`` at every run: there, that took as long as the task's own work. A
    value is dropped once the last node that reads it has run."""
    values = dict(zip(inkeys, dependencies))
    readers: dict[Any, int] = {}
    for node in inner.values():
        for key in node.dependencies:
            readers[key] = readers.get(key, 0) + 1
    for key in _dependencies_first(inner, outkey):
        node = inner[key]
        values[key] = node(values)
        for read in node.dependencies:
            readers[read] -= 1
            if readers[read] == 0 and read != outkey:
                del values[read]
    return values[outkey]


def _dependencies_first(inner: dict, outkey: Any) -> list:
    """The keys of ``inner`` that ``outkey`` needs, itself included, each after its
    dependencies (depth first, without recursion: a fused chain can be long)."""
    order: list = []
    done: set = set()
    entered: set = set()
    stack = [(outkey, False)]
    while stack:
        key, leaving = stack.pop()
        if leaving:
            done.add(key)
            order.append(key)
        elif key not in done:
            if key in entered:
                raise RuntimeError(f"the fused task {outkey!r} has a cycle through {key!r}")
            entered.add(key)
            stack.append((key, True))
            stack.extend((d, False) for d in inner[key].dependencies
                         if d in inner and d not in done)
    return order


def _subgraph_runner() -> Any:
    return run_subgraph


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
        return self.load(node)(dict(inputs))

    def load(self, node: bytes) -> Any:
        """The node pickled in ``node``, its functions taken from this graph's table."""
        with unpickling.LOCK:  # a task thread's loads take turns (see worker/unpickling.py)
            _loading.run = self
            try:
                return pickle.loads(node)
            finally:
                _loading.run = None

    def function(self, index: int) -> Any:
        """The graph's function ``index``, unpickled the first time it is asked for (while a
        node is unpickled, so under ``load``'s lock)."""
        function = self._loaded.get(index)
        if function is None:
            function = self._loaded[index] = pickle.loads(self.functions[index])
        return function


#: The RunNode whose node this thread is unpickling.
_loading = threading.local()


def _table_function(index: int) -> Any:
    """Unpickling a node: its function ``index`` from the table of the graph it came in."""
    run = getattr(_loading, "run", None)
    if run is None:
        raise pickle.UnpicklingError(f"function {index} of a Dask graph's table, unpickled "
                                     "outside the graph's task")
    return run.function(index)

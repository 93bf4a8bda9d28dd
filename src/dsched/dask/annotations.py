"""Annotations recovered from a Dask expression, and what each task of its graph asks for.

Dask keeps annotations only on the layers of a HighLevelGraph before optimisation; fusion
flattens the graph and drops them. So they are read here from the layers of the un-optimised
graphs inside the expression, indexed by the name of each key, and every node of the
optimised graph takes the union of the annotations of all the keys fused into it (inner
sub-graphs included) and of the demands its functions declared with ``requires``: the largest
quantity of each resource, the highest priority, the most retries, and only the workers that
all of them allow. An annotation dsched does not know is warned about once per process.

No I/O; needs Dask.
"""

from __future__ import annotations

import numbers
import re
import warnings
from dataclasses import dataclass
from typing import Any, Iterable

from dask._expr import Expr
from dask._task_spec import DataNode, GraphNode, Task, _execute_subgraph
from dask.highlevelgraph import HighLevelGraph

from ..protocol.fields import checked_int
from ..resources import EMPTY, Resources, check_demand
from .requires import any_marked, declared

KNOWN = ("resources", "priority", "retries", "workers")
#: Containers in a task's arguments longer than this are data, not places to find functions.
_SCAN_ITEMS = 256
#: The suffix blockwise fusion appends to a layer name inside a fused task (``name_.0_.1``).
_BLOCKWISE_SUFFIX = re.compile(r"_(?:\.\d+(?:_\.\d+)*)?$")

_ATOMS = frozenset({str, int, float, bytes, bool, type(None)})

_warned: set[str] = set()


@dataclass(frozen=True)
class Demand:
    """What a task asks for: resources, and priority, retries and workers when set."""

    resources: Resources = EMPTY
    priority: int | None = None
    retries: int | None = None
    workers: frozenset[str] | None = None

    def __or__(self, other: "Demand") -> "Demand":
        """Both demands at once: the demand of two steps fused into one task."""
        if other is NONE or other == self:
            return self
        if self is NONE:
            return other
        workers = (self.workers if other.workers is None else other.workers
                   if self.workers is None else self.workers & other.workers)
        return Demand(self.resources | other.resources, _most(self.priority, other.priority),
                      _most(self.retries, other.retries), workers)

    def options(self) -> dict[str, Any]:
        """The keyword arguments of ``task_options`` for this demand."""
        return {"resources": self.resources, "priority": self.priority or 0,
                "retries": self.retries or 0,
                "workers": sorted(self.workers) if self.workers is not None else None}


NONE = Demand()


def _most(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def demand_of(annotations: dict[str, Any], where: str = "") -> Demand:
    """The demand of plain (not callable) annotation values; warns once about unknown names
    and raises TypeError or ResourceSpecError, naming ``where``, for bad values."""
    unknown = sorted(set(annotations) - set(KNOWN) - _warned)
    if unknown:
        _warned.update(unknown)
        warnings.warn(f"dsched ignores the Dask annotation(s) {unknown}: it honours "
                      f"{', '.join(KNOWN)}", UserWarning, stacklevel=3)
    resources, priority, retries, workers = (annotations.get(name) for name in KNOWN)
    where = f" ({where})" if where else ""
    if resources is not None:
        resources = check_demand(Resources.parse(resources))
    if priority is not None:
        priority = checked_int(f"the priority annotation{where}",
                               _whole(priority, "priority", where))
    if retries is not None:
        retries = checked_int(f"the retries annotation{where}",
                              _whole(retries, "retries", where), 0)
    if workers is not None:
        names = [workers] if isinstance(workers, str) else list(workers)
        if not all(isinstance(name, str) for name in names):
            raise TypeError(f"the workers annotation{where} must name workers: {workers!r}")
        workers = frozenset(names)
    return Demand(resources or EMPTY, priority, retries, workers)


def _whole(value: Any, name: str, where: str) -> int:
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and value == int(value):
        return int(value)
    raise TypeError(f"the {name} annotation{where} must be a whole number, not {value!r}")


class Annotated:
    """Annotations that apply to some keys: plain values, and callables of the key."""

    def __init__(self, annotations: dict[str, Any], where: str):
        self.where = where
        self.callables = {n: v for n, v in annotations.items() if callable(v)}
        self.demand = demand_of({n: v for n, v in annotations.items() if not callable(v)},
                                where)

    def at(self, key: Any) -> Demand:
        if not self.callables:
            return self.demand
        return self.demand | demand_of({n: f(key) for n, f in self.callables.items()},
                                       self.where)


class GraphAnnotations:
    """The annotations of every annotated layer in an expression's un-optimised graphs, and
    the demand of each node of its optimised graph."""

    def __init__(self, expr: Any, whole_graph: Annotated | None = None):
        self.whole_graph = whole_graph
        self.by_name: dict[str, tuple[str, Annotated]] = {}
        for graph in high_level_graphs(expr):
            for name, layer in graph.layers.items():
                if layer.annotations:
                    self._index(name, layer)

    def _index(self, name: str, layer: Any) -> None:
        annotated = (name, Annotated(dict(layer.annotations), f"layer {name}"))
        self.by_name[name] = annotated
        if getattr(layer, "output", name) != name or not hasattr(layer, "task"):
            for key in layer.get_output_keys():  # keys named unlike their layer
                self.by_name.setdefault(key_name(key), annotated)

    def demand(self, key: Any, node: GraphNode) -> Demand:
        """What the task running ``node`` (the node of Dask key ``key``) asks for."""
        keys: list[Any] = []
        demands: list[Resources] = []
        if self.by_name or any_marked():
            _scan(node, keys if self.by_name else None, demands, 0)
        demand = self.whole_graph.at(key) if self.whole_graph is not None else NONE
        for resources in demands:
            demand = demand | Demand(resources)
        for inner in keys:
            found = self._layer_of(inner)
            if found is not None:
                name, annotated = found
                demand = demand | annotated.at(_real_key(inner, name, key))
        return demand

    def _layer_of(self, key: Any) -> tuple[str, Annotated] | None:
        name = key_name(key)
        found = self.by_name.get(name)
        if found is None and isinstance(name, str):
            found = self.by_name.get(_BLOCKWISE_SUFFIX.sub("", name))
        return found


def key_name(key: Any) -> Any:
    return key[0] if type(key) is tuple and key else key


def _real_key(inner: Any, layer: str, outer: Any) -> Any:
    """The key a callable annotation is asked about for ``inner``: itself, or for a step that
    blockwise fusion renamed, the key of its layer at the block of the task ``outer``."""
    if type(inner) is tuple or inner == layer:
        return inner
    return (layer, *outer[1:]) if type(outer) is tuple else layer


def high_level_graphs(expr: Any) -> list[HighLevelGraph]:
    """The HighLevelGraphs inside an expression, as they were before optimisation."""
    found, stack, seen = [], [expr], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, HighLevelGraph):
            found.append(item)
        elif isinstance(item, Expr):
            stack.extend(item.operands)
        elif type(item) is list:
            stack.extend(i for i in item if isinstance(i, (Expr, HighLevelGraph, list)))
    return found


def declared_in(items: Iterable[Any]) -> Resources:
    """The demands that the functions found in ``items`` (task specs, legacy tuples or graph
    nodes) declared with ``requires``, as one."""
    demands: list[Resources] = []
    for item in items:
        _scan(item, None, demands, 0)
    total = EMPTY
    for resources in demands:
        total = total | resources
    return total


def _scan(item: Any, keys: list | None, demands: list[Resources], depth: int) -> None:
    """Collect the keys of the steps inside ``item`` (when ``keys`` is a list) and the
    demands declared by the functions it calls, wherever they sit: a task's function, its
    arguments (``map_partitions`` passes the user's function as one), fused sub-graphs,
    partials."""
    kind = type(item)
    if kind in _ATOMS or depth > 16:
        return
    if isinstance(item, Task):
        if keys is not None and item.key is not None:
            keys.append(item.key)
        func = item.func
        if func is _execute_subgraph:  # a fused task: its steps, by their original keys
            for inner_key, inner in item.args[0].items():
                if keys is not None:
                    keys.append(inner_key)
                _scan(inner, keys, demands, depth + 1)
        else:
            _scan(func, keys, demands, depth + 1)
        for arg in item.args:
            if isinstance(arg, GraphNode) or type(arg) in (list, tuple, dict):
                _scan(arg, keys, demands, depth + 1)
        for arg in item.kwargs.values():
            _scan(arg, keys, demands, depth + 1)
    elif isinstance(item, DataNode):
        _scan(item.value, None, demands, depth + 1)
    elif kind in (list, tuple, set, frozenset):
        if len(item) <= _SCAN_ITEMS:
            for inner in item:
                _scan(inner, keys, demands, depth + 1)
    elif kind is dict:
        if len(item) <= _SCAN_ITEMS:
            for inner in item.values():
                _scan(inner, keys, demands, depth + 1)
    elif callable(item) and not isinstance(item, GraphNode):
        demand = declared(item)
        if demand is not None:
            demands.append(demand)

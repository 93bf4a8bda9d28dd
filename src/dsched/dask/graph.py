"""From a Dask expression to the nodes dsched runs, each after the nodes it depends on.

The optimised graph is Dask's own, except with fusion boundaries: then each collection's
optimiser is also told to keep the keys of every layer whose annotations or declared demands
differ from those of a layer that depends on it, the same way it keeps the keys a user asked
for, so neither blockwise nor low-level fusion joins steps that ask for different things.
An alias (a key that only stands for another) becomes no task: what depends on it depends on
its target, which may be the key of a future outside the graph. Nodes come in the order
``dask.order`` prefers (the one that keeps memory low) as far as their dependencies allow.

No I/O; needs Dask.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable, Iterator

from dask._expr import HLGExpr, _HLGExprSequence
from dask._task_spec import (Alias, GraphNode, NestedContainer, Task, convert_legacy_graph, cull,
                             parse_input)
from dask.core import flatten, reverse_dict
from dask.highlevelgraph import HighLevelGraph
from dask.order import order
from dask.utils import ensure_dict

from .annotations import Demand, GraphAnnotations, declared_in
from .keys import to_dsched


def optimised_graph(expr: Any, boundaries: GraphAnnotations | None = None) -> dict:
    """The graph of an optimised expression; with ``boundaries``, fused only within runs
    of steps that ask for the same things."""
    if boundaries is None:
        return convert_legacy_graph(expr.__dask_graph__())
    return convert_legacy_graph(_bounded(expr, boundaries))


def _bounded(expr: Any, boundaries: GraphAnnotations) -> dict:
    if isinstance(expr, _HLGExprSequence):
        graph: dict = {}
        for operand in expr.operands:
            graph.update(_bounded(operand, boundaries))
        return graph
    if not isinstance(expr, HLGExpr):  # an expression collection: optimised already
        return expr.__dask_graph__()
    keys = list(flatten(expr.__dask_keys__()))
    hlg = expr.hlg
    optimizer = expr.low_level_optimizer
    if optimizer is None:
        return ensure_dict(hlg)
    if not isinstance(hlg, HighLevelGraph):
        return ensure_dict(optimizer(hlg, keys))
    kept = boundary_keys(hlg, boundaries)  # all blocks: the cull below drops unneeded ones
    graph = convert_legacy_graph(ensure_dict(optimizer(hlg, keys + kept)))
    return cull(graph, keys) if kept else graph


def boundary_keys(hlg: HighLevelGraph, annotations: GraphAnnotations) -> list:
    """The keys of every layer that a layer asking for something else depends on."""
    asks: dict[str, Demand] = {}
    for name, layer in hlg.layers.items():
        found = annotations.by_name.get(name)
        demand = found[1].demand if found is not None else Demand()
        if annotations.whole_graph is not None:
            demand = demand | annotations.whole_graph.demand
        asks[name] = demand | Demand(declared_in(_layer_tasks(layer)))
    keys: list = []
    for name, dependents in reverse_dict(hlg.dependencies).items():
        if name in asks and any(asks.get(d, asks[name]) != asks[name] for d in dependents):
            keys.extend(hlg.layers[name].get_output_keys())
    return keys


def _layer_tasks(layer: Any) -> Iterator[Any]:
    task = getattr(layer, "task", None)  # a blockwise layer: one task for every block
    if task is not None:
        yield task
    else:
        yield from getattr(layer, "mapping", layer).values()


class Plan:
    """The nodes of a graph to run, in order, and the dsched key behind each Dask key."""

    def __init__(self, graph: dict):
        self.graph = graph
        self.targets = _alias_targets(graph)

    def dsched_key(self, key: Any) -> str:
        """The dsched key that holds the value of Dask key ``key`` (an alias's target's; a
        key outside the graph is a future's, which is a dsched key already)."""
        key = self.targets.get(key, key)
        if key in self.graph:
            return to_dsched(key)
        if isinstance(key, str):
            return key
        raise ValueError(f"the graph needs {key!r}, which is neither in it nor a future's key")

    def nodes(self) -> list[tuple[Any, GraphNode]]:
        """(key, node) of every node that is no alias, each after its dependencies."""
        graph, targets = self.graph, self.targets
        dependencies = {k: {targets.get(d, d) for d in node.dependencies}
                        for k, node in graph.items() if k not in targets}
        try:
            priority: Callable[[Any], Any] = order(graph).__getitem__
        except Exception:  # no preferred order (a cycle, say): the scheduler reports it
            priority = {k: i for i, k in enumerate(graph)}.__getitem__
        waiting = {k: sum(1 for d in deps if d in dependencies)
                   for k, deps in dependencies.items()}
        dependents = reverse_dict(dependencies)
        ready = [(priority(k), i, k) for i, (k, n) in enumerate(waiting.items()) if n == 0]
        heapq.heapify(ready)
        ordered = []
        count = len(waiting)  # past every index used above: ties never reach the keys
        while ready:
            _, _, key = heapq.heappop(ready)
            ordered.append((key, graph[key]))
            for dependent in dependents.get(key, ()):
                if dependent in waiting:
                    waiting[dependent] -= 1
                    if waiting[dependent] == 0:
                        count += 1
                        heapq.heappush(ready, (priority(dependent), count, dependent))
        if len(ordered) < len(dependencies):  # a cycle: send the rest for the scheduler to fail
            done = {key for key, _ in ordered}
            ordered.extend((k, graph[k]) for k in dependencies if k not in done)
        return ordered


def with_future_inputs(node: Any) -> Any:
    """``node`` with each future among its arguments made an input (an alias of the future's
    key), as ``dask.delayed(f)(future)`` leaves them: Dask only does that for its own
    futures. The same node when it holds none."""
    if not isinstance(node, Task):
        return node
    args = [with_future_inputs(a) if isinstance(a, Task) else parse_input(a) for a in node.args]
    if isinstance(node, NestedContainer):
        changed = any(new is not old for new, old in zip(args, node.args))
        return type(node)(*args) if changed else node
    kwargs = {name: with_future_inputs(v) if isinstance(v, Task) else parse_input(v)
              for name, v in node.kwargs.items()}
    changed = (any(new is not old for new, old in zip(args, node.args))
               or any(kwargs[name] is not v for name, v in node.kwargs.items()))
    return Task(node.key, node.func, *args, **kwargs) if changed else node


def _alias_targets(graph: dict) -> dict:
    """Each alias's final target, following chains of aliases."""
    targets = {}
    for key, node in graph.items():
        if type(node) is not Alias:
            continue
        target, hops = node.target, 0
        while type(graph.get(target)) is Alias and hops < len(graph):
            target, hops = graph[target].target, hops + 1
        targets[key] = target
    return targets

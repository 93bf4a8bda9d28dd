"""Dask collections on a dsched client: ``compute``, ``persist`` and ``get``.

Each turns collections (or the expression ``dask.compute`` hands a scheduler) into one
optimised graph, gives every node the demand its annotations and functions add up to, and
has the client submit the nodes as tasks, dependencies first, in as few messages as fit in a
frame. Only the outputs get futures; the scheduler drops an intermediate result once nothing
left to run needs it. The ``AsyncClient`` and ``Client`` methods of the same names call these.

Whole-graph options (``resources``, ``priority``, ``retries``, ``workers``), given here or
by a ``dsched.annotate`` or ``dask.annotate`` block around the call, apply to every task and
add to the annotations of its layers. ``fusion="boundaries"`` (or the Dask config value
``dsched.fusion``) stops fusion where demands change.

Runs in the caller's thread and sends nothing itself; needs Dask.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

try:
    import dask
except ModuleNotFoundError as error:  # the one line a user without the extra should see
    raise ModuleNotFoundError("Dask collections need Dask: pip install 'dsched[dask]'",
                              name="dask") from error
from dask._expr import Expr, FinalizeCompute
from dask.base import collections_to_expr, get_annotations, is_dask_collection
from dask.core import flatten
from dask.utils import key_split

from ..client.annotations import current as dsched_annotations
from ..client.submission import KeyMaker, TaskBuilder, task_options
from .annotations import Annotated, Demand, GraphAnnotations
from .default import tokenize_futures_by_key
from .execute import NodePickler, RunNode
from .graph import Plan, optimised_graph, with_future_inputs
from .keys import to_dsched

if TYPE_CHECKING:
    from ..client.client import AsyncClient
    from ..client.future import Future

FUSIONS = ("dask", "boundaries")
#: Tasks built before a batch is sent: workers start on a big graph while the rest is built.
STREAM_TASKS = 200

tokenize_futures_by_key()


def compute(client: "AsyncClient", collections: Any, *, optimize_graph: bool = True,
            traverse: bool = True, **options: Any) -> Any:
    """A future of each collection's result (one future for one collection); other values
    pass through as they are."""
    singleton = not isinstance(collections, (list, tuple, set, frozenset))
    items = [collections] if singleton else list(collections)
    if traverse:  # collections inside plain containers run too, as one delayed value
        items = [dask.delayed(item) if isinstance(item, (list, set, tuple, dict, Iterator))
                 else item for item in items]
    variables = [item for item in items if is_dask_collection(item)]
    if not variables:
        return items[0] if singleton else items
    expr = FinalizeCompute(collections_to_expr(variables, optimize_graph)).optimize()
    names = list(flatten(expr.__dask_keys__()))
    futures = submit_expr(client, expr, names, **options)
    found = iter(names)
    results = [futures[next(found)] if is_dask_collection(item) else item for item in items]
    return results[0] if singleton else results


def persist(client: "AsyncClient", collections: Any, *, optimize_graph: bool = True,
            **options: Any) -> Any:
    """The collections again, backed by futures of their parts: they compute in the
    background, serve later graphs, and are released when the collections are dropped."""
    singleton = not isinstance(collections, (list, tuple, set, frozenset))
    items = [collections] if singleton else list(collections)
    bad = [type(item).__name__ for item in items if not is_dask_collection(item)]
    if bad:
        raise TypeError(f"persist() takes Dask collections, not {', '.join(bad)}")
    expr = collections_to_expr(items, optimize_graph).optimize()
    keys = _keys_of(items, expr)
    futures = submit_expr(client, expr, [k for ks in keys for k in ks], **options)
    results = []
    for item, item_keys in zip(items, keys):
        rebuild, state = item.__dask_postpersist__()
        results.append(rebuild({key: futures[key] for key in item_keys}, *state))
    return results[0] if singleton else results


def _keys_of(items: list, expr: Any) -> list[list]:
    """The output keys of each collection. A graph-backed collection's keys survive
    optimisation (Dask may reorder those in the expression); an expression-backed one's are
    those the optimised expression gives, in order."""
    given = iter(expr.__dask_keys__())
    keys = []
    for item in items:
        if isinstance(getattr(item, "expr", None), Expr):
            keys.append(list(flatten(next(given))))
        else:
            keys.append(list(flatten(item.__dask_keys__())))
    return keys


def get(client: "AsyncClient", dsk: Any, keys: Any, **options: Any) -> Any:
    """Futures of ``keys`` (a key, or nested lists of keys) of the graph or expression
    ``dsk``, in the same structure: what ``dask.compute(..., scheduler=client)`` asks for."""
    if not isinstance(dsk, Expr):
        from dask._expr import LLGExpr

        dsk = LLGExpr(dict(dsk))
    wanted = list(flatten(keys)) if isinstance(keys, list) else [keys]
    futures = submit_expr(client, dsk, wanted, **options)

    def pack(item: Any) -> Any:
        return [pack(i) for i in item] if isinstance(item, list) else futures[item]

    return pack(keys)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Building a graph makes many objects that all live until they are sent, and the cyclic
    collector would walk them again and again: 30–50 ms of a 1,000-chunk compute, most of it
    full collections. Paused, it walks them once, after. A caller's paused collector stays
    paused."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@_collector_paused()
def submit_expr(client: "AsyncClient", expr: Any, keys: list, *, fusion: str | None = None,
                resources: Any = None, priority: int | None = None, retries: int | None = None,
                workers: Any = None) -> dict[Any, "Future"]:
    """Submit the optimised expression ``expr``; a future of each Dask key in ``keys``."""
    fusion = fusion if fusion is not None else dask.config.get("dsched.fusion", "dask")
    if fusion not in FUSIONS:
        raise ValueError(f"fusion must be one of {FUSIONS}, not {fusion!r}")
    whole = _whole_graph(resources, priority, retries, workers)
    annotations = GraphAnnotations(expr, whole)
    plan = Plan(optimised_graph(expr, annotations if fusion == "boundaries" else None))
    nodes = plan.nodes()
    demands = [_demand(annotations, key, node) for key, node in nodes]  # errors before sending
    wanted = {key: plan.dsched_key(key) for key in keys}
    outputs = set(wanted.values())
    last_needed = {}  # dsched key -> index of the last node that needs it
    for index, (_, node) in enumerate(nodes):
        for dependency in node.dependencies:
            last_needed[plan.dsched_key(dependency)] = index
    maker = _TaskMaker(plan)
    futures: dict[str, "Future"] = {}
    holds = []
    batch: list[tuple[Any, Any, Demand]] = []
    for index, ((key, node), demand) in enumerate(zip(nodes, demands)):
        batch.append((key, node, demand))
        if len(batch) == STREAM_TASKS or index == len(nodes) - 1:
            # Sent while the rest is built, so workers start early; a result a later batch
            # needs is held by a future until that batch is in.
            tasks = maker.build(batch)
            later = {t["key"] for t in tasks if last_needed.get(t["key"], -1) > index}
            sent = client._submit_graph(tasks, later | {t["key"] for t in tasks
                                                        if t["key"] in outputs})
            holds.extend(sent.pop(name) for name in later - outputs)
            futures.update(sent)
            batch = []
    if outputs - futures.keys():  # outputs that are futures already (a persisted part)
        futures.update(client._submit_graph([], outputs - futures.keys()))
    del holds  # released after every batch is queued
    return {key: futures[dsched_key] for key, dsched_key in wanted.items()}


def _demand(annotations: GraphAnnotations, key: Any, node: Any) -> Demand:
    demand = annotations.demand(key, node)
    if demand.workers is not None and not demand.workers:
        raise ValueError(f"task {key!r} joins steps annotated with workers no one worker is "
                         "among; no worker may run it")
    return demand


class _TaskMaker:
    """Builds the tasks of a graph's nodes, batch by batch: one TaskBuilder per prefix and
    demand, whose function (a RunNode) carries the graph's functions that travel by value."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.key_maker = KeyMaker()
        self.pickler = NodePickler()

    def build(self, batch: list[tuple[Any, Any, Demand]]) -> list[dict]:
        pickled = []
        for key, node, demand in batch:
            try:
                node_bytes = self.pickler.dumps(node)
            except TypeError:  # a dsched future among the arguments cannot be pickled
                with_inputs = with_future_inputs(node)
                if with_inputs is node:
                    raise
                node, node_bytes = with_inputs, self.pickler.dumps(with_inputs)
            pickled.append((key, node, node_bytes, demand))
        run = RunNode(tuple(self.pickler.functions))
        builders: dict[tuple[str, Demand], TaskBuilder] = {}
        tasks = []
        for key, node, node_bytes, demand in pickled:
            prefix = key_split(key)
            builder = builders.get((prefix, demand))
            if builder is None:
                builder = builders[prefix, demand] = TaskBuilder(
                    run, task_options(**demand.options()), _is_input, self.key_maker,
                    prefix=prefix)
            inputs = [(dep, _Input(self.plan.dsched_key(dep))) for dep in node.dependencies]
            tasks.append(builder.build((node_bytes, inputs), {}, to_dsched(key)))
        return tasks


def _whole_graph(resources: Any, priority: Any, retries: Any, workers: Any) -> Annotated | None:
    """The options for every task: those given, else the ``annotate`` blocks in force."""
    given = {"resources": resources, "priority": priority, "retries": retries,
             "workers": workers}
    merged = {**get_annotations(), **dsched_annotations(),
              **{name: value for name, value in given.items() if value is not None}}
    return Annotated(merged, "around compute") if merged else None


class _Input:
    """Stands for the value of a dsched key among a node's inputs, until the task builder
    makes it a dependency."""

    __slots__ = ("key",)

    def __init__(self, key: str):
        self.key = key


def _is_input(value: Any) -> bool:
    return type(value) is _Input

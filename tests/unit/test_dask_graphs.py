"""Dask collections become dsched tasks: what each task asks for after Dask's optimisation,
and how a graph is sent. An offline client records the ops instead of sending them."""

from __future__ import annotations

import asyncio
import functools
import gc

import pytest

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
db = pytest.importorskip("dask.bag")
dd = pytest.importorskip("dask.dataframe")
pd = pytest.importorskip("pandas")

import dsched  # noqa: E402
from dsched import serialize
from dsched.protocol import Payload  # noqa: E402
from dsched.dask import annotations  # noqa: E402
from dask._task_spec import Task, TaskRef  # noqa: E402
from dask.utils import key_split  # noqa: E402

from dsched.dask.annotations import Demand  # noqa: E402
from dsched.dask.keys import to_dask  # noqa: E402
from dsched.resources import SCALE, Resources  # noqa: E402

GPU = {"GPU": SCALE}


def inc(block):
    return block + 1


def double(block):
    return block * 2


@dsched.requires(GPU=1)
def on_gpu(frame, factor=1):
    return frame * factor


def sent(client) -> list[dict]:
    """Every op the client has sent by now (its loop flushes before this returns)."""
    asyncio.run_coroutine_threadsafe(asyncio.sleep(0), client.loop).result(5)
    return client.comm.ops


def tasks_of(client) -> list[dict]:
    return [task for op in sent(client) if op["op"] == "submit" for task in op["tasks"]]


def raw(part) -> bytes:
    """A spec part as sent: large ones are Payloads, to travel out of band."""
    return bytes(part.data) if isinstance(part, Payload) else part


def functions_in(task: dict) -> set[str]:
    """The names of the functions a task's node calls, fused steps and wrapped ones included."""
    (node_bytes, _), _ = serialize.loads(raw(task["spec"][1]))
    node = serialize.loads(raw(task["spec"][0])).load(node_bytes)
    names: set[str] = set()

    def walk(item, depth=0):
        if depth > 20:
            return
        func = getattr(item, "func", None)
        if func is not None:
            names.add(getattr(func, "__name__", type(func).__name__))
            walk(func, depth + 1)
        for arg in [*getattr(item, "args", ()), *getattr(item, "kwargs", {}).values()]:
            walk(arg, depth + 1)
        if isinstance(item, dict):
            for value in item.values():
                walk(value, depth + 1)
        elif callable(item) and hasattr(item, "__name__"):
            names.add(item.__name__)

    walk(node)
    return names


def seed_array():
    x = da.ones((8, 8), chunks=(4, 4))
    with dask.annotate(resources={"GPU": 1}):
        y = x.map_blocks(inc)
    return y.map_blocks(double)


# -- what each task asks for ------------------------------------------------------------------


def test_an_annotation_survives_low_level_fusion(client):
    z = seed_array()
    assert dask.config.get("optimization.fuse.active", None) is not False
    client.compute(z)
    tasks = tasks_of(client)
    runs_inc = [t for t in tasks if "inc" in functions_in(t)]
    assert len(runs_inc) == 4  # one per block: creation, inc and double fused into one task
    assert all(t.get("resources") == GPU for t in runs_inc)
    assert all("resources" not in t for t in tasks if t not in runs_inc)  # the finalize task


def test_fusion_boundaries_keep_other_steps_out_of_the_gpu_task(client):
    client.compute(seed_array(), fusion="boundaries")
    tasks = tasks_of(client)
    gpu = [t for t in tasks if t.get("resources") == GPU]
    assert len(gpu) == 4
    assert all(functions_in(t) & {"inc"} and not functions_in(t) & {"double", "ones_like"}
               for t in gpu)
    cpu = [t for t in tasks if "resources" not in t]
    assert any("double" in functions_in(t) for t in cpu)
    assert any("ones_like" in functions_in(t) for t in cpu)


def test_the_fusion_default_comes_from_the_dask_config(client):
    with dask.config.set({"dsched.fusion": "boundaries"}):
        client.compute(seed_array())
    assert len([t for t in tasks_of(client) if t.get("resources") == GPU]) == 4
    assert len(tasks_of(client)) > 9
    with pytest.raises(ValueError, match="fusion must be one of"):
        client.compute(seed_array(), fusion="sometimes")


def test_requires_is_found_inside_map_partitions(client):
    frame = dd.from_pandas(pd.DataFrame({"a": range(8)}), npartitions=4)
    client.compute(frame.map_partitions(on_gpu).map_partitions(double))
    tasks = tasks_of(client)
    gpu = [t for t in tasks if "on_gpu" in functions_in(t)]
    assert gpu and all(t.get("resources") == GPU for t in gpu)
    assert all("resources" not in t for t in tasks if t not in gpu)


def test_requires_is_found_in_a_fused_array_task_and_through_a_partial(client):
    x = da.ones((8,), chunks=4)
    client.compute((x + 1).map_blocks(functools.partial(on_gpu, factor=3)).map_blocks(inc))
    tasks = tasks_of(client)
    fused = [t for t in tasks if "on_gpu" in functions_in(t)]
    assert len(fused) == 2 and all({"inc", "on_gpu"} <= functions_in(t) for t in fused)
    assert all(t.get("resources") == GPU for t in fused)


def test_requires_marks_the_function_and_checks_the_spec():
    assert on_gpu(2, factor=3) == 6
    assert annotations.declared_in([on_gpu]) == Resources.parse({"GPU": 1})
    with pytest.raises(dsched.ResourceSpecError):
        dsched.requires(GPU=1.5)
    with pytest.raises(TypeError, match="wrap it"):
        dsched.requires(GPU=1)(len)


def test_bags_and_delayed_keep_their_annotations(client):
    with dask.annotate(resources={"GPU": 1}, retries=2):
        bag = db.from_sequence(range(8), npartitions=4).map(inc)
        value = dask.delayed(inc)(1)
    plain = dask.delayed(double)(value)
    client.compute([bag.map(double).sum(), plain])
    tasks = tasks_of(client)
    annotated = [t for t in tasks if functions_in(t) & {"inc"}]
    assert len(annotated) == 5
    assert all(t.get("resources") == GPU and t.get("retries") == 2 for t in annotated)
    assert any("resources" not in t for t in tasks)


def test_a_callable_annotation_is_asked_about_each_key(client):
    x = da.ones((16,), chunks=4)
    with dask.annotate(priority=lambda key: 10 * key[1]):
        y = x.map_blocks(inc)
    client.compute(y.map_blocks(double))
    priorities = sorted(t.get("priority", 0) for t in tasks_of(client)
                        if "inc" in functions_in(t))
    assert priorities == [0, 10, 20, 30]


def test_annotations_around_compute_apply_to_the_whole_graph(client):
    with dask.annotate(resources={"MEMORY": 100}, priority=3):
        client.compute(da.ones((8,), chunks=4) + 1)
    tasks = tasks_of(client)
    assert tasks and all(t["resources"] == {"MEMORY": 100 * SCALE} and t["priority"] == 3
                         for t in tasks)


def test_dsched_annotate_and_explicit_options_apply_too_and_explicit_ones_win(client):
    with dsched.annotate(resources={"GPU": 1}, retries=1):
        client.compute(da.ones((4,), chunks=4) + 1, retries=4, priority=2)
    tasks = tasks_of(client)
    assert all(t["resources"] == GPU and t["retries"] == 4 and t["priority"] == 2
               for t in tasks)


def test_layer_annotations_add_to_whole_graph_ones(client):
    with dask.annotate(resources={"MEMORY": 1}, priority=1):
        y = da.ones((4,), chunks=4).map_blocks(inc)
    with dask.annotate(resources={"GPU": 1, "MEMORY": 5}, priority=0):
        client.compute(y)
    runs_inc = [t for t in tasks_of(client) if "inc" in functions_in(t)]
    assert runs_inc[0]["resources"] == {"GPU": SCALE, "MEMORY": 5 * SCALE}
    assert runs_inc[0]["priority"] == 1


def test_fused_steps_ask_for_the_union_of_their_annotations():
    a = Demand(Resources.parse("GPU=1 MEMORY=4"), priority=1, retries=3,
               workers=frozenset({"w1", "w2"}))
    b = Demand(Resources.parse("MEMORY=8 disk=1"), priority=5, workers=frozenset({"w2", "w3"}))
    both = a | b
    assert both.resources == Resources.parse("GPU=1 MEMORY=8 disk=1")
    assert (both.priority, both.retries, both.workers) == (5, 3, frozenset({"w2"}))
    assert a | Demand() == a and Demand() | b == b


def test_steps_that_no_one_worker_may_run_are_refused(client):
    with dask.annotate(workers=["w1"]):
        y = da.ones((4,), chunks=4).map_blocks(inc)
    with dask.annotate(workers=["w2"]):
        z = y.map_blocks(double)
    with pytest.raises(ValueError, match="no worker may run it"):
        client.compute(z)
    assert sent(client) == []


def test_an_unknown_annotation_is_warned_about_once(client, monkeypatch):
    monkeypatch.setattr(annotations, "_warned", set())
    with dask.annotate(fifo_timeout="60s"):
        y = da.ones((4,), chunks=4) + 1
    with pytest.warns(UserWarning, match="ignores the Dask annotation.*fifo_timeout"):
        client.compute(y)
    with dask.annotate(fifo_timeout="60s"):
        y = da.ones((4,), chunks=4) + 2
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        client.compute(y)


def test_bad_annotation_values_get_clear_errors(client):
    with dask.annotate(priority=1.5):
        y = da.ones((4,), chunks=4) + 1
    with pytest.raises(TypeError, match="priority annotation .* whole number"):
        client.compute(y)
    with dask.annotate(resources={"GPU": 1.5}):
        y = da.ones((4,), chunks=4) + 1
    with pytest.raises(dsched.ResourceSpecError, match="GPU=1.5"):
        client.compute(y)


# -- how a graph is sent ----------------------------------------------------------------------


def test_a_graph_goes_in_one_message_with_only_its_outputs_wanted(client):
    future = client.compute((da.ones((40,), chunks=4) + 1).sum())
    ops = sent(client)
    assert [op["op"] for op in ops] == ["submit"]
    tasks = ops[0]["tasks"]
    assert [t["key"] for t in tasks if t["wanted"]] == [future.key]
    position = {t["key"]: i for i, t in enumerate(tasks)}
    assert all(position[d] < position[t["key"]] for t in tasks for d in t.get("dependencies", ()))
    assert all(t["prefix"] == key_split(to_dask(t["key"])) for t in tasks)
    assert "sum" in {t["prefix"] for t in tasks}


def test_a_graph_larger_than_a_frame_goes_in_parts_dependencies_first(client):
    client._submitter.limits = {**client._limits, "max_frame_size": 40_000}
    future = client.compute((da.ones((400,), chunks=4) + 1).sum())
    ops = sent(client)
    submits = [op for op in ops if op["op"] == "submit"]
    assert len(submits) > 3
    part_of = {t["key"]: i for i, op in enumerate(submits) for t in op["tasks"]}
    held = set()
    for i, op in enumerate(submits):
        for task in op["tasks"]:
            for dep in task.get("dependencies", ()):
                assert part_of[dep] <= i
                if part_of[dep] < i:
                    held.add(dep)
    wanted = {t["key"] for op in submits for t in op["tasks"] if t["wanted"]}
    assert held and wanted == held | {future.key}
    # the holds are released after the last part, never before
    releases = [op for op in ops if op["op"] == "release"]
    assert ops.index(releases[0]) > ops.index(submits[-1])
    assert {k for op in releases for k in op["keys"]} == held


def test_a_big_graph_is_sent_in_batches_as_it_is_built(client, monkeypatch):
    from dsched.dask import compute

    monkeypatch.setattr(compute, "STREAM_TASKS", 10)
    future = client.compute((da.ones((160,), chunks=4) + 1).sum())
    ops = sent(client)
    submits = [op for op in ops if op["op"] == "submit"]
    assert len(submits) >= 4 and all(len(op["tasks"]) <= 10 for op in submits)
    first_seen = {t["key"]: i for i, op in enumerate(submits) for t in op["tasks"]}
    needed_later = {d for i, op in enumerate(submits) for t in op["tasks"]
                    for d in t.get("dependencies", ()) if first_seen[d] < i}
    wanted = {t["key"] for op in submits for t in op["tasks"] if t["wanted"]}
    assert needed_later and wanted == needed_later | {future.key}
    releases = {k for op in ops if op["op"] == "release" for k in op["keys"]}
    assert releases == needed_later
    assert ops.index(next(op for op in ops if op["op"] == "release")) > ops.index(submits[-1])


def test_keys_the_client_holds_are_not_sent_again(client):
    z = dask.delayed(inc)(dask.delayed(double)(1))
    first = client.compute(z)
    count = len(tasks_of(client))
    again = client.compute(z)
    assert again.key == first.key and len(tasks_of(client)) == count


def test_a_graph_that_needs_an_unknown_key_is_refused_before_anything_is_sent(client):
    from dsched.dask.compute import get

    with pytest.raises(ValueError, match="neither it nor a future of this client holds"):
        get(client, {"y": Task("y", inc, TaskRef("x-not-here"))}, "y")
    assert sent(client) == []


def test_persist_gives_collections_of_futures_released_when_dropped(client):
    y = client.persist(da.ones((8,), chunks=4) + 1)
    futures = list(dict(y.dask).values())
    assert len(futures) == 2 and all(isinstance(f, dsched.Future) for f in futures)
    keys = {f.key for f in futures}
    assert {t["key"] for t in tasks_of(client) if t["wanted"]} == keys
    del y, futures
    gc.collect()
    released = {k for op in sent(client) if op["op"] == "release" for k in op["keys"]}
    assert released == keys


def test_a_future_inside_a_delayed_call_becomes_a_dependency(client):
    future = client.submit(inc, 1)
    client.compute(dask.delayed(double)(future))
    (task,) = [t for t in tasks_of(client) if t["key"] != future.key]
    assert task["dependencies"] == [future.key]
    assert dask.base.tokenize(future) == dask.base.tokenize(future)


# -- how a node travels -----------------------------------------------------------------------


def test_functions_that_travel_by_value_go_once_per_graph_in_the_task_function(monkeypatch):
    import operator
    import pickle
    import sys

    import cloudpickle

    from dsched.dask.execute import NodePickler, RunNode

    pickler = NodePickler()
    plain = pickler.dumps(Task("k", operator.add, TaskRef("a"), 1))
    assert pickler.functions == [] and RunNode()(plain, [("a", 41)]) == 42
    square = lambda a: a * a  # noqa: E731 - the standard pickler refuses lambdas
    nodes = [pickler.dumps(Task(("k", i), square, TaskRef("a"))) for i in range(3)]
    assert len(pickler.functions) == 1  # one copy, however many nodes call it
    run = pickle.loads(pickle.dumps(RunNode(tuple(pickler.functions))))  # as a worker gets it
    assert [run(node, [("a", 3)]) for node in nodes] == [9, 9, 9]
    monkeypatch.setattr(inc, "__module__", "__main__")  # a worker's __main__ is another
    of_main = pickler.dumps(Task("k", inc, TaskRef("a")))
    assert len(pickler.functions) == 2 and b"__main__" not in of_main
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        pickler.dumps(Task("k", double, TaskRef("a")))
        assert len(pickler.functions) == 3
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    run = RunNode(tuple(pickler.functions))
    assert run(of_main, [("a", 1)]) == 2


def test_a_fused_task_runs_its_inner_graph_without_dasks_runner():
    from dask._task_spec import _execute_subgraph
    from dask.base import collections_to_expr

    from dsched.dask.execute import NodePickler, RunNode, run_subgraph
    from dsched.dask.graph import Plan, optimised_graph

    total = ((da.arange(40, chunks=4) + 1) * 2).map_blocks(inc).sum()
    plan = Plan(optimised_graph(collections_to_expr([total], True).optimize()))
    nodes = plan.nodes()
    assert any(node.func is _execute_subgraph for _, node in nodes)  # fusion happened
    pickler = NodePickler()
    pickled = [(key, pickler.dumps(node), node) for key, node in nodes]
    run = RunNode(tuple(pickler.functions))
    assert all(getattr(run.load(data), "func", None) is not _execute_subgraph
               for _, data, _ in pickled)
    assert any(getattr(run.load(data), "func", None) is run_subgraph for _, data, _ in pickled)
    values = {}
    for key, data, node in pickled:
        values[key] = run(data, [(d, values[plan.targets.get(d, d)])
                                 for d in node.dependencies])
    assert values[nodes[-1][0]] == total.compute(scheduler="sync") == 1680


def test_a_fused_task_drops_each_inner_value_after_its_last_reader():
    import weakref

    from dsched.dask.execute import run_subgraph

    class Blob:
        pass

    def is_gone(reference):
        gc.collect()
        return reference() is None

    inner = {"made": Task("made", Blob), "ref": Task("ref", weakref.ref, TaskRef("made")),
             "out": Task("out", is_gone, TaskRef("ref"))}
    assert run_subgraph(inner, "out", ()) is True
    inner["unread"] = Task("unread", pytest.fail, "run, though out does not need it")
    assert run_subgraph(inner, "out", ()) is True


def test_a_fused_chain_of_any_length_runs_and_a_cycle_is_an_error():
    from dsched.dask.execute import run_subgraph

    inner = {0: Task(0, inc, TaskRef("x"))}
    inner.update({i: Task(i, inc, TaskRef(i - 1)) for i in range(1, 5000)})
    assert run_subgraph(inner, 4999, ("x",), 0) == 5000
    cycle = {"a": Task("a", inc, TaskRef("b")), "b": Task("b", inc, TaskRef("a"))}
    with pytest.raises(RuntimeError, match="has a cycle through"):
        run_subgraph(cycle, "a", ())


def test_dasks_runner_is_kept_where_it_takes_other_parameters(monkeypatch):
    import dask._task_spec

    from dsched.dask.execute import NodePickler, RunNode

    def _execute_subgraph(graph, key, *inputs):  # a Dask whose fused tasks call another way
        return "dask's"

    monkeypatch.setattr(dask._task_spec, "_execute_subgraph", _execute_subgraph)
    pickler = NodePickler()
    assert pickler.subgraph_runner is None
    node = pickler.dumps(Task("k", _execute_subgraph, {}, "k"))
    assert RunNode(tuple(pickler.functions))(node, []) == "dask's"


def test_a_task_function_is_the_same_bytes_for_every_task_of_a_batch(client):
    def shift(block):  # a local function: travels by value
        return block - 1

    client.compute(da.ones((40,), chunks=4).map_blocks(shift).sum())
    functions = {raw(t["spec"][0]) for t in tasks_of(client)}
    assert len(functions) == 1


def test_the_cyclic_collector_is_paused_while_a_graph_is_built_and_only_then(client,
                                                                               monkeypatch):
    import gc

    from dsched.dask import execute

    seen = []
    dumps = execute.NodePickler.dumps
    monkeypatch.setattr(execute.NodePickler, "dumps",
                        lambda self, node: seen.append(gc.isenabled()) or dumps(self, node))
    assert gc.isenabled()
    client.compute(seed_array())
    assert seen and not any(seen)
    assert gc.isenabled()
    with pytest.raises(ValueError, match="fusion must be one of"):
        client.compute(seed_array(), fusion="sometimes")
    assert gc.isenabled(), "resumed after an error too"
    gc.disable()  # the caller's choice is kept
    try:
        client.compute(seed_array())
        assert not gc.isenabled()
    finally:
        gc.enable()

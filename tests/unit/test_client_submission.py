"""How a call becomes a task message: options, keys, arguments and dependencies (no network)."""

import pickle

import cloudpickle
import msgpack
import pytest

from dsched import annotate
from dsched.protocol import ops
from dsched.client.submission import (
    OP_ROOM,
    KeyMaker,
    TaskBuilder,
    is_bulk,
    map_keys,
    task_options,
    task_size,
)
from dsched.errors import ResourceSpecError
from dsched.jobs import JobSpec, JobSpecError
from dsched.jobspec import job_spec
from dsched.resources import Resources
from dsched.serialize import TaskRef


class FakeFuture:
    def __init__(self, key):
        self.key = key


def is_future(value):
    return isinstance(value, FakeFuture)


def builder(fn=max, options=None, **kwargs):
    return TaskBuilder(fn, options or {}, is_future, KeyMaker(), **kwargs)


def arguments(task):
    return cloudpickle.loads(task["spec"][1].data)


# -- options ---------------------------------------------------------------------------------

def test_defaults_are_left_out_of_the_message():
    assert task_options() == {}


def test_explicit_options_are_checked_and_sent_in_fixed_point_units():
    options = task_options(resources={"GPU": 1, "MEMORY": 70e9}, priority=5, retries=2,
                           workers="gpu-a")
    assert options == {"resources": Resources.parse("GPU=1 MEMORY=70e9").to_wire(),
                       "priority": 5, "retries": 2, "workers": ["gpu-a"]}


def test_numpy_integers_are_taken_and_sent_as_plain_ints():
    numpy = pytest.importorskip("numpy")
    options = task_options(priority=numpy.int64(5), retries=numpy.uint8(2))
    assert options == {"priority": 5, "retries": 2}
    assert all(type(value) is int for value in options.values())  # msgpack carries no other
    spec = JobSpec("s-1", ("true",), priority=numpy.int32(-3), retries=numpy.int64(1),
                   after_ok=(numpy.int64(7),), after_any=[numpy.int16(8)])
    assert (spec.priority, spec.retries, spec.after_ok, spec.after_any) == (-3, 1, (7,), (8,))
    assert msgpack.unpackb(msgpack.packb(spec.to_wire())) == spec.to_wire()
    for bad in (numpy.float64(1.0), numpy.array([5]), int):  # the error names the field
        with pytest.raises(JobSpecError, match="priority must be an integer"):
            JobSpec("s-1", ("true",), priority=bad)
    # As submit_command takes them: its dependencies and an array's limit too.
    spec = job_spec(["true"], priority=numpy.int64(2), after_ok=[numpy.int64(4)],
                    array="0-9", array_limit=numpy.int64(3))
    assert (spec.after_ok, spec.array.limit) == ((4,), 3) and type(spec.array.limit) is int
    assert msgpack.unpackb(msgpack.packb(spec.to_wire())) == spec.to_wire()
    for limit in (2.5, True):
        with pytest.raises(JobSpecError, match="limit"):
            job_spec(["true"], array="0-9", array_limit=limit)


@pytest.mark.parametrize("bad", [{"GPU": -1}, {"GPU": "x"}, "GPU", 3, {"": 1}])
def test_an_invalid_resource_spec_raises_before_anything_is_built(bad):
    with pytest.raises(ResourceSpecError):
        task_options(resources=bad)


@pytest.mark.parametrize("kwargs", [{"priority": "high"}, {"priority": 1.5}, {"retries": -1},
                                    {"retries": True}, {"workers": []}, {"workers": [1]}])
def test_invalid_options_raise(kwargs):
    with pytest.raises((TypeError, ValueError)):
        task_options(**kwargs)


def test_annotations_apply_and_explicit_arguments_win():
    with annotate(resources={"GPU": 1}, priority=3, retries=1, workers=["a"]):
        assert task_options() == {"resources": Resources.parse("GPU=1").to_wire(),
                                  "priority": 3, "retries": 1, "workers": ["a"]}
        explicit = task_options(resources={"MEMORY": 1}, priority=0, retries=0, workers="b")
    assert explicit == {"resources": Resources.parse("MEMORY=1").to_wire(), "workers": ["b"]}


def test_nested_annotations_merge_resources():
    with annotate(resources={"GPU": 1}, priority=1):
        with annotate(resources={"MEMORY": 70e9}):
            options = task_options()
    assert options == {"resources": Resources.parse("GPU=1 MEMORY=70e9").to_wire(),
                       "priority": 1}


# -- keys --------------------------------------------------------------------------------------

def test_pure_calls_get_the_same_key_and_impure_ones_a_new_one():
    b = builder()
    assert b.build((1, 2), {})["key"] == b.build((1, 2), {})["key"]
    assert b.build((1, 2), {})["key"] != b.build((1, 3), {})["key"]
    assert b.build((1, 2), {}, pure=False)["key"] != b.build((1, 2), {}, pure=False)["key"]
    assert b.build((1, 2), {})["key"].startswith("max-")


def test_options_are_part_of_a_pure_key():
    plain = builder().build((1,), {})["key"]
    on_gpu = builder(options=task_options(resources={"GPU": 1})).build((1,), {})["key"]
    assert plain != on_gpu


def test_explicit_keys_and_prefixes():
    assert builder().build((1,), {}, key="mine")["key"] == "mine"
    assert builder(prefix="load").build((1,), {})["key"].startswith("load-")
    assert builder(lambda: 1).build((), {})["key"].startswith("lambda-")
    with pytest.raises(TypeError):
        builder().build((1,), {}, key=5)


def test_map_keys():
    assert map_keys(None, 3) is None
    assert map_keys("load", 3) == "load"
    assert map_keys(iter(["a", "b"]), 2) == ["a", "b"]
    with pytest.raises(ValueError, match="2 keys for 3 calls"):
        map_keys(["a", "b"], 3)


def test_unique_keys_do_not_repeat():
    keys = KeyMaker()
    assert len({keys.unique("f") for _ in range(1000)}) == 1000


# -- arguments and dependencies ----------------------------------------------------------------

def test_futures_anywhere_in_the_arguments_become_refs_and_dependencies():
    x, y, z = FakeFuture("x"), FakeFuture("y"), FakeFuture("z")
    task = builder().build(([x, (y, 1)], {"k": {z}}), {"w": {"deep": [x]}})
    assert sorted(task["dependencies"]) == ["x", "y", "z"]
    args, kwargs = arguments(task)
    assert args == ([TaskRef("x"), (TaskRef("y"), 1)], {"k": {TaskRef("z")}})
    assert kwargs == {"w": {"deep": [TaskRef("x")]}}


def test_plain_arguments_take_the_standard_pickler_and_others_cloudpickle():
    plain = builder().build((1, "a", [2.5, None], {"k": b"v"}), {"n": 3})
    assert pickle.loads(plain["spec"][1].data) == ((1, "a", [2.5, None], {"k": b"v"}), {"n": 3})
    square = builder().build((lambda v: v * v,), {})  # needs cloudpickle: a lambda by value
    (fn,), _ = arguments(square)
    assert fn(3) == 9


def test_a_task_without_futures_has_no_dependencies_field():
    assert "dependencies" not in builder().build((1,), {})


def test_the_function_is_pickled_once_per_builder():
    b = builder(lambda v: v + 1)
    tasks = [b.build((i,), {}) for i in range(3)]
    assert all(task["spec"][0] is tasks[0]["spec"][0] for task in tasks)
    assert cloudpickle.loads(tasks[0]["spec"][0].data)(1) == 2


# -- size ------------------------------------------------------------------------------------

def test_a_task_is_limited_by_the_message_limit_named_in_the_error():
    task = builder().build((bytes(100_000),), {})
    size = task_size(task, max_message_size=100_000 + OP_ROOM + 1000)
    assert size > 100_000
    with pytest.raises(ValueError, match=r"message limit of 150000 bytes \(comm.max_message_size\)"):
        task_size(task, max_message_size=150_000)


def test_a_submit_with_a_large_payload_is_bulk_data_and_small_ones_are_not():
    small = builder().build((1,), {})
    large = builder().build((bytes(2**20),), {})
    assert not is_bulk(ops.Submit(tasks=(small,) * 3))
    assert is_bulk(ops.Submit(tasks=(small, large)))
    assert not is_bulk({"op": "release", "keys": ["x"]})


def test_not_callable():
    with pytest.raises(TypeError, match="callable"):
        builder(fn=5)


async def test_a_clients_other_numbers_take_numpy_integers_and_send_plain_ints():
    # A history's limit and a fenced GPU's index (a log's offset and limit: ``read_latest``):
    # what goes on the wire is a plain int, or the request could not be sent at all.
    numpy = pytest.importorskip("numpy")
    from dsched.client.jobclient import JobRequests

    class Requests(JobRequests):
        def __init__(self):
            self.sent = []

        async def resolve_jobs(self, jobs):
            return list(jobs)

        async def _request(self, make):
            op = make(1)
            self.sent.append(msgpack.unpackb(msgpack.packb(op.to_wire())))
            return {"attempts": []}

    client = Requests()
    assert await client.history(limit=numpy.int64(5)) == []
    await client.release_gpu("w", numpy.uint8(1))
    assert [client.sent[0]["limit"], client.sent[1]["index"]] == [5, 1]
    with pytest.raises(TypeError, match="limit must be an integer"):
        await client.history(limit=numpy.float64(5.0))
    with pytest.raises(ValueError, match="a GPU index must be from 0"):
        await client.release_gpu("w", -1)

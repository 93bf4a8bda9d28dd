"""Every op the daemons and clients exchange survives the trip through msgpack and the frame
layer, and an op a peer got wrong is refused with a reason, before anything acts on it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsched.protocol import MessageDecoder, Payload, encode_ops, ops
from dsched.resources import Resources

BIG = bytes(range(256)) * 512  # over the out-of-band threshold: travels as its own frame

#: One of each op, as the daemons send them (every op class must be here: see below).
SAMPLES = [
    ops.Register(name="w", address="10.0.0.1:4000", nthreads=4,
                 resources=Resources.parse("GPU=2 MEMORY=100e9"),
                 gpus=({"index": 0, "uuid": "GPU-1", "name": "H100", "memory_total": 80},),
                 pid=123, host="gpu-a", memory_limit=2**34, held={"x": 10}, running=("y",),
                 previous_exit="was killed by signal 11 (SIGSEGV)",
                 attempts=({"key": "job-3.1", "outcome": "completed", "exit_code": 0},),
                 job_lease=600.0),
    ops.Registered(address="10.0.0.1:4000"),
    ops.Heartbeat(cpu=12.5, memory=2**30, memory_limit=None,
                  gpus=({"index": 0, "utilization": 40},), executing=3, sent=812.25),
    ops.Lease(sent=812.25),
    ops.Execute(key="inc-1", spec=(b"\x80\x05fn", BIG), resources=Resources.parse("GPU=0.5"),
                priority=2, who_has={"d": ("10.0.0.2:4000",)}, nbytes={"d": 8}),
    ops.StopTask(key="inc-1"),
    ops.Free(keys=("a", "b")),
    ops.Replicate(key="r", who_has=("10.0.0.2:4000",), nbytes=10),
    ops.Retire(),
    ops.Draining(),
    ops.GpuFenced(1, "gpu fault: Xid 79 on gpu1 (GPU-1)"),
    ops.GpuReleased(1),
    ops.UnfenceGpu(1),
    ops.ReleaseGpu(id=3, worker="gpu-a", index=1),
    ops.Replicated(key="r", nbytes=10),
    ops.ReplicateFailed(key="r", reason="peer gone"),
    ops.Unregister(reason="worker drained"),
    ops.TaskFinished(key="inc-1", nbytes=28, start=1.5, stop=2.5, duration=0.9,
                     peak_memory=2**20, gpus=(0,)),
    ops.TaskErred(key="x", exception=b"pickled exc", text="Traceback ...", start=1.0, stop=2.0,
                  gpu={"uuids": ["GPU-1"], "samples": 3, "mem_peak": 2**34}, oom=True),
    ops.TaskStopped(key="x", reason="stopped as asked"),
    ops.TaskRejected(key="x", reason="the worker is closing"),
    ops.MissingData(key="y", dependency="x", tried=("10.0.0.2:4000",), reason="gone",
                    permanent=True),
    ops.FutureFinished(key="inc-1", nbytes=28, who_has=("10.0.0.1:4000",)),
    ops.FutureErred(key="x", error="exception", text="Traceback ...", exception=b"pickled exc"),
    ops.FutureCancelled(key="x", reason="cancelled by client c"),
    ops.FutureMoved(key="x", who_has=("10.0.0.3:4000",)),
    ops.FutureWaiting(keys=("g",), reason="no worker offers resource GPU"),
    ops.Welcome(client="client-1"),
    ops.Submit(id=7, tasks=({"key": "inc-1", "spec": (b"fn", b"args"), "prefix": "inc",
                             "dependencies": ("d",), "resources": Resources.parse("GPU=1"),
                             "priority": 1, "retries": 2, "workers": ("w",), "wanted": False,
                             "gpu_memory_retry": True},)),
    ops.Cancel(keys=("a",)),
    ops.Release(keys=("a", "b")),
    ops.Info(id=3),
    ops.WhoHas(id=4, keys=("a",)),
    ops.Reply(id=3, value={"workers": {}, "tasks": {"memory": 2}}),
    ops.Error(reason="malformed op", id=5, keys=("a",)),
    ops.GetData(id=9, keys=("x",)),
    ops.Execute(key="job-7.2", spec=(b"", b""), resources=Resources.parse("gpu0=1"),
                job={"command": ["python", "train.py"], "env": {"LR": "0.1"}, "cwd": "/data",
                     "time_limit": 3600.0}, hold=True),
    ops.Proceed(keys=("job-7.2", "job-8.1")),
    ops.AttemptStarted(key="job-7.2", pid=4242, log="/scratch/jobs/job-7.2.log", gpus=(0,),
                       started=1700000000.0),
    ops.AttemptEnded(key="job-7.2", outcome="failed", exit_code=3, error="", log="/x.log",
                     started=1700000000.0, ended=1700000060.0),
    ops.AttemptAck(keys=("job-7.2",)),
    ops.SubmitJobs(id=11, jobs=({"submission": "s1", "command": ["true"]},)),
    ops.QueryJobs(id=12, jobs=(7,), states=("running",), offset=0, limit=50),
    ops.CancelJobs(id=13, jobs=(7, 8)),
    ops.ReleaseJobs(id=14, jobs=(9,)),
    ops.QueryHistory(id=16, jobs=(7, 12), states=("failed", "lost"), name="train-*",
                     since=1700000000.0, until=1700086400.0, limit=50),
    ops.WatchJobs(jobs=(7,)),
    ops.JobEnded(job={"id": 7, "state": "completed", "exit_code": 0}),
    ops.WatchWorkers(),
    ops.WorkerCount(count=3),
    ops.GetLog(id=15, key="job-7.2", offset=100, limit=4096),
    ops.Log(id=15, data=b"epoch 1\n", size=108, ended=True),
    ops.Data(id=9, data={"x": BIG}, missing=("y",), errors={"z": "cannot pickle"}, more=True),
]


def wire_trip(op_objects):
    """Through msgpack and frames, as a peer receives them."""
    decoder = MessageDecoder()
    batches = []
    for chunk in encode_ops([op.to_wire() for op in op_objects]):
        batches += decoder.feed(bytes(chunk))
    (batch,) = batches
    return [ops.decode(d) for d in batch]


def test_every_op_class_has_a_sample():
    assert {type(op) for op in SAMPLES} == set(ops.OPS.values())


@pytest.mark.parametrize("op", SAMPLES, ids=lambda op: op.OP)
def test_every_op_round_trips_through_the_wire(op):
    (back,) = wire_trip([op])
    if isinstance(op, ops.Data):  # a large payload arrives as a view of the received buffer
        assert bytes(back.data["x"]) == BIG and back.missing == op.missing
    elif isinstance(op, ops.Execute):
        assert bytes(back.spec[1]) == bytes(op.spec[1]) and back.who_has == op.who_has
        assert back.job == op.job
    else:
        assert back == op


def test_defaults_stay_off_the_wire_and_come_back():
    assert ops.TaskFinished(key="k").to_wire() == {"op": "task-finished", "key": "k"}
    assert ops.Execute(key="k", spec=(b"f", b"a")).to_wire() == {
        "op": "execute", "key": "k", "spec": [b"f", b"a"]}
    back = ops.decode({"op": "execute", "key": "k", "spec": [b"f", b"a"]})
    assert back.who_has == {} and back.nbytes == {} and back.resources.is_empty()


def test_a_payload_inside_an_op_goes_out_of_band():
    op = ops.Execute(key="k", spec=(b"f", Payload(BIG)))
    assert len(encode_ops([op.to_wire()])) > 1  # the payload's own frame, then the ops


@pytest.mark.parametrize("sent, says", [
    ({"op": "nope"}, "unknown op 'nope'"),
    ({"key": "x"}, "unknown op None"),
    ({"op": "task-finished"}, "a task-finished op without 'key'"),
    ({"op": "task-finished", "key": ["x"]}, "expected a string"),
    ({"op": "task-finished", "key": "x", "nbytes": "8"}, "expected an integer"),
    ({"op": "task-finished", "key": "x", "nbytes": True}, "expected an integer"),
    ({"op": "missing-data", "key": "x", "dependency": "d", "tried": 5}, "a list of strings"),
    ({"op": "register", "name": "w", "address": "a:1", "nthreads": "4"}, "an integer"),
    ({"op": "register", "name": "w", "address": "a:1", "nthreads": 1, "job_lease": 60.0,
      "resources": {"GPU": -1}}, "out of range"),
    ({"op": "register", "name": "w", "address": "a:1", "nthreads": 1}, "without 'job_lease'"),
    ({"op": "execute", "key": "k", "spec": [b"f"]}, "two byte strings"),
    ({"op": "submit", "tasks": ["not a task"]}, "expected a task"),
    ({"op": "submit", "tasks": [{"spec": [b"", b""]}]}, "has no 'key'"),
    ({"op": "submit", "tasks": [{"key": "k", "spec": [b"", b""], "priority": "high"}]},
     "task field 'priority'"),
    ({"op": "submit", "tasks": [{"key": "k", "spec": [b"", b""], "bogus": 1}]},
     "unknown fields ['bogus']"),
    ({"op": "get-data", "id": 1, "keys": [[1]]}, "a list of strings"),
    ({"op": "who-has", "id": 1, "keys": 5}, "a list of strings"),
])
def test_a_malformed_op_is_refused_with_a_reason(sent, says):
    with pytest.raises(ops.BadOp, match=says.replace("(", r"\(").replace("[", r"\[")):
        ops.decode(sent)


def test_a_bad_op_is_the_peers_fault():
    from dsched.errors import RemoteProtocolError

    assert issubclass(ops.BadOp, RemoteProtocolError)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["op", "key", "keys", "nbytes", "tasks", "id", "spec",
                                         "dependency", "tried", "reason", "who_has"]),
                       st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5),
                                 st.binary(max_size=5),
                                 st.lists(st.one_of(st.integers(), st.text(max_size=3)),
                                          max_size=3),
                                 st.sampled_from(sorted(ops.OPS)))))
def test_decoding_anything_gives_an_op_or_bad_op_and_nothing_else(d):
    try:
        op = ops.decode(d)
    except ops.BadOp:
        return
    assert type(op) is ops.OPS[d["op"]]


def test_a_daemon_compiles_every_op_class_as_it_starts():
    # build_all is what the scheduler and the worker call at start: afterwards no op class
    # holds a stand-in that would compile its methods at its first use.
    from dsched.protocol import fields

    fields.build_all()
    for name, cls in fields.OPS.items():
        for method in ("__init__", "__repr__", "__eq__", "__hash__", "to_wire"):
            assert cls.__dict__[method].__name__ == method, (name, method)
        assert cls.__dict__["from_wire"].__func__.__name__ == "from_wire", name


def test_a_sched_call_makes_only_the_client_ops_and_compiles_only_the_methods_it_uses():
    # A fresh interpreter, as a ``sched submit`` is: the plain client loads the ops between a
    # client and the scheduler (``clientops``), not the whole table, and the first use of a
    # method compiles that method alone (about a tenth of a millisecond each).
    program = """if True:
        import sys
        from dsched.client import plain
        ops = plain.ops
        ops.SubmitJobs(id=1, jobs=({"command": ["true"]},)).to_wire()
        ops.Reply.from_wire({"op": "reply", "id": 1, "value": [7]})
        real = lambda f: getattr(f, "__func__", f).__name__ != "first_call"
        print("dsched.protocol.ops" in sys.modules, sorted(
            f"{cls.__name__}.{m}" for cls in (ops.SubmitJobs, ops.Reply)
            for m in ("__init__", "__repr__", "__eq__", "__hash__", "to_wire", "from_wire")
            if real(cls.__dict__[m])))
    """
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.split(" ", 1) == [
        "False", "['Reply.__init__', 'Reply.from_wire', 'SubmitJobs.__init__', "
                 "'SubmitJobs.to_wire']\n"]

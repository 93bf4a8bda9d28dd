"""Both cores in one test: the scheduler's and its workers', joined by the shells' own op
tables and a wire the test controls (``memcluster.py``). Each story is what a user would see,
checked end to end at unit speed; every invariant of every core holds after each event."""

from __future__ import annotations

import pytest
from memcluster import MemCluster, WorkerSpec

from dsched.jobs import JobSpec
from dsched.protocol import ops
from dsched.worker.actions import GPU_PROCESS, THREAD


def test_a_task_a_client_submits_runs_on_a_worker_and_its_result_reaches_the_client():
    cluster = MemCluster(WorkerSpec("a", nthreads=2))
    alice = cluster.client("alice")

    alice.submit("inc-1")
    cluster.settle()
    assert cluster.where("inc-1") == ["a"]
    [(start, _)] = cluster.node("a").executing.values()
    assert start.where == THREAD and start.gpus == ()

    cluster.finish("inc-1", value=2)
    cluster.settle()
    finished = alice.end("inc-1")
    assert type(finished) is ops.FutureFinished and finished.who_has == ("tcp://a",)
    assert alice.result("inc-1") == 2  # fetched from the worker that holds it
    cluster.check()

    alice.release("inc-1")  # nobody wants it now: the worker drops it
    cluster.settle()
    assert "inc-1" not in cluster.node("a").store
    cluster.check()


def test_a_gpu_task_is_pinned_to_a_device_of_its_own_and_the_next_one_waits_for_one():
    cluster = MemCluster(WorkerSpec("cpu", nthreads=4),
                         WorkerSpec("gpu", nthreads=4, resources="GPU=2", gpus=(2, 3)))
    client = cluster.client()
    for key in ("train-1", "train-2", "train-3"):
        client.submit(key, resources="GPU=1")
    cluster.settle()

    running = cluster.node("gpu").executing
    assert set(running) == {"train-1", "train-2"} and cluster.where("train-3") == []
    devices = {key: start.gpus for key, (start, _) in running.items()}
    assert sorted(devices.values()) == [(2,), (3,)]  # the physical devices, one each
    assert all(start.where == GPU_PROCESS for start, _ in running.values())

    cluster.finish("train-1")
    cluster.settle()
    [(start, _)] = [v for k, v in running.items() if k == "train-3"]
    assert start.gpus == devices["train-1"]  # the device train-1 gave back
    cluster.run_to_end()
    assert all(type(client.end(k)) is ops.FutureFinished for k in ("train-1", "train-2", "train-3"))
    cluster.check()


def test_a_worker_killed_mid_task_the_task_runs_again_elsewhere():
    cluster = MemCluster("a", "b", allowed_failures=1)
    client = cluster.client()
    client.submit("x")
    cluster.settle()
    [first] = cluster.where("x")
    other = "b" if first == "a" else "a"

    cluster.kill(first)
    cluster.settle()
    assert cluster.where("x") == [other]
    assert cluster.scheduler.tasks["x"].deaths == 1

    cluster.restart(first)  # its nanny starts it again: it registers anew, holding nothing
    cluster.finish("x", value="done")
    cluster.settle()
    assert client.end("x").who_has == (f"tcp://{other}",)
    assert client.result("x") == "done"
    assert first in {w.name for w in cluster.scheduler.workers.values()}
    cluster.check()


def test_a_partitioned_worker_that_comes_back_keeps_the_result_it_computed_meanwhile():
    cluster = MemCluster("a", heartbeat_timeout=5)
    client = cluster.client()
    client.submit("x")
    cluster.settle()

    cluster.partition("a")
    cluster.finish("x", value=7)  # its report is held by the partition
    cluster.advance(10)  # the scheduler hears nothing for longer than its timeout
    cluster.settle()
    assert cluster.scheduler.workers == {} and client.ends("x") == []

    cluster.heal("a")  # it hears its connection was closed, connects and says what it holds
    cluster.settle()
    assert client.end("x").who_has == ("tcp://a",)
    assert client.result("x") == 7 and cluster.where("x") == []  # not computed again
    cluster.check()


def test_a_job_a_client_submits_runs_on_a_worker_and_ends():
    cluster = MemCluster(WorkerSpec("a", nthreads=2))
    client = cluster.client()
    request = client.submit_jobs(JobSpec(submission="s-1", command=("make", "all")))
    cluster.settle()
    [job] = client.reply(request)
    client.watch_jobs(job)
    assert cluster.journal[job]["state"] in ("assigned", "running")  # journaled before told
    assert cluster.running_jobs() == {f"job-{job}.1": "a"}

    cluster.end_job(f"job-{job}.1", "completed", exit_code=0)
    cluster.settle()
    [ended] = [op for op in client.received if type(op) is ops.JobEnded]
    assert ended.job["id"] == job and ended.job["state"] == "completed"
    assert cluster.journal[job]["state"] == "completed"
    assert cluster.node("a").disk == {}  # acknowledged: the worker forgot its record
    cluster.check()


def test_a_worker_drained_hands_back_its_queued_work_and_leaves_once_its_result_is_copied():
    cluster = MemCluster(WorkerSpec("a", nthreads=1), prefetch=2)
    client = cluster.client()
    for key in ("t1", "t2", "t3"):
        client.submit(key)
    cluster.settle()
    assert cluster.where("t1") == ["a"]
    assert set(cluster.node("a").state.tasks) == {"t1", "t2", "t3"}  # two wait there

    cluster.add_worker(WorkerSpec("b", nthreads=1))
    cluster.drain("a")
    cluster.settle()
    assert set(cluster.node("a").state.tasks) == {"t1"}  # the rest handed back...
    assert cluster.where("t2") == ["b"]  # ...and run elsewhere
    assert cluster.node("a").alive  # still running t1

    cluster.finish("t1", value=1)
    cluster.settle()  # t1's result is copied to b, then a is retired and leaves
    assert not cluster.node("a").alive and "tcp://a" not in cluster.scheduler.workers
    assert client.result("t1") == 1  # from b now
    cluster.run_to_end()
    assert {type(client.end(k)) for k in ("t1", "t2", "t3")} == {ops.FutureFinished}
    cluster.check()


def test_a_task_sent_back_to_a_worker_that_is_stopping_it_still_ends():
    """Found by the cluster state machine: a worker told to stop a task it kept running while
    cut off, then sent it again, reported only that it stopped, which the scheduler ignored;
    the task stayed processing there for ever. The run it keeps is now the one asked for."""
    cluster = MemCluster(WorkerSpec("a", nthreads=2), "b")
    client = cluster.client()
    client.submit("x")
    cluster.settle()
    assert cluster.where("x") == ["a"]  # on a thread: it cannot be stopped, it runs on

    cluster.reset("a")  # the scheduler gives x to b; a comes back and is told to stop x
    cluster.settle()
    assert cluster.where("x") == ["a", "b"]
    assert cluster.node("a").state.tasks["x"].state.value == "cancelling"

    cluster.kill("b")  # x goes back to a, which is still running it
    cluster.settle()
    cluster.finish("x", value=1, name="a")
    cluster.settle()
    assert type(client.end("x")) is ops.FutureFinished
    cluster.check()

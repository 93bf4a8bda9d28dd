"""Where and when tasks run, as a client asks: dependency chains across workers, ``workers=``
restrictions, ``priority``, and waiting with ``wait``, ``as_completed`` and ``progress``."""

from __future__ import annotations

import sys

import cloudpickle
import pytest

import dsched
from deadline import wait_until
from task_helpers import wait_for
from dsched import FIRST_COMPLETED, as_completed, progress, wait

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def inc(x):
    return x + 1


def step(previous):
    """One link of a chain: the path so far plus the worker this link ran on."""
    import os

    return previous + [os.environ["SCHED_WORKER_NAME"]]


def record(path, tag):
    """Append ``tag`` to the file at ``path`` (one short line: an atomic append)."""
    with open(path, "a") as f:
        f.write(tag + "\n")
    return tag


CLUSTER_WORKERS = (
    ("--name", "a", "--nthreads", "2", "--gpus", "none"),
    ("--name", "b", "--nthreads", "2", "--gpus", "none"),
    # One thread and one "slot": tasks needing the slot run one at a time, in queue order.
    ("--name", "serial", "--nthreads", "1", "--resources", "slot=1", "--gpus", "none"),
)


def test_a_dependency_chain_alternating_between_workers(client):
    link = client.submit(step, [], workers="a")
    for i in range(1, 12):
        link = client.submit(step, link, workers="b" if i % 2 else "a")
    assert link.result(timeout=60) == ["a", "b"] * 6


def test_workers_restricts_by_name_or_address(client):
    addresses = {w["name"]: address for address, w in client.scheduler_info()["workers"].items()}
    on_b = client.map(step, [[]] * 20, workers=["b"], pure=False)
    assert {path[0] for path in client.gather(on_b, timeout=30)} == {"b"}
    by_address = client.submit(step, [], workers=addresses["a"], pure=False)
    assert by_address.result(timeout=30) == ["a"]


def test_higher_priority_runs_first(client, tmp_path):
    gate, log = tmp_path / "gate", tmp_path / "order"
    slot = {"slot": 1}
    blocker = client.submit(wait_for, str(gate), resources=slot)
    try:
        wait_until(lambda: client.scheduler_info()["tasks"].get("processing") == 1, 30,
                   what="the blocker running")
        low = [client.submit(record, str(log), f"low{i}", resources=slot) for i in range(3)]
        high = [client.submit(record, str(log), f"high{i}", resources=slot, priority=10)
                for i in range(3)]
        with dsched.annotate(priority=5):
            middle = client.submit(record, str(log), "middle", resources=slot)
        wait_until(lambda: client.scheduler_info()["tasks"].get("queued") == 7, 30,
                   what="all seven queued behind the blocker")
    finally:
        gate.touch()
    wait([blocker, *low, *high, middle], timeout=30)
    assert log.read_text().split() == ["high0", "high1", "high2", "middle",
                                       "low0", "low1", "low2"]


def test_wait_for_the_first_and_then_all(client, tmp_path):
    gate = tmp_path / "gate"
    blocked = client.submit(wait_for, str(gate), "slow")
    quick = client.submit(inc, 1)
    done, not_done = wait([blocked, quick], timeout=30, return_when=FIRST_COMPLETED)
    assert done == {quick} and not_done == {blocked}
    with pytest.raises(TimeoutError):
        wait([blocked], timeout=0.2)
    gate.touch()
    done, not_done = wait([blocked, quick], timeout=30)
    assert done == {blocked, quick} and not not_done


def test_as_completed_yields_in_the_order_tasks_end(client, tmp_path):
    gate = tmp_path / "gate"
    blocked = client.submit(wait_for, str(gate), "slow")
    quick = client.submit(inc, 1)
    ordered = []
    for future, result in as_completed([blocked, quick], with_results=True, timeout=30):
        ordered.append(result)
        if future is quick:
            gate.touch()
    assert ordered == [2, "slow"]


def test_progress_shows_a_bar_to_the_end(client, capsys):
    futures = client.map(inc, range(20))
    progress(futures)
    out = capsys.readouterr().out
    assert "20/20 done" in out and "#" * 40 in out
    assert client.gather(futures) == list(range(1, 21))

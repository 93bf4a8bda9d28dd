"""A worker cut off from the network mid-run (its switch port down: packets vanish, nothing
resets): after the heartbeat timeout the scheduler gives up on it and runs its tasks elsewhere;
when the link returns it registers again, and what it computed meanwhile is not counted twice.

The scheduler and two workers are hosts in network namespaces on a private /24; this process
is the client, through one more link. Needs root and iproute2.
"""

from __future__ import annotations

import collections
import random
import sys
import time

import cloudpickle
import pytest

from deadline import wait_until
from netns import Network, unavailable
from task_ledger import Ledger, leaf, total

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.system

HEARTBEAT_TIMEOUT = 2.0
THREADS = 4
GROUPS, LEAVES = 60, 9  # 600 tasks
FAST = {"SCHED_WORKER__HEARTBEAT_INTERVAL": "0.2",
        "SCHED_WORKER__RECONNECT_BACKOFF_MIN": "0.1",
        "SCHED_WORKER__RECONNECT_BACKOFF_MAX": "0.5",
        "SCHED_COMM__CONNECT_TIMEOUT": "3"}


@pytest.fixture
def network():
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    net = Network(["sched", "w1", "w2"])
    try:
        yield net
    finally:
        net.close()


def count_end_reports(client) -> collections.Counter:
    """Ends of tasks as reported to ``client`` on the wire, per key, since the last time the
    client was told the result was lost (a ``future-moved`` to nowhere makes its future
    pending again, and a new end follows). A future ignores a second end, so only the wire
    shows one; a ``future-finished`` without ``nbytes`` says where a recomputed result lives now,
    and is not an end."""
    ends: collections.Counter = collections.Counter()
    reports = client._async._reports
    on_op = reports.on_op

    def counting(op: dict) -> None:
        kind = op.get("op")
        if kind in ("future-erred", "future-cancelled") or (kind == "future-finished"
                                                          and "nbytes" in op):
            ends[op["key"]] += 1
        elif kind == "future-moved" and not op.get("who_has"):
            ends[op["key"]] -= 1
        on_op(op)

    reports.on_op = counting
    return ends


def names(client) -> set[str]:
    return {w["name"] for w in client.scheduler_info()["workers"].values()}


def test_a_cut_off_worker_is_replaced_then_rejoins_without_double_counting(network, daemons,
                                                                          tmp_path):
    rng = random.Random()
    prefix = network.run_in
    daemons.scheduler(env={"SCHED_SCHEDULER__HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT)},
                      host=network.addresses["sched"], prefix=prefix("sched"))
    for name in ("w1", "w2"):
        daemons.worker("--name", name, "--nthreads", str(THREADS), env=FAST,
                       host=network.addresses[name], prefix=prefix(name))
    client = daemons.client()
    ends = count_end_reports(client)
    daemons.wait_for_workers(client, 2)
    ledger, hold = Ledger(tmp_path / "ledger"), tmp_path / "hold"

    roots, expected = [], []
    for group in range(GROUPS):
        leaves = [client.submit(leaf, str(ledger.path), str(hold), f"leaf-{group}-{i}",
                                group * LEAVES + i, rng.uniform(0.02, 0.1),
                                key=f"leaf-{group}-{i}") for i in range(LEAVES)]
        roots.append(client.submit(total, str(ledger.path), str(hold), f"sum-{group}",
                                   rng.uniform(0.02, 0.1), leaves, key=f"sum-{group}"))
        expected.append(sum(group * LEAVES + i for i in range(LEAVES)))
        del leaves
    wait_until(lambda: ledger.count("end") >= 100, 60, what="the run to get going")

    # Freeze every task before its end, so that what w1 runs when cut off is known exactly.
    hold.touch()
    stranded = wait_until(lambda: (running := ledger.executing(by="worker").get("w1")) and
                          sum(running.values()) == THREADS and set(running), 30,
                          what=f"w1 executing {THREADS} tasks")
    network.cut("w1")
    cut_at = time.monotonic()
    wait_until(lambda: "w1" not in names(client), 30, what="the scheduler to give up on w1")
    gave_up_after = time.monotonic() - cut_at
    hold.unlink()

    # Its tasks run on w2 while w1 is still cut off; w1 finishes them too, unheard.
    def started_on_w2() -> bool:
        lines = ledger.lines()
        return stranded <= {key for event, key, _, worker in lines
                            if event == "start" and worker == "w2"}

    wait_until(started_on_w2, 60, what="w1's tasks to start again on w2")
    wait_until(lambda: "w1" not in ledger.executing(by="worker"), 30,
               what="w1 to finish its tasks in isolation")
    assert "w1" not in names(client)

    network.restore("w1")
    wait_until(lambda: "w1" in names(client), 60, what="w1 to register again")

    assert client.gather(roots, timeout=120) == expected
    print(f"w1 cut off executing {len(stranded)} tasks; removed after {gave_up_after:.1f} s; "
          f"{ledger.count('start')} task runs for {GROUPS * (LEAVES + 1)} tasks")
    assert gave_up_after >= HEARTBEAT_TIMEOUT - 0.5  # the timeout, not a reset, removed it
    ended_on_w1 = {key for event, key, _, worker in ledger.lines()
                   if event == "end" and worker == "w1"}
    assert stranded <= ended_on_w1  # computed twice, once in isolation...
    assert {key: n for key, n in ends.items() if n != 1} == {}  # ...but ended once for us
    assert {root.key for root in roots} <= set(ends)
    assert client.scheduler_info()["counters"]["deaths"] == len(stranded)

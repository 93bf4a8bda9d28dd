"""The ready queue: ``following`` walks the tasks behind a queue's head in queue order (past
at most a few removed entries, which stay in the heap until they reach its top)."""

from __future__ import annotations

from hypothesis import given, strategies as st

from dsched.resources import EMPTY
from dsched.scheduler.queue import ReadyQueue
from dsched.scheduler.task import Task


@given(orders=st.lists(st.integers(0, 10_000), unique=True, min_size=1, max_size=60),
       removed=st.sets(st.integers(0, 59)), again=st.sets(st.integers(0, 59)),
       limit=st.integers(0, 20))
def test_following_gives_the_live_tasks_behind_the_head_in_order(orders, removed, again,
                                                                 limit):
    rq = ReadyQueue()
    tasks = [Task(f"t{order}", b"", EMPTY, 0, order, 0, None, "t") for order in orders]
    for t in tasks:
        q, _ = rq.push(t, {})
    for i in sorted(removed):
        if i < len(tasks) and tasks[i].queue is q and tasks[i] is not rq.head(q):
            rq.remove(tasks[i])
    for i in sorted(again & removed):  # queued again: its old entry stays in the heap
        if i < len(tasks) and tasks[i].queue is None:
            rq.push(tasks[i], {})
    live = sorted((t for t in tasks if t.queue is q), key=lambda t: t.order)
    assert live[0] is rq.head(q)
    found = list(rq.following(q, limit))
    assert found == live[1:1 + len(found)]
    if len(q.heap) - len(live) <= 3 * limit:  # few removed entries: none missed
        assert found == live[1:1 + limit]

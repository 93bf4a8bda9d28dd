"""Groups: the inputs of one dependent, brought together on one worker.

A task without inputs has no locality of its own, but the other inputs of its dependent (its
group) do: the roots of a reduction should run where their partial sum will. So the placer
sends such a task where its group runs or is held, and a worker that frees a slot while the
queue's head belongs to a group on other workers takes instead, from the next few tasks of
the same priority, the first whose group is on it or nowhere yet. A head is passed over at
most ``MAX_PASSES`` times; after that, or when nothing behind it qualifies, it starts on that
worker at once, so no worker idles and no head waits long for this rule. Without it, roots
alternate between workers as slots free up, and each partial sum fetches half its inputs
from another worker. The search (``choice.py``) asks ``group_workers`` where a group is;
``Groups.instead`` picks the task a worker takes.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from .backfill import Backfill
from .fit import Fit
from .queue import ReadyQueue, ShapeQueue
from .task import Task
from .worker import WorkerInfo

#: A dependent of more inputs than this forms no group: a wide reduction gains nothing from
#: one worker, and counting its inputs at each placement would cost quadratic time.
GROUP_LIMIT = 16
#: An input held on more workers than this (a broadcast) does not say where its group is,
#: nor does a group already spread over more workers than this.
SPREAD = 4
#: How many tasks behind a queue's head a worker looks at, and how many groups on other
#: workers it passes before it gives up and takes the head.
LOOKAHEAD = 32
MAX_REJECTED = 3
#: How many times one head may be passed over.
MAX_PASSES = 8

#: Where a task's group is, seen from one worker.
HERE, ELSEWHERE, NOWHERE, NO_GROUP = "here", "elsewhere", "nowhere", "no group"


def where(t: Task, address: str) -> str:
    """Where the group of ``t`` (the other inputs of its first dependent) is, seen from the
    worker at ``address``: one of them runs or is held there (HERE), only on other workers
    (ELSEWHERE), on none yet (NOWHERE); NO_GROUP without a dependent, for one too wide, or
    for a group spread over more than ``SPREAD`` workers."""
    found = group_workers(t)
    if found is None:
        return NO_GROUP
    if not found:
        return NOWHERE
    return HERE if address in found else ELSEWHERE


def group_workers(t: Task) -> dict[str, None] | None:
    """The workers that run or hold the other inputs of ``t``'s first dependent; None when
    there is no group (see ``where``)."""
    for d in t.dependents:
        deps = d.deps
        if len(deps) > GROUP_LIMIT:
            return None
        found: dict[str, None] = {}
        for s in deps:
            if s.processing_on is not None:
                found[s.processing_on] = None
            elif s.who_has and len(s.who_has) <= SPREAD:
                found.update(s.who_has)
        return found if len(found) <= SPREAD else None
    return None


class Groups:
    """The group rule of one placer. It reads the ready ``queue`` (the tasks behind a head),
    the ``fit`` (whether a worker can start one) and the ``backfill`` reservation (whether
    starting one would delay it), and changes only how often a queue's head was passed over."""

    def __init__(self, queue: ReadyQueue, fit: Fit, backfill: Backfill):
        self.queue = queue
        self.fit = fit
        self.backfill = backfill

    def instead(self, t: Task, q: ShapeQueue, w: WorkerInfo, x: Task | None,
                xq: ShapeQueue | None) -> Task:
        """The task to start on ``w``, which can start ``t`` (the head of ``q``, without
        inputs): ``t``, unless its group is on other workers only and it has been passed
        over fewer than ``MAX_PASSES`` times; then the first of the next ``LOOKAHEAD`` tasks
        of its priority whose group is on ``w`` or nowhere, if ``w`` can start it (``x`` of
        ``xq`` holds the reservation it must not delay)."""
        if q.passed_head is not t:
            q.passed_head, q.passed = t, 0
        elif q.passed >= MAX_PASSES:
            return t
        address = w.address
        if where(t, address) is not ELSEWHERE:
            return t
        priority = t.priority
        # where() reads only the first dependent: judge each dependent once
        judged = {next(iter(t.dependents)): ELSEWHERE}
        rejected = 0
        startable, blocks = self.fit.startable, self.backfill.blocks
        for u in self.queue.following(q, LOOKAHEAD):
            if u.priority != priority:
                break
            if u.deps or not u.dependents:
                continue
            d = next(iter(u.dependents))
            verdict = judged.get(d)
            if verdict is None:
                verdict = judged[d] = where(u, address)
                if verdict is ELSEWHERE:
                    rejected += 1
                    if rejected == MAX_REJECTED:
                        break
            if (verdict is HERE or verdict is NOWHERE) and startable(u, q, w) and not (
                    x is not None and blocks(u, q, w, x, xq)):
                q.passed += 1
                return u
        return t

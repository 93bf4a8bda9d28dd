"""Groups: the inputs of one dependent, brought together on one worker.

A task without inputs has no locality of its own, but the other inputs of its dependent (its
group) do: the roots of a reduction should run where their partial sum will. So the placer
sends such a task where its group runs or is held, and a worker that frees a slot while the
queue's head belongs to a group on other workers takes, from the next few tasks of the same
priority, the first whose group is on it or nowhere yet. The head waits a moment for a slot
where its group is; when nothing behind it qualifies, it starts here at once, so no worker
idles for this rule. Without it, roots alternate between workers as slots free up, and each
partial sum fetches half its inputs from another worker.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .queue import ShapeQueue
from .task import Task
from .worker import WorkerInfo

if TYPE_CHECKING:
    from .placer import Placer

#: A dependent of more inputs than this forms no group: a wide reduction gains nothing from
#: one worker, and counting its inputs at each placement would cost quadratic time.
GROUP_LIMIT = 32
#: How many tasks behind a queue's head a worker looks for one whose group it holds.
LOOKAHEAD = 32


def group_on(t: Task, address: str) -> bool | None:
    """Where the group of ``t`` (the other inputs of its first dependent) is: True if one of
    them runs or is held on ``address``, False if only on other workers, None if nowhere yet
    (or the dependent is too wide to form a group)."""
    found = None
    for d in t.dependents:
        deps = d.deps
        if len(deps) > GROUP_LIMIT:
            return None
        for s in deps:
            on = s.processing_on
            if on is not None:
                if on == address:
                    return True
                found = False
            elif s.who_has:
                if address in s.who_has:
                    return True
                found = False
        return found
    return None


def group_workers(t: Task) -> dict[str, None]:
    """The workers that run or hold the other inputs of ``t``'s first dependent."""
    found: dict[str, None] = {}
    for d in t.dependents:
        deps = d.deps
        if len(deps) <= GROUP_LIMIT:
            for s in deps:
                if s.processing_on is not None:
                    found[s.processing_on] = None
                elif s.who_has:
                    found.update(s.who_has)
        break
    return found


class Groups:
    """The group rule of one placer."""

    def __init__(self, placer: Placer):
        self.placer = placer

    def find(self, t: Task, q: ShapeQueue, x: Task | None,
             xq: ShapeQueue | None) -> WorkerInfo | None:
        """The best of the workers where ``t``'s group is that can start it now, or None."""
        workers = self.placer.workers
        found = [workers[a] for a in group_workers(t) if a in workers]
        if not found:
            return None
        return self.placer.best_of(t, q, found, x, xq)

    def instead(self, t: Task, q: ShapeQueue, w: WorkerInfo, x: Task | None,
                xq: ShapeQueue | None) -> Task:
        """The task to start on ``w``, which can start ``t`` (the head of ``q``, without
        inputs): ``t``, unless its group is on other workers and not on ``w``; then the first
        of the next ``LOOKAHEAD`` tasks of its priority whose group is on ``w`` or nowhere,
        if ``w`` can start it (``x`` of ``xq`` holds the reservation it must not delay)."""
        address = w.address
        if group_on(t, address) is not False:
            return t
        placer = self.placer
        priority = t.priority
        for u in placer.queue.following(q, LOOKAHEAD):
            if u.priority != priority:
                break
            if u.deps or u is t or group_on(u, address) is False:
                continue
            if placer.startable(u, q, w) and not (
                    x is not None and placer.backfill.blocks(u, q, w, x, xq)):
                return u
        return t

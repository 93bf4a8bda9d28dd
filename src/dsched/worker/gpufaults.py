"""What a worker does when one of its GPU devices reports a fatal fault, and when an operator
releases the device again: fencing, for ``WorkerState``.

A faulted device is fenced in the ledger's book (``dsched.devices``): nothing is granted on it.
The work running on it is stopped: a job ends ``lost`` with the fault as its reason (its
supervisor writes it), and so goes back to the queue where ``--requeue`` allows; a Python task
goes back to the scheduler as refused, with the reason, and runs elsewhere within its budget.
Work granted the device that has not started goes back the same way. The scheduler hears
``GpuFenced``, and again at each registration, until the device is released (``UnfenceGpu``),
which ``GpuReleased`` says.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..protocol import ops
from .actions import Action, KillJob, KillTask
from .events import GpuFaulted
from .task import RUNNING, WorkerTaskState

if TYPE_CHECKING:
    from .state import WorkerState

#: Why a task is stopped (``WorkerTask.stopped_for``, ``KillJob.why``): its device failed.
FAULT = "fault"


def faulted(state: WorkerState, event: GpuFaulted) -> list[Action]:
    """Fence ``event.index``; stop and hand back the work on it."""
    reason = " ".join(event.reason.split())  # one line: it travels as a supervisor's order
    if not state.slots.ledger.book.fence(event.index, reason):
        return []  # not one of ours, or fenced already
    actions: list[Action] = [ops.GpuFenced(event.index, reason)]
    for task in sorted(state.tasks.values(), key=lambda t: t.seq):
        if task.state is WorkerTaskState.EXECUTING and event.index in task.gpus:
            task.state, task.stopped_for, task.stop_reason = (
                WorkerTaskState.CANCELLING, FAULT, reason)
            actions.append(KillJob(task.key, FAULT, reason) if task.job is not None
                           else KillTask(task.key))
        elif task.state not in RUNNING and event.index in task.granted:  # ready, or fetching
            actions.append(ops.TaskRejected(task.key, reason))
            actions += state.forget(task)
    return actions


def fenced(state: WorkerState, gpus: tuple[int, ...]) -> str:
    """Why work granted ``gpus`` cannot run here ("" when it can): one of them is fenced (the
    grant crossed the fence on the wire, or came before the scheduler heard of it)."""
    fences = state.slots.ledger.book.fenced
    return next((fences[d] for d in gpus if d in fences), "")


def unfence(state: WorkerState, event: ops.UnfenceGpu) -> list[Action]:
    """An operator released the device: it takes work again."""
    if not state.slots.ledger.book.unfence(event.index):
        return []
    return [ops.GpuReleased(event.index)]


def announce(state: WorkerState) -> list[Action]:
    """The devices fenced now, said again to a scheduler that has just accepted this worker
    (it may be a new one, or one that forgot)."""
    return [ops.GpuFenced(index, reason)
            for index, reason in sorted(state.slots.ledger.book.fenced.items())]

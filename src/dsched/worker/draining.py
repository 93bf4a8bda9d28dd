"""What a worker does when its drain deadline passes, for ``WorkerState``: every running task
and job is stopped for shutdown. A task goes back to the scheduler as refused by a closing
worker, never as an error of its own: at once when it runs on a thread (which cannot be
stopped; its end is ignored, and one asked to stop before is left so too), else once its
process is gone.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .actions import SHUTDOWN, Action, KillJob, KillTask
from .events import DrainTimedOut
from .task import WorkerTaskState

if TYPE_CHECKING:
    from .state import WorkerState


def timed_out(state: WorkerState, event: DrainTimedOut) -> list[Action]:
    actions: list[Action] = []
    for task in sorted(state.tasks.values(), key=lambda t: t.seq):
        on_thread = task.job is None and not task.gpus
        if task.state is WorkerTaskState.EXECUTING:
            task.state, task.stopped_for = WorkerTaskState.CANCELLING, SHUTDOWN
            if not on_thread:
                actions.append(KillJob(task.key, SHUTDOWN) if task.job is not None
                               else KillTask(task.key))
        elif not (task.state is WorkerTaskState.CANCELLING and on_thread):
            continue
        if on_thread:
            state.slots.free(task)
            actions += [state.stop_report(task), *state.end_without_result(task)]
    return actions

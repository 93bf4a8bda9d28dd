"""Task reports from the scheduler, applied to the client's futures.

``TaskFinished``, ``ResultMoved`` (a finished result is held elsewhere now: copied off a
draining worker, or computed again after a loss), ``TaskErred``, ``TaskCancelled`` (this
client's cancel took effect) and ``TaskWaiting`` (the reason no connected worker can run a
task yet, or none once one can). Runs on the client's loop.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from ..errors import TaskFailedError
from ..protocol import ops
from .future import FutureState, FutureStatus

logger = logging.getLogger("dsched.client")

TASK_REPORTS = frozenset((ops.TaskFinished, ops.ResultMoved, ops.TaskErred, ops.TaskCancelled,
                          ops.TaskWaiting))


def apply_task_report(states: Mapping[str, FutureState], op: Any) -> None:
    kind = type(op)
    if kind is ops.TaskWaiting:
        reason = op.reason or ""
        for key in op.keys:
            state = states.get(key)
            if state is not None:
                state.reason = reason
        if reason:
            logger.warning("%d task(s) cannot run yet: %s", len(op.keys), reason)
        return
    state = states.get(op.key)
    if state is None:
        return  # released by now
    if kind is ops.TaskFinished:
        state.who_has = op.who_has
        state.nbytes = op.nbytes
        state.finish(FutureStatus.finished)
    elif kind is ops.ResultMoved:
        state.who_has = op.who_has
    elif kind is ops.TaskErred:
        if op.exception:
            state.error_from_payload(op.exception, op.text, op.error)
        else:
            state.finish(FutureStatus.error, exception=TaskFailedError(op.text, op.error),
                         traceback=None, reason=op.error)
    else:
        state.finish(FutureStatus.cancelled, reason=op.reason)

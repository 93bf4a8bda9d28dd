"""Task reports from the scheduler, applied to the client's futures.

``task-finished`` (also sent again when a lost result was computed anew elsewhere: it says
where to fetch it now), ``task-erred``, ``task-cancelled`` and ``task-waiting`` (the reason no
connected worker can run a task yet, or none once one can). Runs on the client's loop.
"""

from __future__ import annotations

import logging
from typing import Mapping

from ..errors import TaskFailedError
from .future import FutureState, FutureStatus

logger = logging.getLogger("dsched.client")

TASK_REPORTS = frozenset(("task-finished", "task-erred", "task-cancelled", "task-waiting"))


def apply_task_report(states: Mapping[str, FutureState], op: dict) -> None:
    kind = op["op"]
    if kind == "task-waiting":
        reason = op.get("reason") or ""
        for key in op.get("keys", ()):
            state = states.get(key)
            if state is not None:
                state.reason = reason
        if reason:
            logger.warning("%d task(s) cannot run yet: %s", len(op.get("keys", ())), reason)
        return
    state = states.get(op["key"])
    if state is None:
        return  # released by now
    if kind == "task-finished":
        state.who_has = op.get("who_has") or ()
        state.nbytes = op.get("nbytes", state.nbytes)
        state.finish(FutureStatus.finished)
    elif kind == "task-erred":
        text, error = op.get("text") or "", op.get("error") or ""
        if op.get("exception"):
            state.error_from_payload(op["exception"], text, error)
        else:
            state.finish(FutureStatus.error, exception=TaskFailedError(text, error),
                         traceback=None, reason=error)
    else:
        state.finish(FutureStatus.cancelled, reason=op.get("reason") or "")

"""The scheduler's pure core: SchedulerState with its events, actions and placement policy.

``SchedulerState.handle(event) -> list[action]`` is the one mutator; the async shell
(``server.py``) turns messages into events and carries out the actions. See ``events.py`` and
``actions.py`` for the vocabulary, ``policy.py`` for the placement rules.

Pure: no I/O, no clock.
"""

from .actions import (
    Action, CancelTask, CloseWorker, Execute, FreeResults, Log, Replicate, ReportCancelled,
    ReportErred, ReportFinished, ReportMoved, ReportWaiting, RetireWorker,
)
from .events import (
    CancelConfirmed, CancelRequested, ClientDisconnected, Event, KeysReleased, MissingData,
    ReplicateFailed, ResultReplicated, TaskErred, TaskFinished, TaskRejected, TaskSpec,
    TasksSubmitted, Tick, WorkerDraining, WorkerHeartbeat, WorkerJoined, WorkerLeft,
)
from .state import SchedulerState
from .task import Task, TaskState
from .worker import WorkerInfo

__all__ = [
    "Action", "CancelConfirmed", "CancelRequested", "CancelTask", "ClientDisconnected",
    "CloseWorker", "Event", "Execute", "FreeResults", "KeysReleased", "Log", "MissingData",
    "Replicate", "ReplicateFailed", "ReportCancelled", "ReportErred", "ReportFinished",
    "ReportMoved", "ReportWaiting", "ResultReplicated", "RetireWorker", "SchedulerState",
    "Task", "TaskErred", "TaskFinished", "TaskRejected", "TaskSpec", "TaskState",
    "TasksSubmitted", "Tick", "WorkerDraining", "WorkerHeartbeat", "WorkerInfo", "WorkerJoined",
    "WorkerLeft",
]

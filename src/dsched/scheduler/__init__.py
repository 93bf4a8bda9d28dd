"""The scheduler: its pure core, ``SchedulerState``, and the daemon around it.

``SchedulerState.handle(event) -> list[action]`` is the one mutator; the events and actions
are in ``events`` and ``actions`` (import those modules: several names, such as
``TaskFinished``, are both an event a worker reports and an action that tells clients, one
name per outcome end to end). ``server.py`` is the async shell; ``main.py`` runs it as a
daemon.

Pure (this package's core modules): no I/O, no clock.
"""

from . import actions, events
from .state import SchedulerState
from .task import Task, TaskState
from .worker import WorkerInfo

__all__ = ["SchedulerState", "Task", "TaskState", "WorkerInfo", "actions", "events"]

"""The words for where a job stands, shared by the scheduler, the client and the ``sched``
command: its ``state``, one of a few lowercase words, and for a job that is not running one
``reason`` from a fixed vocabulary, with a detail in words ("waiting for gpu0 on w1, reserved
for job 12").

Apart from ``jobs.py`` because they are enums, and ``enum`` costs a ``sched submit`` (which
names no state) about 4 ms to load.

Pure: no I/O.
"""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    queued = "queued"  #: waits to be dispatched (``reason`` says why)
    held = "held"  #: waits for ``sched release``
    assigned = "assigned"  #: an attempt is on its way to a worker, not yet started
    running = "running"  #: an attempt runs
    completed = "completed"  #: its command exited 0
    failed = "failed"  #: it exited non-zero (with no retries left) or could not start
    cancelled = "cancelled"
    timeout = "timeout"  #: it ran past its time limit and was killed
    lost = "lost"  #: its worker was lost while it ran, and it is not to be queued again

    def __str__(self) -> str:
        return self.value


#: States a job does not leave.
ENDED = frozenset((JobState.completed, JobState.failed, JobState.cancelled, JobState.timeout,
                   JobState.lost))


class Reason(str, Enum):
    """Why a job that is not running is not running."""

    resources = "resources"  #: what it needs is in use (a worker that has it exists)
    priority = "priority"  #: other jobs are ahead of it
    dependency = "dependency"  #: a job it runs after has not ended
    dependency_never_satisfied = "dependency_never_satisfied"  #: an --after-ok job failed
    held = "held"
    no_workers = "no_workers"  #: no worker that takes work is connected
    missing_resources = "missing_resources"  #: no worker defines a resource it needs
    too_large = "too_large"  #: it needs more than any one worker offers
    refused = "refused"  #: a worker refused its last attempt; the next waits out a back-off
    recovering = "recovering"  #: the scheduler restarted and waits for its workers
    worker_lost = "worker_lost"  #: the worker running it went away
    starting = "starting"  #: assigned: on its way to a worker that starts it at once
    idle = "idle"  #: cancelled by its worker: it held its GPUs at 0% for too long

    def __str__(self) -> str:
        return self.value

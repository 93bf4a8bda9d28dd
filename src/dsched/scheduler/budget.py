"""The failure budget: how often an attempt may fail, by kind of failure, before its task or
job fails, and how long it waits before the next try.

One table, ``BUDGETS``, holds every kind: what counts it, what bounds it, the error kind a task
out of budget ends with and the words it is told, and the back-off. ``FailureBudget`` counts a
failure against it and says what follows; the graph acts on that (``TaskGraph.attempt_failed``)
for Python tasks and the attempts of shell-command jobs alike. An attempt of a job is a new
task each time, so its failures count against its job. A failure that is not the task's fault
(a draining worker's refusal; a worker that died while the task was only sent ahead to it, or
at the end of its drain) is not counted: the task runs again at once.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, NamedTuple

from .actions import WARNING

if TYPE_CHECKING:
    from .outbox import Outbox
    from .task import Task


class Failure(str, Enum):
    raised = "raised"  #: it raised (a job: its command exited non-zero)
    refused = "refused"  #: a worker refused to start it
    died = "died"  #: its worker died, or went away, while it ran
    lost = "lost"  #: its result could not be fetched from any worker that held it

    def __str__(self) -> str:
        return self.value


RAISED, REFUSED, DIED, LOST = Failure.raised, Failure.refused, Failure.died, Failure.lost


class Budget(NamedTuple):
    counter: str  #: the attribute of the Task (of the Job, for a job's attempt) that counts them
    limit: str  #: how many are allowed (one more ends it): the task's ``retries``, or a setting
    error: str  #: the error kind a task out of budget ends with
    backoff: float  #: seconds before the next try after the first failure, doubling; 0: at once
    text: str  #: what it is told then: {n} failures, {key}, {worker}, {text}, {limit}, {what}


BUDGETS: dict[Failure, Budget] = {
    RAISED: Budget("exceptions", "retries", "exception", 0.0, "{text}"),
    REFUSED: Budget("rejections", "max_rejections", "rejected", 0.5,
                    "workers refused {what} {n} times; the last, {worker}, said: {text}"),
    DIED: Budget("deaths", "allowed_failures", "killed_worker", 0.0,
                 "{n} worker(s) died while running task {key} (allowed_failures={limit}); "
                 "the last: {text}"),
    LOST: Budget("losses", "allowed_failures", "unfetchable", 0.0,
                 "no worker could send the result of {key} to the workers that needed it, "
                 "{n} times (the last tried: {worker}): {text}"),
}


def next_try(failure: Failure, n: int, limit: int) -> float | None:
    """Seconds before the next try after the ``n``-th failure of a kind (0: at once), or None
    when ``limit`` allows fewer."""
    if n > limit:
        return None
    return BUDGETS[failure].backoff * 2 ** (n - 1)


class FailureBudget:
    """Counts failed attempts against ``BUDGETS``. ``allowed_failures`` and ``max_rejections``
    are the settings of those names (``policy.py``)."""

    def __init__(self, out: Outbox, *, allowed_failures: int, max_rejections: int):
        self.out = out
        self.limits = {"allowed_failures": allowed_failures, "max_rejections": max_rejections}

    def charge(self, t: Task, failure: Failure, text: str,
               worker: str) -> tuple[float | None, str]:
        """Count a failure of the attempt ``t`` (on ``worker``; ``text``: how it failed)
        against its budget, and say what follows: the seconds before the next try (0: at
        once) and, when it is out of budget, None and the words it ends with. A task that
        tries again says so in the log; a job's attempt leaves that to the job book."""
        budget = BUDGETS[failure]
        record = t if t.job is None else t.job
        n = getattr(record, budget.counter) + 1
        setattr(record, budget.counter, n)
        limit = t.retries if budget.limit == "retries" else self.limits[budget.limit]
        delay = next_try(failure, n, limit)
        out = self.out
        if failure is REFUSED:
            out.counters["rejected"] += 1
        if delay is None:
            return None, budget.text.format(n=n, key=t.key, worker=worker, text=text,
                                            limit=limit,
                                            what="this task" if t.job is None else "it")
        if t.job is None and failure is RAISED:
            out.log_failure(t.prefix, text, "Task %s raised on %s; retrying (%d retries left)",
                            t.key, worker, limit - n)
        elif t.job is None and failure is REFUSED:
            out.log(WARNING, "Worker %s refused task %s (%s); trying again in %g s", worker,
                    t.key, text, delay)
        return delay, ""

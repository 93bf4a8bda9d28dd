"""The worker's book of job attempts: those it has started and what it has heard of each, the
outcomes it keeps until the scheduler acknowledges them, the job lease, and whether a session
with the scheduler is up (jobs start only then); and the check of a job as an Execute carries it.

``WorkerState`` holds one and does the slot and resource accounting of jobs as it does that of
tasks; the rest of what it decides about jobs it asks this book.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from numbers import Real
from typing import Any

from ..jobs import parse_job_key
from ..protocol.ops import AttemptAck, AttemptEnded, AttemptStarted, Lease, Proceed
from .actions import Action, DropJob, ExtendLease, ForgetAttempt, ProceedJob
from .events import AttemptsRecovered, SessionOpened


def job_error(key: str, job: Any) -> str:
    """What is wrong with the job of an Execute, in one line; "" when nothing is."""
    if parse_job_key(key) is None:
        return f"{key!r} is not the key of a job attempt (job-<id>.<attempt>)"
    if not isinstance(job, dict):
        return "the job is not a map"
    command = job.get("command")
    if not (isinstance(command, (list, tuple)) and command
            and all(isinstance(part, str) for part in command)):
        return "its command is not a non-empty list of strings"
    env = job.get("env", {})
    if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str)
                                          for k, v in env.items())):
        return "its env does not map names to strings"
    if job.get("cwd") is not None and not isinstance(job["cwd"], str):
        return "its cwd is not a string"
    limit = job.get("time_limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, Real)
                              or not limit > 0):
        return f"its time limit is not a positive number of seconds: {limit!r:.40}"
    return ""


class AttemptBook:
    """See the module docstring. ``WorkerState`` changes it; nothing else does."""

    def __init__(self, job_lease: float):
        self.job_lease = job_lease
        self.registered = False
        #: Until when (the worker's monotonic clock) running jobs may run unheard.
        self.lease_until = 0.0
        #: Attempts started (StartJob given) and not ended: their AttemptStarted once heard.
        self.running: dict[str, AttemptStarted | None] = {}
        self.gpus: dict[str, tuple[int, ...]] = {}
        #: Outcomes not yet acknowledged by the scheduler.
        self.kept: dict[str, AttemptEnded] = {}
        #: Attempts that end without starting (EndUnstartedJob given, AttemptEnded not heard).
        self.ending_unstarted: set[str] = set()
        #: Attempts sent ahead of the scheduler's commit (``Execute.hold``), not yet told to
        #: proceed: their supervisors (if started) prepare them and wait.
        self.held: set[str] = set()

    def may_start(self, now: float) -> bool:
        """Whether a job may start at ``now`` (the worker's monotonic clock): only while
        registered, so that its start is reported, and within the lease. Past the lease the
        scheduler may already have given this worker's jobs up and queued them elsewhere; a
        job then waits for a new lease, or is dropped with the session."""
        return self.registered and now < self.lease_until

    def known(self, key: str) -> list[Action] | None:
        """The answer to an Execute of an attempt this worker knows (it never starts one
        twice): nothing while it runs, its outcome once ended; None for an unknown one."""
        if key in self.kept:
            return [self.kept[key]]
        if key in self.running or key in self.ending_unstarted:
            return []
        return None

    # -- events that concern the book alone ---------------------------------------------------

    def opened(self, event: SessionOpened) -> list[Action]:
        """Registered: jobs may start, and the lease runs from when the Register was sent."""
        self.registered = True
        return self._extend(event.sent + self.job_lease)

    def leased(self, event: Lease) -> list[Action]:
        return self._extend(event.sent + self.job_lease)

    def _extend(self, until: float) -> list[Action]:
        """Leases only grow (a Lease may arrive after a later one)."""
        if until <= self.lease_until:
            return []
        self.lease_until = until
        return [ExtendLease(until)] if self.running else []

    def proceed(self, event: Proceed) -> list[Action]:
        """The scheduler committed these held attempts: those started go on (the others
        start unheld)."""
        going = [key for key in event.keys if key in self.held]
        self.held.difference_update(going)
        return [ProceedJob(key) for key in going if key in self.running]

    def acknowledged(self, event: AttemptAck) -> list[Action]:
        return [ForgetAttempt(key) for key in event.keys if self.kept.pop(key, None)]

    def recovered(self, event: AttemptsRecovered) -> list[Action]:
        """What an earlier worker process left: ended attempts, kept until acknowledged."""
        for ended in event.ended:
            self.kept[ended.key] = ended
        return []

    # -- what WorkerState tells it ----------------------------------------------------------

    def started(self, key: str, gpus: tuple[int, ...]) -> None:
        self.running[key] = None
        self.gpus[key] = gpus

    def dropped(self, key: str) -> DropJob:
        """The held attempt ``key``, started, never runs: the session that sent it ended
        before its Proceed. The scheduler, which lost the session too, finds it unlisted when
        the worker registers again, and puts the job back in its queue."""
        del self.running[key], self.gpus[key]
        return DropJob(key)

    def heard_started(self, report: AttemptStarted) -> list[Action]:
        """Its supervisor spawned it: tell the scheduler (once)."""
        if report.key not in self.running or self.running[report.key] is not None:
            return []
        self.running[report.key] = report
        return [report]

    def heard_ended(self, report: AttemptEnded) -> list[Action]:
        """Keep the outcome of a running attempt, or of one that ended unstarted."""
        key = report.key
        if key in self.running:
            del self.running[key], self.gpus[key]
        elif key in self.ending_unstarted:
            self.ending_unstarted.discard(key)
        else:
            return []  # told twice
        self.kept[key] = report
        return [report]

    def registration(self) -> tuple[AttemptStarted | AttemptEnded, ...]:
        """Every attempt known here, as a Register lists them. One whose supervisor has not
        yet said it started is listed with pid 0 and no log: it is being started, and its own
        AttemptStarted follows."""
        running = tuple(started or AttemptStarted(key, 0, "", self.gpus[key], 0.0)
                        for key, started in self.running.items())
        return running + tuple(self.kept.values())

    def validate(self, running_jobs: set[str], unstarted_jobs: set[str]) -> None:
        assert set(self.running) == running_jobs, (set(self.running), running_jobs)
        assert set(self.gpus) == running_jobs
        assert not (set(self.kept) & (running_jobs | unstarted_jobs)), self.kept
        assert not (self.ending_unstarted & (running_jobs | unstarted_jobs | set(self.kept)))
        assert self.held <= running_jobs | unstarted_jobs, self.held

"""Reconciliation: what the journal says of a worker's jobs against what the worker reports.

When a worker registers (after a network fault, a restart of the scheduler or of the worker)
it lists the job attempts it knows: those still running, and those that ended and whose end
the scheduler has not yet acknowledged. ``reconcile`` compares that with the jobs the
scheduler believes are on that worker and says, for each, what to do: adopt a running attempt;
record an ended one; kill an attempt that is stale (an older attempt of a job) or unknown;
acknowledge an end that changes nothing; put back a job whose attempt never started; and give
up on a job whose started attempt the worker no longer knows. It decides only; the JobBook
carries the decisions out.

Pure: no I/O, no clock, no changes to what it is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Union

from ..jobs import parse_job_key
from ..protocol import ops
from .job import ON_WORKER, Job


@dataclass(frozen=True)
class Adopt:
    """The job's current attempt runs on the worker: it is running there."""

    job: int
    report: ops.AttemptStarted


@dataclass(frozen=True)
class Record:
    """The job's current attempt ended on the worker: record how (and acknowledge it)."""

    job: int
    report: ops.AttemptEnded


@dataclass(frozen=True)
class Kill:
    """An attempt runs that must not: an older attempt, one of a job that has ended or been
    put elsewhere, or one of a job this scheduler does not know."""

    key: str
    why: str


@dataclass(frozen=True)
class Ack:
    """An ended attempt the job book has nothing to learn from: the worker may forget it."""

    key: str


@dataclass(frozen=True)
class PutBack:
    """The job's attempt was sent to the worker but never started there: queue it again."""

    job: int


@dataclass(frozen=True)
class Vanished:
    """The job's attempt had started on the worker, or may have (its machine restarted), and
    the worker no longer knows of it."""

    job: int


Decision = Union[Adopt, Record, Kill, Ack, PutBack, Vanished]
Report = Union[ops.AttemptStarted, ops.AttemptEnded]


def reconcile(jobs: Mapping[int, Job], worker: str, reports: Iterable[Report],
              expected: Iterable[int], machine_restarted: bool = False) -> list[Decision]:
    """What to do about the worker named ``worker``, which reports ``reports``, given the job
    book ``jobs`` and the ids of the jobs it believes are on that worker (``expected``); in the
    order of the reports, then the expected jobs the worker did not report. A worker does not
    wait for the disk to record an attempt (no fsync per job), so one whose
    ``machine_restarted`` may have lost the record of an attempt that started: an expected job
    it does not report is then given up on, as one known to have started."""
    decisions: list[Decision] = []
    reported: set[int] = set()
    for report in reports:
        running = type(report) is ops.AttemptStarted
        parsed = parse_job_key(report.key)
        job = jobs.get(parsed[0]) if parsed is not None else None
        if job is not None and job.state in ON_WORKER and job.worker == worker \
                and job.attempt == parsed[1]:
            reported.add(job.id)
            decisions.append(Adopt(job.id, report) if running else Record(job.id, report))
        elif running:
            if job is None:
                why = "it is of a job this scheduler does not know"
            elif job.ended:
                why = f"job {job.id} has ended ({job.state.value})"
            else:
                why = f"it is not the current attempt of job {job.id}"
            decisions.append(Kill(report.key, why))
        else:
            decisions.append(Ack(report.key))
    for job_id in expected:
        job = jobs[job_id]
        if job_id in reported or job.state not in ON_WORKER or job.worker != worker:
            continue
        decisions.append(Vanished(job_id) if job.started or machine_restarted
                         else PutBack(job_id))
    return decisions

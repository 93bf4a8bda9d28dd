"""What the ``sched`` command prints about jobs and workers, as text: the tables of ``sched
status`` and ``sched workers``, the line for a job that ended, a summary, a progress line.

Pure: no I/O; times come in as arguments (wall-clock seconds, as job views carry them).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from ..jobstates import ENDED, JobState

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:
    from typing import Any, Iterable, Sequence

#: A job's view, as the scheduler sends it.
View = Mapping[str, object]
_ENDED = [state.value for state in JobState if state in ENDED]
#: The states of jobs not ended, as a progress line counts them: the busiest first.
_WAITING = ["running", "assigned", "queued", "held"]


def duration(seconds: float | None) -> str:
    """``0.4s``, ``59.9s``, ``3m05s``, ``2h03m``, ``1d04h``; empty for None."""
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def clock(when: float | None, now: float) -> str:
    """A wall-clock time in local time: ``18:24:13`` today, ``11-22 18:24`` on another day."""
    return "" if when is None else _clock(when, dt.datetime.fromtimestamp(now).date())


def _clock(when: float | None, today: dt.date) -> str:
    """``clock``, given the day of ``now`` (a table finds it once, not once a cell)."""
    if when is None:
        return ""
    moment = dt.datetime.fromtimestamp(when)
    hour, minute = moment.hour, moment.minute  # as strftime's %H:%M, a quarter of its cost
    if moment.date() == today:
        return f"{hour:02d}:{minute:02d}:{moment.second:02d}"
    return f"{moment.month:02d}-{moment.day:02d} {hour:02d}:{minute:02d}"


def elapsed(view: View, now: float) -> float | None:
    """How long the job ran (runs, for one that has not ended)."""
    if view.get("duration") is not None:
        return view["duration"]
    started = view.get("started")
    if started is None or view["state"] in _ENDED:
        return None
    return max(0.0, now - started)


def reason(view: View) -> str:
    """Why the job is in its state, in words (empty for a job that runs or completed)."""
    return view.get("detail") or view.get("reason") or ""


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Columns as wide as their widest cell, two spaces apart; the last one not padded."""
    rows = [list(header), *(list(row) for row in rows)]
    widths = [max(map(len, column)) for column in zip(*rows)]
    return ["  ".join(map(str.ljust, row, widths)).rstrip() for row in rows]


JOB_COLUMNS = ("ID", "NAME", "STATE", "RESOURCES", "WORKER", "GPUS", "SUBMITTED", "STARTED",
               "DURATION", "EXIT", "REASON")


def job_label(view: View) -> str:
    """How a job is named: ``12``, or ``12_3`` for the element of array 12 with index 3."""
    if view.get("array_id") is not None:
        return f"{view['array_id']}_{view['array_index']}"
    return str(view["id"])


def _id_cell(view: View) -> str:
    """The ID column: an array shows its indices, as it was submitted (``12_[0-999%8]``)."""
    array = view.get("array")
    if array:
        indices = array["indices"] or f"0-{array['size'] - 1}"  # an array of lines
        limit = f"%{array['limit']}" if array["limit"] and "%" not in indices else ""
        return f"{view['id']}_[{indices}{limit}]"
    return job_label(view)


def job_table(views: Sequence[View], now: float) -> list[str]:
    """``sched status``: one row a job (an array is one row, its elements counted by state in
    its reason), its reason last (the widest)."""
    today = dt.datetime.fromtimestamp(now).date()
    return table(JOB_COLUMNS, ([
        _id_cell(v), v["name"], v["state"], v["resources"], v["worker"],
        ",".join(map(str, v["gpus"])), _clock(v["submitted"], today),
        _clock(v["started"], today),
        duration(elapsed(v, now)), "" if v["exit_code"] is None else str(v["exit_code"]),
        reason(v)] for v in views))


def _amount(value: float, name: str = "") -> str:
    """A quantity as ``sched workers`` shows it: GPU memory in GB (``80G``)."""
    return f"{value / 1e9:g}G" if name == "GPU_MEMORY" else f"{value:g}"


def _gpu(gpu: Mapping[str, Any]) -> str:
    users = "+".join(f"job {job}" for job in gpu["jobs"]) or "free"
    use = "" if gpu.get("utilization") is None else f" {gpu['utilization']:.0%} busy"
    fenced = f" FENCED ({gpu['fenced']})" if gpu.get("fenced") else ""
    return f"{gpu['index']}: {users}{use}{fenced}"


WORKER_COLUMNS = ("WORKER", "ADDRESS", "SLOTS", "RESOURCES (USED/TOTAL)", "FREE", "GPUS",
                  "CONTAINMENT", "JOBS")


def worker_table(workers: Sequence[Mapping[str, Any]]) -> list[str]:
    """``sched workers``: one row a worker; slots busy of its threads; each resource used of
    its total, and what is free; each GPU with the jobs on it; how it kills what its jobs
    start (``cgroup``, ``subreaper``); the jobs it runs."""
    rows = []
    for w in workers:
        resources = w["resources"]
        name = w["name"] + (" (draining)" if w["draining"] else "")
        rows.append([
            name, w["address"], f"{w['busy']}/{w['nthreads']}",
            " ".join(f"{n}={_amount(r['used'], n)}/{_amount(r['total'], n)}"
                     for n, r in sorted(resources.items())),
            " ".join(f"{n}={_amount(r['free'], n)}" for n, r in sorted(resources.items())),
            ", ".join(_gpu(gpu) for gpu in w["gpus"]), w.get("containment", ""),
            ",".join(map(str, w["jobs"]))])
    return table(WORKER_COLUMNS, rows)


def ended_line(view: View) -> str:
    """``job 4 (train) failed after 2.1s: exited with code 3``."""
    name = f" ({view['name']})" if view["name"] else ""
    took = duration(view.get("duration"))
    after = f" after {took}" if took else ""
    why = reason(view)
    return f"job {job_label(view)}{name} {view['state']}{after}" + (f": {why}" if why else "")


def _counts(views: Iterable[View], states: Sequence[str]) -> list[str]:
    counts: dict[str, int] = {}
    for view in views:
        counts[view["state"]] = counts.get(view["state"], 0) + 1
    return [f"{counts[state]} {state}" for state in states if counts.get(state)]


def summary(views: Sequence[View]) -> str:
    """``4 jobs: 3 completed, 1 failed``."""
    s = "s" if len(views) != 1 else ""
    states = _counts(views, _ENDED + _WAITING)
    return f"{len(views)} job{s}: {', '.join(states)}" if states else f"{len(views)} job{s}"


def count_line(counts: Mapping[str, int], shown: int, total: int) -> str:
    """``1003 jobs: 3 running, 1000 queued`` for the jobs the scheduler has (``counts`` by
    state), and which of them a page shows when it shows fewer."""
    n = sum(counts.values())
    states = [f"{counts[state]} {state}" for state in _WAITING + _ENDED if counts.get(state)]
    line = f"{n} job{'s' if n != 1 else ''}" + (f": {', '.join(states)}" if states else "")
    if shown < total:
        line += (f" (showing {shown} of {total}: those on workers first, then those waiting, "
                 "then those ended, each newest first)")
    return line


def progress_line(views: Sequence[View], seconds: float) -> str:
    """``[0:12] 2/4 ended (1 completed, 1 failed); 1 running, 1 queued``."""
    ended = [view for view in views if view["state"] in _ENDED]
    whole = int(seconds)
    text = f"[{whole // 60}:{whole % 60:02d}] {len(ended)}/{len(views)} ended"
    if ended:
        text += f" ({', '.join(_counts(ended, _ENDED))})"
    waiting = _counts(views, _WAITING)
    return text + (f"; {', '.join(waiting)}" if waiting else "")


def exit_status(state: str, exit_code: int | None) -> int:
    """The status a program that ran the job in the foreground exits with, as a shell reports
    one: 0 if it completed, its command's exit code if that was not 0, 128 + N if a signal N
    killed it, 124 if it ran past its time limit (as ``timeout`` says so), else 1 (it could
    not start, was cancelled or lost)."""
    if state == "completed":
        return 0
    if state == "timeout":
        return 124
    if state == "failed" and exit_code:
        return exit_code if exit_code > 0 else 128 - exit_code
    return 1

"""What ``sched history`` prints: one line per ended attempt, with the GPUs it held, its
GPU-hours and how well it used them, and a last line of totals; and the times its ``--since``
and ``--until`` take.

Pure: no I/O; times come in as arguments (wall-clock seconds, as the attempts carry them).
"""

from __future__ import annotations

import datetime as dt

from .jobtext import _clock, duration, job_label, table

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:
    from typing import Iterable, Mapping, Sequence

    View = Mapping[str, object]

COLUMNS = ("JOB", "ATTEMPT", "NAME", "STATE", "WORKER", "ENDED", "DURATION", "GPUS",
           "GPU-HOURS", "UTIL-AVG/PEAK", "MEM-PEAK", "EFFICIENCY")


def when(text: str, now: float) -> float:
    """The wall-clock time ``text`` names: a duration ago (``90m``, ``2h``, ``1d``, as a time
    limit is written), or a date, or a date and time, in ISO form (``2024-05-01``,
    ``2024-05-01T14:30``; local time unless it names its zone). ValueError saying why not."""
    from ..jobs import parse_duration

    try:
        return dt.datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        pass
    try:
        return now - parse_duration(text)
    except ValueError:
        raise ValueError(f"{text!r} is neither a time ago (90m, 2h, 1d) nor a date or time "
                         "(2024-05-01, 2024-05-01T14:30)") from None


def _percent(fraction: float | None) -> str:
    return "" if fraction is None else f"{fraction:.0%}"


def state(view: View) -> str:
    """How the attempt ended; ``failed (oom)`` when it ran out of GPU memory."""
    return f"{view['state']} (oom)" if view["oom"] else str(view["state"])


def history_table(views: Sequence[View], now: float) -> list[str]:
    """``sched history``: one row an attempt, newest first as they come."""
    today = dt.datetime.fromtimestamp(now).date()
    return table(COLUMNS, ([
        job_label(v), str(v["attempt"]), v["name"], state(v), v["worker"],
        _clock(v["ended"], today), duration(v["duration"]),
        f"{v['gpus']:g}" if v["gpus"] else "",
        f"{v['gpu_hours']:.2f}" if v["gpus"] else "",
        "" if v["util_avg"] is None else f"{v['util_avg']:.0f}%/{v['util_peak']:.0f}%",
        "" if v["mem_peak"] is None else f"{v['mem_peak'] / 1e9:.1f}G",
        _percent(v["efficiency"])] for v in views))


def efficiency(views: Iterable[View]) -> float | None:
    """The efficiency of ``views`` together: the GPU-hours they used of those they held, of
    the attempts that were sampled (None when none was)."""
    used = held = 0.0
    for v in views:
        if v["efficiency"] is not None:
            used += v["efficiency"] * v["gpu_hours"]
            held += v["gpu_hours"]
    return used / held if held else None


def totals_line(views: Sequence[View]) -> str:
    """``3 attempts, 12.50 GPU-hours, efficiency 43%``."""
    s = "" if len(views) == 1 else "s"
    hours = sum(v["gpu_hours"] for v in views)
    mean = efficiency(views)
    return (f"{len(views)} attempt{s}, {hours:.2f} GPU-hours"
            + ("" if mean is None else f", efficiency {mean:.0%}"))

"""``sched history`` benchmark: prints one JSON line.

Builds a journal (``scheduler/journal.py``, layout and indexes as the scheduler makes them)
holding ``--attempts`` ended attempts (1,000,000 by default), written straight to SQLite with
``executemany``: a tenth of them second attempts, a fifth elements of 1,000-element arrays
(named ``sweep-ID``), the rest named ``train-N`` and ``eval-N`` (1,000 of each) but the oldest
tenth, named ``legacy-N``; most completed and a few lost, one ending every 8 s back from now.
Then times queries of the newest 100 through the function the scheduler answers
``query-history`` with (``history.query``: its own read-only connection, the rows made into
views), each the median of ``--repeat`` runs: by state (common, rare, two), by name (one, a
glob of few names, a glob of many), by time (the last hour, a day a month ago), by job and by
array, and combinations. ``worst_ms`` is the slowest of them, against the target of 200 ms.
Beside it, ``unindexed_glob_ms``: the one shape no index narrows, a glob of too many names to
scan each (``legacy-*``, 1,000) whose attempts are all old, so the scan by time reads nine
tenths of its index before it finds them.

    python bench/history.py [--attempts 1000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time

from dsched.scheduler import history
from dsched.scheduler.journal import FILENAME, INSERT_ATTEMPT, INSERT_NAME, Journal

TARGET_MS = 200
#: 100 attempts' states, as a busy cluster's might be.
STATES = ["completed"] * 85 + ["failed"] * 9 + ["cancelled"] * 3 + ["timeout"] * 2 + ["lost"]
GPUS = (0.0, 0.5, 1.0, 1.0, 2.0, 4.0, 8.0)
ARRAY = 1000


def attempts(n: int, now: float):
    """``n`` attempt rows (in ``COLUMNS`` order), the last ending at ``now``."""
    job = plain = 0
    array_id = None
    for i in range(n):
        if i % 10 == 9 and array_id is None:  # the job before, tried again
            attempt = 2
        else:
            attempt, job = 1, job + 1
            plain += array_id is None
            if plain == 4 * ARRAY:  # an array: its elements follow
                array_id, job, plain = job, job + 1, 0
        index = job - array_id - 1 if array_id is not None else None
        element = array_id
        if index == ARRAY - 1:
            array_id = None
        name = (f"legacy-{job % 1000}" if i < n // 10 else f"sweep-{element}" if element else
                f"train-{job % 1000}" if job % 3 else f"eval-{job % 1000}")
        state = STATES[(i * 7919) % 100]
        ended = now - (n - i) * 8.0
        gpus = GPUS[i % 7]
        util = float((i * 37) % 101) if gpus else None
        yield (job, attempt, element, index, name, state, f"w{i % 64}",
               ended - 600.0 - i % 3600, ended, 0 if state == "completed" else 1, "",
               f"GPU={gpus:g}" if gpus else "", gpus, "GPU-0a1b2c3d" if gpus else "", util,
               util and min(100.0, util + 20), 10**9 if gpus else None,
               2 * 10**9 if gpus else None, int(state == "failed" and i % 13 == 0))


def build(path: str, n: int) -> tuple[float, float]:
    """The journal at ``path`` with ``n`` attempts; the time of its newest end, and the
    seconds it took."""
    started = time.perf_counter()
    journal = Journal(path)
    now = time.time()
    db = journal.db
    db.execute("BEGIN")
    db.executemany(INSERT_ATTEMPT, attempts(n, now))
    db.executemany(INSERT_NAME, db.execute("SELECT DISTINCT name FROM attempts").fetchall())
    db.execute("COMMIT")
    journal.close()
    return now, time.perf_counter() - started


def queries(now: float, n: int) -> dict[str, dict]:
    day = 86400.0
    return {
        "newest": {},
        "state_completed": {"states": ["completed"]},
        "state_lost": {"states": ["lost"]},
        "states_failed_timeout": {"states": ["failed", "timeout"]},
        "name": {"name": "train-7"},
        "glob_few_names": {"name": "eval-99*"},
        "glob_many_names": {"name": "train-*"},
        "since_1h": {"since": now - 3600},
        "a_day_a_month_ago": {"since": now - 31 * day, "until": now - 30 * day},
        "jobs": {"jobs": [5, n // 3, n // 2 + 1]},
        "array": {"jobs": [4 * ARRAY]},
        "failed_named": {"states": ["failed"], "name": "train-1*"},
        "lost_last_week": {"states": ["lost"], "since": now - 7 * day},
        "glob_old_range": {"name": "eval-*", "since": now - 60 * day, "until": now - 59 * day},
        "sweep_named": {"name": "sweep-*", "states": ["failed"]},
    }


def timed(path: str, repeat: int, **filters) -> tuple[float, int]:
    """The median milliseconds of ``repeat`` queries, and the rows found."""
    times, found = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        found = len(history.query(path, **filters))
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 1), found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    result: dict = {"bench": "history", "python": platform.python_version(),
                    "cpus": os.cpu_count(), "attempts": args.attempts}
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        path = os.path.join(tmp, FILENAME)
        now, seconds = build(path, args.attempts)
        result.update(build_s=round(seconds, 1),
                      journal_mb=round(os.path.getsize(path) / 1e6, 1))
        figures = {}
        for label, filters in queries(now, args.attempts).items():
            ms, found = timed(path, args.repeat, **filters)
            figures[label] = {"ms": ms, "rows": found}
        worst = max(f["ms"] for f in figures.values())
        result.update(queries_ms=figures, worst_ms={
            "value": worst, "target": f"<= {TARGET_MS}", "met": worst <= TARGET_MS})
        result["unindexed_glob_ms"] = timed(path, args.repeat, name="legacy-*")[0]
    print(json.dumps(result))


if __name__ == "__main__":
    main()

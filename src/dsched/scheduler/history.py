"""The history of ended job attempts (``sched history``): the journal's ``attempts`` table,
read on a connection of its own, opened read-only for each query. The scheduler runs it on a
thread, beside the journal's writes (WAL lets readers read while one writer writes), so a query
never holds up its event loop; the bench (``bench/history.py``) times this same function.

A query asks for the newest attempts that pass its filters, at most ``limit`` of them. It stays
quick over millions of rows because it is read as one or more ordered index scans that each
stop at ``limit`` matches, never as "every match, then sorted": one scan per job and array
asked for, else per name the glob matches (the names are matched first, in ``attempt_names``),
else per state, else one scan by end time; the newest of what they found are kept, and only
their rows are read. Each index holds the other filtered columns (``journal.ATTEMPTS``), so a
scan reads nothing but its index. The scans are separate statements: SQLite merges the arms of
one ``UNION ALL`` through a chain of co-routines, which cost more than the scans themselves at
100 arms. A glob that matches too
many names for one scan each is matched while scanning by state or by time. What stays slow
is what no index narrows: such a glob, with no state asked, whose attempts are all old, reads
the index of every attempt after them (about 0.2 s a million here).

This is I/O: it holds no decisions.
"""

from __future__ import annotations

import heapq
import os
import sqlite3
from operator import itemgetter
from typing import Any, Iterable, Sequence, Sized
from urllib.parse import quote

from ..protocol.ints import INT_MAX
from .attemptrows import COLUMNS, view

#: The most attempts one query returns.
MAX_LIMIT = 100_000
#: The most scans of one job, name or state each that a query is read as, and the most rows
#: its scans of one name each may return in all.
_SCANS = 200
_NAME_ROWS = 50_000
#: The most values one statement is given in a list (SQLite takes 32,766 in all).
_CHUNK = 10_000
_GLOB = frozenset("*?[")
_ENDED, _ROW_ENDED = itemgetter(1), itemgetter(COLUMNS.index("ended"))


def query(path: str, jobs: Iterable[int] = (), states: Iterable[str] = (), name: str = "",
          since: float | None = None, until: float | None = None,
          limit: int = 100) -> list[dict[str, Any]]:
    """The newest attempts of the journal at ``path`` (ended first), as ``sched history
    --json`` shows them (``attemptrows.view``): of ``jobs`` (an array: its elements), in
    ``states``, whose name matches the glob ``name``, that ended at or after ``since`` and
    before ``until``; at most ``limit`` (and ``MAX_LIMIT``). sqlite3.Error when the journal
    cannot be read."""
    limit = max(0, min(limit, MAX_LIMIT))
    # What a peer may send but SQLite cannot bind (integers of 64 bits and more) matches
    # nothing: no job is numbered so, and a time is a float.
    asked = tuple(jobs)
    jobs = tuple(j for j in asked if 0 < j <= INT_MAX)
    since, until = (None if t is None else float(t) for t in (since, until))
    if not limit or asked and not jobs:
        return []
    db = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True,
                         isolation_level=None)
    try:
        scans = _scans(db, tuple(dict.fromkeys(jobs)), tuple(dict.fromkeys(states)), name,
                       since, until, limit)
        found = [hit for sql, args in scans for hit in db.execute(sql, args)]
        if len(scans) > 1:  # an element is found by its array's scan too: once each
            found = heapq.nlargest(limit, dict(found).items(), key=_ENDED)
        rows = [row for chunk in _chunks([rowid for rowid, _ in found])
                for row in db.execute(f"SELECT {', '.join(COLUMNS)} FROM attempts "
                                      f"WHERE rowid IN ({_marks(chunk)})", chunk)]
    finally:
        db.close()
    rows.sort(key=_ROW_ENDED, reverse=True)
    return [view(values) for values in rows]


def _scans(db: sqlite3.Connection, jobs: tuple[int, ...], states: tuple[str, ...],
           name: str, since: float | None, until: float | None,
           limit: int) -> list[tuple[str, list]]:
    """The statements that find the attempts asked for (their rowid and end), each with its
    arguments (none when none can match)."""
    filters: dict[str, tuple[str, list]] = {}
    if states:
        filters["state"] = (f"state IN ({_marks(states)})", list(states))
    names: list[str] = []
    if name and _GLOB & set(name):
        filters["name"] = ("name GLOB ?", [name])
        names = [n for (n,) in db.execute(
            "SELECT name FROM attempt_names WHERE name GLOB ?", (name,))]
        if not names:
            return []
    elif name:
        filters["name"], names = ("name = ?", [name]), [name]
    if since is not None:
        filters["since"] = ("ended >= ?", [since])
    if until is not None:
        filters["until"] = ("ended < ?", [until])
    # The scans: (index, the condition that picks the rows it reads, its arguments).
    if jobs:
        scans = [("", f"job IN ({_marks(chunk)})", chunk) for chunk in _chunks(jobs)]
        scans += ([("attempts_array", "array_id = ?", [j]) for j in jobs]
                  if len(jobs) <= _SCANS else
                  [("attempts_array", f"array_id IN ({_marks(chunk)})", chunk)
                   for chunk in _chunks(jobs)])
    elif names and len(names) <= min(_SCANS, _NAME_ROWS // limit):
        del filters["name"]
        scans = [("attempts_name", "name = ?", [n]) for n in names]
    elif 0 < len(states) <= _SCANS:
        del filters["state"]
        scans = [("attempts_state", "state = ?", [s]) for s in states]
    else:
        scans = [("attempts_ended", "", [])]
    given = [arg for _, args in filters.values() for arg in args]
    statements = []
    for index, condition, values in scans:
        where = [c for c, _ in filters.values()] + ([condition] if condition else [])
        indexed = f" INDEXED BY {index}" if index else ""
        statements.append((f"SELECT rowid, ended FROM attempts{indexed}"
                           + (f" WHERE {' AND '.join(where)}" if where else "")
                           + " ORDER BY ended DESC LIMIT ?", given + values + [limit]))
    return statements


def _marks(values: Sized) -> str:
    return ", ".join("?" * len(values))


def _chunks(values: Sequence) -> list[list]:
    return [list(values[i:i + _CHUNK]) for i in range(0, len(values), _CHUNK)]

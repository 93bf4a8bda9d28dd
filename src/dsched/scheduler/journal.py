"""The journal: every job's latest row, in SQLite, committed before the scheduler acts.

One table of rows (msgpack), one per job, replaced whole on each change. The database runs
in WAL mode with ``synchronous=FULL``: a commit has reached the disk when ``write`` returns,
so a dispatch the scheduler has acted on cannot be rolled back by a power loss (which would
run the job a second time). ``write`` is called from one thread at a time (the scheduler's
commit thread); ``load`` once at start.

This is I/O: it holds no decisions.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Iterable, Mapping

import msgpack

from ..errors import ConfigError

#: The layout of the database (``PRAGMA user_version``): raise it when the layout changes.
SCHEMA = 1
FILENAME = "jobs.sqlite"


class Journal:
    """The journal at ``path`` (created, mode 0600, when missing)."""

    def __init__(self, path: str):
        self.path = path
        try:
            fresh = not os.path.exists(path)
            if fresh:  # private from the start: rows hold commands and environments
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                self.db.execute("CREATE TABLE IF NOT EXISTS jobs "
                                "(id INTEGER PRIMARY KEY, row BLOB NOT NULL)")
                self.db.execute(f"PRAGMA user_version={SCHEMA}")
            elif version != SCHEMA:
                raise ConfigError(f"the journal {path} has layout {version}, and this version "
                                  f"of dsched reads layout {SCHEMA}")
        except sqlite3.Error as error:
            raise ConfigError(f"cannot open the journal {path}: {error}; move it away to "
                              "start with no jobs") from None

    def load(self) -> list[dict]:
        """Every job's row, by id."""
        try:
            return [msgpack.unpackb(row, strict_map_key=False)
                    for (row,) in self.db.execute("SELECT row FROM jobs ORDER BY id")]
        except (sqlite3.Error, ValueError, msgpack.UnpackException) as error:
            raise ConfigError(f"cannot read the journal {self.path}: {error}; move it away to "
                              "start with no jobs") from None

    def write(self, rows: Iterable[Mapping]) -> None:
        """Replace these jobs' rows, in one transaction that has reached the disk on return."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT OR REPLACE INTO jobs (id, row) VALUES (?, ?)",
                           [(row["id"], msgpack.packb(row)) for row in rows])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self.db.close()

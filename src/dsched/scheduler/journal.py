"""The journal: every job's latest row, in SQLite, committed before the scheduler acts.

One table of rows (msgpack), one per job, replaced whole on each change; and ``attempts``, one
row per ended attempt (``attemptrows.py``), written in the same transaction as its job's row,
with its columns indexed for ``sched history`` (``history.py`` reads them, on a connection of
its own). A journal of layout 1 (no ``attempts``) is upgraded when it is opened, each ended
job's last attempt given a row from its job row. The database runs
in WAL mode with ``synchronous=FULL``: a commit has reached the disk when ``write`` returns,
so a dispatch the scheduler has acted on cannot be rolled back by a power loss (which would
run the job a second time). ``write`` is called from one thread at a time (the scheduler's
commit thread); ``load`` once at start. A journal that opens but cannot be written (a
read-only file) is refused at start (``JournalNotWritable``), not at the first submit; a write
that fails reports its own error (``database or disk is full``), not the rollback's after it.

Job numbers are never given twice, even when the journal loses commits it had acknowledged
(its ``-wal`` file lost or cut short: the rows in it are gone, and ``max(id)`` drops). Beside
the journal, ``job-numbers`` holds a high-water mark: every number below ``next`` may have been
given. It is raised, and fsync'd, before the journal commits a row numbered at or above it, by
``RESERVE`` numbers at a time, so it costs one small write per ``RESERVE`` jobs, not one per
job; a number, and so every attempt's fence (``job-<id>.<attempt>``), is never reused. The mark
also says how far the journal was known to reach when it was written (``committed``): a journal
that now reaches less lost acknowledged jobs, and the scheduler says so at start (a WARNING).
On a clean close the mark comes down to the journal's highest number, so that a restart leaves
no gap in the numbering.

This is I/O: it holds no decisions.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import tempfile
import threading
import time
from typing import Iterable, Mapping

import msgpack

from ..errors import ConfigError, SchedError
from . import attemptrows

logger = logging.getLogger("dsched.scheduler")

#: The layout of the database (``PRAGMA user_version``): raise it when the layout changes.
SCHEMA = 2
#: The attempts table and its indexes, for the filters of ``sched history`` (``history.py``):
#: each index reads the attempts of one state, name or array by ``ended``, so newest first and
#: no more of them than asked for, and holds the other filtered columns after it, so that a
#: scan checks them on the index before it reads a row. ``attempt_names``: every name once,
#: where a glob is matched before any attempt is read.
ATTEMPTS = (
    "CREATE TABLE attempts (job INTEGER NOT NULL, attempt INTEGER NOT NULL, array_id INTEGER, "
    "array_index INTEGER, name TEXT NOT NULL, state TEXT NOT NULL, worker TEXT NOT NULL, "
    "started REAL, ended REAL NOT NULL, exit_code INTEGER, error TEXT NOT NULL, "
    "resources TEXT NOT NULL, gpus REAL NOT NULL, gpu_uuids TEXT NOT NULL, util_avg REAL, "
    "util_peak REAL, mem_avg INTEGER, mem_peak INTEGER, oom INTEGER NOT NULL, "
    "PRIMARY KEY (job, attempt))",
    "CREATE INDEX attempts_ended ON attempts (ended, state, name)",
    "CREATE INDEX attempts_state ON attempts (state, ended, name)",
    "CREATE INDEX attempts_name ON attempts (name, ended, state)",
    "CREATE INDEX attempts_array ON attempts (array_id, ended, state, name)",
    "CREATE TABLE attempt_names (name TEXT PRIMARY KEY) WITHOUT ROWID",
)
INSERT_ATTEMPT = (f"INSERT OR REPLACE INTO attempts ({', '.join(attemptrows.COLUMNS)}) "
                  f"VALUES ({', '.join('?' * len(attemptrows.COLUMNS))})")
INSERT_NAME = "INSERT OR IGNORE INTO attempt_names (name) VALUES (?)"
FILENAME = "jobs.sqlite"
#: The job numbers' high-water mark, in the journal's directory.
MARK_FILENAME = "job-numbers"
#: Numbers the mark is raised by at a time (one fsync'd write of the mark per this many jobs).
RESERVE = 100


class JournalNotWritable(ConfigError):
    """The journal opens but cannot be written: no submission could be acknowledged."""


class Journal:
    """The journal at ``path`` (created, mode 0600, when missing), and its high-water mark.

    ``next_id``: the first job number this run may give (every lower one may have been given).
    """

    def __init__(self, path: str):
        self.path = path
        self.mark_path = os.path.join(os.path.dirname(os.path.abspath(path)), MARK_FILENAME)
        self._lock = threading.Lock()  # a write in flight, or the close
        self._broken = False  # a write failed: what is committed is no longer known exactly
        self.db: sqlite3.Connection | None = None
        try:
            self._open(path)
        except BaseException:
            if self.db is not None:  # refused: leave nothing open behind
                self.db.close()
            raise

    def _open(self, path: str) -> None:
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
            if version in (0, 1):
                self._add_attempts(version == 1)
            elif version != SCHEMA:
                raise ConfigError(f"the journal {path} has layout {version}, and this version "
                                  f"of dsched reads layout {SCHEMA}")
            # Written at every start: SQLite opens a file it may not write read-only, and says
            # so only at the first write, which would be the first submission's.
            self.db.execute(f"PRAGMA user_version={SCHEMA}")
            highest = self.db.execute("SELECT max(id) FROM jobs").fetchone()[0] or 0
        except sqlite3.Error as error:
            if getattr(error, "sqlite_errorname", "").startswith(("SQLITE_READONLY",
                                                                   "SQLITE_FULL")):
                raise JournalNotWritable(
                    f"the journal {path} cannot be written: {error}; make it (and its "
                    "directory) writable by this user, or choose another --state-dir "
                    "(scheduler.state_dir)") from None
            raise ConfigError(f"cannot open the journal {path}: {error}; move it away to "
                              "start with no jobs") from None
        self._number_from(highest)

    def _add_attempts(self, backfill: bool) -> None:
        """Layout 1 to 2: the attempts table, in one transaction with the new layout's number;
        ``backfill``: a row for each ended job's last attempt, from the job rows."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in ATTEMPTS:
                db.execute(statement)
            if backfill:
                try:
                    rows = attemptrows.backfilled(msgpack.unpackb(row, strict_map_key=False)
                                                  for (row,) in db.execute("SELECT row FROM jobs"))
                except (KeyError, TypeError, ValueError, AttributeError, SchedError,
                        msgpack.UnpackException) as error:  # a row this layout cannot read
                    raise ConfigError(f"cannot upgrade the journal {self.path} to layout "
                                      f"{SCHEMA}: a job's row is not as layout 1 wrote it "
                                      f"({error!r:.200}); move it away to start with no "
                                      "jobs") from None
                self._insert_attempts(rows, time.time())
                logger.info("The journal %s was upgraded to layout %d: %d ended job(s) now "
                            "have their last attempt in its history", self.path, SCHEMA,
                            len(rows))
            db.execute(f"PRAGMA user_version={SCHEMA}")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:  # rolled back by SQLite itself: its error counts
                    pass
            raise

    def _insert_attempts(self, rows: list[Mapping], now: float) -> None:
        """Within a transaction: the rows of ended attempts (one whose end is not known ended
        ``now``), and their names."""
        columns = attemptrows.COLUMNS
        self.db.executemany(INSERT_ATTEMPT, [
            tuple(row[c] if c != "ended" or row[c] is not None else now for c in columns)
            for row in rows])
        self.db.executemany(INSERT_NAME, {(row["name"],) for row in rows})

    def _number_from(self, highest: int) -> None:
        """Where numbering goes on, from the journal's highest job and the mark."""
        mark, committed = self._read_mark()
        #: The first number this run gives: above the journal and every number given before.
        self.next_id = max(highest + 1, mark)
        self._floor = self._reserved = self.next_id  # the mark covers every number below
        self._committed = highest  # the highest number the journal is known to hold
        if committed > highest:
            logger.warning(
                "The journal %s holds no job numbered above %d, but jobs up to %d had been "
                "committed to it: acknowledged jobs were lost (its -wal file lost or cut short, "
                "or the journal replaced); new jobs are numbered from %d, so that no number is "
                "given twice", self.path, highest, committed, self.next_id)

    def load(self) -> list[dict]:
        """Every job's row, by id."""
        try:
            return [msgpack.unpackb(row, strict_map_key=False)
                    for (row,) in self.db.execute("SELECT row FROM jobs ORDER BY id")]
        except (sqlite3.Error, ValueError, msgpack.UnpackException) as error:
            raise ConfigError(f"cannot read the journal {self.path}: {error}; move it away to "
                              "start with no jobs") from None

    def write(self, rows: Iterable[Mapping], attempts: Iterable[Mapping] = ()) -> None:
        """Replace these jobs' rows and add the rows of these ended ``attempts`` (one whose
        end is not known ended now), in one transaction that has reached the disk on return
        (the mark first, when a row is numbered at or above it). The error raised is the one
        that made the write fail."""
        # An array's row holds the numbers of its elements too (``block``): the mark covers
        # them, though the row's own number is the one that says what was committed.
        last = max((row["id"] + row.get("block", 0) for row in rows), default=0)
        rows = [(row["id"], msgpack.packb(row)) for row in rows]
        top = max((job_id for job_id, _ in rows), default=0)
        attempts = list(attempts)
        now = time.time()
        with self._lock:
            db = self.db
            try:
                if last >= self._reserved:
                    self._write_mark(last + RESERVE, self._committed)
                    self._reserved = last + RESERVE
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.executemany("INSERT OR REPLACE INTO jobs (id, row) VALUES (?, ?)", rows)
                    if attempts:
                        self._insert_attempts(attempts, now)
                    db.execute("COMMIT")
                except BaseException:
                    # SQLite may have rolled the transaction back itself (a full disk does):
                    # a ROLLBACK then fails too, and its error would hide the one that counts.
                    if db.in_transaction:
                        try:
                            db.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass
                    raise
            except BaseException:
                self._broken = True
                raise
            self._committed = max(self._committed, top)

    def close(self) -> None:
        """Close the database; after a run whose writes all succeeded, bring the mark down to
        just above the journal's highest job (numbers above it were never acknowledged)."""
        with self._lock:
            settled = max(self._floor, self._committed + 1)
            if not self._broken and settled < self._reserved:
                try:
                    self._write_mark(settled, self._committed)
                except OSError:
                    pass  # the mark on disk stands: higher, so no number is given twice
            self.db.close()

    # -- the high-water mark ----------------------------------------------------------------

    def _read_mark(self) -> tuple[int, int]:
        """(next, committed) of the mark; (0, 0) when there is none yet."""
        try:
            with open(self.mark_path) as file:
                mark = json.load(file)
            return int(mark["next"]), int(mark["committed"])
        except FileNotFoundError:
            return 0, 0
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ConfigError(f"cannot read {self.mark_path}, the high-water mark of the job "
                              f"numbers: {error}; it must be readable and whole (moved away, "
                              "numbers of jobs the journal lost may be given again)") from None

    def _write_mark(self, next_id: int, committed: int) -> None:
        """Replace the mark durably and atomically (write, fsync, rename, fsync the
        directory)."""
        directory = os.path.dirname(self.mark_path)
        fd, temporary = tempfile.mkstemp(prefix=f".{MARK_FILENAME}.", dir=directory)
        try:
            with os.fdopen(fd, "w") as file:
                json.dump({"next": next_id, "committed": committed}, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.mark_path)
        except BaseException:
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

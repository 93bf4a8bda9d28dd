"""The scheduler's LogLine actions, written to its log: a flood of task failures costs the log a
few lines a minute, not a traceback per task.

A LogLine with a ``pace`` (a failed task's key prefix) is paced: in a minute that begins with one,
the first of each prefix is logged, up to ``MOST`` prefixes, and the rest are counted, then
told in one line once the minute is over (on a tick, or when the scheduler stops). A LogLine's
``detail`` (a traceback) is logged only where DEBUG is, with its line; there every paced line
is kept too. The clock is the shell's, passed in: the core that makes the Logs has none.
"""

from __future__ import annotations

import logging

from .actions import LogLine

#: Seconds of one pacing window.
INTERVAL = 60.0
#: The most key prefixes whose failures get a line of their own in one window.
MOST = 5


class PacedLog:
    """Writes LogLine actions to ``logger``, pacing those that ask for it."""

    def __init__(self, logger: logging.Logger, interval: float = INTERVAL, most: int = MOST):
        self.logger = logger
        self.interval = interval
        self.most = most
        self._since: float | None = None  # when this window began (its first paced line)
        self._told: set[str] = set()  # the prefixes that had their line in it
        self._held = 0  # the paced lines not logged in it (at DEBUG only)

    def write(self, log: LogLine, now: float) -> None:
        if log.pace:
            self.tick(now)
            if self._since is None:
                self._since = now
            if log.pace not in self._told and len(self._told) < self.most:
                self._told.add(log.pace)
            else:
                self._held += 1
                self._emit(logging.DEBUG, log)
                return
        self._emit(log.level, log)

    def tick(self, now: float, *, stopping: bool = False) -> None:
        """Tell how many lines were held back once their window is over (or the scheduler
        stops), and begin a new window with the next paced line."""
        if self._since is None or (now - self._since < self.interval and not stopping):
            return
        if self._held:
            failures = "task failure" if self._held == 1 else "task failures"
            self.logger.info("%d more %s in the last %.0f s (each is logged at DEBUG level)",
                             self._held, failures, now - self._since)
        self._since, self._told, self._held = None, set(), 0

    def _emit(self, level: int, log: LogLine) -> None:
        if not self.logger.isEnabledFor(level):
            return
        if log.detail and self.logger.isEnabledFor(logging.DEBUG):
            self.logger.log(level, log.msg + "\n%s", *log.args, log.detail.rstrip())
        else:
            self.logger.log(level, log.msg, *log.args)

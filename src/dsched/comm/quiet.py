"""Warnings about peers, at most one a minute of each kind: a daemon under a flood of bad
connections says so in a line, not in a line per connection."""

from __future__ import annotations

import logging
import time

#: Seconds between two warnings of one kind; those in between go to DEBUG and are counted.
INTERVAL = 60.0


class Limited:
    """One kind of warning (refused handshakes, say), rate-limited."""

    def __init__(self, logger: logging.Logger, interval: float = INTERVAL):
        self.logger = logger
        self.interval = interval
        self._last = -interval
        self._held = 0

    def warning(self, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last < self.interval:
            self._held += 1
            self.logger.debug(msg, *args)
            return
        if self._held:
            msg += f" (and {self._held} more like it in the last {now - self._last:.0f} s)"
        self._last, self._held = now, 0
        self.logger.warning(msg, *args)

"""Progress where people wait on jobs (``sched wait``, ``sched run-local``).

In a terminal: a line for each job as it ends, and below them one live line (how many ended,
how, and how many still run or wait), rewritten in place with a carriage return. Elsewhere (a
pipe, a file, a CI log): only the line for each job that ends, and no rewriting. Both end with
a summary. Lines given with an update (``sched run-local``'s jobs' output) go above the lines
of jobs that ended then. It prints only; what to wait for and when is the client library's.
"""

from __future__ import annotations

import time
from typing import IO, Any, Callable, Sequence

from ..jobstates import ENDED
from .jobtext import ended_line, progress_line, summary

_ENDED = frozenset(state.value for state in ENDED)


class JobProgress:
    """Shown on ``stream``; ``live``: rewrite a progress line in place (a terminal)."""

    def __init__(self, stream: IO[str], live: bool,
                 clock: Callable[[], float] = time.monotonic):
        self.stream, self.live, self.clock = stream, live, clock
        self.start = clock()
        self.reported: set[int] = set()
        self.width = 0  # of the live line now shown

    def update(self, views: Sequence[dict[str, Any]], before: Sequence[str] = ()) -> None:
        """The jobs as they are now: a line for each that has ended since the last update,
        after the lines ``before`` (the jobs' output, from run-local)."""
        ended = [v for v in views if v["state"] in _ENDED and v["id"] not in self.reported]
        self.reported.update(v["id"] for v in ended)
        lines = [*before, *(ended_line(v) for v in ended)]
        if self.live:
            lines.append(progress_line(views, self.clock() - self.start))
            self._rewrite(lines)
        else:
            self.stream.write("".join(line + "\n" for line in lines))
        self.stream.flush()

    def finish(self, views: Sequence[dict[str, Any]]) -> None:
        """The jobs have ended (or the wait is over): the summary, on a line of its own."""
        self.update(views)
        if self.live:
            self._rewrite([])
        self.stream.write(summary(views) + "\n")
        self.stream.flush()

    def _rewrite(self, lines: list[str]) -> None:
        """Replace the live line by ``lines``, all but the last ending in a newline; blanks
        pad over what is left of a longer line before it."""
        out = []
        for i, line in enumerate(lines):
            out.append("\r" + line.ljust(self.width if i == 0 else 0))
            if i < len(lines) - 1:
                out.append("\n")
        if not lines:
            out.append("\r" + " " * self.width + "\r")
        self.width = len(lines[-1]) if lines else 0
        self.stream.write("".join(out))

"""What ``sched run-local`` shows and keeps of its jobs' output.

The run's worker is on this machine: it writes each attempt's output (stdout and stderr) to a
log file in its job directory, which goes with the run's temporary directory. So
:class:`JobOutput` reads those files (the ``log`` of each job's view) as they grow, each time
the run's progress is read: each whole line goes to the terminal after its job's prefix,
``[N] ``; a partial line waits for its end (or the job's), so that lines of different jobs
never mix. With ``log_dir``, each job's bytes are also copied, as they are, to
``log_dir/job-N.log``, which stays. The last ``TAIL`` lines of each job are kept, to be shown
under the line of a job that did not complete once the run is over (:meth:`failures`).
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import IO, Any, Iterable, Sequence

from ..jobstates import ENDED
from .jobtext import ended_line

_ENDED = frozenset(state.value for state in ENDED)
#: Seconds between two reads of the jobs' progress, and so of their output.
INTERVAL = 0.5
#: The last lines of a job shown under its failure line.
TAIL = 20
#: A line longer than this is shown in pieces (a progress bar that never writes a newline).
LINE_MAX = 64 << 10
#: Bytes read of one job per update while it runs, so that one that writes much does not hold
#: up the others' lines; a job that ended is read to its end.
READ_MAX = 1 << 20


class JobOutput:
    """The output of run-local's jobs: ``open()`` makes ``log_dir``; ``read(views)`` gives
    the lines (prefixed) written since the last read; ``failures(views)`` what is said of the
    jobs that did not complete at the end. ``close()`` closes the copies in ``log_dir``."""

    def __init__(self, log_dir: Path | None = None, tail: int = TAIL):
        self.log_dir = log_dir
        self.tail = tail
        self._jobs: dict[int, _Output] = {}

    def open(self) -> None:
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)

    def read(self, views: Iterable[dict[str, Any]]) -> list[str]:
        lines: list[str] = []
        for view in views:
            if not view.get("log"):
                continue  # not started: nothing written yet
            out = self._jobs.get(view["id"])
            if out is None:
                copy = self.log_dir / f"job-{view['id']}.log" if self.log_dir else None
                out = self._jobs[view["id"]] = _Output(f"[{view['id']}] ", copy, self.tail)
            lines += out.read(view["log"], ended=view["state"] in _ENDED)
        return lines

    def failures(self, views: Sequence[dict[str, Any]]) -> list[str]:
        """For each job that did not complete: its line, then its last lines, indented."""
        lines = []
        for view in views:
            if view["state"] == "completed":
                continue
            out = self._jobs.get(view["id"])
            last = list(out.last) if out is not None else []
            kept = f" (all of it in {out.copy_path})" if out and out.copy_path else ""
            if not last:
                lines.append(f"{ended_line(view)}; it wrote no output{kept}")
                continue
            what = (f"the last {len(last)} lines of its output" if out.lines > len(last)
                    else "its output")
            lines.append(f"{ended_line(view)}; {what}{kept}:")
            lines += ["    " + line for line in last]
        return lines

    def close(self) -> None:
        for out in self._jobs.values():
            out.close()


class _Output:
    """One job's output: where its log is read (``path``, ``offset``), the partial line read
    so far, its copy, and its last lines."""

    def __init__(self, prefix: str, copy_path: Path | None, tail: int):
        self.prefix = prefix
        self.path: str | None = None
        self.offset = 0
        self.partial = b""
        self.copy_path = copy_path
        self.copy: IO[bytes] | None = open(copy_path, "wb") if copy_path else None
        self.last: collections.deque[str] = collections.deque(maxlen=tail)
        self.lines = 0

    def read(self, path: str, ended: bool) -> list[str]:
        lines = []
        if path != self.path:
            if self.path is not None:  # a new attempt: the rest of the last one's log first
                lines += self._lines(self._bytes(whole=True), final=True)
            self.path, self.offset = path, 0
        lines += self._lines(self._bytes(whole=ended), final=ended)
        if ended:
            self.close()
        return lines

    def _bytes(self, whole: bool) -> bytes:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read() if whole else f.read(READ_MAX)
        except FileNotFoundError:  # not created yet
            return b""
        self.offset += len(data)
        if data and self.copy_path is not None:
            if self.copy is None:  # closed at an end, and written to again (a new attempt)
                self.copy = open(self.copy_path, "ab")
            self.copy.write(data)
            self.copy.flush()
        return data

    def _lines(self, data: bytes, final: bool) -> list[str]:
        *whole, rest = (self.partial + data).split(b"\n")
        if rest and (final or len(rest) > LINE_MAX):
            whole.append(rest)
            rest = b""
        self.partial = rest
        # A line rewritten with carriage returns (a progress bar) is shown as a terminal
        # would leave it.
        lines = [line.decode("utf-8", "replace").rstrip("\r").rsplit("\r", 1)[-1]
                 for line in whole]
        self.last.extend(lines)
        self.lines += len(lines)
        return [self.prefix + line for line in lines]

    def close(self) -> None:
        if self.copy is not None:
            self.copy.close()
            self.copy = None

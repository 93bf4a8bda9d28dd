"""The elements of an array job (``sched submit --array 0-999%8``, ``--array-file``): which
indices or lines it has, how many may run at once, and which element is which.

Pure: no I/O.
"""

from __future__ import annotations

from .errors import JobSpecError
from .frozen import Frozen
from .protocol.ints import INT_MAX, checked_int

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:
    from typing import Any, Mapping

#: The most elements one array may have.
MAX_ARRAY = 10_000_000
#: The patterns below are compiled where first used (``re`` caches them): not by every program
#: that imports this module.
_RANGE = r"(\d+)(?:-(\d+)(?::(\d+))?)?$"


class ArraySpec(Frozen):
    """The elements of an array job: index values (``ranges``, from ``--array 0-999%8``), or
    lines (``--array-file``: element i has index i, and its line replaces ``{}``); ``limit``:
    at most this many run at once (None: no limit). Element ``position`` (0, 1, ...) is job
    ``array id + 1 + position``: an array's ids are taken in one block when it is submitted,
    so an element has its number before it runs. Queued elements cost nothing but this."""

    FIELDS = ("ranges", "lines", "limit")

    ranges: tuple[range, ...]
    lines: tuple[str, ...]
    limit: int | None

    def __init__(self, ranges: tuple[range, ...] = (), lines: tuple[str, ...] = (),
                 limit: int | None = None):
        self.__dict__.update(ranges=ranges, lines=lines, limit=limit)
        self._check()

    def _check(self) -> None:
        if bool(self.ranges) == bool(self.lines):
            raise JobSpecError("an array has index ranges or lines, one of the two")
        for r in self.ranges:  # before any len(): a range past sys.maxsize has none
            if not isinstance(r, range) or r.start < 0 or r.step < 1 or r.stop <= r.start:
                raise JobSpecError(f"an array's indices are ranges of whole numbers from 0 "
                                   f"up, in steps of 1 or more, not {r!r}")
            if r.stop > INT_MAX:
                raise JobSpecError(f"an array's indices are below 2**63, not {r.stop - 1}")
            if r.stop - r.start > MAX_ARRAY * r.step:
                raise JobSpecError(f"an array has at most {MAX_ARRAY:,} elements: "
                                   f"{r.start}-{r.stop - 1} is more")
        if not 0 < self.size <= MAX_ARRAY:
            raise JobSpecError(f"an array has 1 to {MAX_ARRAY:,} elements, not {self.size:,}")
        if self.limit is not None:  # a whole number (numpy's too), kept as a plain int
            try:
                object.__setattr__(self, "limit", checked_int("an array's limit (%N)",
                                                              self.limit, 1, MAX_ARRAY))
            except (TypeError, ValueError) as error:
                raise JobSpecError(str(error)) from None
        if not all(isinstance(line, str) and "\0" not in line for line in self.lines):
            raise JobSpecError("the lines of an array are strings, with no NUL character")
        ends = sorted((r.start, r[-1]) for r in self.ranges)
        for (_, end), (start, _) in zip(ends, ends[1:]):
            if start <= end:
                raise JobSpecError(f"index {start} is given twice in the array")
        starts, total = [], 0
        for r in self.ranges:
            starts.append(total)
            total += len(r)
        object.__setattr__(self, "_starts", tuple(starts))

    @classmethod
    def parse(cls, text: str) -> "ArraySpec":
        """``0-999``, ``1,3,5-7``, ``0-30:10`` (every 10th), each with an optional ``%N``."""
        import re  # here: a ``sched`` call that gives no array need not load it

        spec, percent, limit = text.strip().partition("%")
        ranges = []
        for part in spec.split(","):
            match = re.match(_RANGE, part.strip())
            if not match:
                raise JobSpecError(f"invalid array {text!r}: use indices and ranges such as "
                                   "0-999, 1,3,5-7 or 0-30:10, with %N to run at most N at once")
            first, last, step = match.groups()
            last_index = int(last) if last is not None else int(first)
            if last_index < int(first) or (step is not None and int(step) < 1):
                raise JobSpecError(f"invalid array range {part.strip()!r}")
            ranges.append(range(int(first), last_index + 1, int(step or 1)))
        if percent and not limit.strip().isdigit():
            raise JobSpecError(f"invalid array limit {limit!r}: %N takes a whole number")
        return cls(ranges=tuple(ranges), limit=int(limit) if percent else None)

    @classmethod
    def of_lines(cls, lines: Any, limit: int | None = None) -> "ArraySpec":
        """One element per line (blank lines and lines starting with ``#`` skipped)."""
        kept = tuple(line.strip() for line in lines
                     if line.strip() and not line.lstrip().startswith("#"))
        if not kept:
            raise JobSpecError("an array file needs at least one line")
        return cls(lines=kept, limit=limit)

    @property
    def size(self) -> int:
        return len(self.lines) if self.lines else sum(len(r) for r in self.ranges)

    def index(self, position: int) -> int:
        """The index of element ``position`` (what ``SCHED_ARRAY_INDEX`` says)."""
        if self.lines:
            return position
        from bisect import bisect_right

        i = bisect_right(self._starts, position) - 1  # type: ignore[attr-defined]
        return self.ranges[i][position - self._starts[i]]  # type: ignore[attr-defined]

    def value(self, position: int) -> str:
        """What replaces ``{}`` in element ``position``'s command."""
        return self.lines[position] if self.lines else str(self.index(position))

    def position(self, index: int) -> int | None:
        """The element with index ``index`` (the 3 of ``12_3``), or None."""
        if self.lines:
            return index if 0 <= index < len(self.lines) else None
        for start, r in zip(self._starts, self.ranges):  # type: ignore[attr-defined]
            if index in r:
                return start + r.index(index)
        return None

    def text(self) -> str:
        """The indices as ``--array`` takes them (``lines`` for an array of lines)."""
        if self.lines:
            indices = f"0-{len(self.lines) - 1}"
        else:
            indices = ",".join(
                str(r.start) if len(r) == 1 else
                f"{r.start}-{r[-1]}" + (f":{r.step}" if r.step != 1 else "") for r in self.ranges)
        return indices + (f"%{self.limit}" if self.limit is not None else "")

    def to_wire(self) -> dict[str, Any]:
        return {"indices": self.text() if self.ranges else None, "lines": list(self.lines),
                "limit": self.limit}

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> "ArraySpec":
        limit = wire.get("limit")
        if limit is not None and type(limit) is not int:
            raise JobSpecError(f"an array's limit is a whole number, not {limit!r:.40}")
        if wire.get("indices"):
            spec = cls.parse(_text(wire["indices"]))
            return cls(ranges=spec.ranges, limit=limit)
        return cls(lines=tuple(wire.get("lines") or ()), limit=limit)


def _text(v: Any) -> str:
    if type(v) is not str:
        raise TypeError(f"expected a string, got {v!r:.40}")
    return v

"""The integers the wire carries, and the checks of a caller's numbers against them: pure, and
free of everything else here, so that the command line checks its numbers without loading
msgpack or the op machinery (``fields`` gives these names too)."""

from __future__ import annotations

#: ``typing`` is read by type checkers only: importing it costs a ``sched`` call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: The integers the wire carries (msgpack's signed 64 bits). A number outside is refused where
#: a caller gives it (``checked_int``): sent, it would fail the whole connection instead.
INT_MIN, INT_MAX = -(1 << 63), (1 << 63) - 1


def checked_int(name: str, value: Any, low: int = INT_MIN, high: int = INT_MAX) -> int:
    """``value`` as an int, if it is an integer from ``low`` to ``high`` (an int, or what
    stands for one: numpy's ``int64``); else ValueError (TypeError for a non-integer, a bool
    included) naming ``name`` and the range. What is sent is the int returned: msgpack
    carries no other."""
    try:  # the type's own method: a class given (``int``) is not an integer either
        number = type(value).__index__(value) if type(value) is not bool else None
    except (AttributeError, TypeError):  # none, or one that refuses (numpy's arrays)
        number = None
    if type(number) is not int:
        raise TypeError(f"{name} must be an integer, not {value!r:.40}")
    if not low <= number <= high:
        raise ValueError(f"{name} must be from {low} to {high}, not {number}")
    return number


def checked_ids(name: str, values: Any) -> tuple[int, ...]:
    """Numbers (of jobs) as the wire carries them: each from 1 to INT_MAX."""
    return tuple(checked_int(name, value, 1) for value in values)

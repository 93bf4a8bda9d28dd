"""Values of named fields that never change once made (a job's spec, an array's elements).

A frozen dataclass would do, but loading ``dataclasses`` (with the ``inspect`` it loads) and
making the classes cost the ``sched`` command more than all it does with a spec: a call from a
shell loop is mostly what it imports.

Pure: no I/O.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:
    from typing import Any


class FrozenError(AttributeError):
    """A value's fields cannot be assigned or deleted."""


class Frozen:
    """A value of named fields (``FIELDS``, in order): compared, hashed, shown and copied by
    them, and never changed once made (its own class fills it in with ``object.__setattr__``
    or its ``__dict__``)."""

    FIELDS: tuple[str, ...] = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.FIELDS)

    def __hash__(self) -> int:  # a TypeError where a field is a dict (a job's env)
        return hash(tuple(getattr(self, n) for n in self.FIELDS))

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.FIELDS)
        return f"{type(self).__qualname__}({shown})"

    def replace(self, **changes: Any) -> Any:
        """A copy with ``changes``, checked as a new one is."""
        return type(self)(**{**{n: getattr(self, n) for n in self.FIELDS}, **changes})

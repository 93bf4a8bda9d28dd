"""Dask keys and dsched keys: the one place where one becomes the other.

Dask names a task by a str or a tuple such as ``("x-3f2a", 0, 1)``; dsched's keys are str. A
str stays as it is; a tuple becomes its repr, ``"('x-3f2a', 0, 1)"``, so that it reads the
same in ``sched status`` as in Dask; anything else (an int, a float, bytes, or a str that
starts with ``(`` or a backslash and so could be mistaken for the other forms) becomes a
backslash and its repr. :func:`to_dask` undoes :func:`to_dsched` exactly.

Pure: no I/O, and no Dask import.
"""

from __future__ import annotations

import ast
import math
import numbers
from typing import Any

_ESCAPE = "\\"


def to_dsched(key: Any) -> str:
    """The dsched key of the Dask key ``key``; TypeError for what Dask cannot use as a key."""
    if type(key) is str:
        return _ESCAPE + repr(key) if key[:1] in ("(", _ESCAPE) else key
    if isinstance(key, tuple):
        return repr(_plain(key))
    return _ESCAPE + repr(_plain(key))


def to_dask(key: str) -> Any:
    """The Dask key whose dsched key is ``key``."""
    if key[:1] == "(":
        return ast.literal_eval(key)
    if key[:1] == _ESCAPE:
        return ast.literal_eval(key[1:])
    return key


def _plain(part: Any) -> Any:
    """``part`` as the built-in type whose repr ``ast.literal_eval`` reads back (a NumPy
    integer in a key becomes an int)."""
    kind = type(part)
    if kind is str or kind is int or kind is bytes or (kind is float and math.isfinite(part)):
        return part
    if kind is tuple or isinstance(part, tuple):
        return tuple(_plain(item) for item in part)
    if isinstance(part, numbers.Integral) and not isinstance(part, bool):
        return int(part)
    if isinstance(part, numbers.Real) and not isinstance(part, bool) and math.isfinite(part):
        return float(part)
    raise TypeError(f"a Dask key must be made of str, int, finite float and tuples; "
                    f"{part!r} ({kind.__name__}) cannot name a dsched task")

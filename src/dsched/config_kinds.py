"""The kinds of configuration values: each checks and normalizes one value, or raises
:class:`Bad` saying what it expected. ``settings.py`` gives every setting its kind.

No I/O and no logging; the one thing read from outside is the home directory, for a path
that starts with ``~``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from .resources import Resources, check_offer

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:
    from typing import Any, Callable

class Bad(ValueError):
    """A value of the wrong type or range; the message says what was expected."""


def _kind(expected: str, accept: Callable[[Any], bool],
          convert: Callable[[Any], Any] = lambda v: v) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if accept(v):
            return convert(v)
        raise Bad(expected)

    return check


def nullable(kind: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if v is None or (isinstance(v, str) and v.strip().lower() in ("", "none", "off")):
            return None
        try:
            return kind(v)
        except Bad as e:
            raise Bad(f"{e}, or 'none'") from None

    return check


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def integer(lo: int, hi: int | None = None) -> Callable[[Any], Any]:
    expected = f"an integer from {lo} to {hi}" if hi is not None else f"an integer >= {lo}"
    return _kind(expected, lambda v: isinstance(v, int) and not isinstance(v, bool)
                 and lo <= v and (hi is None or v <= hi))


_LEVELS = ("debug", "info", "warning", "error", "critical")
text = _kind("a non-empty string", lambda v: isinstance(v, str) and v.strip() != "", str.strip)
path = _kind("a path", lambda v: isinstance(v, (str, os.PathLike)) and str(v).strip() != "",
              lambda v: os.path.expanduser(str(v).strip()))
flag = _kind("true or false", lambda v: isinstance(v, bool))
seconds = _kind("a positive number of seconds", lambda v: _is_number(v) and v > 0, float)
log_level = _kind("one of " + ", ".join(_LEVELS),
                   lambda v: isinstance(v, str) and v.strip().lower() in _LEVELS,
                   lambda v: v.strip().lower())
_CONTAINMENT = ("auto", "cgroup", "subreaper")
containment = _kind("one of " + ", ".join(_CONTAINMENT),
                    lambda v: isinstance(v, str) and v.strip().lower() in _CONTAINMENT,
                    lambda v: v.strip().lower())
idle_action = _kind("warn or cancel", lambda v: isinstance(v, str)
                    and v.strip().lower() in ("warn", "cancel"), lambda v: v.strip().lower())
_SIZE = r"\s*(\d*\.?\d+(?:e[+-]?\d+)?)\s*([kmgtp]i?)?b?\s*"


def _match(pattern: str, text: str, ignore_case: bool = True) -> Any:
    """``re.fullmatch(pattern, text)``, with ``re`` loaded only for a text to read: it costs
    a ``sched`` call about 9 ms, and most programs read no setting as text."""
    import re

    return re.fullmatch(pattern, text, re.IGNORECASE if ignore_case else 0)


def size(v: Any) -> int:
    if isinstance(v, str) and (m := _match(_SIZE, v)):
        unit = (m.group(2) or "").lower()
        v = float(m.group(1)) * (1024 if unit.endswith("i") else 1000) ** (
            "kmgtp".index(unit[0]) + 1 if unit else 0)
    if _is_number(v) and v >= 1:
        return int(v)
    raise Bad("a size in bytes such as 268435456, '256MiB' or '100e9'")


def memory_limit(v: Any) -> Any:
    if isinstance(v, str) and v.strip().lower() == "auto":
        return "auto"
    if isinstance(v, float) and 0 < v <= 1:
        return v  # a fraction of the machine's memory, as in Dask
    try:
        return size(v)
    except Bad:
        raise Bad("'auto', a fraction in (0, 1] or a size such as '4GiB'") from None


def _device(item: Any) -> int | str | None:
    if isinstance(item, str) and item.strip():
        return int(item.strip()) if item.strip().isdigit() else item.strip()
    return item if isinstance(item, int) and not isinstance(item, bool) and item >= 0 else None


def gpus(v: Any) -> Any:
    if v is None or (isinstance(v, str) and v.strip().lower() in ("auto", "none")):
        return "none" if v is None else v.strip().lower()
    items = v.split(",") if isinstance(v, str) else [v] if isinstance(v, int) else v
    devices = [_device(item) for item in items] if isinstance(items, list) else []
    if not devices or None in devices or len(devices) != len({str(d) for d in devices}):
        raise Bad("'auto', 'none', or distinct device indices or UUIDs as in '0,1' or [0, 1]")
    return devices


def xids(v: Any) -> tuple[int, ...]:
    """Xid numbers: ``'48,79'``, ``[48, 79]``, or ``'none'`` (an empty list)."""
    if isinstance(v, str) and v.strip().lower() in ("", "none"):
        return ()
    items = v.split(",") if isinstance(v, str) else [v] if isinstance(v, int) else v
    numbers = [int(i) if isinstance(i, str) and i.strip().isdigit() else i
               for i in (items if isinstance(items, (list, tuple)) else [None])]
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in numbers):
        raise Bad("Xid numbers as in '48,79' or [48, 79], or 'none'")
    return tuple(sorted(set(numbers)))


def resource_table(v: Any) -> dict[str, int | float]:
    # Resources.parse is the one parser; its ResourceSpecError reaches the user unchanged.
    if not isinstance(v, (str, Mapping)):
        raise Bad("a resource spec such as 'GPU=2 MEMORY=100e9' or a table such as {GPU = 2}")
    parsed = check_offer(Resources.parse(v))
    return {name: parsed.quantity(name) for name in parsed}


port = integer(0, 65535)


def url_prefix(v: Any) -> str:
    """A path a reverse proxy serves under: ``/sched`` (one leading slash, no trailing one, no
    query, fragment or spaces); ``""`` or ``/`` for none."""
    path = r"/?([A-Za-z0-9._~!$&'()*+,;=:@%-]+/?)*"
    if isinstance(v, str) and _match(path, v.strip(), ignore_case=False):
        parts = [part for part in v.strip().split("/") if part]
        return "".join(f"/{part}" for part in parts)
    raise Bad("a URL path such as '/sched' (letters, digits and -._~ between slashes)")

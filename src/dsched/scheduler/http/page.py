"""What the page's templates use to show a snapshot to a person: numbers as people read them,
``<meter>`` bars, and lists cut into pages with relative links to the next and previous ones.

Pure: no I/O; the request's query arguments come in as a plain mapping.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping, Sequence
from urllib.parse import urlencode

#: Rows of a list on the page at once (the API pages with ?limit=).
PAGE_ROWS = 50


def quantity(value: float | None) -> str:
    """A resource quantity: ``2``, ``0.5``, ``1.5e+11``."""
    if value is None:
        return "?"
    if float(value).is_integer() and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.3g}"


def size(nbytes: float | None) -> str:
    """Bytes in binary units: ``512 B``, ``3.2 GiB``."""
    if nbytes is None:
        return "?"
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def seconds(value: float | None) -> str:
    """A duration: ``850 ms``, ``12 s``, ``3 min``, ``2.5 h``."""
    if value is None:
        return "?"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.0f} min"
    return f"{value / 3600:.1f} h"


def clock(wall: float) -> str:
    """A time of day in the scheduler's time zone: ``14:03:07``."""
    return datetime.fromtimestamp(wall).strftime("%H:%M:%S")


def percent(fraction: float | None) -> str:
    return "?" if fraction is None else f"{fraction * 100:.0f}%"


def meter(used: float | None, total: float | None, label: str) -> str:
    """A bar of ``used`` out of ``total`` (escaped HTML; nothing when there is no total),
    ``label`` naming it for screen readers and tooltips."""
    if used is None or not total:
        return ""
    high = f' high="{total * 0.9:g}"' if total else ""
    return (f'<meter min="0" max="{total:g}" value="{min(used, total):g}"{high} '
            f'title="{html.escape(label)}" aria-label="{html.escape(label)}"></meter>')


@dataclass(frozen=True)
class Page:
    """One page of a list: its ``items``, where it starts, how many there are in all, and
    relative links (``?name.offset=50``) to the pages before and after, if any."""

    items: Sequence[Any]
    offset: int
    total: int
    previous: str | None
    next: str | None

    @property
    def first(self) -> int:
        return self.offset + 1 if self.items else 0

    @property
    def last(self) -> int:
        return self.offset + len(self.items)


def page(items: Sequence[Any], name: str, query: Mapping[str, str], here: str = "./",
         rows: int = PAGE_ROWS) -> Page:
    """The page of ``items`` that ``query`` asks for with ``<name>.offset`` (0 when absent or
    not a number: a page is read by people, who get the first page rather than an error).
    ``here`` is the page's own path relative to the dashboard's root (its ``<base>``)."""
    key = f"{name}.offset"
    text = query.get(key, "0")
    offset = int(text) if text.isdigit() else 0
    total = len(items)
    offset = min(offset, max(0, total - 1)) // rows * rows if total else 0

    def link(start: int) -> str:
        args = {k: v for k, v in query.items() if k != key}
        if start:
            args[key] = str(start)
        return here + ("?" + urlencode(sorted(args.items())) if args else "")

    return Page(items[offset:offset + rows], offset, total,
                link(max(0, offset - rows)) if offset else None,
                link(offset + rows) if offset + rows < total else None)


#: The helpers every panel template may call, by name.
HELPERS = {"quantity": quantity, "size": size, "seconds": seconds, "clock": clock,
           "percent": percent, "meter": meter, "page": page}

"""``annotate``: resource demands, priority, retries, workers and the retry of a task that
runs out of GPU memory (``gpu_memory_retry``) for every submit inside a block.

Annotations live in a context variable, so they follow the code that set them across threads
started with ``contextvars.copy_context`` and across asyncio tasks, and never leak into other
clients' submits. Nested blocks merge: an inner block's keys replace the outer ones, and its
``resources`` are merged name by name. Explicit ``submit`` arguments win over annotations.

Resource specs are checked when the block is entered, so a bad spec fails at the ``with``
line, before anything is sent.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager

from ..resources import Resources, check_demand

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:
    from typing import Any, Iterator

KNOWN = ("resources", "priority", "retries", "workers", "gpu_memory_retry")

_current: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar(
    "dsched_annotations", default={}
)


@contextmanager
def annotate(**annotations: Any) -> Iterator[None]:
    """Apply ``resources=``, ``priority=``, ``retries=``, ``workers=`` or
    ``gpu_memory_retry=`` to submits inside."""
    unknown = sorted(set(annotations) - set(KNOWN))
    if unknown:
        raise TypeError(f"annotate() got unknown annotations {unknown}; known: {list(KNOWN)}")
    merged = dict(_current.get())
    for name, value in annotations.items():
        if name == "resources":
            outer = merged.get("resources", Resources())
            inner = Resources.parse(value)
            value = check_demand(Resources({**outer.to_wire(), **inner.to_wire()}))
        merged[name] = value
    token = _current.set(merged)
    try:
        yield
    finally:
        _current.reset(token)


def current() -> dict[str, Any]:
    """The annotations in force here (a fresh dict the caller may change)."""
    return dict(_current.get())

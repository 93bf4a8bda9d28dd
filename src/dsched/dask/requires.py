"""``requires``: a resource demand declared on a function itself.

``@dsched.requires(GPU=1)`` says that a function needs those resources wherever it runs in
a Dask graph: the task that calls it asks for them, alone or fused with other steps or wrapped
(``map_partitions`` passes it to a helper). The function comes back unchanged apart from one
attribute, so it imports, pickles and calls as before.

Pure: no I/O, and no Dask import.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

from ..resources import Resources, ResourcesLike, check_demand

ATTRIBUTE = "__dsched_requires__"

F = TypeVar("F", bound=Callable[..., Any])

#: Functions marked in this process. While none is, no graph needs searching for them: a
#: function reaches a client's graph from code that ran its decorator here.
_marked = 0


def requires(spec: ResourcesLike = None, /, **resources: Any) -> Callable[[F], F]:
    """Declare the resources a function needs: ``@requires(GPU=1)``, ``@requires("GPU=1
    MEMORY=8e9")`` or ``@requires({"GPU": 1})``. A bad spec fails here, at the decorator."""
    if spec is not None and resources:
        raise TypeError("requires() takes a spec or NAME=VALUE keywords, not both")
    demand = check_demand(Resources.parse(spec if spec is not None else resources))

    def mark(fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"requires() decorates a function, not {type(fn).__name__}")
        global _marked
        try:
            setattr(fn, ATTRIBUTE, demand)
        except (AttributeError, TypeError):  # builtins and ufuncs take no attributes
            raise TypeError(f"cannot mark {fn!r} with requires(); wrap it in a function of "
                            "your own and decorate that") from None
        _marked += 1
        return fn

    return mark


def any_marked() -> bool:
    """Whether any function in this process was marked with :func:`requires`."""
    return _marked > 0


def declared(fn: Any) -> Resources | None:
    """What ``fn`` (a function, or a ``functools.partial`` or bound method of one) declared
    with :func:`requires`, or None."""
    for _ in range(8):  # partials of partials, but never a cycle
        demand = getattr(fn, ATTRIBUTE, None)
        if isinstance(demand, Resources):
            return demand
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif hasattr(fn, "__func__"):
            fn = fn.__func__
        else:
            return None
    return None

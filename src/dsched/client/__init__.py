"""The client side: Client, AsyncClient, Future, annotate, LocalCluster, wait and friends.

Each name is loaded when first used, as in ``dsched`` itself: a ``sched`` command reads its
config through this package (``settings.py``) and must not pay for asyncio, the op classes
and LocalCluster (which loads the worker's core) before it needs a connection.
"""

import importlib
from typing import Any

# Loaded now, cheap: the function shares its module's name, and importing that submodule
# later would otherwise leave the module, not the function, under dsched.client.annotate.
from .annotate import annotate

_PUBLIC = {
    "Client": ".blocking", "AsyncClient": ".client",
    "LocalCluster": ".cluster", "CancelledError": ".future", "Future": ".future",
    **dict.fromkeys(("SchedulerLostError", "TaskFailedError"), "..errors"),
    **dict.fromkeys(("JobFailed", "JobFuture", "JobResult"), ".jobs"),
    **dict.fromkeys(("ALL_COMPLETED", "FIRST_COMPLETED", "as_completed", "progress", "wait"),
                    ".waiting"),
}


def __getattr__(name: str) -> Any:
    where = _PUBLIC.get(name)
    if where is None:
        raise AttributeError(f"module 'dsched.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


__all__ = [
    "ALL_COMPLETED", "AsyncClient", "CancelledError", "Client", "FIRST_COMPLETED", "Future",
    "JobFailed", "JobFuture", "JobResult", "LocalCluster", "SchedulerLostError", "TaskFailedError", "annotate", "as_completed",
    "progress", "wait",
]

"""The client side: Client, AsyncClient, Future, annotate, LocalCluster, wait and friends.

Each name is loaded when first used, as in ``dsched`` itself: a ``sched`` command reads its
config through this package (``settings.py``) and must not pay for asyncio, the op classes
and LocalCluster (which loads the worker's core) before it needs a connection.
"""

from ..lazy import lazy_names

_PUBLIC = {
    "Client": ".blocking", "AsyncClient": ".client", "annotate": ".annotations",
    "LocalCluster": ".cluster", "CancelledError": ".future", "Future": ".future",
    **dict.fromkeys(("SchedulerLostError", "TaskFailedError"), "..errors"),
    **dict.fromkeys(("JobFailed", "JobFuture", "JobResult"), ".jobs"),
    **dict.fromkeys(("ALL_COMPLETED", "FIRST_COMPLETED", "as_completed", "progress", "wait"),
                    ".waiting"),
}


__getattr__, __dir__ = lazy_names(__name__, _PUBLIC, globals())



__all__ = [
    "ALL_COMPLETED", "AsyncClient", "CancelledError", "Client", "FIRST_COMPLETED", "Future",
    "JobFailed", "JobFuture", "JobResult", "LocalCluster", "SchedulerLostError", "TaskFailedError", "annotate", "as_completed",
    "progress", "wait",
]

"""dsched: a resource-aware distributed task scheduler.

The public API: Client, AsyncClient, LocalCluster, Future, annotate, requires, wait,
as_completed, progress, get_gpu_ids and config; shell-command jobs through
``Client.submit_command`` (JobFuture, JobResult, JobFailed). Dask collections run on a Client through
``dsched.dask`` (the ``dask`` extra); importing dsched never imports Dask.
"""

import importlib
from typing import Any

#: Where each public name lives. Importing dsched loads none of them: a program that needs
#: only a part (``sched --version``, a job's supervisor, a worker) pays for that part alone.
_PUBLIC = {
    "config": ".config",
    **dict.fromkeys(("ALL_COMPLETED", "FIRST_COMPLETED", "AsyncClient", "CancelledError",
                     "Client", "Future", "JobFailed", "JobFuture", "JobResult", "LocalCluster",
                     "SchedulerLostError", "TaskFailedError", "annotate", "as_completed",
                     "progress", "wait"), ".client"),
    "requires": ".dask.requires",
    **dict.fromkeys(("ResourceSpecError", "SchedError", "TaskExit"), ".errors"),
    "get_gpu_ids": ".gpu_ids",
    **dict.fromkeys(("Resources", "parse_resources"), ".resources"),
}


def __getattr__(name: str) -> Any:
    where = _PUBLIC.get(name)
    if where is None:
        raise AttributeError(f"module 'dsched' has no attribute {name!r}")
    module = importlib.import_module(where, __name__)
    value = module if name == "config" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


__version__ = "0.1.0"

__all__ = [
    "ALL_COMPLETED", "AsyncClient", "CancelledError", "Client", "FIRST_COMPLETED", "Future",
    "JobFailed", "JobFuture", "JobResult", "LocalCluster", "ResourceSpecError", "Resources", "SchedError", "SchedulerLostError",
    "TaskExit", "TaskFailedError", "annotate", "as_completed", "config", "get_gpu_ids", "parse_resources",
    "progress", "requires", "wait",
]

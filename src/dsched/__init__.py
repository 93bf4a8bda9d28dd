"""dsched: a resource-aware distributed task scheduler.

The public API: Client, AsyncClient, LocalCluster, Future, annotate, requires, wait,
as_completed, progress, get_gpu_ids and config; shell-command jobs through
``Client.submit_command`` (JobFuture, JobResult, JobFailed). Dask collections run on a Client through
``dsched.dask`` (the ``dask`` extra); importing dsched never imports Dask.
"""

from .lazy import lazy_names

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


__getattr__, __dir__ = lazy_names(__name__, _PUBLIC, globals(), modules=frozenset({"config"}))

__version__ = "0.1.0"

__all__ = [
    "ALL_COMPLETED", "AsyncClient", "CancelledError", "Client", "FIRST_COMPLETED", "Future",
    "JobFailed", "JobFuture", "JobResult", "LocalCluster", "ResourceSpecError", "Resources", "SchedError", "SchedulerLostError",
    "TaskExit", "TaskFailedError", "annotate", "as_completed", "config", "get_gpu_ids", "parse_resources",
    "progress", "requires", "wait",
]

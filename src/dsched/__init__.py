"""dsched: a resource-aware distributed task scheduler.

The public API: Client, AsyncClient, LocalCluster, Future, annotate, requires, wait,
as_completed, progress, get_gpu_ids and config; shell-command jobs through
``Client.submit_command`` (JobFuture, JobResult, JobFailed). Dask collections run on a Client through
``dsched.dask`` (the ``dask`` extra); importing dsched never imports Dask.
"""

from . import config
from .client import (ALL_COMPLETED, FIRST_COMPLETED, AsyncClient, CancelledError, Client, Future,
                     JobFailed, JobFuture, JobResult, LocalCluster, SchedulerLostError,
                     TaskFailedError, annotate, as_completed, progress, wait)
from .dask.requires import requires
from .errors import ResourceSpecError, SchedError, TaskExit
from .gpu_ids import get_gpu_ids
from .resources import Resources, parse_resources

__version__ = "0.1.0"

__all__ = [
    "ALL_COMPLETED", "AsyncClient", "CancelledError", "Client", "FIRST_COMPLETED", "Future",
    "JobFailed", "JobFuture", "JobResult", "LocalCluster", "ResourceSpecError", "Resources", "SchedError", "SchedulerLostError",
    "TaskExit", "TaskFailedError", "annotate", "as_completed", "config", "get_gpu_ids", "parse_resources",
    "progress", "requires", "wait",
]

"""The client side: Client, AsyncClient, Future, annotate, LocalCluster, wait and friends."""

from .annotate import annotate
from .blocking import Client
from ..errors import SchedulerLostError, TaskFailedError
from .client import AsyncClient
from .cluster import LocalCluster
from .future import CancelledError, Future
from .jobs import JobFailed, JobFuture, JobResult
from .waiting import ALL_COMPLETED, FIRST_COMPLETED, as_completed, progress, wait

__all__ = [
    "ALL_COMPLETED", "AsyncClient", "CancelledError", "Client", "FIRST_COMPLETED", "Future",
    "JobFailed", "JobFuture", "JobResult", "LocalCluster", "SchedulerLostError", "TaskFailedError", "annotate", "as_completed",
    "progress", "wait",
]

"""dsched: a resource-aware distributed task scheduler.

The public API grows here as the client lands: Client, LocalCluster, Future, annotate, wait,
as_completed, progress, get_gpu_ids and config.
"""

from . import config
from .errors import ResourceSpecError, SchedError
from .gpu_ids import get_gpu_ids
from .resources import Resources, parse_resources

__version__ = "0.1.0"

__all__ = ["Resources", "get_gpu_ids", "ResourceSpecError", "SchedError", "config", "parse_resources"]

"""The worker: the pure ``WorkerState`` and GPU ledger, NVML discovery, and the async shell.

Importing this package loads only the pure core (no NVML, no asyncio), because the GPU task
child process (``python -m dsched.worker.child``) imports it on its way in. Import ``gpus``,
``executor`` and the shell modules by name where they are needed.
"""

from .ledger import GpuLedger
from .state import WorkerState

__all__ = ["GpuLedger", "WorkerState"]

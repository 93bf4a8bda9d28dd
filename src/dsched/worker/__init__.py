"""The worker: the pure ``WorkerState`` and GPU ledger, NVML discovery, and the async shell.

Importing this package loads nothing: ``WorkerState`` and ``GpuLedger`` are loaded when first
named, because the processes that import its modules on their way in (the GPU task child,
``python -m dsched.worker.child``; the job spawner, whose memory every job's supervisor
copies when it forks) need neither. Import ``gpus``, ``executor`` and the shell modules by
name where they are needed.
"""

from ..lazy import lazy_names

__all__ = ["GpuLedger", "WorkerState"]

__getattr__, __dir__ = lazy_names(__name__, {"GpuLedger": ".ledger", "WorkerState": ".state"},
                                  globals())

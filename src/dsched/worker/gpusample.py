"""One look at what each attempt holding GPU devices does with them, for ``gpuuse.GpuUse``.

Made at each heartbeat from what the heartbeat read of NVML (``gpus.gpu_usage``, with the
memory of each compute process): an attempt's utilisation is the highest of its devices'
(NVML's figure is the device's, whoever runs on it), and its memory is what the processes
under its root (a job's supervisor, a GPU task's process) use on its devices. Where NVML lists
no process on a device (it cannot, for some devices and users) and the attempt is alone there,
the device's used memory is taken for its own.

This is I/O (it reads the process tree); what the figures mean is ``gpuuse``'s.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import psutil

from .gpus import GpuUsage, process_tree
from .gpuuse import Sample


def samples(usage: Sequence[GpuUsage], processes: Mapping[int, Mapping[int, int]],
            holders: Mapping[str, tuple[tuple[int, ...], int | None]],
            uuids: Mapping[int, str]) -> dict[str, Sample]:
    """A Sample of each attempt in ``holders`` (key -> its devices and its root pid, None
    where it has none yet) whose devices were read; ``processes``: device -> pid -> bytes."""
    by_index = {u.index: u for u in usage}
    sharing: dict[int, int] = {}
    for devices, _ in holders.values():
        for device in devices:
            sharing[device] = sharing.get(device, 0) + 1
    found = {}
    for key, (devices, root) in holders.items():
        read = [by_index[d] for d in devices if d in by_index]
        if not read:
            continue
        pids = _tree(root)
        memory = 0
        for u in read:
            used = processes.get(u.index, {})
            mine = sum(bytes_ for pid, bytes_ in used.items() if pid in pids)
            if not used and sharing[u.index] == 1:
                mine = u.memory_used
            memory += mine
        found[key] = Sample(tuple(uuids.get(d, f"gpu{d}") for d in devices),
                            float(max(u.utilization for u in read)), memory)
    return found


def _tree(root: int | None) -> set[int]:
    if root is None:
        return set()
    try:
        return process_tree(psutil.Process(root))
    except psutil.Error:  # ended meanwhile
        return set()

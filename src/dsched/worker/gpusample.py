"""One look at what each attempt holding GPU devices does with them, for ``gpuuse.GpuUse``.

Made at each heartbeat from what the heartbeat read of NVML (``gpus.gpu_usage``, with the
memory of each compute process): an attempt's utilisation is the highest of its devices'
(NVML's figure is the device's, whoever runs on it), and its memory is what the processes
under its root (a job's supervisor, a GPU task's process) use on its devices. Where NVML lists
no process on a device (it cannot, for some devices and users) and the attempt is alone there,
the device's used memory is taken for its own. A device is full when 95% of its memory is in
use (``oom.FULL``).

The processes are read once a heartbeat, on the heartbeat's thread (``ProcessTree.scan``: one
walk of the process table), and only where NVML lists some; ``samples`` then runs on the
worker's loop, beside its state, and reads nothing but that table.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import psutil

from ..oom import FULL
from .gpus import GpuUsage
from .gpuuse import Sample


class ProcessTree:
    """Which process is whose child, as the process table said when it was scanned."""

    def __init__(self) -> None:
        self.children: dict[int, list[int]] | None = None  # None: not scanned

    def scan(self) -> None:
        """Read the process table (once; I/O: on the heartbeat's thread)."""
        if self.children is not None:
            return
        children: dict[int, list[int]] = {}
        for process in psutil.process_iter(["ppid"]):
            parent = process.info.get("ppid")
            if parent is not None:
                children.setdefault(parent, []).append(process.pid)
        self.children = children

    def under(self, root: int | None) -> set[int]:
        """``root`` and the processes under it (nothing where the table was not scanned)."""
        if root is None or self.children is None:
            return set()
        found, todo = {root}, [root]
        while todo:
            for child in self.children.get(todo.pop(), ()):
                if child not in found:
                    found.add(child)
                    todo.append(child)
        return found


def samples(usage: Sequence[GpuUsage], processes: Mapping[int, Mapping[int, int]],
            holders: Mapping[str, tuple[tuple[int, ...], int | None]],
            uuids: Mapping[int, str], tree: ProcessTree) -> dict[str, Sample]:
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
        pids = tree.under(root)
        memory = 0
        for u in read:
            used = processes.get(u.index, {})
            mine = sum(bytes_ for pid, bytes_ in used.items() if pid in pids)
            if not used and sharing[u.index] == 1:
                mine = u.memory_used
            memory += mine
        full = any(u.memory_total and u.memory_used >= FULL * u.memory_total for u in read)
        found[key] = Sample(tuple(uuids.get(d, f"gpu{d}") for d in devices),
                            float(max(u.utilization for u in read)), memory, full)
    return found

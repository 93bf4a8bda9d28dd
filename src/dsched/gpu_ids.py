"""Which GPUs a task may use: the environment a pinned task starts with, and how it reads it.

``task_environment`` writes the variables the worker gives a task process; ``get_gpu_ids``
reads them back from inside the task. Both live here so that the format has one copy (the
names have theirs in ``environ.py``), and so that a task process can import this module
cheaply (standard library only).

Device numbers are physical NVML indices, which CUDA uses too once ``CUDA_DEVICE_ORDER`` is
``PCI_BUS_ID``: a worker restricted to devices 2,3 gives a task ``CUDA_VISIBLE_DEVICES=3``, not
``1``, so the value means the same device whatever the worker's own restriction was.

Must not import anything heavy (no NVML, no asyncio, no dsched daemons): task code calls it.
"""

from __future__ import annotations

import os
from typing import Mapping

from .environ import CUDA_DEVICE_ORDER_ENV, CUDA_VISIBLE_DEVICES_ENV, TASK_GPUS_ENV


def format_gpus(gpus: tuple[int, ...]) -> str:
    """``(0, 2)`` as ``"0,2"``; ``()`` as ``""``, which CUDA reads as "no device"."""
    return ",".join(str(index) for index in gpus)


def task_environment(gpus: tuple[int, ...], base_env: Mapping[str, str]) -> dict[str, str]:
    """The environment of a task that holds exactly ``gpus`` (physical NVML indices).

    ``CUDA_VISIBLE_DEVICES`` names exactly those devices, and is empty for a task that holds
    none, so that it sees no GPU rather than every GPU. ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` makes
    CUDA number devices as NVML does.
    """
    if any(not isinstance(index, int) or isinstance(index, bool) or index < 0 for index in gpus):
        raise ValueError(f"GPU indices must be non-negative integers, not {gpus!r}")
    text = format_gpus(tuple(gpus))
    env = dict(base_env)
    env[CUDA_VISIBLE_DEVICES_ENV] = text
    env[CUDA_DEVICE_ORDER_ENV] = "PCI_BUS_ID"
    env[TASK_GPUS_ENV] = text
    return env


def get_gpu_ids() -> list[int]:
    """The GPU indices (NVML / PCI bus order) granted to the calling task; ``[]`` for none.

    Reads dsched's own record of the grant first, then ``CUDA_VISIBLE_DEVICES`` (integer
    entries only: a UUID cannot be turned into an index without NVML). A task granted no GPU
    gets ``[]``, and so does a process outside dsched with neither variable set.
    """
    text = os.environ.get(TASK_GPUS_ENV)
    if text is None:
        text = os.environ.get(CUDA_VISIBLE_DEVICES_ENV, "")
    ids: list[int] = []
    for entry in text.split(","):
        entry = entry.strip()
        if not entry.isdigit():
            # CUDA ignores everything after the first entry it cannot read; so do we.
            break
        ids.append(int(entry))
    return ids

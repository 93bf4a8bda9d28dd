"""Out of GPU memory: how a failed attempt is recognised as one, and the larger request its
one retry makes (``--gpu-memory-retry``).

The worker recognises it (``out_of_memory``): the attempt failed, and either its output's tail
names a GPU out-of-memory error (PyTorch's, CUDA's, cuBLAS's and cuDNN's, XLA's, TensorFlow's),
or the device memory its processes used while their device was full (``FULL`` of its memory in
use), as the worker sampled it, reached what it held: memory held on a device with room left
did not run out, however close to its grant it came. The
scheduler sizes the retry (``larger``): twice what the attempt held on each device, or a
quarter more than its measured peak where that is more, and never more than the largest device
any worker has; no retry where that is no larger than what it held.

Pure: no I/O, no clock.
"""

from __future__ import annotations

#: Words (lowercase) that a GPU out-of-memory error prints.
SIGNS = ("cuda out of memory", "cuda error: out of memory", "outofmemoryerror",
         "cudaerrormemoryallocation", "cublas_status_alloc_failed", "cudnn_status_alloc_failed",
         "resource_exhausted: out of memory", "oom when allocating")
#: How much of the output, from its end, is looked at.
TAIL = 64 * 1024
#: A peak at this share of what it held counts as having run out; a device with this share
#: of its memory in use is full.
FULL = 0.95
#: What a retry asks for, at the least: this many times what the attempt held, and this much
#: more than its measured peak.
GROWTH, HEADROOM = 2, 1.25
#: Requests are rounded up to whole megabytes.
MB = 10**6


def says_out_of_memory(tail: str) -> bool:
    """Whether the end of an attempt's output names a GPU out-of-memory error."""
    text = tail[-TAIL:].lower()
    return any(sign in text for sign in SIGNS)


def out_of_memory(outcome: str, tail: str, peak: int, held: int) -> bool:
    """Whether an attempt that ended with ``outcome`` ran out of GPU memory: it failed, and
    its output says so (``tail``), or its measured ``peak`` while its device was full (bytes)
    reached what it ``held`` (bytes, on the same devices; 0 where it held no memory it knew
    of)."""
    if outcome != "failed":
        return False
    return says_out_of_memory(tail) or (held > 0 and peak >= FULL * held)


def larger(held: int, peak: int, largest: int) -> int | None:
    """The memory per device (bytes) a retry asks for, after an attempt that held ``held``
    per device and used at most ``peak`` per device; ``largest``: the memory of the largest
    device of any worker. None where no larger request can be met."""
    wanted = max(GROWTH * held, int(HEADROOM * peak))
    wanted = min(-(-wanted // MB) * MB, largest)
    return wanted if wanted > held else None

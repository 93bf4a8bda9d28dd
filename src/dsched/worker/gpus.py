"""Finding the worker's GPUs with NVML, and the plans made from what was found.

This is the only module that calls NVML (``pynvml`` of nvidia-ml-py), and it loads it lazily.
``detect_gpus`` lists the devices the worker may use; no library, no driver or no device means
no GPUs and one info line in the log, never an error. ``gpu_usage`` reads utilization and
memory for heartbeats. The rest is pure: what the worker advertises (``resources_with_gpus``),
which devices back its ``GPU`` resource (``ledger_devices``), and how ``--nworkers`` divides
the devices (``split_gpus``, ``gpus_option``).

Indices are NVML's, the PCI bus order, which CUDA follows only with
``CUDA_DEVICE_ORDER=PCI_BUS_ID``: tasks get that setting, and integer entries of the worker's
own ``CUDA_VISIBLE_DEVICES`` are read as NVML indices (UUID entries are exact whatever the
order). With ``SCHED_FAKE_NVML`` set, the test double in ``fake_nvml`` replaces pynvml.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence, TypeVar

from ..devices import GPU_MEMORY
from ..environ import CUDA_VISIBLE_DEVICES_ENV, FAKE_NVML_ENV
from ..errors import ConfigError, ResourceSpecError
from ..resources import SCALE, Resources, device_index, format_units, named_devices
from .ledger import GPU

logger = logging.getLogger(__name__)

_FROM_ENV: Any = object()  # default of ``visible``: read CUDA_VISIBLE_DEVICES at call time
T = TypeVar("T")


@dataclass(frozen=True)
class GpuDevice:
    index: int  # NVML index (PCI bus order)
    uuid: str = ""
    name: str = ""
    memory_total: int = 0  # bytes


@dataclass(frozen=True)
class GpuInventory:
    """The devices this worker may use; ``reason`` says why there are none."""

    devices: tuple[GpuDevice, ...] = ()
    reason: str = ""

    @property
    def count(self) -> int:
        return len(self.devices)

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(device.index for device in self.devices)


@dataclass(frozen=True)
class GpuUsage:
    index: int
    utilization: int  # percent of time a kernel ran, over NVML's last sample period
    memory_used: int  # bytes
    memory_total: int
    memory_outside: int = 0  # bytes used by processes this worker did not start


def load_nvml(environ: Any = os.environ) -> Any:
    """The NVML backend: the fake when ``SCHED_FAKE_NVML`` is set, else pynvml; None if absent."""
    value = environ.get(FAKE_NVML_ENV)
    if value:
        from .fake_nvml import FakeNvml

        return FakeNvml.from_env_value(value)
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def detect_gpus(
    visible: str | None = _FROM_ENV, select: str = "auto", backend: Any = None,
    announce: bool = True,
) -> GpuInventory:
    """The GPUs this worker may use.

    ``visible`` is ``CUDA_VISIBLE_DEVICES`` (read from the environment when not given; ``None``
    means unset, ``""`` no device). ``select`` is the ``--gpus`` value: ``auto`` (every visible
    device), ``none``, or indices/UUIDs such as ``0,2``; a device it names that is not found
    raises ConfigError, since the user asked for it by name. What was found is logged at INFO
    when ``announce`` (a nanny's process, whose nanny said it, logs it at DEBUG).
    """
    if visible is _FROM_ENV:
        visible = os.environ.get(CUDA_VISIBLE_DEVICES_ENV)
    wanted = parse_gpus_option(select)
    if wanted == ():
        return _found((), "GPUs are turned off (--gpus none)", announce)
    if visible is not None and not visible.strip():
        devices: tuple[GpuDevice, ...] = ()
        reason = "CUDA_VISIBLE_DEVICES is empty"
    else:
        devices, reason = _read_devices(backend if backend is not None else load_nvml())
        if visible is not None and devices:
            devices = _visible(devices, visible)
            reason = "" if devices else f"CUDA_VISIBLE_DEVICES={visible!r} names none of them"
    if wanted is not None:
        devices = _select(devices, wanted, select, reason)
    return _found(devices, reason, announce)


def _found(devices: tuple[GpuDevice, ...], reason: str, announce: bool) -> GpuInventory:
    level = logging.INFO if announce else logging.DEBUG
    if devices:
        logger.log(level, "Found %d GPU(s): %s", len(devices), "; ".join(
            f"{d.index} {d.name} {d.uuid} {d.memory_total / 2**30:.0f} GiB" for d in devices
        ))
        return GpuInventory(devices)
    logger.log(level, "No GPUs: %s; the worker runs without GPUs", reason)
    return GpuInventory((), reason)


def _read_devices(nvml: Any) -> tuple[tuple[GpuDevice, ...], str]:
    if nvml is None:
        return (), "nvidia-ml-py (pynvml) is not installed"
    nvml_error = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVML that cannot start, whatever the cause, means "no GPUs"
        return (), _init_failure(nvml, exc)
    devices = []
    try:
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                devices.append(GpuDevice(
                    index, _text(nvml.nvmlDeviceGetUUID(handle)),
                    _text(nvml.nvmlDeviceGetName(handle)),
                    int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                ))
            except nvml_error as exc:
                logger.warning("Leaving out GPU %d: NVML cannot read it (%s)", index, exc)
    except nvml_error as exc:
        return (), f"NVML could not count the devices ({exc})"
    finally:
        _shutdown(nvml)
    return tuple(devices), "" if devices else "NVML found no GPU"


def _init_failure(nvml: Any, exc: Exception) -> str:
    code = getattr(exc, "value", None)
    if code == getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", 12):
        return "the NVML library was not found (no NVIDIA driver is installed)"
    if code == getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", 9):
        return "the NVIDIA driver is not loaded"
    return f"NVML could not start ({type(exc).__name__}: {exc})"


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception as exc:  # nothing left to do with NVML; the devices are already read
        logger.debug("nvmlShutdown failed: %s", exc)


def _text(value: str | bytes) -> str:
    # Older nvidia-ml-py versions return bytes.
    return value.decode() if isinstance(value, bytes) else value


def _match(entry: str, devices: Sequence[GpuDevice]) -> GpuDevice | None:
    """The device an index or (a unique prefix of) a UUID names, as CUDA matches them."""
    if entry.isdigit():
        return next((d for d in devices if d.index == int(entry)), None)
    if entry.startswith("GPU-"):
        matches = [d for d in devices if d.uuid.startswith(entry)]
        return matches[0] if len(matches) == 1 else None
    return None


def _visible(devices: tuple[GpuDevice, ...], text: str) -> tuple[GpuDevice, ...]:
    chosen: list[GpuDevice] = []
    for entry in (part.strip() for part in text.split(",")):
        device = _match(entry, devices)
        if device is None:
            logger.warning(
                "CUDA_VISIBLE_DEVICES=%r: %r names no GPU found here; as CUDA does, it and the "
                "entries after it are ignored", text, entry,
            )
            break
        if device not in chosen:
            chosen.append(device)
    return tuple(chosen)


def parse_gpus_option(text: str) -> tuple[str, ...] | None:
    """``--gpus``: None for ``auto``, ``()`` for ``none``, else the entries named."""
    value = text.strip()
    if value.lower() == "auto":
        return None
    if value.lower() in ("none", ""):
        return ()
    entries = tuple(part.strip() for part in value.split(","))
    for entry in entries:
        if not (entry.isdigit() or entry.startswith("GPU-")):
            raise ConfigError(
                f"invalid --gpus value {text!r}: {entry!r} is not a GPU index or UUID; expected "
                "auto, none, or a comma-separated list such as 0,2 or GPU-5d3f...,GPU-91a0..."
            )
    return entries


def _select(devices: tuple[GpuDevice, ...], wanted: tuple[str, ...], text: str,
            reason: str) -> tuple[GpuDevice, ...]:
    chosen: list[GpuDevice] = []
    for entry in wanted:
        device = _match(entry, devices)
        if device is None:
            found = ", ".join(str(d.index) for d in devices) or f"none: {reason}"
            raise ConfigError(f"--gpus {text}: GPU {entry} is not available here (found {found})")
        if device not in chosen:
            chosen.append(device)
    return tuple(chosen)


# -- plans on what was found (pure) -------------------------------------------------------


def resources_with_gpus(resources: Resources, gpus: Sequence[GpuDevice]) -> Resources:
    """What the worker advertises: ``GPU=<count>`` added when GPUs were found and none given.

    A ``GPU`` given explicitly (``GPU=0`` included) is kept as given, and none is added to a
    worker that names its devices (``gpu0=1 gpu1=1``).
    """
    if GPU in resources or not gpus or named_devices(resources):
        return resources  # devices named gpu<N> are the worker's GPUs: no second count of them
    return resources + Resources({GPU: len(gpus) * SCALE})


def with_gpu_memory(resources: Resources, behind_gpu: Sequence[GpuDevice]) -> Resources:
    """``resources`` with ``GPU_MEMORY``, the memory of the devices behind its ``GPU`` all
    together (each device's own goes to the scheduler with them: ``dsched.devices``), where
    NVML said each one's. A worker never takes ``GPU_MEMORY`` as given: it is measured."""
    if GPU_MEMORY in resources:
        raise ResourceSpecError(
            f"invalid worker resource {GPU_MEMORY}={format_units(resources[GPU_MEMORY])}: a "
            "worker offers each GPU's memory as NVML reports it, not as given")
    if not behind_gpu or not all(device.memory_total for device in behind_gpu):
        return resources
    total = sum(device.memory_total for device in behind_gpu)
    return resources + Resources({GPU_MEMORY: total * SCALE})


def ledger_devices(resources: Resources, gpus: Sequence[GpuDevice],
                   detected: bool | None = None) -> tuple[int, ...]:
    """The device indices behind the worker's ``GPU`` resource, for ``WorkerState``.

    Without devices found, abstract ``GPU=N`` maps to ``0..N-1``. With devices found, ``GPU=N``
    takes the first N of them by index, and asking for more than were found is an error (it
    would let tasks share devices the user thinks are separate). The same holds for devices
    named ``gpu<N>`` (``check_named_devices``). ``detected``: whether this machine's GPUs were
    found at all (default: whether ``gpus`` has any), when ``gpus`` is one process's share.
    """
    check_named_devices(resources, gpus, bool(gpus) if detected is None else detected)
    units = resources.get(GPU)
    if units % SCALE:
        raise ResourceSpecError(
            f"invalid worker resource GPU={format_units(units)}: a worker offers whole GPUs"
        )
    count = units // SCALE
    indices = sorted(device.index for device in gpus) if gpus else list(range(count))
    named = set(named_devices(resources)) & set(indices[:count])
    if named:
        raise ResourceSpecError(
            f"the worker offers GPU={count} on device(s) {', '.join(map(str, indices[:count]))} "
            f"and names device(s) {', '.join(map(str, sorted(named)))} as gpu<N> too: two tasks "
            "would share a device; offer one or the other"
        )
    if not gpus:
        return tuple(indices)
    if count > len(indices):
        raise ResourceSpecError(
            f"the worker offers GPU={count} but only {_were_found(len(indices), 'GPU')} "
            f"({', '.join(map(str, indices))}): offer at most GPU={len(indices)}, or leave GPU "
            "out to offer all of them"
        )
    return tuple(indices[:count])


def check_named_devices(resources: Resources, gpus: Sequence[GpuDevice],
                        detected: bool) -> None:
    """Refuse ``gpu<N>`` resources that would give one device two owners: each stands for
    device N, whose jobs are pinned to it, so its value is 1 (``gpu0=2`` would pin two
    whole-device jobs to device 0); and where GPUs were detected, N is one of ``gpus``, the
    devices this worker may use (not a device that does not exist, nor one that
    ``CUDA_VISIBLE_DEVICES``, ``--gpus`` or the division among ``--nworkers`` keeps from it)."""
    for name in resources.names():
        index = device_index(name)
        if index is None:
            continue
        if resources[name] != SCALE:
            raise ResourceSpecError(
                f"invalid worker resource {name}={format_units(resources[name])}: {name} stands "
                f"for device {index}, one device, so its value is 1")
        usable = sorted(device.index for device in gpus)
        if detected and index not in usable:
            raise ResourceSpecError(
                f"invalid worker resource {name}=1: device {index} is not one this worker may "
                f"use (it may use {', '.join(map(str, usable)) or 'none'}: the devices found, "
                "less those CUDA_VISIBLE_DEVICES, --gpus or --nworkers keep from it)")


def _were_found(n: int, noun: str = "") -> str:
    """``1 GPU was found``, ``2 GPUs were found``; without a noun, ``1 was found``."""
    counted = f"{n} {noun}{'s' if noun and n != 1 else ''}".rstrip()
    return f"{counted} {'was' if n == 1 else 'were'} found"


def split_gpus(gpus: Sequence[T], nworkers: int) -> list[list[T]]:
    """Divide devices among ``nworkers`` worker processes, as evenly as possible.

    Contiguous blocks, the first ones one larger when the count does not divide. With fewer
    devices than workers, the first workers get one each and the rest none (they run CPU
    tasks only): sharing a device between workers would break the rule that two tasks share
    a device only when both asked for a fraction of one.
    """
    if nworkers < 1:
        raise ValueError(f"nworkers must be at least 1, not {nworkers}")
    size, extra = divmod(len(gpus), nworkers)
    shares, start = [], 0
    for worker in range(nworkers):
        end = start + size + (1 if worker < extra else 0)
        shares.append(list(gpus[start:end]))
        start = end
    return shares


def check_division(resources: Resources, gpus: Sequence[GpuDevice],
                   shares: Sequence[Sequence[GpuDevice]]) -> None:
    """Refuse a ``GPU`` per process that the found devices, divided, cannot back.

    A process whose share is smaller than its ``GPU`` would count devices it was not given and
    pin tasks to devices of another process, so two tasks would share a whole device; without
    devices found at all, ``GPU=N`` stays abstract.
    """
    count = resources.get(GPU) // SCALE
    if not gpus or not count or len(shares) == 1:  # one process: ledger_devices says why
        return
    short = [i for i, share in enumerate(shares) if len(share) < count]
    if short:
        raise ResourceSpecError(
            f"{len(shares)} worker processes offering GPU={count} each need {len(shares) * count} "
            f"GPUs, but {_were_found(len(gpus))} (process {short[0]} would get "
            f"{len(shares[short[0]])}): lower --nworkers or GPU, or leave GPU out to divide the "
            "devices found"
        )


def _outside(nvml: Any, handle: Any, ours: Callable[[], set[int]], mine: list,
             listed: dict[int, int]) -> int:
    """Bytes of the device's memory its compute processes use but ours (0 where NVML cannot
    list them); each process's bytes go into ``listed`` (pid -> bytes)."""
    try:
        processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except getattr(nvml, "NVMLError", Exception):
        return 0
    if not processes:
        return 0
    for p in processes:
        listed[p.pid] = listed.get(p.pid, 0) + int(p.usedGpuMemory or 0)
    if not mine:
        mine.append(set(ours()))
    return sum(int(p.usedGpuMemory or 0) for p in processes if p.pid not in mine[0])


def gpus_option(share: Sequence[GpuDevice]) -> str:
    """The ``--gpus`` value that gives one worker process exactly ``share``."""
    return ",".join(str(device.index) for device in share) or "none"


def gpu_usage(indices: Iterable[int], backend: Any = None,
              ours: Callable[[], set[int]] = frozenset,
              processes: dict[int, dict[int, int]] | None = None) -> list[GpuUsage]:
    """Utilization and memory of these devices for a heartbeat; ``[]`` without NVML. Each
    device's ``memory_outside`` is the memory its compute processes use but those whose pids
    ``ours()`` gives (the worker and what it started; asked once, where a device has any):
    what no grant of this worker may count on. A process whose memory NVML does not say
    counts none. ``processes``, when given, gets each device's processes (index -> pid ->
    bytes), for ``gpusample``.

    A device that cannot be read is left out (logged at debug level: heartbeats repeat).
    """
    indices = list(indices)
    nvml = backend if backend is not None else load_nvml()
    if nvml is None or not indices:
        return []
    try:
        nvml.nvmlInit()
    except Exception as exc:  # no NVML: heartbeats carry no GPU figures
        logger.debug("GPU usage unavailable: %s", exc)
        return []
    usage = []
    mine: list[set[int]] = []  # ``ours()``, once asked
    try:
        for index in indices:
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                rates = nvml.nvmlDeviceGetUtilizationRates(handle)
                listed: dict[int, int] = {}
                outside = _outside(nvml, handle, ours, mine, listed)
                if processes is not None:
                    processes[index] = listed
                usage.append(GpuUsage(index, int(rates.gpu), int(memory.used), int(memory.total),
                                      outside))
            except getattr(nvml, "NVMLError", Exception) as exc:
                logger.debug("GPU %d usage unavailable: %s", index, exc)
    finally:
        _shutdown(nvml)
    return usage

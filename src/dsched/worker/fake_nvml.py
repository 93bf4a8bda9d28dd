"""A test double of the pynvml calls dsched makes, so that every GPU path runs without a GPU.

``gpus.py`` uses it in place of pynvml when ``SCHED_FAKE_NVML`` is set, so that tests can start
real worker daemons "with 4 GPUs" on a machine that has none. The variable holds a JSON
description, inline (text starting with ``{``) or in the file it names::

    {"gpus": [{"uuid": "GPU-...", "name": "...", "memory_total": 17179869184,
               "memory_used": 0, "utilization": 0,
               "processes": [{"pid": 4242, "memory": 4294967296}]}],
     "init_error": null}

Every device field is optional. ``{"count": 4}`` is short for four default devices. A device's
``processes`` are what ``nvmlDeviceGetComputeRunningProcesses`` lists, each using ``memory``
bytes, counted in its used memory beside ``memory_used``. A device's ``events`` are what an
event set it is registered in delivers, in order: ``{"xid": 79}`` (a critical Xid error) or
``{"ecc": "double_bit"}``; ``"remap_failed": true`` is a failed row remapping, and ``"ecc":
false`` a device without ECC (registering for its ECC events fails, as NVML's does). A file is read
again at each ``load_nvml``, and at each wait for events, so a test changes what a running
worker measures, and injects faults, by rewriting it.
``init_error`` makes ``nvmlInit`` fail as real NVML does: ``"library_not_found"``,
``"driver_not_loaded"``, ``"no_permission"`` or ``"unknown"``. A device with
``"error": "gpu_lost"`` fails when it is read.

It raises pynvml's own exception classes (it takes only those from pynvml), so the code under
test catches exactly what it would for real. It must never call the real NVML library.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Mapping

import pynvml  # for its exception classes and error codes only

GIB = 1024**3

_INIT_ERRORS = {
    "library_not_found": pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
    "driver_not_loaded": pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    "no_permission": pynvml.NVML_ERROR_NO_PERMISSION,
    "unknown": pynvml.NVML_ERROR_UNKNOWN,
}
_DEVICE_ERRORS = {"gpu_lost": pynvml.NVML_ERROR_GPU_IS_LOST, "unknown": pynvml.NVML_ERROR_UNKNOWN}


def default_device(index: int) -> dict[str, Any]:
    return {
        "uuid": f"GPU-fa4e{index:04x}-0000-4000-8000-{index:012x}",
        "name": "dsched Fake GPU",
        "memory_total": 16 * GIB,
        "memory_used": 0,
        "utilization": 0,
    }


class FakeNvml:
    """Stands in for the ``pynvml`` module: same function names, same exception types."""

    NVMLError = pynvml.NVMLError
    NVML_ERROR_LIBRARY_NOT_FOUND = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_DRIVER_NOT_LOADED = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    NVML_ERROR_TIMEOUT = pynvml.NVML_ERROR_TIMEOUT
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError
    nvmlEventTypeDoubleBitEccError = pynvml.nvmlEventTypeDoubleBitEccError
    #: The file it was read from, read again for events (None: inline).
    source: Path | None = None

    def __init__(self, gpus: list[Mapping[str, Any]] | None = None, init_error: str | None = None):
        if init_error is not None and init_error not in _INIT_ERRORS:
            raise ValueError(f"unknown init_error {init_error!r}; one of {sorted(_INIT_ERRORS)}")
        self.gpus = [{**default_device(i), **gpu} for i, gpu in enumerate(gpus or [])]
        for gpu in self.gpus:
            error = gpu.get("error")
            if error is not None and error not in _DEVICE_ERRORS:
                raise ValueError(f"unknown device error {error!r}; one of {sorted(_DEVICE_ERRORS)}")
        self.init_error = init_error
        self.initialized = 0  # NVML counts nvmlInit calls; nvmlShutdown undoes one
        self.init_calls = 0

    @classmethod
    def from_description(cls, description: Mapping[str, Any]) -> "FakeNvml":
        gpus = description.get("gpus")
        if gpus is None:
            gpus = [{} for _ in range(int(description.get("count", 0)))]
        return cls(list(gpus), description.get("init_error"))

    @classmethod
    def from_env_value(cls, value: str) -> "FakeNvml":
        """Read ``SCHED_FAKE_NVML``: inline JSON, or the path of a JSON file."""
        if value.lstrip().startswith("{"):
            return cls.from_description(json.loads(value))
        fake = cls.from_description(json.loads(Path(value).read_text(encoding="utf-8")))
        fake.source = Path(value)
        return fake

    @classmethod
    def with_count(cls, count: int) -> "FakeNvml":
        return cls([{} for _ in range(count)])

    # -- the pynvml calls -----------------------------------------------------------------

    def nvmlInit(self) -> None:  # noqa: N802 (pynvml's names)
        self.init_calls += 1
        if self.init_error is not None:
            raise pynvml.NVMLError(_INIT_ERRORS[self.init_error])
        self.initialized += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self._check_initialized()
        self.initialized -= 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        self._check_initialized()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimpleNamespace:  # noqa: N802
        self._check_initialized()
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return SimpleNamespace(index=index)

    def nvmlDeviceGetUUID(self, handle: SimpleNamespace) -> str:  # noqa: N802
        return self._device(handle)["uuid"]

    def nvmlDeviceGetName(self, handle: SimpleNamespace) -> str:  # noqa: N802
        return self._device(handle)["name"]

    def nvmlDeviceGetMemoryInfo(self, handle: SimpleNamespace) -> SimpleNamespace:  # noqa: N802
        gpu = self._device(handle)
        total = int(gpu["memory_total"])
        processes = gpu.get("processes", ())
        used = int(gpu["memory_used"]) + sum(int(p["memory"] or 0) for p in processes)
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetComputeRunningProcesses(  # noqa: N802
        self, handle: SimpleNamespace
    ) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=int(p["pid"]), usedGpuMemory=p.get("memory"))
                for p in self._device(handle).get("processes", ())]

    def nvmlDeviceGetUtilizationRates(  # noqa: N802
        self, handle: SimpleNamespace
    ) -> SimpleNamespace:
        return SimpleNamespace(gpu=int(self._device(handle)["utilization"]), memory=0)

    def nvmlDeviceGetIndex(self, handle: SimpleNamespace) -> int:  # noqa: N802
        return handle.index

    def nvmlDeviceGetRemappedRows(self, handle: SimpleNamespace) -> tuple:  # noqa: N802
        return 0, 0, False, bool(self._device(handle).get("remap_failed"))

    # -- events: what a device's "events" list, delivered once each ------------------------

    def nvmlEventSetCreate(self) -> SimpleNamespace:  # noqa: N802
        self._check_initialized()
        return SimpleNamespace(types={}, delivered={})

    def nvmlDeviceRegisterEvents(self, handle: SimpleNamespace, types: int,  # noqa: N802
                                 events: SimpleNamespace) -> None:
        gpu = self._device(handle)
        if types & self.nvmlEventTypeDoubleBitEccError and gpu.get("ecc") is False:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # as NVML: none of them
        events.types[handle.index] = events.types.get(handle.index, 0) | types

    def nvmlEventSetWait_v2(self, events: SimpleNamespace,  # noqa: N802
                            timeout_ms: int) -> SimpleNamespace:
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if self.source is not None:  # a test may have written faults since
                try:
                    self.gpus = FakeNvml.from_env_value(str(self.source)).gpus
                except (OSError, ValueError):  # being written: as it was
                    pass
            for index, types in sorted(events.types.items()):
                seen = events.delivered.get(index, 0)
                pending = self.gpus[index].get("events", ())[seen:]
                if pending:
                    events.delivered[index] = seen + 1
                    kind = (self.nvmlEventTypeXidCriticalError if "xid" in pending[0]
                            else self.nvmlEventTypeDoubleBitEccError)
                    if kind & types:
                        return SimpleNamespace(device=SimpleNamespace(index=index),
                                               eventType=kind,
                                               eventData=int(pending[0].get("xid", 0)))
            if time.monotonic() >= deadline:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def nvmlEventSetFree(self, events: SimpleNamespace) -> None:  # noqa: N802
        events.types.clear()

    def _device(self, handle: SimpleNamespace) -> dict[str, Any]:
        self._check_initialized()
        gpu = self.gpus[handle.index]
        if gpu.get("error"):
            raise pynvml.NVMLError(_DEVICE_ERRORS[gpu["error"]])
        return gpu

    def _check_initialized(self) -> None:
        if self.initialized <= 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

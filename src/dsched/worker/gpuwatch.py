"""The worker's watch for GPU faults: a thread that waits on NVML's events for its devices and
tells the worker core (``GpuFaulted``, decided in ``gpufaults.py``) when one reports a fault
that should fence it:

- a critical Xid error whose number is in ``worker.gpu_fault_xids`` (hardware faults such as
  79, fallen off the bus, or 48 and 94/95, ECC errors; not the Xids an application's own bug
  raises, such as 13, 31 or 43);
- a double-bit ECC error;
- a failed row remapping (the device could not retire memory that went bad), looked at every
  ``REMAP_EVERY`` seconds.

Each is said once per device; the core fences it until an operator releases it (``sched gpu
release``) or the worker starts again. Where NVML is absent, or cannot register events for a
device, nothing is watched there (said once at DEBUG: many devices cannot).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterable

from .gpus import load_nvml

logger = logging.getLogger("dsched.worker")

#: Seconds one wait for events lasts, so that the thread sees it should stop.
WAIT = 0.5
#: Seconds between looks at each device's row remapping.
REMAP_EVERY = 10.0


def on_loop(loop: Any, call: Callable[[int, str], None]) -> Callable[[int, str], None]:
    """``call``, made from the watch's thread to run on ``loop`` (nothing once it has closed:
    the worker is gone)."""
    def soon(index: int, reason: str) -> None:
        try:
            loop.call_soon_threadsafe(call, index, reason)
        except RuntimeError:
            pass

    return soon


class GpuWatch:
    """Watch ``indices`` (NVML's) and call ``on_fault(index, reason)`` from its own thread,
    once a device, for each fault that should fence it."""

    def __init__(self, indices: Iterable[int], xids: Iterable[int],
                 on_fault: Callable[[int, str], None], backend: Any = None):
        self.indices = tuple(indices)
        self.xids = frozenset(xids)
        self.on_fault = on_fault
        self.backend = backend
        self.said: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-watch", daemon=True)

    def start(self) -> None:
        if self.indices:
            self._thread.start()

    def rearm(self, index: int) -> None:
        """``index`` was released: a fault it reports from now on fences it again."""
        self.said.discard(index)

    def stop(self) -> None:
        """Stop watching; returns once the thread is gone (within a wait)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(WAIT + 1.0)

    def _run(self) -> None:
        nvml = self.backend if self.backend is not None else load_nvml()
        if nvml is None:
            return
        try:
            nvml.nvmlInit()
        except Exception as error:  # noqa: BLE001 - no NVML: nothing to watch
            logger.debug("GPU faults are not watched: %s", error)
            return
        try:
            self._watch(nvml)
        except Exception:  # a bug here must not take the worker down, but must be seen
            logger.exception("The watch for GPU faults stopped")
        finally:
            try:
                nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass

    def _watch(self, nvml: Any) -> None:
        try:
            events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as error:
            logger.debug("GPU faults are not watched: %s", error)
            return
        handles = {}
        for index in self.indices:
            try:
                handles[index] = nvml.nvmlDeviceGetHandleByIndex(index)
            except nvml.NVMLError as error:
                logger.debug("GPU %d cannot be watched: %s", index, error)
                continue
            # One type at a time: a device without ECC refuses the ECC events, and NVML then
            # registers none of a mask.
            for kind in (nvml.nvmlEventTypeXidCriticalError,
                         nvml.nvmlEventTypeDoubleBitEccError):
                try:
                    nvml.nvmlDeviceRegisterEvents(handles[index], kind, events)
                except nvml.NVMLError as error:
                    logger.debug("GPU %d: events %#x cannot be watched: %s", index, kind, error)
        remap_due = 0.0
        try:
            while not self._stop.is_set():
                if time.monotonic() >= remap_due:
                    remap_due = time.monotonic() + REMAP_EVERY
                    for index, handle in handles.items():
                        self._look_at_rows(nvml, index, handle)
                try:
                    event = nvml.nvmlEventSetWait_v2(events, int(WAIT * 1000))
                except nvml.NVMLError as error:
                    if getattr(error, "value", None) != nvml.NVML_ERROR_TIMEOUT:
                        logger.debug("Waiting for GPU fault events failed: %s", error)
                        self._stop.wait(WAIT)
                    continue
                self._seen(nvml, event)
        finally:
            nvml.nvmlEventSetFree(events)

    def _seen(self, nvml: Any, event: Any) -> None:
        index = nvml.nvmlDeviceGetIndex(event.device)
        if event.eventType & nvml.nvmlEventTypeXidCriticalError:
            xid = int(event.eventData)
            if xid not in self.xids:
                logger.info("GPU %d reported Xid %d, which does not fence it", index, xid)
                return
            self._fault(nvml, index, f"Xid {xid}")
        elif event.eventType & nvml.nvmlEventTypeDoubleBitEccError:
            self._fault(nvml, index, "a double-bit ECC error")

    def _look_at_rows(self, nvml: Any, index: int, handle: Any) -> None:
        try:
            failed = nvml.nvmlDeviceGetRemappedRows(handle)[3]
        except (nvml.NVMLError, AttributeError, IndexError):
            return  # not a device that remaps rows
        if failed:
            self._fault(nvml, index, "a failed row remapping")

    def _fault(self, nvml: Any, index: int, what: str) -> None:
        if index in self.said or index not in self.indices:
            return
        self.said.add(index)
        try:
            uuid = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(index))
        except nvml.NVMLError:
            uuid = "its UUID unreadable"
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        self.on_fault(index, f"gpu fault: {what} on gpu{index} ({uuid})")

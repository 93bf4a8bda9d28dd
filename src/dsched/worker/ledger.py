"""The worker's GPU ledger: its devices, and which of them each running task holds.

The devices are booked in a ``dsched.devices.DeviceBook``, by its one rule of what a demand
takes of each device (its share, in ``GPU`` units with ``SCALE`` per device, and its memory,
in ``GPU_MEMORY`` units): the scheduler chooses the devices with the same rule where it places
the task and sends them with it, and the ledger books exactly those, once they are free here.
A task sent without devices (a scheduler that chose none) gets the best fit here. Two tasks
share a device only when both asked for part of one and both parts fit.

Devices are physical NVML indices (see ``dsched.gpu_ids``), each with its memory in bytes
where NVML said it; without NVML an abstract ``GPU=N`` maps to ``0..N-1``, of unknown memory.

Pure: no I/O, no clock, no NVML.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from ..devices import DeviceBook
from ..errors import ResourceSpecError
from ..resources import GPU, SCALE, Resources, check_offer, gpu_request_error


def check_gpu_request(units: int) -> None:
    """Raise ResourceSpecError unless ``units`` is a fraction below one GPU or a whole number."""
    if units < 0:
        raise ResourceSpecError(f"invalid GPU request GPU={units / SCALE}: it is negative")
    error = gpu_request_error(units)
    if error:
        raise ResourceSpecError(error)


class GpuLedger:
    """Which devices are in use, and by which task (``book``, a DeviceBook)."""

    def __init__(self, devices: Iterable[int] | Mapping[int, int]):
        """``devices``: their indices, or each index with its memory in bytes."""
        if isinstance(devices, Mapping):
            memory = dict(devices)
        else:
            listed = tuple(devices)
            memory = dict.fromkeys(listed, 0)
            if len(memory) != len(listed):
                raise ValueError(f"GPU device indices repeat: {listed!r}")
        indices = tuple(sorted(memory))
        for index in indices:
            if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                raise ValueError(f"GPU device indices must be non-negative integers: {indices!r}")
        self.devices: tuple[int, ...] = indices
        self.book = DeviceBook({index: memory[index] * SCALE for index in indices})

    @classmethod
    def abstract(cls, units: int) -> "GpuLedger":
        """The ledger of a worker that declared ``GPU=N`` without NVML: devices ``0..N-1``."""
        check_offer(Resources({GPU: units}))
        return cls(range(units // SCALE))

    # -- queries --------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """Units of all devices together."""
        return len(self.devices) * SCALE

    def in_use(self) -> int:
        """Share units held by all tasks together."""
        return sum(self.book.share_used.values())

    def used(self, device: int) -> int:
        return self.book.share_used[device]

    def held(self, key: str) -> tuple[int, ...]:
        """The devices ``key`` holds, in index order; ``()`` when it holds none."""
        return self.book.devices_of(key)

    def units_held(self, key: str) -> int:
        return sum(share for _, share, _ in self.book.held.get(key, ()))

    def holders(self) -> dict[str, tuple[int, ...]]:
        return {key: self.held(key) for key in self.book.held}

    def free_devices(self) -> tuple[int, ...]:
        """Devices no task holds any part of."""
        book = self.book
        return tuple(d for d in self.devices
                     if not book.share_used[d] and not book.memory_used[d])

    def fits(self, demand: int | Resources) -> bool:
        """True when the request can be placed now."""
        return self.book.choose(_demand(demand)) is not None

    def snapshot(self) -> list[dict]:
        """Per-device use for heartbeats and the dashboard (units, holders)."""
        on_device: dict[int, list[str]] = {device: [] for device in self.devices}
        for key, parts in self.book.held.items():
            for device, _, _ in parts:
                on_device[device].append(key)
        return [
            {"index": device, "used": self.book.share_used[device],
             "tasks": sorted(on_device[device])}
            for device in self.devices
        ]

    # -- changes --------------------------------------------------------------------------

    def allocate(self, key: str, demand: int | Resources,
                 granted: tuple[int, ...] = ()) -> tuple[int, ...] | None:
        """Give ``key`` the devices its ``demand`` takes (``GPU`` units, or a Resources):
        ``granted``, the scheduler's choice, else the best fit; ``None`` (and no change)
        when they are not free.

        Raises ResourceSpecError for a fraction above one device, ValueError when ``key``
        already holds devices (a second grant would leak the first).
        """
        demand = _demand(demand)
        check_gpu_request(demand.get(GPU, 0))
        if key in self.book.held:
            raise ValueError(f"task {key!r} already holds GPUs {self.held(key)}")
        devices = granted or self.book.choose(demand)
        if devices is None:
            return None
        if devices and not self.book.take(key, demand, devices):
            return None
        return tuple(sorted(devices))

    def release(self, key: str) -> tuple[int, ...]:
        """Give back what ``key`` holds (nothing when it holds nothing); returns the devices."""
        return self.book.give(key)

    def validate(self) -> None:
        """Raise AssertionError when the books do not balance or a device is over-committed;
        a whole-device holder shares it with no one."""
        self.book.check()
        for key, parts in self.book.held.items():
            fraction = len(parts) == 1 and 0 <= parts[0][1] < SCALE
            assert fraction or all(share == SCALE for _, share, _ in parts), f"{key!r}: {parts}"


def _demand(demand: int | Resources) -> Resources:
    return Resources({GPU: demand}) if isinstance(demand, int) else demand

"""The worker's GPU ledger: its devices, and which of them each running task holds.

Quantities are ``Resources`` units of the ``GPU`` resource (``SCALE`` per device), so the
arithmetic is exact. A request below one device is a fraction: it goes to the most-used device
that still has room (best fit), so that whole devices stay free for tasks that need them. A
request of one or more devices must be whole and takes that many fully free devices, lowest
index first. Two tasks share a device only when both asked for a fraction of one.

Devices are physical NVML indices (see ``dsched.gpu_ids``); without NVML an abstract ``GPU=N``
maps to ``0..N-1``.

Pure: no I/O, no clock, no NVML.
"""

from __future__ import annotations

from typing import Iterable

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
    """Which devices are in use, and by which task, in ``SCALE`` units per device."""

    def __init__(self, devices: Iterable[int]):
        indices = tuple(sorted(devices))
        for index in indices:
            if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                raise ValueError(f"GPU device indices must be non-negative integers: {indices!r}")
        if len(set(indices)) != len(indices):
            raise ValueError(f"GPU device indices repeat: {indices!r}")
        self.devices: tuple[int, ...] = indices
        self._used: dict[int, int] = {index: 0 for index in indices}
        # key -> ((device, units), ...): what each running task holds.
        self._held: dict[str, tuple[tuple[int, int], ...]] = {}

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
        """Units held by all tasks together."""
        return sum(self._used.values())

    def used(self, device: int) -> int:
        return self._used[device]

    def held(self, key: str) -> tuple[int, ...]:
        """The devices ``key`` holds, in index order; ``()`` when it holds none."""
        return tuple(device for device, _ in self._held.get(key, ()))

    def units_held(self, key: str) -> int:
        return sum(units for _, units in self._held.get(key, ()))

    def holders(self) -> dict[str, tuple[int, ...]]:
        return {key: self.held(key) for key in self._held}

    def free_devices(self) -> tuple[int, ...]:
        """Devices no task holds any part of."""
        return tuple(device for device in self.devices if not self._used[device])

    def fits(self, units: int) -> bool:
        """True when the request can be placed now."""
        return self._place(units) is not None

    def snapshot(self) -> list[dict]:
        """Per-device use for heartbeats and the dashboard (units, holders)."""
        on_device: dict[int, list[str]] = {device: [] for device in self.devices}
        for key, parts in self._held.items():
            for device, _ in parts:
                on_device[device].append(key)
        return [
            {"index": device, "used": self._used[device], "tasks": sorted(on_device[device])}
            for device in self.devices
        ]

    # -- changes --------------------------------------------------------------------------

    def allocate(self, key: str, units: int) -> tuple[int, ...] | None:
        """Give ``key`` devices for ``units``; ``None`` (and no change) when they are not free.

        Raises ResourceSpecError for a fraction above one device, ValueError when ``key``
        already holds devices (a second grant would leak the first).
        """
        check_gpu_request(units)
        if key in self._held:
            raise ValueError(f"task {key!r} already holds GPUs {self.held(key)}")
        parts = self._place(units)
        if parts is None:
            return None
        if parts:
            self._held[key] = parts
            for device, part in parts:
                self._used[device] += part
        return tuple(device for device, _ in parts)

    def release(self, key: str) -> tuple[int, ...]:
        """Give back what ``key`` holds (nothing when it holds nothing); returns the devices."""
        parts = self._held.pop(key, ())
        for device, units in parts:
            self._used[device] -= units
        return tuple(device for device, _ in parts)

    def _place(self, units: int) -> tuple[tuple[int, int], ...] | None:
        check_gpu_request(units)
        if units == 0:
            return ()
        if units < SCALE:
            # Best fit: the device with the least room that still fits; ties go to the lowest
            # index. A fully free device has the most room, so it is chosen last.
            best, best_room = None, SCALE + 1
            for device in self.devices:
                room = SCALE - self._used[device]
                if units <= room < best_room:
                    best, best_room = device, room
            return None if best is None else ((best, units),)
        free = self.free_devices()
        wanted = units // SCALE
        if len(free) < wanted:
            return None
        return tuple((device, SCALE) for device in free[:wanted])

    def validate(self) -> None:
        """Raise AssertionError when the books do not balance.

        A device's total is at most one, so a whole-device holder shares it with no one.
        """
        totals = {device: 0 for device in self.devices}
        for key, parts in self._held.items():
            assert parts, f"{key!r} is recorded with no devices"
            devices = [device for device, _ in parts]
            assert len(set(devices)) == len(devices), f"{key!r} holds a device twice: {parts}"
            fraction = len(parts) == 1 and 0 < parts[0][1] < SCALE
            assert fraction or all(units == SCALE for _, units in parts), f"{key!r}: {parts}"
            for device, units in parts:
                assert device in totals, f"{key!r} holds unknown device {device}"
                totals[device] += units
        for device, total in totals.items():
            assert total == self._used[device], (
                f"device {device}: used {self._used[device]} but tasks hold {total}"
            )
            assert 0 <= total <= SCALE, f"device {device} is over-committed: {total}"

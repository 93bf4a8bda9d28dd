"""GPU devices as consumables: the one rule of which devices a demand takes, and how much of
each. The scheduler chooses with it where it places work (``scheduler/fit.py``), and the worker
books the same choice with it (``worker/ledger.py``): the rule is written here once.

Each device behind a worker's ``GPU`` resource has two dimensions: its share (``SCALE`` units:
the whole device) and its memory (``GPU_MEMORY`` units, ``SCALE`` per byte, as every resource;
0 where the worker does not know it: abstract GPUs). A demand of ``GPU=g`` and
``GPU_MEMORY=m`` (per device) takes of each device it is granted:

- ``g`` a whole number of devices: that many devices nobody holds any part of, each with at
  least ``m`` of memory; each grant holds the whole device, its memory included;
- ``g`` a fraction below one: one device, ``g`` of its share and ``m`` of its memory, or, with no
  ``m``, that fraction of its memory;
- only ``m``: one device, ``m`` of its memory and none of its share.

So a device is never over-committed on either dimension, and memory requests share a device
only with work whose grants fit beside theirs. Memory that processes dsched did not start use
on a device (``outside``, as its worker last measured it) is not granted either: new grants fit
in what is left of it (work already running keeps its grant). A device ``fenced`` for a fault
takes no new grant at all. Among the devices that fit, a
demand takes the best fit: the least memory left after it, then the least share left, then the
lowest index; whole devices the smallest first (big devices stay free for big requests).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from .resources import GPU, SCALE, Resources

#: The resource of GPU memory, asked per device (``GPU_MEMORY=20G``): see the module's text.
GPU_MEMORY = "GPU_MEMORY"

#: What one grant holds of one device: (device, share units, memory units).
Part = tuple[int, int, int]


def format_memory(units: int) -> str:
    """``GPU_MEMORY`` units as a person reads them: ``18 GiB``, ``20 GB``, ``1.5 GiB``."""
    size = units / SCALE
    for unit, name in ((2**30, "GiB"), (10**9, "GB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit:.0f} {name}"
    return f"{size / 2**30:.3g} GiB" if size >= 2**20 else f"{size:.0f} bytes"


def _bytes(value: object) -> int:
    """A peer's memory figure: a non-negative int, else 0 (not known)."""
    return value if type(value) is int and value > 0 else 0


def asks_devices(demand: Resources) -> bool:
    """Whether ``demand`` takes devices (a ``GPU`` or ``GPU_MEMORY`` quantity)."""
    return bool(demand.get(GPU, 0) or demand.get(GPU_MEMORY, 0))


class DeviceBook:
    """The devices of one worker (index -> memory units), what each grant holds of them, and
    what is left."""

    __slots__ = ("memory", "sizes", "share_used", "memory_used", "outside", "fenced", "held",
                 "partial")

    def __init__(self, memory: Mapping[int, int]):
        self.memory: dict[int, int] = dict(sorted(memory.items()))
        self.sizes = sorted(self.memory.values(), reverse=True)  # for ``could_fit``
        self.share_used: dict[int, int] = {d: 0 for d in self.memory}
        self.memory_used: dict[int, int] = {d: 0 for d in self.memory}
        #: Memory units that processes dsched did not start use on each device.
        self.outside: dict[int, int] = {d: 0 for d in self.memory}
        #: Devices that reported a fatal fault, each with its reason: no new grants there.
        self.fenced: dict[int, str] = {}
        self.held: dict[str, tuple[Part, ...]] = {}
        #: Grants of part of a device (a fraction, or memory alone): while there are none, no
        #: device is fenced and no memory is asked, a worker's ``GPU`` count says what fits
        #: (``fit.Fit.startable`` asks the book only otherwise).
        self.partial = 0

    @classmethod
    def abstract(cls, count: int) -> "DeviceBook":
        """``count`` devices numbered from 0 whose memory is not known (abstract ``GPU=N``)."""
        return cls({index: 0 for index in range(count)})

    @classmethod
    def offered(cls, resources: Resources, devices: Iterable[int] = (),
                gpus: Iterable[Mapping] = ()) -> "DeviceBook | None":
        """The book of a worker offering ``resources``: ``devices``, the indices behind its
        ``GPU`` (none said: abstract, 0 to N-1), each with the memory its entry in ``gpus``
        (NVML's, by ``index``) says; None where it offers no GPU."""
        count = resources.get(GPU, 0) // SCALE
        if not count:
            return None
        devices = tuple(devices)
        if len(devices) != count or len(set(devices)) != count:
            return cls.abstract(count)
        memory = {g["index"]: g.get("memory_total") for g in gpus
                  if isinstance(g, Mapping) and type(g.get("index")) is int}
        return cls({d: _bytes(memory.get(d)) * SCALE for d in devices})

    def copy(self) -> "DeviceBook":
        book = DeviceBook(self.memory)
        book.share_used, book.memory_used = dict(self.share_used), dict(self.memory_used)
        book.outside, book.fenced = dict(self.outside), dict(self.fenced)
        book.held, book.partial = dict(self.held), self.partial
        return book

    # -- the rule ---------------------------------------------------------------------------

    def part(self, demand: Resources, device: int) -> Part:
        """What ``demand`` would hold of ``device``."""
        share, memory = demand.get(GPU, 0), demand.get(GPU_MEMORY, 0)
        if share >= SCALE:
            return device, SCALE, self.memory[device]
        if share and not memory:
            return device, share, self.memory[device] * share // SCALE
        return device, share, memory

    def fits_on(self, demand: Resources, device: int) -> bool:
        """Whether ``demand``'s part of ``device`` is free there now."""
        if device in self.fenced:
            return False
        _, share, memory = self.part(demand, device)
        # What others use counts against memory asked for, not against the memory a fraction
        # holds by its share alone (a user who asked for none did not count on it).
        asked = demand.get(GPU_MEMORY, 0)
        room = self.memory[device] - (self.outside[device] if asked else 0)
        if demand.get(GPU, 0) >= SCALE:  # a whole device: nothing of it held, memory enough
            return (not self.share_used[device] and not self.memory_used[device]
                    and demand.get(GPU_MEMORY, 0) <= room)
        return (self.share_used[device] + share <= SCALE
                and self.memory_used[device] + memory <= room)

    def choose(self, demand: Resources) -> tuple[int, ...] | None:
        """The devices ``demand`` would be granted now (best fit), ``()`` when it asks for
        none, None when they are not free."""
        share = demand.get(GPU, 0)
        if not asks_devices(demand):
            return ()
        fitting = [d for d in self.memory if self.fits_on(demand, d)]
        if share >= SCALE:
            wanted = share // SCALE
            if len(fitting) < wanted:
                return None
            return tuple(sorted(sorted(fitting, key=lambda d: (self.memory[d], d))[:wanted]))
        if not fitting:
            return None
        return (min(fitting, key=lambda d: (self.left(demand, d), d)),)

    def left(self, demand: Resources, device: int) -> tuple[int, int]:
        """The memory and share ``device`` would have left once ``demand`` took its part."""
        _, share, memory = self.part(demand, device)
        return (self.memory[device] - self.outside[device] - self.memory_used[device] - memory,
                SCALE - self.share_used[device] - share)

    def could_fit(self, demand: Resources) -> bool:
        """Whether ``demand`` fits these devices when nothing holds any of them (nor fences
        them, nor uses their memory)."""
        share, memory = demand.get(GPU, 0), demand.get(GPU_MEMORY, 0)
        wanted = share // SCALE if share >= SCALE else 1
        return wanted <= len(self.sizes) and self.sizes[wanted - 1] >= memory


    def can_take(self, demand: Resources, devices: tuple[int, ...]) -> bool:
        """Whether ``demand`` may take ``devices`` now: as many as it asks, each one of these
        and free for its part."""
        share = demand.get(GPU, 0)
        wanted = share // SCALE if share >= SCALE else 1
        return len(set(devices)) == len(devices) == wanted and all(
            d in self.memory and self.fits_on(demand, d) for d in devices)

    # -- changes ----------------------------------------------------------------------------

    def measured(self, outside: Mapping[int, int]) -> bool:
        """The memory units others use on each device, as measured (devices not named keep
        theirs); whether any grew less, so that more may fit now."""
        freed = False
        for device, units in outside.items():
            if device in self.outside:
                freed = freed or units < self.outside[device]
                self.outside[device] = units
        return freed

    def fence(self, device: int, reason: str) -> bool:
        """No new grants on ``device`` (a fault, ``reason``); whether it was not fenced yet."""
        if device not in self.memory or device in self.fenced:
            return False
        self.fenced[device] = reason
        return True

    def unfence(self, device: int) -> bool:
        """``device`` takes grants again; whether it was fenced."""
        return self.fenced.pop(device, None) is not None

    def take(self, key: str, demand: Resources, devices: Iterable[int]) -> bool:
        """Book ``demand``'s parts of ``devices`` for ``key``; False (nothing booked) when
        they are not all free, or are not the number it asks for."""
        devices = tuple(devices)
        if key in self.held or not self.can_take(demand, devices):
            return False
        parts = tuple(self.part(demand, d) for d in devices)
        self.held[key] = parts
        for device, share, memory in parts:
            self.share_used[device] += share
            self.memory_used[device] += memory
            self.partial += share < SCALE
        return True

    def give(self, key: str) -> tuple[int, ...]:
        """Give back what ``key`` holds (nothing when it holds nothing); its devices."""
        parts = self.held.pop(key, ())
        for device, share, memory in parts:
            self.share_used[device] -= share
            self.memory_used[device] -= memory
            self.partial -= share < SCALE
        return tuple(device for device, _, _ in parts)

    # -- what is left -------------------------------------------------------------------------

    def devices_of(self, key: str) -> tuple[int, ...]:
        return tuple(device for device, _, _ in self.held.get(key, ()))

    def most_memory_free(self) -> int:
        """The most memory units free on any one device (not fenced)."""
        return max((max(0, self.memory[d] - self.outside[d] - self.memory_used[d])
                    for d in self.memory if d not in self.fenced), default=0)


    def check(self) -> None:
        """Raise AssertionError when a device is over-committed or the books do not balance."""
        share = {d: 0 for d in self.memory}
        memory = {d: 0 for d in self.memory}
        for key, parts in self.held.items():
            assert parts and len({d for d, _, _ in parts}) == len(parts), f"{key!r}: {parts}"
            for device, s, m in parts:
                share[device] += s
                memory[device] += m
        for d in self.memory:
            assert share[d] == self.share_used[d] and memory[d] == self.memory_used[d], d
            assert share[d] <= SCALE, f"device {d} over-committed: share {share[d]}"
            assert memory[d] <= self.memory[d], f"device {d} over-committed: memory {memory[d]}"
        assert self.partial == sum(s < SCALE for parts in self.held.values() for _, s, _ in parts)


def shortfall(demand: Resources, books: Iterable[DeviceBook], free: bool) -> str:
    """Why no device of ``books`` grants ``demand``: now (``free``: with what others use and
    the devices fenced), or ever (all free), in words that name what is short: "GPU_MEMORY: at
    most 8 GB free on any device (18 GB asked)"."""
    books = list(books) if free else [DeviceBook(book.memory) for book in books]
    memory, share = demand.get(GPU_MEMORY, 0), demand.get(GPU, 0)
    room = [book.most_memory_free() for book in books]
    notes = []
    outside = max((sum(book.outside.values()) for book in books), default=0)
    if free and outside:
        notes.append(f"processes dsched did not start use {format_memory(outside)}")
    notes += [f"GPU {d} fenced: {why}" for book in books for d, why in book.fenced.items()]
    said = "".join(f"; {note}" for note in notes)
    if memory > max(room, default=0):
        return (f"{GPU_MEMORY}: at most {format_memory(max(room, default=0))}"
                f"{' free' if free else ''} on any device ({format_memory(memory)} asked{said})")
    if share >= SCALE:
        count = max((sum(book.fits_on(demand, d) for d in book.memory) for book in books),
                    default=0)
        each = f" with {format_memory(memory)}" if memory else ""
        devices = f"{count} device{'' if count == 1 else 's'}{each}"
        return (f"GPU={share // SCALE}: {devices} free{said}" if free
                else f"GPU={share // SCALE}: at most {devices} on any worker")
    return (f"no device{' free' if free else ''} has both GPU={share / SCALE:g} and "
            f"{format_memory(memory)} of memory{said}")

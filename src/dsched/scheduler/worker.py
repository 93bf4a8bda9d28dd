"""Workers as the scheduler sees them: WorkerInfo, and WorkerIndex, which finds the workers
with room for a task without looking at every worker.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import TYPE_CHECKING, Any, Mapping

from ..devices import GPU_MEMORY, DeviceBook
from ..resources import Resources
from .fit import Room

if TYPE_CHECKING:
    from .task import Task


class WorkerInfo:
    """One connected worker.

    ``resources`` is its total and ``room`` what its assigned tasks leave of it (``fit.py``
    keeps it; ``free`` is its free resources); ``processing`` holds the tasks sent to it,
    ``stopping`` those it was told to stop and has not yet confirmed stopped (they keep their
    thread and resources). ``prefetched`` counts the tasks sent ahead to it that wait there for a
    thread (``sent_ahead``): those in ``processing`` flagged ``prefetched``, and those in
    ``stopping`` whose keys are in ``stopped_ahead`` (the flag is on the Task, which may be
    placed on another worker before this one confirms the stop, so there it is this worker's). ``version`` changes whenever its load does. A ``draining`` worker
    takes no new tasks (it is out of the index); ``evacuating`` maps each result it alone
    holds and is copying away to the worker copying it, and ``retired`` says it has been told
    it may leave. ``job_lease``: how long it lets its jobs run when cut off from the
    scheduler; ``containment``: how it kills what they start (shown). Its GPU devices
    (``devices``, their memory in ``gpus``) are booked in its room (``fit.py``).
    """

    __slots__ = (
        "address", "name", "nthreads", "resources", "gpus", "last_seen", "metrics", "room",
        "processing", "stopping", "has_what", "prefetched", "stopped_ahead", "slot_key", "free_keys",
        "thread_free", "version", "draining", "evacuating", "retired", "job_lease",
        "containment",
    )

    def __init__(
        self, address: str, name: str, nthreads: int, resources: Resources,
        gpus: tuple[Mapping[str, Any], ...], now: float, job_lease: float,
        containment: str = "", devices: tuple[int, ...] = (),
    ):
        self.address = address
        self.name = name
        self.nthreads = nthreads
        self.resources = resources
        self.gpus = gpus
        self.last_seen = now
        self.metrics: Mapping[str, Any] | None = None
        self.room = Room(resources, DeviceBook.offered(resources, devices, gpus))
        self.processing: dict[str, Task] = {}
        self.stopping: dict[str, Task] = {}
        self.has_what: dict[str, None] = {}
        self.prefetched = 0
        self.stopped_ahead: set[str] = set()
        self.slot_key = 0
        self.free_keys: dict[str, int] = {n: 0 for n in sorted(resources.names())}
        self.thread_free = False
        self.version = 0
        self.draining = False
        self.evacuating: dict[str, str] = {}
        self.retired = False
        self.job_lease = job_lease
        self.containment = containment

    def sent_ahead(self) -> list[Task]:
        """The tasks held here that wait for a thread, in the order the worker holds them."""
        return [*(t for t in self.processing.values() if t.prefetched),
                *(t for key, t in self.stopping.items() if key in self.stopped_ahead)]

    @property
    def free(self) -> Resources:
        return self.room.free

    @property
    def used(self) -> Resources:
        """What its tasks hold, as shown: of ``GPU_MEMORY``, what their devices hold (a whole
        device holds all its memory, a fraction its part)."""
        used = self.resources - self.room.free
        devices = self.room.devices
        if devices is not None and GPU_MEMORY in self.resources:
            held = sum(devices.memory_used.values())
            used = Resources({**used.to_wire(), GPU_MEMORY: min(held, self.resources[GPU_MEMORY])})
        return used

    @property
    def assigned(self) -> int:
        """Tasks holding (or waiting for) one of its threads."""
        return len(self.processing) + len(self.stopping)

    def __repr__(self) -> str:
        return f"<WorkerInfo {self.name!r} {self.address} {self.assigned}/{self.nthreads}>"


class Buckets:
    """Worker addresses grouped by an integer key; the keys are kept sorted."""

    __slots__ = ("groups", "keys")

    def __init__(self) -> None:
        self.groups: dict[int, dict[str, None]] = {}
        self.keys: list[int] = []

    def add(self, key: int, address: str) -> None:
        group = self.groups.get(key)
        if group is None:
            self.groups[key] = {address: None}
            insort(self.keys, key)
        else:
            group[address] = None

    def discard(self, key: int, address: str) -> None:
        group = self.groups[key]
        del group[address]
        if not group:
            del self.groups[key]
            del self.keys[bisect_left(self.keys, key)]

    def __len__(self) -> int:
        return sum(len(g) for g in self.groups.values())


class WorkerIndex:
    """Where there is room, kept up to date as tasks start and end.

    ``slots``: workers by free slots (threads plus ``prefetch``, less assigned tasks), for
    resource-free tasks. ``free[name]``: workers that have a free thread, by the free units
    of ``name``, for tasks that demand it. ``totals``: workers by their total resources, and
    ``offered``: how many workers offer each name, for unrunnable reasons and reservations.
    A draining worker is withdrawn from all of these (it offers nothing any more) but keeps
    its name in ``by_name`` until it leaves.
    """

    def __init__(self, prefetch: int):
        self.prefetch = prefetch
        self.slots = Buckets()
        self.free: dict[str, Buckets] = {}
        self.totals: dict[Resources, dict[str, None]] = {}
        self.offered: dict[str, int] = {}
        self.by_name: dict[str, str] = {}
        self.open_slots = 0

    def add(self, w: WorkerInfo) -> None:
        self.totals.setdefault(w.resources, {})[w.address] = None
        for name in w.free_keys:
            self.offered[name] = self.offered.get(name, 0) + 1
            if name not in self.free:
                self.free[name] = Buckets()
        self.by_name[w.name] = w.address
        w.thread_free = not w.thread_free  # force the first filing
        self.update(w)

    def remove(self, w: WorkerInfo) -> None:
        if not w.draining:
            self.withdraw(w)
        if self.by_name.get(w.name) == w.address:
            del self.by_name[w.name]

    def withdraw(self, w: WorkerInfo) -> None:
        """Take ``w`` out of every index but ``by_name``: no task may start there now."""
        address = w.address
        if w.slot_key:
            self.slots.discard(w.slot_key, address)
            self.open_slots -= w.slot_key
            w.slot_key = 0
        for name, units in w.free_keys.items():
            if units:
                self.free[name].discard(units, address)
                w.free_keys[name] = 0
            self.offered[name] -= 1
            if not self.offered[name]:
                del self.offered[name]
                del self.free[name]
        group = self.totals[w.resources]
        del group[address]
        if not group:
            del self.totals[w.resources]

    def update(self, w: WorkerInfo, resources_changed: bool = True) -> None:
        """Re-file ``w`` after its assigned tasks or free resources changed."""
        if w.draining:
            return
        address = w.address
        assigned = len(w.processing) + len(w.stopping)
        slots = w.nthreads + self.prefetch - assigned
        if slots < 0:
            slots = 0
        old = w.slot_key
        if slots != old:  # Buckets.discard and Buckets.add, inlined: this is the hot path
            self.open_slots += slots - old
            groups = self.slots.groups
            if old:
                group = groups[old]
                del group[address]
                if not group:
                    del groups[old]
                    keys = self.slots.keys
                    del keys[bisect_left(keys, old)]
            if slots:
                group = groups.get(slots)
                if group is None:
                    groups[slots] = {address: None}
                    insort(self.slots.keys, slots)
                else:
                    group[address] = None
            w.slot_key = slots
        free_keys = w.free_keys
        if not free_keys:
            return
        thread_free = assigned < w.nthreads
        if not resources_changed and thread_free is w.thread_free:
            return
        w.thread_free = thread_free
        free = w.room.units
        for name, old in free_keys.items():
            units = free.get(name, 0) if thread_free else 0
            if units != old:
                buckets = self.free[name]
                if old:
                    buckets.discard(old, address)
                if units:
                    buckets.add(units, address)
                free_keys[name] = units

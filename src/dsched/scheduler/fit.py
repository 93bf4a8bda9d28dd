"""The fit: what a task demands, what a worker has free, and whether it can start the task now.

Every rule of whether a task fits a worker lives here, and nowhere else. ``Shape`` is what the
tasks of one queue demand; ``Room`` is what one worker has free (its threads are counted from
the tasks assigned to it); ``Fit.startable`` is the one rule of whether a worker can start a
task now, or take it to start next; ``could_host`` says whether it could start one once idle;
``Fit.take`` and ``Fit.give`` are the only changes to a worker's room. The placer's search,
backfill, groups, the ready queue, the reasons a queue cannot run, and the booking of what a
returning worker still runs all ask here.

A new dimension (a limit per user, ...) is added here alone: what a task demands of it, on
``Shape``; what is free of it, on ``Room`` for one worker's or on ``Fit`` for one across the
cluster, kept by ``take`` and ``give``; its test in ``startable``, and in ``could_host`` when
it also bounds what a worker could ever start. The GPU devices are such a dimension: a
worker's ``Room`` holds their book (``dsched.devices``: each device's share and memory), a
demand of ``GPU`` or ``GPU_MEMORY`` fits only where its devices are free, and ``take`` chooses
them (``Task.gpus``, sent to the worker, which books the same devices).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping

from ..devices import GPU_MEMORY, DeviceBook, asks_devices
from ..resources import Resources

if TYPE_CHECKING:
    from .task import Task
    from .worker import WorkerInfo


def placed_best_fit(name: str) -> bool:
    """Demands of scarce devices are placed best-fit, to keep whole workers free for big
    requests: any name that starts with GPU, in any case (``GPU``, ``gpu0``, ``GPU_A100``)."""
    return name[:3].upper() == "GPU"


class Shape:
    """What each task of one shape demands: ``resources``, and ``restrict``, the names or
    addresses of the only workers it may run on (None: any).

    The rest is worked out once per shape, for the rule and the worker index: ``names``, the
    demanded names; ``empty``, whether there are none; ``multi``, whether there are several;
    ``primary``, the name the worker index is searched by (a GPU name first, then the one the
    fewest workers offer, from ``offered``), with ``primary_units`` of it; ``best_fit``,
    whether to search it smallest first; ``devices``, whether it takes GPU devices, and
    ``memory``, whether it asks for memory on one.
    """

    __slots__ = ("resources", "restrict", "names", "empty", "multi", "primary",
                 "primary_units", "best_fit", "devices", "memory")

    def __init__(self, resources: Resources, restrict: frozenset[str] | None,
                 offered: Mapping[str, int]):
        self.resources = resources
        self.restrict = restrict
        self.names = tuple(sorted(resources.names()))
        self.empty = not self.names
        self.multi = len(self.names) > 1
        gpus = [n for n in self.names if placed_best_fit(n)]
        if gpus:
            self.primary = gpus[0]
        elif self.names:
            self.primary = min(self.names, key=lambda n: (offered.get(n, 0), n))
        else:
            self.primary = ""
        self.best_fit = bool(gpus)
        self.primary_units = resources.get(self.primary, 0) if self.primary else 0
        self.devices = asks_devices(resources)
        self.memory = bool(resources.get(GPU_MEMORY, 0))


class Room:
    """What one worker has free for new tasks: ``free``, its resources less those of the tasks
    assigned to it (and of those it is stopping), with ``units`` the same as a plain dict, for
    a fast ``Resources.fits``; ``total``, all it offers, as a plain dict; ``devices``, the
    book of the GPU devices behind its ``GPU`` resource (None: it has none)."""

    __slots__ = ("free", "units", "total", "devices")

    def __init__(self, resources: Resources, devices: DeviceBook | None = None):
        self.free = resources
        self.units = resources.to_wire()
        self.total = resources.to_wire()
        self.devices = devices


def allows(restrict: frozenset[str] | None, w: WorkerInfo) -> bool:
    """Whether a restriction (worker names or addresses; None: any) allows ``w``."""
    return restrict is None or w.name in restrict or w.address in restrict


def allowed_workers(restrict: frozenset[str], workers: Mapping[str, WorkerInfo],
                    by_name: Mapping[str, str]) -> list[WorkerInfo]:
    """The connected ``workers`` a restriction names (by name, through ``by_name``, or by
    address) that take work (not draining), in name order."""
    found: dict[str, WorkerInfo] = {}
    for name in sorted(restrict):
        address = by_name.get(name, name)
        w = workers.get(address)
        if w is not None and not w.draining:
            found[address] = w
    return list(found.values())


def holds(q: Shape, total: Mapping[str, int]) -> bool:
    """Whether a worker offering ``total`` could start a task of ``q`` once idle, as far as
    its totals say (``could_host`` asks its devices too)."""
    return q.resources.fits(total)


def could_host(q: Shape, w: WorkerInfo) -> bool:
    """Whether ``w`` could start a task of ``q`` once idle: its restriction allows ``w`` and
    ``w`` offers enough."""
    restrict = q.restrict  # ``allows``, inlined: backfill asks this of every candidate
    if restrict is not None and w.name not in restrict and w.address not in restrict:
        return False
    if not q.memory:  # with no memory asked, the GPU count says as much as the devices
        return q.resources.fits(w.room.total)
    devices = w.room.devices
    return q.resources.fits(w.room.total) and (devices is None
                                               or devices.could_fit(q.resources))


class Fit:
    """The one rule, for workers that may hold ``prefetch`` tasks beyond their threads (sent
    ahead, to start on the next thread that frees); ``ahead_for`` (the ready queue's) says
    whether the head of a queue before a task could take a worker's next thread, which that
    task must not take first."""

    def __init__(self, prefetch: int, ahead_for: Callable[[int, WorkerInfo], bool]):
        self.prefetch = prefetch
        self.ahead_for = ahead_for
        self._arithmetic = FreeArithmetic()

    def startable(self, t: Task, q: Shape, w: WorkerInfo, gpus: tuple[int, ...] = ()) -> bool:
        """Whether ``w`` can start ``t`` (of shape ``q``) now, or take it to start next: it
        is not draining; its restriction allows ``w``; ``w`` has a free thread, or may hold
        ``t`` until one frees (``may_send_ahead``); ``w`` has its resources free, and its
        devices (``gpus``, where it runs on them already); and ``w`` is not still stopping an
        earlier run of the same key."""
        if w.draining:
            return False
        restrict = q.restrict
        if restrict is not None and not allows(restrict, w):
            return False
        assigned = len(w.processing) + len(w.stopping)
        if assigned >= w.nthreads and not self.may_send_ahead(t, q, w, assigned):
            return False
        if not q.empty:
            units = w.room.units
            if not (q.resources.fits(units) if q.multi  # one name: a lookup
                    else units.get(q.primary, 0) >= q.primary_units):
                return False
            if q.devices:  # its devices, where the GPU count does not say (``counted``)
                book = w.room.devices
                if book is not None and (gpus or book.partial or book.fenced or q.memory) \
                        and devices_for(t.resources, book, gpus) is None:
                    return False
        return not (w.stopping and t.key in w.stopping)

    def startable_now(self, t: Task, q: Shape, w: WorkerInfo, gpus: tuple[int, ...] = ()) -> bool:
        """Whether ``w`` can start ``t`` on a thread free now (not sent ahead): where a
        returning worker still runs ``t`` (on ``gpus``), it is booked there only so."""
        return (len(w.processing) + len(w.stopping) < w.nthreads
                and self.startable(t, q, w, gpus))

    def may_send_ahead(self, t: Task, q: Shape, w: WorkerInfo, assigned: int) -> bool:
        """Whether ``t`` may wait at ``w``, which has no free thread, for its next one (be
        prefetched). The worker starts the highest priority task it holds, so a task sent
        ahead starts before anything placed there later: never a job (it would wait there
        while another worker may free a slot first), never past the head of a queue ahead of
        it that could run on ``w``, and a task with resources only to come before a task of
        lower priority already waiting there (of equal priority, the one that arrived first
        starts first, and the resources would wait idle meanwhile)."""
        if assigned >= w.nthreads + self.prefetch or t.job is not None:
            return False
        if q.empty:
            return not self.ahead_for(t.order, w)
        priority = t.priority
        return any(h.prefetched and h.priority < priority for h in w.processing.values())

    # -- the only changes to a worker's room ---------------------------------------------------

    def take(self, t: Task, q: Shape, w: WorkerInfo, gpus: tuple[int, ...] = ()) -> bool:
        """``t`` (of shape ``q``) was assigned to ``w``: take what it demands from the room
        there, its devices the best fit (``Task.gpus``; ``gpus``: those it runs on already).
        Returns whether the free resources changed."""
        if q.empty:
            return False
        room = w.room
        room.free, room.units = self._arithmetic.take(room.free, t.resources)
        t.gpus = ()
        if q.devices and room.devices is not None:
            devices = devices_for(t.resources, room.devices, gpus)
            if devices is None or not room.devices.take(t.key, t.resources, devices):
                raise AssertionError(f"{t.key} placed without its devices free")
            t.gpus = devices
        return True

    def give(self, t: Task, w: WorkerInfo) -> bool:
        """``t`` left ``w`` (ended, stopped or moved): give back what it took. Returns whether
        the free resources changed."""
        resources = t.resources
        if not resources:
            return False
        room = w.room
        room.free, room.units = self._arithmetic.give(room.free, resources)
        if room.devices is not None:
            room.devices.give(t.key)
        t.gpus = ()
        return True


def devices_for(demand: Resources, book: DeviceBook,
                gpus: tuple[int, ...] = ()) -> tuple[int, ...] | None:
    """The devices ``demand`` would take of ``book`` now: ``gpus`` where given (a job found
    running there on a worker that came back), else the best fit; None where not free."""
    if gpus:  # those behind its GPU resource (a job's also lists its gpu<N> devices)
        gpus = tuple(d for d in gpus if d in book.memory)
        return gpus if book.can_take(demand, gpus) else None
    return book.choose(demand)


class FreeArithmetic:
    """Memoised ``free - demand`` and ``free + demand`` (done by Resources, exactly).

    A worker's free vector takes few distinct values, so the same few sums recur. Entries
    are keyed by the operands' ids and hold the operands, so an id cannot be reused while
    its entry exists. Results are interned, so the next lookup hits again; each comes with
    its units as a plain dict (read-only, shared) for fast ``Resources.fits``.
    """

    LIMIT = 100_000

    def __init__(self) -> None:
        self._memo: dict[tuple[int, int, bool], tuple] = {}
        self._canon: dict[Resources, tuple[Resources, dict[str, int]]] = {}

    def take(self, free: Resources, demand: Resources) -> tuple[Resources, dict[str, int]]:
        hit = self._memo.get((id(free), id(demand), False))
        if hit is None:
            hit = self._remember(free, demand, False, free - demand)
        return hit[0], hit[1]

    def give(self, free: Resources, demand: Resources) -> tuple[Resources, dict[str, int]]:
        hit = self._memo.get((id(free), id(demand), True))
        if hit is None:
            hit = self._remember(free, demand, True, free + demand)
        return hit[0], hit[1]

    def _remember(self, free: Resources, demand: Resources, add: bool, result: Resources):
        if len(self._memo) >= self.LIMIT:
            self._memo.clear()
            self._canon.clear()
        canon = self._canon.get(result)
        if canon is None:
            canon = self._canon[result] = (result, result.to_wire())
        hit = self._memo[(id(free), id(demand), add)] = (*canon, free, demand)
        return hit

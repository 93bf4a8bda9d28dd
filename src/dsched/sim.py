"""A discrete-event simulator that drives SchedulerState with simulated workers.

Workers have threads and resources; tasks have durations; a virtual clock advances through
an event heap. The simulated workers check their own capacity on every SendExecute, apart from
the scheduler's accounting: they hold what they are sent, up to their threads plus the
scheduler's prefetch, and start the highest priority task they hold as a thread frees, as real
workers do; a worker with GPU devices of known memory (``gpu_memory``) books each task on the
devices it was granted, and a device over-committed on its share or memory is an error. The simulator can call ``validate()`` after every event. It
reports the makespan, each task's wait (first start less submission) and the number of
placement decisions. Used by the tests and the benchmarks.

Pure: no I/O, no clock (the virtual clock is the only time here).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .devices import GPU_MEMORY, DeviceBook
from .resources import EMPTY, GPU, SCALE, Resources, ResourcesLike
from .scheduler import events as ev
from .scheduler.actions import (CloseWorker, SendExecute, TellMoved, SendStopTask, TellCancelled,
                                TellErred, TellFinished)
from .scheduler.state import SchedulerState


class SimulationError(AssertionError):
    """The scheduler did something a real worker would refuse (over capacity)."""


@dataclass(frozen=True)
class SimWorker:
    name: str
    nthreads: int = 1
    resources: ResourcesLike = None
    join_at: float = 0.0
    leave_at: float | None = None
    #: Its GPU devices' memory in bytes, one each (they add ``GPU`` and ``GPU_MEMORY``).
    gpu_memory: tuple[int, ...] = ()

    @property
    def address(self) -> str:
        return f"sim://{self.name}"

    def offer(self) -> Resources:
        resources = Resources.parse(self.resources)
        if self.gpu_memory:
            resources = resources + Resources({GPU: len(self.gpu_memory) * SCALE,
                                               GPU_MEMORY: sum(self.gpu_memory) * SCALE})
        return resources


@dataclass(frozen=True)
class SimTask:
    """A task of the workload; it raises ``errors`` times before it succeeds."""

    key: str
    duration: float
    resources: ResourcesLike = None
    dependencies: tuple[str, ...] = ()
    priority: int = 0
    workers: tuple[str, ...] | None = None
    prefix: str = ""
    submit_at: float = 0.0
    nbytes: int = 0
    retries: int = 0
    errors: int = 0
    client: str = "client"


@dataclass
class SimReport:
    makespan: float
    waits: dict[str, float]
    starts: dict[str, float]
    ends: dict[str, float]
    placements: dict[str, list[str]]
    outcomes: dict[str, str]
    decisions: int
    events: int
    unfinished: list[str] = field(default_factory=list)


class _Running:
    __slots__ = ("key", "resources", "priority", "token", "gpus")

    def __init__(self, key: str, resources: Resources, priority: int, token: int,
                 gpus: tuple[int, ...] = ()):
        self.key, self.resources, self.priority, self.token = key, resources, priority, token
        self.gpus = gpus


class Simulation:
    """Run ``tasks`` on ``workers``; ``state`` defaults to a fresh SchedulerState (with the
    daemon's policy).

    ``validate``: call ``state.validate()`` after every event. ``tick``: send a Tick every
    so many virtual seconds while work remains, after a heartbeat from each worker still
    there (so that one is timed out only when it is gone). ``handle``: the function events go
    through (the state's ``handle`` by default; a benchmark wraps it to time it).
    """

    def __init__(
        self, workers: Iterable[SimWorker], tasks: Iterable[SimTask], *,
        state: SchedulerState | None = None, validate: bool = False,
        tick: float | None = None, handle: Callable | None = None,
        max_events: int = 10_000_000,
    ):
        self.workers = {w.address: w for w in workers}
        self.tasks = {t.key: t for t in tasks}
        self.state = state if state is not None else SchedulerState()
        self.validate = validate
        self.tick = tick
        self.handle = handle if handle is not None else self.state.handle
        self.max_events = max_events
        self.now = 0.0
        self._heap: list = []
        self._seq = 0
        self._running: dict[str, dict[str, _Running]] = {}
        self._prefetched: dict[str, dict[str, _Running]] = {}
        self._capacity: dict[str, tuple[int, Resources]] = {}
        self._used: dict[str, Resources] = {}
        self._devices: dict[str, DeviceBook] = {}
        self._errors_left = {t.key: t.errors for t in self.tasks.values()}
        self._token = 0
        self.starts: dict[str, float] = {}
        self.ends: dict[str, float] = {}
        self.outcomes: dict[str, str] = {}
        self.placements: dict[str, list[str]] = {}
        self.decisions = 0
        self.events = 0

    def _at(self, time: float, kind: str, *payload) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time, self._seq, kind, payload))

    def run(self) -> SimReport:
        for w in self.workers.values():
            self._at(w.join_at, "join", w)
            if w.leave_at is not None:
                self._at(w.leave_at, "leave", w.address, "simulated death")
        batches: dict[tuple[float, str], list[SimTask]] = {}
        for t in self.tasks.values():
            batches.setdefault((t.submit_at, t.client), []).append(t)
        for (time, client), batch in batches.items():
            self._at(time, "submit", client, batch)
        if self.tick:
            self._at(self.tick, "tick")
        heap = self._heap
        while heap:
            time, _, kind, payload = heapq.heappop(heap)
            self.now = time
            if kind == "tick":
                if len(self.outcomes) >= len(self.tasks) or not self._work_left():
                    continue
                self._at(time + self.tick, "tick")
                for address in list(self._running):  # the workers still there are heard from
                    self._handle(ev.WorkerHeartbeat(address=address, now=self.now))
            event = getattr(self, "_make_" + kind)(*payload)
            if event is not None:
                self._handle(event)
        submitted = [t.submit_at for t in self.tasks.values()]
        first = min(submitted) if submitted else 0.0
        finished = [self.ends[k] for k, o in self.outcomes.items() if o == "finished"]
        return SimReport(
            makespan=(max(finished) - first) if finished else 0.0,
            waits={k: self.starts[k] - self.tasks[k].submit_at for k in self.starts
                   if k in self.tasks},
            starts=dict(self.starts), ends=dict(self.ends), placements=self.placements,
            outcomes=dict(self.outcomes), decisions=self.decisions, events=self.events,
            unfinished=sorted(k for k in self.tasks if k not in self.outcomes),
        )

    def _handle(self, event: ev.Event) -> None:
        self.events += 1
        if self.events > self.max_events:
            raise SimulationError(f"more than {self.max_events} events")
        actions = self.handle(event)
        if self.validate:
            self.state.validate()
        self._carry_out(actions)

    def _work_left(self) -> bool:
        return any(self._running.values()) or len(self.state.queue) > 0 or any(
            t.state.value == "waiting" for t in self.state.tasks.values())

    # -- events into the scheduler ----------------------------------------------------------------

    def _make_join(self, w: SimWorker):
        resources = w.offer()
        self._running[w.address] = {}
        self._prefetched[w.address] = {}
        self._capacity[w.address] = (w.nthreads, resources)
        self._used[w.address] = EMPTY
        devices = tuple(range(len(w.gpu_memory)))
        gpus = tuple({"index": d, "memory_total": m} for d, m in zip(devices, w.gpu_memory))
        self._devices[w.address] = DeviceBook.offered(resources, devices, gpus) or DeviceBook({})
        return ev.WorkerJoined(address=w.address, name=w.name, nthreads=w.nthreads,
                               resources=resources, devices=devices, gpus=gpus, now=self.now)

    def _make_leave(self, address: str, reason: str):
        if self._running.pop(address, None) is None:
            return None
        self._prefetched.pop(address, None)
        return ev.WorkerLeft(address=address, reason=reason, now=self.now)

    def _make_submit(self, client: str, batch: list[SimTask]):
        specs = tuple(
            ev.TaskSpec(key=t.key, dependencies=t.dependencies,
                        resources=Resources.parse(t.resources), priority=t.priority,
                        retries=t.retries, workers=t.workers, prefix=t.prefix)
            for t in batch
        )
        return ev.TasksSubmitted(client=client, tasks=specs, now=self.now)

    def _make_tick(self):
        return ev.Tick(now=self.now)

    def _make_end(self, address: str, key: str, token: int, start: float):
        running = self._running.get(address)
        r = running.get(key) if running is not None else None
        if r is None or r.token != token:
            return None
        self._stop(address, key)
        if self._errors_left.get(key, 0) > 0:
            self._errors_left[key] -= 1
            return ev.WorkerTaskErred(key=key, worker=address, exception=b"sim", text="simulated error",
                                now=self.now)
        nbytes = self.tasks[key].nbytes if key in self.tasks else 0
        return ev.WorkerTaskFinished(key=key, worker=address, nbytes=nbytes, start=start,
                               stop=self.now, now=self.now)

    def _make_stopped(self, address: str, key: str):
        if address not in self._running:
            return None
        self._stop(address, key)
        return ev.WorkerTaskStopped(key=key, worker=address, now=self.now)

    def _stop(self, address: str, key: str) -> None:
        """``key`` leaves ``address`` (ended or killed); a prefetched task takes its thread."""
        if self._prefetched[address].pop(key, None) is not None:
            return
        r = self._running[address].pop(key, None)
        if r is None:
            return
        self._used[address] = self._used[address] - r.resources
        self._devices[address].give(key)
        self._start_held(address)

    def _start_held(self, address: str) -> None:
        """While a thread is free, the worker starts the highest priority task it holds (the
        first sent of equals); the scheduler booked its resources, so they must be free."""
        held, running = self._prefetched[address], self._running[address]
        nthreads, total = self._capacity[address]
        while held and len(running) < nthreads:
            r = held.pop(max(held, key=lambda key: held[key].priority))
            used = self._used[address] + r.resources
            if not used.fits(total):
                raise SimulationError(f"{address} over capacity with {r.key}: {used} > {total}")
            self._start(address, r)

    def _start(self, address: str, r: _Running) -> None:
        devices = self._devices[address]
        if r.gpus and not devices.take(r.key, r.resources, r.gpus):
            raise SimulationError(f"{address} devices {r.gpus} over-committed with {r.key} "
                                  f"({r.resources}): {devices.held}")
        self._running[address][r.key] = r
        self._used[address] = self._used[address] + r.resources
        self.starts.setdefault(r.key, self.now)
        duration = self.tasks[r.key].duration if r.key in self.tasks else 0.0
        self._at(self.now + duration, "end", address, r.key, r.token, self.now)

    # -- actions out of the scheduler -------------------------------------------------------------

    def _carry_out(self, actions: list) -> None:
        for a in actions:
            kind = type(a)
            if kind is SendExecute:
                self._execute(a)
            elif kind is SendStopTask:
                self._at(self.now, "stopped", a.worker, a.key)
            elif kind is CloseWorker:
                self._at(self.now, "leave", a.worker, a.reason)
            elif kind is TellFinished:
                self._end(a.key, "finished")
            elif kind is TellMoved and not a.who_has:  # lost: it will end again
                self.outcomes.pop(a.key, None)
            elif kind is TellErred:
                self._end(a.key, "erred")
            elif kind is TellCancelled:
                self._end(a.key, "cancelled")

    def _end(self, key: str, outcome: str) -> None:
        if key in self.outcomes:
            raise SimulationError(f"task {key} reported ended twice")
        self.outcomes[key] = outcome
        self.ends[key] = self.now

    def _execute(self, a: SendExecute) -> None:
        """A simulated worker checks its own capacity: threads, resources, prefetch."""
        running = self._running.get(a.worker)
        if running is None:
            raise SimulationError(f"{a.key} sent to unknown or dead worker {a.worker}")
        prefetched = self._prefetched[a.worker]
        if a.key in running or a.key in prefetched:
            raise SimulationError(f"{a.key} sent twice to {a.worker}")
        nthreads, _ = self._capacity[a.worker]
        if len(running) + len(prefetched) >= nthreads + self.state.policy.prefetch:
            raise SimulationError(f"{a.worker} over its {nthreads} threads and prefetch")
        self._token += 1
        self.decisions += 1
        self.placements.setdefault(a.key, []).append(a.worker)
        prefetched[a.key] = _Running(a.key, a.resources, a.priority, self._token, a.gpus)
        self._start_held(a.worker)

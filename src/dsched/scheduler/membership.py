"""Membership: workers joining, reconnecting, draining and leaving.

A joining worker is indexed for placement (a reconnecting one has what it kept adopted); a
draining one is withdrawn from placement and has the results only it holds copied to other
workers before it is told it may leave; a worker that leaves, or misses its heartbeats, loses
what only it held (computed again where still needed) and its running tasks go back to the
queue, each counting the death against itself only if it was executing there (job attempts
are the job book's: they wait for their worker). A crashed worker process is named with the
task that ended it once its nanny's next process says how.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import ResourceSpecError
from ..jobs import parse_job_key
from ..resources import SCALE, check_offer
from . import events as ev
from .actions import (INFO, WARNING, CloseWorker, GrantLease, JobsReply, SendReplicate,
                      SendUnfenceGpu, TellMoved, SendRetire,
                      SendStopTask, TellWorkerCount, WorkerAccepted)
from .budget import DIED
from .graph import TaskGraph
from .jobrecovery import JobRecovery
from .outbox import Outbox
from .placer import Placer
from .task import MEMORY, QUEUED
from .worker import WorkerInfo

#: Worker names whose last process died with tasks running, remembered until it comes back.
CRASHES_KEPT = 1000


class Membership:
    """``workers`` by address (shared with the placer and the graph, changed only here).
    ``heartbeat_timeout``: seconds of silence after which a worker is removed (None: never).
    A worker that dies while a task executes there counts against the task's budget
    (``budget.py``: ``allowed_failures``)."""

    def __init__(self, workers: dict[str, WorkerInfo], placer: Placer, graph: TaskGraph,
                 jobs: JobRecovery, out: Outbox, *, heartbeat_timeout: float | None):
        self.workers = workers
        self.placer = placer
        self.graph = graph
        self.jobs = jobs
        self.out = out
        self.heartbeat_timeout = heartbeat_timeout
        self.draining: dict[str, WorkerInfo] = {}
        #: Worker name -> the tasks its process was running when it died unexpectedly.
        self._crashed: dict[str, tuple[str, ...]] = {}
        #: Clients told the number of workers on each change, and the number they know.
        self.watchers: dict[str, None] = {}
        self._told = 0

    # -- joining -----------------------------------------------------------------------------

    def joined(self, e: ev.WorkerJoined) -> None:
        out = self.out
        old = self.workers.get(e.address)
        if old is not None:
            self.remove(old, "it registered again")
        other = self.placer.index.by_name.get(e.name)
        if other is not None:
            reason = f"a worker named {e.name!r} is already connected from {other}"
            out.actions.append(CloseWorker(worker=e.address, reason=reason, refused=True))
            out.log(WARNING, "Refused worker %s at %s: %s", e.name, e.address, reason)
            return
        if e.nthreads < 1:
            reason = f"a worker needs at least one thread, not {e.nthreads}"
            out.actions.append(CloseWorker(worker=e.address, reason=reason, refused=True))
            return
        try:  # its GPUs are whole devices, and few enough to book one by one
            check_offer(e.resources)
        except ResourceSpecError as error:
            out.actions.append(CloseWorker(worker=e.address, reason=str(error), refused=True))
            return
        w = WorkerInfo(e.address, e.name, e.nthreads, e.resources, tuple(e.gpus), out.now,
                       e.job_lease, e.containment, e.devices)
        self.workers[e.address] = w
        self.placer.add_worker(w)
        out.actions.append(WorkerAccepted(worker=e.address))
        out.log(INFO, "Worker %s joined from %s: %d thread%s, resources %s", e.name,
                e.address, e.nthreads, "" if e.nthreads == 1 else "s", e.resources or "none")
        if e.previous_exit:
            self._explain_crash(e.name, e.previous_exit)
        if e.held or e.running:
            self._reconcile(w, e.held, e.running, e.running_gpus)
        self.jobs.worker_joined(w, e.attempts, e.machine_restarted)
        self.placer.reasons.refresh()

    def _explain_crash(self, name: str, how: str) -> None:
        """The process that ran as worker ``name`` ended ``how``, says the process its nanny
        started next: name the task that ended it, and tell the tasks that died with it."""
        keys = self._crashed.pop(name, ())
        log = self.out.log
        if not keys:
            log(WARNING, "The previous process of worker %s %s", name, how)
            return
        if len(keys) == 1:
            log(WARNING, "Task %s ended the worker process of %s: it %s", keys[0], name, how)
        else:
            log(WARNING, "One of tasks %s ended the worker process of %s: it %s",
                ", ".join(keys[:5]) + (" ..." if len(keys) > 5 else ""), name, how)
        prefix = f"worker {name} "
        for key in keys:
            t = self.graph.tasks.get(key)
            if t is not None and t.death_causes and t.death_causes[-1].startswith(prefix):
                t.death_causes = (*t.death_causes[:-1], f"{t.death_causes[-1]}; its process {how}")

    def _reconcile(self, w: WorkerInfo, held: tuple[tuple[str, int], ...],
                   running: tuple[str, ...], running_gpus: Mapping[str, Any]) -> None:
        """Adopt what a reconnecting worker kept that is still needed; drop the rest there.

        A result still needed and not yet recomputed ends its task here; a result already
        in memory elsewhere becomes one more copy. A task it still runs is adopted when it is
        queued to run again and can start on this worker now (the worker ignores the repeated
        Execute), on the devices it runs on (``running_gpus``); any other running task is
        stopped there.
        """
        graph, out = self.graph, self.out
        for key, nbytes in held:
            t = graph.tasks.get(key)
            if t is not None and t.state is MEMORY and t.who_has is not None:
                t.who_has[w.address] = None
                w.has_what[key] = None
            elif t is not None and t.state is QUEUED and t.queue is not None:
                self.placer.dequeue(t)
                out.log(INFO, "Worker %s kept the result of task %s; not computing it again",
                        w.name, key)
                graph.finished(t, w, nbytes)
            else:
                out.free(w.address, key)
        for key in running:
            if parse_job_key(key) is not None:
                continue  # a job attempt: the job book settles it
            t = graph.tasks.get(key)
            gpus = running_gpus.get(key)
            gpus = tuple(gpus) if isinstance(gpus, (list, tuple)) and all(
                type(d) is int for d in gpus) else ()
            if t is None or t.state is not QUEUED or not self.placer.adopt(t, w, gpus):
                out.actions.append(SendStopTask(key=key, worker=w.address))

    def heartbeat(self, e: ev.WorkerHeartbeat) -> None:
        w = self.workers.get(e.address)
        if w is not None:  # a member's only: one closed here gets no lease
            w.last_seen = self.out.now
            if e.metrics is not None:
                w.metrics = e.metrics
                self._measured(w, e.metrics.get("gpus") or ())
            if e.sent:
                self.out.actions.append(GrantLease(worker=w.address, sent=e.sent))

    def _measured(self, w: WorkerInfo, gpus) -> None:
        """What processes dsched did not start use of ``w``'s device memory, as heartbeats
        say it: new grants fit in the rest, from now on."""
        devices = w.room.devices
        if devices is None or not gpus:
            return
        outside = {g["index"]: g.get("memory_outside", 0) * SCALE for g in gpus
                   if isinstance(g, Mapping) and type(g.get("index")) is int
                   and type(g.get("memory_outside", 0)) is int and g.get("memory_outside", 0) >= 0}
        before = dict(devices.outside)
        if devices.measured(outside):
            self.placer.room_grew(w)
        elif devices.outside != before:
            self.placer.room_shrank(w)

    # -- faulty GPUs --------------------------------------------------------------------------

    def gpu_fenced(self, e: ev.WorkerGpuFenced) -> None:
        """A device of ``e.worker`` faulted: nothing new is granted there (its worker stops
        the work on it, which ends as the worker says)."""
        w = self.workers.get(e.worker)
        devices = w.room.devices if w is not None else None
        if devices is not None and devices.fence(e.index, e.reason):
            self.placer.room_shrank(w)
            self.out.counters["gpus_fenced"] += 1
            self.out.log(WARNING, "GPU %d of worker %s fenced: %s", e.index, w.name, e.reason)

    def gpu_released(self, e: ev.WorkerGpuReleased) -> None:
        w = self.workers.get(e.worker)
        devices = w.room.devices if w is not None else None
        if devices is not None and devices.unfence(e.index):
            self.out.log(INFO, "GPU %d of worker %s released: it takes work again", e.index,
                         w.name)
            self.placer.room_grew(w)

    def release_gpu(self, e: ev.GpuReleaseRequested) -> None:
        """An operator releases a fenced device; the worker confirms (``gpu_released``)."""
        address = self.placer.index.by_name.get(e.worker, e.worker)
        w = self.workers.get(address)
        devices = w.room.devices if w is not None else None
        if w is None:
            error = f"no worker named {e.worker} is connected"
        elif devices is None or e.index not in devices.memory:
            error = f"worker {e.worker} has no GPU {e.index}"
        elif e.index not in devices.fenced:
            error = f"GPU {e.index} of worker {e.worker} is not fenced"
        else:
            error = ""
            self.out.actions.append(SendUnfenceGpu(worker=w.address, index=e.index))
        self.out.actions.append(JobsReply(client=e.client, request=e.request, value=not error,
                                          error=error))

    # -- leaving -----------------------------------------------------------------------------

    def left(self, e: ev.WorkerLeft) -> None:
        w = self.workers.get(e.address)
        if w is not None:
            self.remove(w, e.reason, level=INFO if e.expected else WARNING, expected=e.expected)

    def check_heartbeats(self) -> None:
        timeout = self.heartbeat_timeout
        if timeout is None:
            return
        now = self.out.now
        for w in list(self.workers.values()):
            if now - w.last_seen > timeout:
                reason = f"no heartbeat for {now - w.last_seen:g} s (timeout {timeout:g} s)"
                self.out.actions.append(CloseWorker(worker=w.address, reason=reason))
                self.remove(w, reason)

    def remove(self, w: WorkerInfo, reason: str, level: int = WARNING,
               expected: bool = False) -> None:
        """``w`` is gone: what only it held is lost, what it ran goes back to the queue (a
        task executing there counts the death against itself, unless ``expected``: a drained
        worker that stopped its last tasks at the deadline)."""
        graph, out = self.graph, self.out
        address = w.address
        del self.workers[address]
        self.placer.remove_worker(w)
        self.draining.pop(address, None)
        for other in self.draining.values():  # copies it was making for a draining worker
            for key in [k for k, target in other.evacuating.items() if target == address]:
                del other.evacuating[key]
        lost = []
        for key in w.has_what:
            t = graph.tasks[key]
            del t.who_has[address]
            if not t.who_has:
                lost.append(t)
        w.has_what = {}
        recomputed = out.counters["recomputed"]
        for t in lost:
            graph.lose(t)
        if lost:
            reason += (f"; it alone held {len(lost)} result(s), "
                       f"{out.counters['recomputed'] - recomputed} of them still needed and "
                       "computed again")
        out.log(level, "Worker %s at %s removed: %s", w.name, address, reason)
        running = list(w.processing.values())
        attempts = [t for t in (*running, *w.stopping.values()) if t.job is not None]
        if attempts:  # jobs wait for their worker to return, or for its lease to pass
            running = [t for t in running if t.job is None]
        w.processing, w.stopping = {}, {}
        self.jobs.worker_gone(w, attempts)
        executing = []
        for t in running:
            t.processing_on = None
            counted = not (t.prefetched or expected)
            if counted:
                t.death_causes = (*t.death_causes[-2:], f"worker {w.name} at {address}: {reason}")
                executing.append(t.key)
            t.prefetched = False
            graph.attempt_failed(t, DIED, "; earlier: ".join(reversed(t.death_causes)), w.name,
                                 counted=counted)
        if executing:
            out.counters["deaths"] += len(executing)
            self._crashed[w.name] = tuple(executing)
            if len(self._crashed) > CRASHES_KEPT:
                del self._crashed[next(iter(self._crashed))]
        self.placer.reasons.refresh()

    # -- draining ----------------------------------------------------------------------------

    def start_draining(self, e: ev.WorkerDraining) -> None:
        w = self.workers.get(e.address)
        if w is None or w.draining:
            return
        w.draining = True
        self.placer.withdraw_worker(w)
        for other in list(self.draining.values()):  # copies it was making go elsewhere
            keys = [k for k, target in other.evacuating.items() if target == w.address]
            for key in keys:
                del other.evacuating[key]
            self.evacuate(other, keys)
        self.draining[w.address] = w
        moving, stuck = self.evacuate(w, list(w.has_what))
        self.out.log(INFO, "Worker %s is draining: it takes no new tasks; copying %d "
                     "result(s) only it holds to other workers%s", w.name, moving,
                     f" ({stuck} cannot be moved: no other worker)" if stuck else "")
        self.placer.reasons.refresh()

    def evacuate(self, w: WorkerInfo, keys: list[str]) -> tuple[int, int]:
        """Copy the results among ``keys`` that the draining ``w`` holds, that no worker taking
        work holds too and that are still needed, to the other workers, those holding fewest
        results first; returns how many are being copied and how many cannot be (no other
        worker)."""
        workers = self.workers
        targets = sorted((x for x in workers.values() if not x.draining),
                         key=lambda x: (len(x.has_what), x.name))
        moving = stuck = 0
        for key in keys:
            t = self.graph.tasks.get(key)
            if (t is None or t.state is not MEMORY or key in w.evacuating
                    or not (t.wanted_by or t.waiters)
                    or any(not workers[a].draining for a in t.who_has)):
                continue
            if not targets:
                stuck += 1
                continue
            target = targets[moving % len(targets)]
            moving += 1
            w.evacuating[key] = target.address
            self.out.actions.append(SendReplicate(worker=target.address, key=key, source=w.address,
                                              nbytes=t.nbytes))
        return moving, stuck

    def _evacuated(self, key: str, target: str) -> None:
        """The copy of ``key`` that ``target`` was making for a draining worker is settled."""
        for w in self.draining.values():
            if w.evacuating.get(key) == target:
                del w.evacuating[key]
                return

    def replicated(self, e: ev.WorkerReplicated) -> None:
        self._evacuated(e.key, e.worker)
        w = self.workers.get(e.worker)
        if w is None:
            return
        t = self.graph.tasks.get(e.key)
        if t is None or t.state is not MEMORY:
            self.out.free(w.address, e.key)  # nobody needs it now
            return
        if w.address in t.who_has:
            return
        t.who_has[w.address] = None
        w.has_what[e.key] = None
        self.out.counters["replicated"] += 1
        if t.wanted_by:  # the clients' fetches may go there now
            self.out.actions.append(TellMoved(key=t.key, clients=t.wanted_by,
                                                who_has=tuple(t.who_has)))

    def replicate_failed(self, e: ev.WorkerReplicateFailed) -> None:
        self._evacuated(e.key, e.worker)
        w = self.workers.get(e.worker)
        self.out.log(WARNING, "Worker %s could not copy the result of %s off a draining worker "
                     "(%s); it is computed again if still needed once that worker leaves",
                     w.name if w is not None else e.worker, e.key, e.reason)

    def retire_idle(self) -> None:
        """Tell each draining worker that runs nothing and has nothing left to copy away that
        it may leave (once)."""
        for w in self.draining.values():
            if not (w.retired or w.processing or w.stopping or w.evacuating):
                w.retired = True
                self.out.actions.append(SendRetire(worker=w.address))

    # -- clients watching the number of workers ----------------------------------------------

    def watch(self, client: str) -> None:
        """``client`` is told the number of workers now, and on each change (``tell_count``)."""
        self.watchers[client] = None
        self._told = len(self.workers)  # what the others were told at the end of the last event
        self.out.actions.append(TellWorkerCount(clients=(client,), count=self._told))

    def tell_count(self) -> None:
        """Once per event: tell the watchers the number of workers if it changed (a worker that
        registers again is not a change; a draining one counts until it leaves)."""
        count = len(self.workers)
        if count != self._told:
            self._told = count
            self.out.actions.append(TellWorkerCount(clients=tuple(self.watchers), count=count))

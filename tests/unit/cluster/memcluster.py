"""An in-memory cluster: one ``SchedulerState``, N ``WorkerState`` cores and the wire between
them, at unit-test speed, with no socket, thread, process or real clock.

What crosses between the cores goes through the shells' own tables, never a second
translation: a worker's op becomes a scheduler event through ``WORKER_OPS`` (and a worker's
``register`` through the shell's ``joined``), a client's through ``CLIENT_OPS``; a scheduler
action becomes an op through ``TO_WORKER`` or ``TO_CLIENTS``; an op the scheduler sends a worker
goes to its core as it is when its type is in the worker shell's ``_TO_STATE``, and a report the
worker core returns is sent as it is. Every op is encoded as it leaves (``to_wire``, then
msgpack) and decoded as it arrives (msgpack, then ``ops.decode``, which runs ``from_wire``'s
checks), so an op one side cannot send or the other cannot read fails here.

Between sending and arriving, each message waits in one queue that the test controls:
``settle()`` delivers in order until nothing is left to do; ``step(i)`` does the i-th thing
that can be done now (a message is delivered in order on its own connection unless
``in_order=False``); ``drop(i)``, ``duplicate(i)``; ``partition(name)`` holds a worker's
messages both ways and its peers' fetches from it fail, until ``heal(name)``; ``reset(name)``
breaks its connection (what was in flight on it is lost, both ends see it close);
``kill(name)`` ends its process (``restart(name)`` starts the next one, as its nanny would);
``drain(name)`` is a SIGTERM. Time is a virtual clock: ``advance(seconds)``.

What the shells do beyond their op tables is emulated here, minimally:

- **Connections and registration** (``scheduler/server.py``, ``worker/session.py``): a worker
  connects and sends ``Register`` (built as ``Worker._register`` builds it, from
  ``WorkerState.snapshot()``); the scheduler core's ``WorkerAccepted`` becomes its
  ``Registered``, which opens the worker's session (``SessionOpened``). A closed connection is
  a FIN message: it arrives after what was sent before it, then the scheduler hands
  ``WorkerLeft`` to its core (if that connection is still the worker's) and the worker's core
  gets ``SessionLost`` and it connects again (at once, unless partitioned). A worker's reports
  wait while it is not registered, and go first once it is. ``CloseWorker`` closes the
  connection (``refused``: the worker stops for good). A register from an address already
  connected replaces the old connection, as in the shell. A malformed or unexpected op closes
  the connection that carried it.
- **Heartbeats and the clock**: every ``heartbeat_interval`` of virtual time each registered
  worker sends ``Heartbeat(sent=now)`` (the scheduler core's ``GrantLease`` answers it with a
  ``Lease``); the scheduler's core gets a ``Tick`` every ``tick_interval``. Both sides read
  the one virtual clock.
- **The executor**: a ``StartTask`` is held as executing until the test calls
  ``finish(key, value)`` or ``err(key, text)``, which hand ``RunFinished``/``RunErred`` to the
  worker core as the shell's ``_ended`` does (the value is kept in the worker's data store).
  ``KillTask`` stops a task in a GPU process (``TaskStopped`` soon after) and, as in the shell,
  not a task on a thread (it runs on until the test ends it).
- **The data port**: ``FetchDependency`` is done soon after: ``DependencyFetched`` when the peer
  is up, reachable and holds the key in its store, else ``DependencyFetchFailed``.
- **Job supervisors and the job directory**: ``StartJob`` spawns soon after (the attempt is
  recorded on the worker's "disk", which outlives its process, then ``AttemptStarted``); the
  test ends it with ``end_job(key, outcome)``. ``KillJob`` ends it ``cancelled`` (``lost`` for a
  shutdown), before or after it started; ``ExtendLease`` moves its deadline, and a job whose
  lease passes on the virtual clock ends ``lost``. A killed worker's running attempts are
  recorded lost; the next process hands what its disk holds to its core
  (``AttemptsRecovered``). ``ForgetAttempt`` deletes the record; ``EndUnstartedJob`` is
  reported soon after.
- **The journal**: a ``JournalWrite`` is committed at once (its rows are kept in ``journal``),
  so the actions behind it are carried out in order at once.
- **Drain**: ``drain(name)`` hands ``DrainRequested`` to the worker core; the worker leaves
  (``Unregister``, then it closes) once its core is idle and the scheduler retired it, or it is
  not connected. The drain deadline (``DrainTimedOut``) is not emulated.
  ``drain_scheduler()`` hands the scheduler's core ``SchedulerDraining``.
- Requests (``info``, ``who-has``, ``query-jobs``) are answered from the scheduler's views, and
  ``submit-jobs`` becomes ``JobsSubmitted`` as in ``Scheduler._submit_jobs``.

Neither core is changed or reached into: the harness only hands them events and reads what
they expose. ``check()`` asserts both sides' invariants and the checks across them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable, get_args

import msgpack

from dsched.jobs import JobSpec
from dsched.policy import SchedulerPolicy, WorkerPolicy
from dsched.protocol import decode_ops, ops
from dsched.protocol.messages import Payload
from dsched.resources import EMPTY, Resources
from dsched.scheduler import actions as sact, events as sev
from dsched.scheduler.optables import CLIENT_OPS, TO_CLIENTS, TO_WORKER, WORKER_OPS, joined
from dsched.scheduler.state import SchedulerState
from dsched.scheduler.task import PROCESSING, QUEUED, WAITING
from dsched.scheduler.jobviews import jobs_view
from dsched.scheduler.views import task_counts, who_has, worker_info
from dsched.settings import default_of
from dsched.worker import actions as wact, events as wev
from dsched.worker.server import _TO_STATE
from dsched.worker.state import WorkerState
from dsched.worker.task import RUNNING, WorkerTaskState

#: What a task spec is when the test does not care: (function, arguments), opaque bytes.
SPEC = (b"function", b"arguments")
#: The ops a worker core returns that are reports for the scheduler, sent as they are.
REPORTS = get_args(wact.Report)
#: The words a job supervisor ends an attempt with (``worker/jobsupervisor.py``).
LEASE_EXPIRED = "killed because its worker lost the scheduler for longer than its job lease"
WORKER_GONE = "killed because its worker process ended while it ran"


def encode(op: Any) -> bytes:
    """An op as it leaves: ``to_wire``, then msgpack (a payload as its bytes)."""
    def default(obj: Any) -> Any:
        if isinstance(obj, Payload):
            return bytes(obj.data)
        raise TypeError(f"cannot send a {type(obj).__name__} over the wire")

    return msgpack.packb([op.to_wire()], default=default, use_bin_type=True)


def decode(body: bytes) -> Any:
    """An op as it arrives: msgpack, then ``ops.decode`` (``from_wire``'s checks)."""
    [wire] = decode_ops(body)
    return ops.decode(wire)


class Diverged(AssertionError):
    """The scheduler has a task processing on a worker that is cancelling it for its user,
    and has not sent it again: the task would never end (``test_cluster_stories.py``'s
    ``test_a_task_sent_back_to_a_worker_that_is_stopping_it_still_ends``)."""


# -- the wire -------------------------------------------------------------------------------


@dataclass(eq=False)
class Link:
    """One connection: a worker's or a client's, to the scheduler. Each end closes on its own;
    ``address`` is the worker's once its register arrived."""

    id: int
    kind: str  # "worker" or "client"
    peer: str  # the worker's or the client's name
    address: str = ""
    scheduler_open: bool = True
    peer_open: bool = True

    def __repr__(self) -> str:
        return f"<link {self.id} {self.kind} {self.peer}>"


@dataclass(eq=False)
class Message:
    """An op (``body``) or a close (``fin``, with its ``reason``) on its way along ``link``,
    ``up`` to the scheduler or down to the peer."""

    link: Link
    up: bool
    body: bytes = b""
    fin: bool = False
    reason: str = ""

    def op(self) -> Any:
        return None if self.fin else decode(self.body)

    def __repr__(self) -> str:
        what = f"FIN({self.reason})" if self.fin else decode(self.body)
        return f"<{self.link.peer} {'->' if self.up else '<-'} {what}>"


@dataclass(eq=False)
class Chore:
    """Something a shell does soon, off the path of the event that asked for it: a fetch, a
    kill, a job supervisor's spawn, an event handed over later, a reconnect, the scheduler
    noticing a connection it closed."""

    where: str  # a worker's name, or "" for the scheduler
    what: str
    args: tuple = ()

    def __repr__(self) -> str:
        return f"<{self.where or 'scheduler'}: {self.what} {self.args}>"


# -- the worker processes -------------------------------------------------------------------


@dataclass
class WorkerSpec:
    name: str
    nthreads: int = 1
    resources: str | None = None
    gpus: tuple[int, ...] | None = None  # the devices behind GPU; None: 0..N-1


@dataclass(eq=False)
class Node:
    """One worker: its spec and, while its process runs, its core and what its shell holds."""

    spec: WorkerSpec
    address: str
    resources: Resources
    state: WorkerState | None = None
    alive: bool = False
    gone: bool = False  # it stopped for good (drained, refused)
    refusal: str | None = None
    link: Link | None = None
    registered: bool = False
    register_sent: float = 0.0
    unsent: list[bytes] = field(default_factory=list)
    executing: dict[str, tuple[wact.StartTask, float]] = field(default_factory=dict)
    store: dict[str, tuple[Any, int]] = field(default_factory=dict)  # key -> (value, nbytes)
    jobs: dict[str, dict] = field(default_factory=dict)  # attempts spawning or running
    disk: dict[str, ops.AttemptEnded | None] = field(default_factory=dict)  # outlives the process
    lease_until: float = 0.0
    draining: bool = False
    retired: bool = False
    cut: bool = False
    previous_exit: str | None = None
    processes: int = 0

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        return f"<worker {self.name}{'' if self.alive else ' (down)'}>"


@dataclass(eq=False)
class Client:
    """A client connection: what it sent and what it was told."""

    cluster: MemCluster
    link: Link
    name: str = ""  # as the scheduler's Welcome named it
    received: list = field(default_factory=list)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def send(self, op: Any) -> None:
        self.cluster._send(self.link, True, op)

    def submit(self, key: str, resources: str | None = None, dependencies: Iterable[str] = (),
               *, priority: int = 0, retries: int = 0, workers: tuple[str, ...] | None = None,
               wanted: bool = True, spec: tuple = SPEC) -> None:
        self.submit_many([task(key, resources, dependencies, priority=priority, retries=retries,
                               workers=workers, wanted=wanted, spec=spec)])

    def submit_many(self, tasks: list[dict]) -> None:
        self.send(ops.Submit(tasks=tuple(tasks)))

    def cancel(self, *keys: str) -> None:
        self.send(ops.Cancel(keys=keys))

    def release(self, *keys: str) -> None:
        self.send(ops.Release(keys=keys))

    def submit_jobs(self, *specs: JobSpec) -> int:
        request = next(self._ids)
        self.send(ops.SubmitJobs(id=request, jobs=tuple(spec.to_wire() for spec in specs)))
        return request

    def query_jobs(self, *jobs: int) -> int:
        request = next(self._ids)
        self.send(ops.QueryJobs(id=request, jobs=jobs))
        return request

    def cancel_jobs(self, *jobs: int) -> int:
        request = next(self._ids)
        self.send(ops.CancelJobs(id=request, jobs=jobs))
        return request

    def watch_jobs(self, *jobs: int) -> None:
        self.send(ops.WatchJobs(jobs=jobs))

    def disconnect(self) -> None:
        self.cluster._close(self.link, up=True, reason="client closed")

    # -- what it was told ----------------------------------------------------------------------

    def reply(self, request: int) -> Any:
        """The Reply (or Error) to ``request``: its value, or AssertionError with the reason."""
        for op in self.received:
            if type(op) in (ops.Reply, ops.Error) and op.id == request:
                assert type(op) is ops.Reply, op.reason
                return op.value
        raise AssertionError(f"no reply to request {request} yet")

    def ends(self, key: str) -> list:
        """How ``key`` ended, as told: FutureFinished, FutureErred, FutureCancelled ops, in order."""
        return [op for op in self.received if getattr(op, "key", None) == key
                and type(op) in (ops.FutureFinished, ops.FutureErred, ops.FutureCancelled)]

    def end(self, key: str) -> Any:
        """The one end of ``key`` (AssertionError unless there is exactly one)."""
        ends = self.ends(key)
        assert len(ends) == 1, (key, ends)
        return ends[0]

    def result(self, key: str) -> Any:
        """The value of ``key`` fetched from a worker the scheduler said holds it (the last
        FutureFinished or FutureMoved), as a client's gather does."""
        told = [op for op in self.received if type(op) in (ops.FutureFinished, ops.FutureMoved)
                and op.key == key]
        assert told, f"{key} was not reported finished"
        for address in told[-1].who_has:
            node = self.cluster.by_address(address)
            if node is not None and node.alive and not node.cut and key in node.store:
                return node.store[key][0]
        raise AssertionError(f"no worker of {told[-1].who_has} holds {key}")


def task(key: str, resources: str | None = None, dependencies: Iterable[str] = (), *,
         priority: int = 0, retries: int = 0, workers: tuple[str, ...] | None = None,
         wanted: bool = True, spec: tuple = SPEC) -> dict:
    """One task of a submit op, as a client builds it."""
    out = {"key": key, "spec": spec, "dependencies": tuple(dependencies),
           "resources": Resources.parse(resources), "priority": priority, "retries": retries,
           "wanted": wanted}
    if workers is not None:
        out["workers"] = tuple(workers)
    return out


# -- the cluster ------------------------------------------------------------------------------


class MemCluster:
    """One scheduler core and its workers' cores, joined by a queue of messages the test
    controls; see the module docstring. ``validate``: check every invariant of the core that
    handled each event, after each (slower; ``check()`` checks everything when called).

    Both sides run as the daemons do with no configuration: the intervals, the job lease and
    the scheduler's policy default to the settings' defaults; ``scheduler_options`` are the
    fields of the ``SchedulerPolicy`` a test changes."""

    def __init__(self, *workers: WorkerSpec | str,
                 heartbeat_interval: float = default_of("worker.heartbeat_interval"),
                 tick_interval: float = default_of("scheduler.tick_interval"),
                 job_lease: float = default_of("worker.job_lease"), validate: bool = True,
                 **scheduler_options: Any):
        self.now = 0.0
        self.heartbeat_interval, self.tick_interval = heartbeat_interval, tick_interval
        self.worker_policy = WorkerPolicy(job_lease=job_lease)
        self.validate = validate
        self.scheduler = SchedulerState(SchedulerPolicy(**scheduler_options))
        self.queue: list[Message | Chore] = []
        self.nodes: dict[str, Node] = {}
        self.journal: dict[int, dict] = {}
        self.logs: list[sact.LogLine] = []
        self.clients: list[Client] = []
        # The scheduler shell's own maps: the connection of each worker address and client.
        self._worker_links: dict[str, Link] = {}
        self._client_links: dict[str, Link] = {}
        self._links = itertools.count(1)
        self._client_ids = itertools.count(1)
        self._pids = itertools.count(1000)
        self._next_beat, self._next_tick = heartbeat_interval, tick_interval
        for spec in workers:
            self.add_worker(spec)
        self.settle()

    # -- the people in it ----------------------------------------------------------------------

    def add_worker(self, spec: WorkerSpec | str) -> Node:
        """Start a worker process (it connects and registers as the queue is delivered)."""
        spec = WorkerSpec(spec) if isinstance(spec, str) else spec
        assert spec.name not in self.nodes, spec.name
        node = Node(spec, f"tcp://{spec.name}", Resources.parse(spec.resources))
        self.nodes[spec.name] = node
        self._start(node)
        return node

    def client(self, name: str = "client") -> Client:
        """A client that connects now (the scheduler welcomes it at once, as its shell does)."""
        link = Link(next(self._links), "client", name)
        client = Client(self, link)
        self.clients.append(client)
        cid = f"{name}-{next(self._client_ids)}"
        self._client_links[cid] = link
        self._send(link, False, ops.Welcome(client=cid))
        return client

    def node(self, name: str) -> Node:
        return self.nodes[name]

    def by_address(self, address: str) -> Node | None:
        return self.nodes.get(address.removeprefix("tcp://"))

    # -- what the test does to the network and the processes -------------------------------------

    def partition(self, name: str) -> None:
        """Cut the worker off: nothing reaches it or leaves it (held, not lost) and no peer
        reaches its data, until ``heal``."""
        self.nodes[name].cut = True

    def heal(self, name: str) -> None:
        self.nodes[name].cut = False

    def reset(self, name: str) -> None:
        """Break the worker's connection: what is in flight on it is lost, and each end sees it
        close (the worker connects again)."""
        node = self.nodes[name]
        link = node.link
        if link is None:
            return
        self.queue = [m for m in self.queue if not (isinstance(m, Message) and m.link is link)]
        for up in (True, False):  # each end learns it from its FIN
            self.queue.append(Message(link, up, fin=True, reason="connection reset"))

    def kill(self, name: str) -> None:
        """The worker process dies (SIGKILL): its core, its executor and its store go; what it
        had sent is still delivered, then its connection closes. Its running job attempts are
        recorded lost on its disk."""
        node = self.nodes[name]
        assert node.alive, name
        for key, job in node.jobs.items():
            if job["started"] is not None:
                node.disk[key] = ops.AttemptEnded(key, "lost", None, WORKER_GONE, job["log"],
                                                  job["started"], self.now)
        self._exit(node, "connection reset by peer")
        node.previous_exit = "was killed by signal 9 (SIGKILL)"

    def restart(self, name: str) -> Node:
        """Its nanny starts the worker's next process (same name and address)."""
        node = self.nodes[name]
        assert not node.alive and not node.gone, name
        self._start(node)
        return node

    def drain_scheduler(self) -> None:
        """SIGTERM to the scheduler: its core refuses new work from now on."""
        self._scheduler_handle(sev.SchedulerDraining(now=self.now))

    def drain(self, name: str) -> None:
        """SIGTERM: the worker takes no new work, and leaves once idle and retired."""
        node = self.nodes[name]
        if node.alive and not node.draining:
            node.draining = True
            self._worker_handle(node, wev.DrainRequested())

    # -- the executor, as the test drives it ----------------------------------------------------

    def where(self, key: str) -> list[str]:
        """The workers executing ``key`` now (its StartTask given, its outcome not handed back)."""
        return [n.name for n in self.nodes.values() if n.alive and key in n.executing]

    def executing(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for node in self.nodes.values():
            if node.alive:
                for key in node.executing:
                    out.setdefault(key, []).append(node.name)
        return out

    def _executor(self, key: str, name: str | None) -> Node:
        names = [name] if name is not None else self.where(key)
        assert len(names) == 1, f"{key} executes on {names}: say which"
        node = self.nodes[names[0]]
        assert node.alive and key in node.executing, (key, node)
        return node

    def finish(self, key: str, value: Any = None, nbytes: int = 8, name: str | None = None) -> None:
        """The task ``key`` returns ``value`` (on ``name``, if it runs on several)."""
        node = self._executor(key, name)
        _, started = node.executing.pop(key)
        node.store[key] = (value, nbytes)
        self._worker_handle(node, wev.RunFinished(key, nbytes, started, self.now))

    def err(self, key: str, text: str = "Traceback: boom", name: str | None = None) -> None:
        """The task ``key`` raises."""
        node = self._executor(key, name)
        _, started = node.executing.pop(key)
        self._worker_handle(node, wev.RunErred(key, b"pickled exception", text, started,
                                                self.now))

    def running_jobs(self) -> dict[str, str]:
        """Job attempts whose supervisor started them and that have not ended: key -> worker."""
        return {key: n.name for n in self.nodes.values() if n.alive
                for key, job in n.jobs.items() if job["started"] is not None}

    def end_job(self, key: str, outcome: str = "completed", exit_code: int | None = 0) -> None:
        """The running attempt ``key`` exits (its supervisor records and reports how)."""
        [name] = [n for k, n in self.running_jobs().items() if k == key] or [None]
        assert name is not None, f"{key} is not running"
        node = self.nodes[name]
        self._job_ended(node, key, outcome, exit_code, "" if outcome == "completed" else outcome)

    # -- time and the queue -------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass: heartbeats go out, the scheduler ticks, and
        job supervisors kill the attempts whose lease passed. Nothing is delivered."""
        end = self.now + seconds
        while min(self._next_beat, self._next_tick) <= end:
            self.now = min(self._next_beat, self._next_tick)
            if self._next_beat <= self.now:
                self._next_beat += self.heartbeat_interval
                for node in self.nodes.values():
                    if node.alive and node.registered:
                        self._send(node.link, True, ops.Heartbeat(
                            executing=node.spec.nthreads - node.state.free_threads,
                            sent=self.now))
            if self._next_tick <= self.now:
                self._next_tick += self.tick_interval
                self._scheduler_handle(sev.Tick(now=self.now))
            self._expire_leases()
        self.now = end
        self._expire_leases()

    def ready(self, in_order: bool = True) -> list[int]:
        """Indices in ``queue`` of what can be done now: messages not held by a partition
        (only the first of each connection and direction, when ``in_order``), and chores."""
        out, seen = [], set()
        for i, item in enumerate(self.queue):
            if isinstance(item, Message):
                node = self.nodes.get(item.link.peer) if item.link.kind == "worker" else None
                if node is not None and node.cut:
                    continue
                lane = (item.link.id, item.up)
                if in_order and lane in seen:
                    continue
                seen.add(lane)
            elif item.what == "reconnect" and self.nodes[item.where].cut:
                continue
            out.append(i)
        return out

    def step(self, choice: int = 0, in_order: bool = True) -> bool:
        """Do the ``choice``-th thing of ``ready()`` (modulo their number); False if none."""
        ready = self.ready(in_order)
        if not ready:
            return False
        item = self.queue.pop(ready[choice % len(ready)])
        if isinstance(item, Message):
            self._deliver(item)
        else:
            self._chore(item)
        self._drained()
        return True

    def settle(self, limit: int = 100_000) -> int:
        """Deliver and do everything that can be, in order, until nothing is left; how many."""
        for count in itertools.count():
            if not self.step():
                return count
            assert count < limit, "the cluster does not settle: " + repr(self.queue[:10])
        raise AssertionError  # unreachable

    def drop(self, index: int) -> Message | Chore:
        """Lose the ``index``-th item of the queue."""
        return self.queue.pop(index)

    def duplicate(self, index: int) -> None:
        """Deliver the ``index``-th message twice (the copy right behind it)."""
        item = self.queue[index]
        assert isinstance(item, Message)
        self.queue.insert(index + 1, Message(item.link, item.up, item.body, item.fin,
                                             item.reason))

    def in_flight(self, link: Link | None, up: bool) -> list:
        """The ops on their way along ``link`` (up or down), in order."""
        return [m.op() for m in self.queue
                if isinstance(m, Message) and m.link is link and m.up is up and not m.fin]

    def run_to_end(self, value: Any = None, rounds: int = 200, step: float = 1.0) -> None:
        """Settle; finish every task executing and complete every job running; let time pass;
        again, until nothing runs, nothing is in flight and nothing is left to compute.
        ``check()`` after each round."""
        for _ in range(rounds):
            self.settle()
            self.check()
            for key, names in self.executing().items():
                for name in names:
                    self.finish(key, value, name=name)
            for key in self.running_jobs():
                self.end_job(key)
            self.settle()
            if not self.executing() and not self.running_jobs() and not self._active():
                return
            self.advance(step)
        raise AssertionError(f"still active after {rounds} rounds: {self._active()}")

    def _active(self) -> list[str]:
        """Tasks the scheduler has waiting, queued or processing, and jobs not ended."""
        tasks = [k for k, t in self.scheduler.tasks.items()
                 if t.state in (QUEUED, PROCESSING, WAITING)]
        jobs = [str(i) for i, j in self.scheduler.jobs.jobs.items() if not j.ended]
        return tasks + jobs

    # -- the checks ------------------------------------------------------------------------------

    def check(self) -> None:
        """Every invariant of every core (``validate()``), and the checks across them: each
        worker's executor and job supervisors run exactly what its core says runs, within its
        threads and resources; and the seam (``_check_seam``)."""
        self.scheduler.validate()
        for node in self.nodes.values():
            if not node.alive:
                continue
            state = node.state
            state.validate()
            running = {k for k, t in state.tasks.items() if t.state in RUNNING and t.job is None}
            # The executor runs exactly what the core says runs, within the worker's threads and
            # resources (jobs' supervisors likewise).
            assert set(node.executing) == running, (node, set(node.executing), running)
            assert set(node.jobs) == set(state.attempts.running), (node, node.jobs)
            assert len(node.executing) + len(node.jobs) <= node.spec.nthreads, node
            used = sum((start.resources for start, _ in node.executing.values()), EMPTY)
            assert used.fits(node.resources), (node, used)
            self._check_seam(node)

    def _check_seam(self, node: Node) -> None:
        """Every task the scheduler believes is processing on a connected worker is known
        to that worker, or on its way to it (Execute), or its end is on its way back; and that
        worker is not stopping it (``Diverged``)."""
        link = node.link
        w = self.scheduler.workers.get(node.address)
        if (w is None or link is None or not node.registered
                or self._worker_links.get(node.address) is not link
                or not (link.scheduler_open and link.peer_open)
                or any(isinstance(m, Message) and m.link is link and m.fin for m in self.queue)):
            return  # not connected, or the end of the connection is on its way to one end
        state = node.state
        down = {op.key for op in self.in_flight(link, False) if type(op) is ops.Execute}
        up = {op.key for op in self.in_flight(link, True) if hasattr(op, "key")}
        up |= {op.key for op in map(decode, node.unsent) if hasattr(op, "key")}
        for key in w.processing:
            task = state.tasks.get(key)
            # Stopping it for its user (not for a shutdown: that comes back as a refusal): the
            # worker will say it stopped, which ends nothing where the scheduler has it running.
            if task is not None and task.job is None and task.state is WorkerTaskState.CANCELLING \
                    and task.stopped_for == wact.CANCEL and key not in down:
                raise Diverged(f"the scheduler has {key} processing on {node.name}, which is "
                               "cancelling it")
            assert (key in state.tasks or key in state.attempts.running
                    or key in state.attempts.kept or key in down or key in up), (
                f"the scheduler has {key} processing on {node.name}, which does not know it")

    # -- the wire ----------------------------------------------------------------------------

    def _send(self, link: Link | None, up: bool, op: Any) -> None:
        assert link is not None
        self.queue.append(Message(link, up, encode(op)))

    def _close(self, link: Link, up: bool, reason: str) -> None:
        """The end that sends ``up`` (the peer's) or down (the scheduler's) closes ``link``."""
        if up and link.peer_open:
            link.peer_open = False
        elif not up and link.scheduler_open:
            link.scheduler_open = False
        else:
            return
        self.queue.append(Message(link, up, fin=True, reason=reason))

    def _deliver(self, m: Message) -> None:
        link = m.link
        if m.up:
            if not link.scheduler_open:
                return  # the scheduler closed its end: lost
            if link.kind == "client":
                self._to_scheduler_from_client(link, m)
            else:
                self._to_scheduler_from_worker(link, m)
        else:
            if not link.peer_open:
                return
            if link.kind == "client":
                client = next(c for c in self.clients if c.link is link)
                if m.fin:
                    link.peer_open = False
                    return
                op = m.op()
                if type(op) is ops.Welcome:
                    client.name = op.client
                client.received.append(op)
            else:
                self._to_worker(self.nodes[link.peer], link, m)

    def _chore(self, chore: Chore) -> None:
        if not chore.where:
            what, link, reason = chore.what, *chore.args
            assert what == "left"
            self._worker_link_ended(link, reason, expected=False)
            return
        node = self.nodes[chore.where]
        if not node.alive:
            return
        getattr(self, f"_chore_{chore.what}")(node, *chore.args)

    # -- the scheduler's shell ---------------------------------------------------------------

    def _scheduler_handle(self, event: Any) -> None:
        actions = self.scheduler.handle(event)
        if self.validate:
            self.scheduler.validate()
        for action in actions:
            self._scheduler_carry_out(action)

    def _scheduler_carry_out(self, action: Any) -> None:
        kind = type(action)
        make = TO_WORKER.get(kind)
        if make is not None:
            link = self._worker_links.get(action.worker)
            if link is not None and link.scheduler_open:
                self._send(link, False, make(action))
            return
        make = TO_CLIENTS.get(kind)
        if make is not None:
            op = make(action)
            clients = action.clients if kind is not sact.TellWaiting else (action.client,)
            for client in clients:
                link = self._client_links.get(client)
                if link is not None and link.scheduler_open:
                    self._send(link, False, op)
        elif kind is sact.Refused:
            link = self._client_links.get(action.client)
            if link is not None and link.scheduler_open:
                self._send(link, False, ops.Error(reason=action.reason, id=action.request,
                                                  keys=action.keys))
        elif kind is sact.JobsReply:
            link = self._client_links.get(action.client)
            if link is not None and link.scheduler_open:
                self._send(link, False, ops.Error(reason=action.error, id=action.request)
                           if action.error else ops.Reply(id=action.request, value=action.value))
        elif kind is sact.JournalWrite:
            self.journal.update((row["id"], dict(row)) for row in action.rows)
        elif kind is sact.LogLine:
            self.logs.append(action)
        elif kind is sact.CloseWorker:
            link = self._worker_links.get(action.worker)
            if link is not None:
                self._scheduler_closes(link, f"refused: {action.reason}" if action.refused
                                       else action.reason)
        else:
            raise TypeError(f"unknown scheduler action {action!r}")

    def _scheduler_closes(self, link: Link, reason: str) -> None:
        """The shell closes a worker's connection; its serving loop ends soon after."""
        self._close(link, False, reason)
        self.queue.append(Chore("", "left", (link, reason)))

    def _worker_link_ended(self, link: Link, reason: str, expected: bool) -> None:
        """``_serve_worker``'s ``finally``: WorkerLeft if it is still the worker's connection."""
        if link.address and self._worker_links.get(link.address) is link:
            del self._worker_links[link.address]
            self._scheduler_handle(sev.WorkerLeft(address=link.address, reason=reason,
                                                  expected=expected, now=self.now))

    def _to_scheduler_from_worker(self, link: Link, m: Message) -> None:
        if m.fin:
            link.scheduler_open = False
            self._worker_link_ended(link, m.reason, expected=False)
            return
        try:
            op = m.op()
            if not link.address:  # the first op of a connection
                if type(op) is not ops.Register:
                    raise ops.BadOp(f"a worker's first op must be register, not {op.OP}")
                self._register(link, op)
                return
            if type(op) is ops.Unregister:
                link.scheduler_open = False
                self._worker_link_ended(link, op.reason, expected=True)
                self.queue.append(Message(link, False, fin=True, reason="goodbye"))
                return
            make = WORKER_OPS.get(type(op))
            if make is None:
                raise ops.BadOp(f"{op.OP} is not an op a registered worker sends")
        except ops.BadOp as error:  # that worker goes, the scheduler goes on
            self._scheduler_closes(link, f"protocol error: {error}")
            return
        self._scheduler_handle(make(op, link.address, self.now))

    def _register(self, link: Link, op: ops.Register) -> None:
        address = link.address = op.address
        old = self._worker_links.pop(address, None)
        if old is not None:  # the same worker again: the new connection replaces the old one
            self._scheduler_closes(old, "the worker registered again")
        self._worker_links[address] = link
        self._scheduler_handle(joined(op, self.now))  # WorkerAccepted: Registered, first

    def _to_scheduler_from_client(self, link: Link, m: Message) -> None:
        cid = next((c for c, lk in self._client_links.items() if lk is link), None)
        if cid is None:
            return
        if m.fin:
            link.scheduler_open = False
            del self._client_links[cid]
            self._scheduler_handle(sev.ClientDisconnected(client=cid, now=self.now))
            return
        op = m.op()
        kind = type(op)
        make = CLIENT_OPS.get(kind)
        if make is not None:
            self._scheduler_handle(make(op, cid, self.now))
        elif kind is ops.SubmitJobs:  # the journal (emulated) is there, and never draining
            specs = tuple(JobSpec.from_wire(job) for job in op.jobs)
            self._scheduler_handle(sev.JobsSubmitted(client=cid, request=op.id, jobs=specs,
                                                     at=1_700_000_000 + self.now, now=self.now))
        elif kind is ops.QueryJobs:
            view = jobs_view(self.scheduler, op.jobs, op.states, op.offset, op.limit)
            self._send(link, False, ops.Reply(id=op.id, value=view))
        elif kind is ops.Info:
            self._send(link, False, ops.Reply(id=op.id, value={
                "workers": worker_info(self.scheduler), "tasks": task_counts(self.scheduler)}))
        elif kind is ops.WhoHas:
            self._send(link, False, ops.Reply(id=op.id, value=who_has(self.scheduler, op.keys)))
        else:
            raise AssertionError(f"{op.OP} is not an op a client sends")

    # -- the worker's shell ---------------------------------------------------------------------

    def _start(self, node: Node) -> None:
        spec = node.spec
        node.state = WorkerState(spec.nthreads, node.resources, gpus=spec.gpus,
                                 address=node.address, policy=self.worker_policy)
        node.alive, node.processes = True, node.processes + 1
        node.link, node.registered, node.unsent = None, False, []
        node.executing, node.store, node.jobs = {}, {}, {}
        node.lease_until, node.draining, node.retired = 0.0, False, False
        ended = tuple(e for e in node.disk.values() if e is not None)
        self._worker_handle(node, wev.AttemptsRecovered(ended))
        self._connect(node)

    def _exit(self, node: Node, reason: str) -> None:
        """The worker process is gone: its connection closes, its chores die with it."""
        node.alive = False
        node.state = None
        node.executing, node.jobs, node.store, node.unsent = {}, {}, {}, []
        self.queue = [c for c in self.queue if not (isinstance(c, Chore) and c.where == node.name)]
        if node.link is not None:
            self._close(node.link, True, reason)
        node.link, node.registered = None, False

    def _connect(self, node: Node) -> None:
        """``SchedulerSession._serve``: a new connection, and the register op first."""
        if not node.alive or node.gone:
            return
        if node.cut:  # it cannot connect now: it tries again (after the partition heals)
            self.queue.append(Chore(node.name, "reconnect"))
            return
        node.link = Link(next(self._links), "worker", node.name)
        node.registered = False
        node.register_sent = self.now
        snapshot = node.state.snapshot()
        previous_exit, node.previous_exit = node.previous_exit, None
        self._send(node.link, True, ops.Register(
            name=node.name, address=node.address, nthreads=node.spec.nthreads,
            resources=node.resources, gpus=(), pid=next(self._pids), host="memcluster",
            held=dict(snapshot.results), running=tuple(t.key for t in snapshot.running),
            running_gpus={t.key: list(t.gpus) for t in snapshot.running if t.gpus},
            previous_exit=previous_exit,
            attempts=tuple(attempt.to_wire() for attempt in snapshot.attempts),
            job_lease=self.worker_policy.job_lease, containment="subreaper",
            devices=node.state.ledger.devices))

    def _to_worker(self, node: Node, link: Link, m: Message) -> None:
        if not node.alive or node.link is not link:
            return  # a connection that process no longer reads
        if m.fin:
            link.peer_open = False
            self._session_ended(node, m.reason)
            return
        try:
            op = m.op()
            if not node.registered:
                if type(op) is not ops.Registered:
                    return self._session_ended(node, f"refused: unexpected reply {op.OP}",
                                               close=True)
                node.registered = True
                unsent, node.unsent = node.unsent, []
                for body in unsent:
                    self.queue.append(Message(link, True, body))
                self._worker_handle(node, wev.SessionOpened(node.register_sent))
                return
            kind = type(op)
            if kind in _TO_STATE:
                self._worker_handle(node, op)
            elif kind is ops.Retire:
                node.retired = True
            else:
                raise ops.BadOp(f"{op.OP} is not an op the scheduler sends a worker")
        except ops.BadOp as error:  # logged; that connection closes and it connects again
            self._session_ended(node, f"protocol error: {error}", close=True)

    def _session_ended(self, node: Node, reason: str, close: bool = False) -> None:
        link = node.link
        if close and link is not None:
            self._close(link, True, reason)
        was_registered = node.registered
        node.link, node.registered = None, False
        if was_registered:
            self._worker_handle(node, wev.SessionLost())
        if reason.startswith("refused"):  # final: the worker stops, and says why
            node.refusal = reason
            node.gone = True
            self._exit(node, reason)
        elif not node.gone:
            self.queue.append(Chore(node.name, "reconnect"))

    def _drained(self) -> None:
        """``Worker._drain``: a draining worker that is idle, and retired or not connected,
        says goodbye and stops."""
        for node in self.nodes.values():
            if (node.alive and node.draining and node.state.is_idle()
                    and (node.retired or not node.registered)):
                if node.registered and node.link.peer_open:
                    self._send(node.link, True, ops.Unregister(reason="worker drained"))
                node.gone = True
                self._exit(node, "worker drained")

    def _worker_handle(self, node: Node, event: Any) -> None:
        actions = node.state.handle(event, self.now)
        if self.validate:
            node.state.validate()
        for action in actions:
            kind = type(action)
            if kind is wact.StartTask:
                assert action.key not in node.executing, (node, action)
                node.executing[action.key] = (action, self.now)
            elif kind is wact.FetchDependency:
                self.queue.append(Chore(node.name, "fetch", (action,)))
            elif kind is wact.KillTask:
                start = node.executing.get(action.key)
                if start is not None and start[0].where != wact.THREAD:
                    self.queue.append(Chore(node.name, "kill", (action.key,)))
            elif kind is wact.ReleaseResult:
                node.store.pop(action.key, None)
            elif kind is wact.StartJob:
                node.lease_until = max(node.lease_until, action.lease_until)
                node.jobs[action.key] = {"started": None, "order": None, "log": "",
                                         "gpus": action.gpus}
                self.queue.append(Chore(node.name, "spawn", (action.key,)))
            elif kind is wact.ExtendLease:
                node.lease_until = max(node.lease_until, action.until)
            elif kind is wact.KillJob:
                self.queue.append(Chore(node.name, "kill_job", (action.key, action.why)))
            elif kind is wact.ForgetAttempt:
                node.disk.pop(action.key, None)
            elif kind is wact.EndUnstartedJob:
                ended = ops.AttemptEnded(action.key, action.outcome, None, action.error,
                                         started=None, ended=self.now)
                self.queue.append(Chore(node.name, "event", (ended,)))
            elif isinstance(action, REPORTS):  # ``SchedulerSession.send``
                if node.registered and node.link.peer_open:
                    self._send(node.link, True, action)
                else:
                    node.unsent.append(encode(action))
            else:
                raise TypeError(f"unknown worker action {action!r}")

    # -- the worker shell's chores --------------------------------------------------------------

    def _chore_reconnect(self, node: Node) -> None:
        if node.link is None:
            self._connect(node)

    def _chore_event(self, node: Node, event: Any) -> None:
        self._worker_handle(node, event)

    def _chore_fetch(self, node: Node, fetch: wact.FetchDependency) -> None:
        peer = self.by_address(fetch.worker)
        if peer is None or not peer.alive or peer.cut or node.cut:
            why = f"cannot reach {fetch.worker}"
            self._worker_handle(node, wev.DependencyFetchFailed(fetch.key, fetch.worker, why))
        elif fetch.key not in peer.store:
            why = f"{fetch.worker} does not hold it"
            self._worker_handle(node, wev.DependencyFetchFailed(fetch.key, fetch.worker, why))
        else:
            node.store[fetch.key] = peer.store[fetch.key]
            self._worker_handle(node, wev.DependencyFetched(fetch.key, peer.store[fetch.key][1],
                                                            fetch.worker))

    def _chore_kill(self, node: Node, key: str) -> None:
        if key in node.executing:  # the GPU process is killed (not if it finished first)
            del node.executing[key]
            self._worker_handle(node, wev.RunStopped(key, "killed by signal 9 (SIGKILL)"))

    def _chore_spawn(self, node: Node, key: str) -> None:
        """``JobRunner.run``: record the attempt, start its supervisor; it may end at once."""
        job = node.jobs.get(key)
        if job is None:
            return
        order = job["order"] or ("lease" if self.now >= node.lease_until else None)
        if order is not None:  # told to stop before it started, or its lease is over already
            outcome, error = {"cancel": ("cancelled", "cancelled before it started"),
                              "shutdown": ("lost", "not started: its worker shut down"),
                              "lease": ("lost", "not started: its worker had lost the "
                                                "scheduler for longer than its job lease")}[order]
            del node.jobs[key]
            ended = ops.AttemptEnded(key, outcome, None, error, f"/jobs/{key}.log", None, self.now)
            node.disk[key] = ended
            self._worker_handle(node, ended)
            return
        job["started"], job["log"] = self.now, f"/jobs/{key}.log"
        node.disk[key] = None
        self._worker_handle(node, ops.AttemptStarted(key, next(self._pids), job["log"],
                                                     job["gpus"], self.now))

    def _chore_kill_job(self, node: Node, key: str, why: str) -> None:
        job = node.jobs.get(key)
        if job is None:
            return
        if job["started"] is None:
            job["order"] = "shutdown" if why == wact.SHUTDOWN else "cancel"
            return
        if why == wact.SHUTDOWN:
            self._job_ended(node, key, "lost", None, "killed because its worker shut down")
        else:
            self._job_ended(node, key, "cancelled", None, "cancelled")

    def _job_ended(self, node: Node, key: str, outcome: str, exit_code: int | None,
                   error: str) -> None:
        job = node.jobs.pop(key)
        ended = ops.AttemptEnded(key, outcome, exit_code, error, job["log"], job["started"],
                                 self.now)
        node.disk[key] = ended
        self._worker_handle(node, ended)

    def _expire_leases(self) -> None:
        """Each supervisor kills its job once the lease passes unrenewed."""
        for node in self.nodes.values():
            if node.alive and self.now >= node.lease_until:
                for key in [k for k, j in node.jobs.items() if j["started"] is not None]:
                    self._job_ended(node, key, "lost", None, LEASE_EXPIRED)

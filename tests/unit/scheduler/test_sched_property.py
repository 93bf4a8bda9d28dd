"""Property tests of SchedulerState: random joins, leaves, drains, submits (with
dependencies), completions, failures, refusals, missing inputs, cancels and releases keep every
invariant after every step; no client is told twice how a task ended, nor told of a cancel it
did not ask for; and once all work drains, every task still wanted has ended, reported exactly
once to each client that wants it."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from dsched.policy import SchedulerPolicy
from dsched.resources import Resources
from dsched.scheduler import SchedulerState, actions as act, events as ev

DEMANDS = [None, None, "GPU=1", "GPU=0.5", "GPU=2", "MEMORY=4", "GPU=1 MEMORY=2", "ACCEL=1"]
OFFERS = [None, "GPU=1", "GPU=2", "MEMORY=8", "GPU=2 MEMORY=8"]
CLIENTS = ["c1", "c2"]


class SchedulerMachine(RuleBasedStateMachine):
    options: dict = {"allowed_failures": 1, "no_worker_timeout": 30}

    def __init__(self):
        super().__init__()
        self.state = SchedulerState(SchedulerPolicy(**self.options))
        self.now = 0.0
        self.count = 0
        self.workers: list[str] = []
        self.keys: list[str] = []
        self.running: dict[tuple[str, str], float] = {}
        self.stopping: set[tuple[str, str]] = set()
        self.replicating: set[tuple[str, str]] = set()
        self.retired: set[str] = set()
        self.cancellers: set[str] = set()
        self.ends: dict[tuple[str, str], list[str]] = {}

    # -- plumbing -----------------------------------------------------------------------------

    def apply(self, event) -> None:
        actions = self.state.handle(event)
        self.state.validate()
        closed = []
        for a in actions:
            if isinstance(a, act.SendExecute):
                assert (a.worker, a.key) not in self.running, a
                self.running[(a.worker, a.key)] = self.now
            elif isinstance(a, act.SendStopTask):
                del self.running[(a.worker, a.key)]
                self.stopping.add((a.worker, a.key))
            elif isinstance(a, act.TellMoved) and not a.who_has:  # lost: a new end comes
                for client in a.clients:
                    assert self.ends.pop((a.key, client)) == ["TellFinished"], (a, client)
            elif isinstance(a, (act.TellFinished, act.TellErred, act.TellCancelled)):
                for client in a.clients:
                    ends = self.ends.setdefault((a.key, client), [])
                    ends.append(type(a).__name__)
                    assert len(ends) == 1, (a.key, client, ends)
                    if isinstance(a, act.TellCancelled):
                        assert client in self.cancellers, (a, "a cancel nobody asked for")
            elif isinstance(a, act.SendReplicate):
                self.replicating.add((a.worker, a.key))
            elif isinstance(a, act.SendRetire):
                self.retired.add(a.worker)
            elif isinstance(a, act.CloseWorker):
                closed.append(a.worker)
        for address in closed:
            self.forget_worker(address)

    def forget_worker(self, address: str) -> None:
        if address in self.workers:
            self.workers.remove(address)
        for k in [k for k in self.running if k[0] == address]:
            del self.running[k]
        self.stopping = {k for k in self.stopping if k[0] != address}
        self.replicating = {k for k in self.replicating if k[0] != address}
        self.retired.discard(address)

    # -- rules --------------------------------------------------------------------------------

    @precondition(lambda self: len(self.workers) < 5)
    @rule(nthreads=st.integers(1, 3), offer=st.sampled_from(OFFERS))
    def join(self, nthreads, offer):
        self.count += 1
        address = f"tcp://w{self.count}"
        self.workers.append(address)
        self.apply(ev.WorkerJoined(address=address, name=f"w{self.count}", nthreads=nthreads,
                                resources=Resources.parse(offer), now=self.now))

    @precondition(lambda self: self.workers)
    @rule(data=st.data())
    def leave(self, data):
        address = data.draw(st.sampled_from(self.workers))
        self.forget_worker(address)
        self.apply(ev.WorkerLeft(address=address, now=self.now))

    @precondition(lambda self: len(self.keys) < 40)
    @rule(data=st.data(), n=st.integers(1, 4), client=st.sampled_from(CLIENTS))
    def submit(self, data, n, client):
        specs = []
        for _ in range(n):
            self.count += 1
            key = f"k{self.count}"
            known = self.keys + [s.key for s in specs]
            deps = data.draw(st.lists(st.sampled_from(known), max_size=2, unique=True)
                             if known else st.just([]))
            restrict = data.draw(st.sampled_from([None, None, None, ("w1",), ("w2", "w9")]))
            specs.append(ev.TaskSpec(
                key=key, dependencies=tuple(deps),
                resources=Resources.parse(data.draw(st.sampled_from(DEMANDS))),
                priority=data.draw(st.integers(0, 2)), retries=data.draw(st.integers(0, 1)),
                workers=restrict, prefix=data.draw(st.sampled_from(["p0", "p1", "p2"])),
                wanted=data.draw(st.booleans()) or not deps,
            ))
        self.keys += [s.key for s in specs]
        self.apply(ev.TasksSubmitted(client=client, tasks=tuple(specs), now=self.now))

    @precondition(lambda self: self.running)
    @rule(data=st.data(), nbytes=st.integers(0, 1000), duration=st.floats(0, 5))
    def finish(self, data, nbytes, duration):
        worker, key = data.draw(st.sampled_from(sorted(self.running)))
        del self.running[(worker, key)]
        self.apply(ev.WorkerTaskFinished(key=key, worker=worker, nbytes=nbytes, start=0.0,
                                stop=duration, now=self.now))

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def fail(self, data):
        worker, key = data.draw(st.sampled_from(sorted(self.running)))
        del self.running[(worker, key)]
        self.apply(ev.WorkerTaskErred(key=key, worker=worker, exception=b"x", text="boom", now=self.now))

    @precondition(lambda self: self.running and len(self.workers) > 1)
    @rule(data=st.data())
    def stray_report(self, data):
        worker, key = data.draw(st.sampled_from(sorted(self.running)))
        other = data.draw(st.sampled_from([w for w in self.workers if w != worker]))
        if (other, key) not in self.running and (other, key) not in self.stopping:
            self.apply(ev.WorkerTaskFinished(key=key, worker=other, now=self.now))

    @precondition(lambda self: self.stopping)
    @rule(data=st.data())
    def confirm(self, data):
        worker, key = data.draw(st.sampled_from(sorted(self.stopping)))
        self.stopping.discard((worker, key))
        self.apply(ev.WorkerTaskStopped(key=key, worker=worker, now=self.now))

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def refuse(self, data):
        worker, key = data.draw(st.sampled_from(sorted(self.running)))
        del self.running[(worker, key)]
        self.apply(ev.WorkerTaskRejected(key=key, worker=worker, reason="no", now=self.now))

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def missing_input(self, data):
        worker, key = data.draw(st.sampled_from(sorted(self.running)))
        deps = self.state.tasks[key].dependencies
        if deps:
            del self.running[(worker, key)]
            dep = data.draw(st.sampled_from(deps))
            holders = tuple(self.state.tasks[dep].who_has or ())
            self.apply(ev.WorkerMissingData(key=key, worker=worker, dependency=dep, tried=holders,
                                   now=self.now))

    @precondition(lambda self: self.workers)
    @rule(data=st.data())
    def drain(self, data):
        self.apply(ev.WorkerDraining(address=data.draw(st.sampled_from(self.workers)),
                                  now=self.now))

    @precondition(lambda self: self.replicating)
    @rule(data=st.data(), ok=st.booleans())
    def replicated(self, data, ok):
        worker, key = data.draw(st.sampled_from(sorted(self.replicating)))
        self.replicating.discard((worker, key))
        event = (ev.WorkerReplicated(key=key, worker=worker, now=self.now) if ok
                 else ev.WorkerReplicateFailed(key=key, worker=worker, now=self.now))
        self.apply(event)

    @precondition(lambda self: self.retired)
    @rule(data=st.data())
    def retired_leaves(self, data):
        address = data.draw(st.sampled_from(sorted(self.retired)))
        self.forget_worker(address)
        self.apply(ev.WorkerLeft(address=address, expected=True, now=self.now))

    @precondition(lambda self: self.keys)
    @rule(data=st.data(), client=st.sampled_from(CLIENTS))
    def cancel(self, data, client):
        key = data.draw(st.sampled_from(self.keys))
        self.cancellers.add(client)
        self.apply(ev.CancelRequested(client=client, keys=(key,), now=self.now))

    @precondition(lambda self: self.keys)
    @rule(data=st.data(), client=st.sampled_from(CLIENTS))
    def release(self, data, client):
        key = data.draw(st.sampled_from(self.keys))
        self.apply(ev.KeysReleased(client=client, keys=(key,), now=self.now))

    @rule(client=st.sampled_from(CLIENTS))
    def disconnect(self, client):
        self.apply(ev.ClientDisconnected(client=client, now=self.now))

    @precondition(lambda self: self.workers)
    @rule(data=st.data())
    def heartbeat(self, data):
        address = data.draw(st.sampled_from(self.workers))
        self.apply(ev.WorkerHeartbeat(address=address, now=self.now))

    @rule(dt=st.floats(0, 20))
    def tick(self, dt):
        self.now += dt
        self.apply(ev.Tick(now=self.now))

    # -- once all work drains, every task has ended once ---------------------------------------

    def teardown(self):
        self.count += 1
        joined = False
        for _ in range(200):
            for worker, key in sorted(self.stopping):
                self.stopping.discard((worker, key))
                self.apply(ev.WorkerTaskStopped(key=key, worker=worker, now=self.now))
            for worker, key in sorted(self.running):
                if (worker, key) in self.running:
                    del self.running[(worker, key)]
                    self.apply(ev.WorkerTaskFinished(key=key, worker=worker, start=0, stop=1,
                                            now=self.now))
            for worker, key in sorted(self.replicating):
                self.replicating.discard((worker, key))
                self.apply(ev.WorkerReplicated(key=key, worker=worker, now=self.now))
            for address in sorted(self.retired):
                self.forget_worker(address)
                self.apply(ev.WorkerLeft(address=address, expected=True, now=self.now))
            if self.running or self.stopping or self.replicating or self.retired:
                continue
            if not joined:  # once every draining worker is gone, so "w1" may join
                joined = True
                self.apply(ev.WorkerJoined(address="tcp://big", name="w1", nthreads=64,
                                        resources=Resources.parse("GPU=64 MEMORY=64"),
                                        now=self.now))
                continue
            active = [t for t in self.state.tasks.values()
                      if t.state.value in ("waiting", "queued", "processing")]
            if not active:
                break
            self.now += 100
            self.apply(ev.Tick(now=self.now))
        assert not self.running and not self.stopping
        for key, t in self.state.tasks.items():
            for client in t.wanted_by:
                assert len(self.ends.get((key, client), ())) == 1, (key, client, self.ends)
        for w in self.state.workers.values():
            assert w.assigned == 0 and w.free == w.resources, w


class PrefetchHeartbeatMachine(SchedulerMachine):
    """The same story with prefetch slots and workers that time out without heartbeats."""

    options = {"allowed_failures": 2, "no_worker_timeout": 45, "prefetch": 1,
               "heartbeat_timeout": 25}


_settings = settings(max_examples=120, stateful_step_count=40, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])
SchedulerMachine.TestCase.settings = _settings
PrefetchHeartbeatMachine.TestCase.settings = _settings
TestSchedulerInvariants = SchedulerMachine.TestCase
TestSchedulerInvariantsWithPrefetchAndTimeouts = PrefetchHeartbeatMachine.TestCase

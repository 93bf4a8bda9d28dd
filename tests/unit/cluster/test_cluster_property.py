"""Random runs of the whole cluster in memory (``memcluster.py``): clients submit tasks with
random resources and dependencies and shell-command jobs, cancel and release them; tasks
finish or raise; workers are killed and restarted, cut off and healed, their connections
reset, drained; messages are delivered in order, interleaved across connections, duplicated;
time passes (heartbeats, timeouts, leases).

After every step every invariant of every core holds, and so do the checks across them
(``MemCluster.check``: the executor runs exactly what its core says, never more than its
threads or resources; every task the scheduler has processing on a connected worker is known
there or on its way), no client hears twice how a task ended, and no two attempts of a job
ever run at once. At the end, with every partition healed and every worker back, everything
runs to completion: each task a client still wants has ended, reported to it exactly once,
and every job has ended.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from memcluster import Message, MemCluster, WorkerSpec

from dsched.jobs import JobSpec, parse_job_key
from dsched.protocol import ops
from dsched.resources import Resources

WORKERS = [WorkerSpec("w1", 2), WorkerSpec("w2", 2, "GPU=2"), WorkerSpec("w3", 1, "GPU=1 MEM=8")]
NAMES = [w.name for w in WORKERS]
DEMANDS = [None, None, "GPU=1", "GPU=0.5", "GPU=2", "MEM=4", "GPU=1 MEM=4"]
CLIENTS = ["c1", "c2"]
ENDS = (ops.FutureFinished, ops.FutureErred, ops.FutureCancelled)
HANDSHAKE = (ops.Register, ops.Registered)


class ClusterMachine(RuleBasedStateMachine):
    options = dict(heartbeat_timeout=5, allowed_failures=2, no_worker_timeout=20, prefetch=1,
                   lease_margin=2.0, max_rejections=3)

    def __init__(self):
        super().__init__()
        self.cluster = MemCluster(*WORKERS, job_lease=6.0, **self.options)
        self.clients = {name: self.cluster.client(name) for name in CLIENTS}
        self.keys: dict[str, list[str]] = {name: [] for name in CLIENTS}
        self.dropped: dict[str, set[str]] = {name: set() for name in CLIENTS}  # cancelled, released
        self.count = 0
        self.seen: dict[str, int] = {name: 0 for name in CLIENTS}  # ops of each client read
        self.ends: Counter = Counter()  # (client, key) -> ends heard since it was last lost

    # -- clients ------------------------------------------------------------------------------

    @rule(client=st.sampled_from(CLIENTS), demand=st.sampled_from(DEMANDS),
          deps=st.lists(st.integers(0, 30), max_size=2), priority=st.integers(0, 2),
          retries=st.integers(0, 1))
    def submit(self, client, demand, deps, priority, retries):
        self.count += 1
        key = f"t{self.count}"
        mine = self.keys[client]
        dependencies = sorted({mine[i % len(mine)] for i in deps}) if mine else []
        self.clients[client].submit(key, demand, dependencies, priority=priority,
                                    retries=retries)
        mine.append(key)

    @precondition(lambda self: any(self.keys.values()))
    @rule(client=st.sampled_from(CLIENTS), index=st.integers(0, 100),
          cancel=st.booleans())
    def cancel_or_release(self, client, index, cancel):
        mine = self.keys[client]
        if not mine:
            return
        key = mine[index % len(mine)]
        (self.clients[client].cancel if cancel else self.clients[client].release)(key)
        self.dropped[client].add(key)

    @rule(demand=st.sampled_from([None, None, "GPU=1", "MEM=4"]), retries=st.integers(0, 1),
          requeue=st.booleans())
    def submit_job(self, demand, retries, requeue):
        self.count += 1
        self.clients["c1"].submit_jobs(JobSpec(submission=f"s{self.count}", command=("true",),
                                               resources=Resources.parse(demand), retries=retries,
                                               requeue=requeue))

    @precondition(lambda self: self.cluster.running_jobs())
    @rule(index=st.integers(0, 10), outcome=st.sampled_from(["completed", "failed"]))
    def end_job(self, index, outcome):
        running = sorted(self.cluster.running_jobs())
        self.cluster.end_job(running[index % len(running)], outcome,
                             0 if outcome == "completed" else 1)

    @precondition(lambda self: self.cluster.scheduler.jobs.jobs)
    @rule(index=st.integers(0, 10))
    def cancel_job(self, index):
        jobs = sorted(self.cluster.scheduler.jobs.jobs)
        self.clients["c1"].cancel_jobs(jobs[index % len(jobs)])

    # -- the executor ------------------------------------------------------------------------

    @precondition(lambda self: self.cluster.executing())
    @rule(index=st.integers(0, 20), fail=st.booleans())
    def end_task(self, index, fail):
        running = sorted((key, name) for key, names in self.cluster.executing().items()
                         for name in names)
        key, name = running[index % len(running)]
        if fail:
            self.cluster.err(key, name=name)
        else:
            self.cluster.finish(key, value=key, name=name)

    # -- the wire and the clock --------------------------------------------------------------

    @rule(n=st.integers(1, 12))
    def deliver(self, n):
        for _ in range(n):
            if not self.cluster.step():
                break

    @rule(choice=st.integers(0, 50))
    def deliver_out_of_turn(self, choice):
        """Any connection's next message (or any chore) first: the interleaving of different
        connections is never fixed."""
        self.cluster.step(choice)

    @rule()
    def settle(self):
        self.cluster.settle()

    @rule(choice=st.integers(0, 100))
    def duplicate(self, choice):
        """A worker's op or the scheduler's to a worker arrives twice (a client's would be
        a second request, which may well get a second answer)."""
        messages = [i for i, m in enumerate(self.cluster.queue) if isinstance(m, Message)
                    and m.link.kind == "worker" and not m.fin
                    and type(m.op()) not in HANDSHAKE]
        if messages:
            self.cluster.duplicate(messages[choice % len(messages)])

    @rule(seconds=st.sampled_from([0.5, 1.0, 3.0, 7.0]))
    def advance(self, seconds):
        self.cluster.advance(seconds)

    # -- the workers -----------------------------------------------------------------------------

    @rule(name=st.sampled_from(NAMES))
    def kill(self, name):
        if self.cluster.node(name).alive:
            self.cluster.kill(name)

    @rule(name=st.sampled_from(NAMES))
    def restart(self, name):
        node = self.cluster.node(name)
        if not node.alive and not node.gone:
            self.cluster.restart(name)

    @rule(name=st.sampled_from(NAMES))
    def partition(self, name):
        self.cluster.partition(name)

    @rule(name=st.sampled_from(NAMES))
    def heal(self, name):
        self.cluster.heal(name)

    @rule(name=st.sampled_from(NAMES))
    def reset(self, name):
        self.cluster.reset(name)

    @rule(name=st.sampled_from(NAMES))
    def drain(self, name):
        self.cluster.drain(name)

    # -- after every step ------------------------------------------------------------------

    @invariant()
    def every_invariant_holds(self):
        self.cluster.check()
        self._read_clients()
        running: dict[int, set[str]] = {}
        for key in self.cluster.running_jobs():
            job, _ = parse_job_key(key)
            running.setdefault(job, set()).add(key)
        for job, keys in running.items():
            assert len(keys) == 1, f"job {job} runs {sorted(keys)} at once"

    def _read_clients(self):
        """No client hears twice how a task ended (unless told its result was lost since)."""
        for name, client in self.clients.items():
            for op in client.received[self.seen[name]:]:
                if type(op) in ENDS:
                    self.ends[name, op.key] += 1
                    assert self.ends[name, op.key] == 1, (name, op)
                elif type(op) is ops.FutureMoved and not op.who_has:
                    self.ends[name, op.key] = 0
            self.seen[name] = len(client.received)

    def teardown(self):
        cluster = self.cluster
        for name, node in cluster.nodes.items():
            cluster.heal(name)
            if not node.alive and not node.gone:
                cluster.restart(name)
        # A worker that offers everything, so that no demand waits for one that drained away.
        cluster.add_worker(WorkerSpec("rescue", 2, "GPU=2 MEM=8"))
        cluster.run_to_end(value="end")
        self.every_invariant_holds()
        for key, t in cluster.scheduler.tasks.items():
            for client in t.wanted_by:
                name = client.rsplit("-", 1)[0]
                assert self.ends[name, key] == 1, (key, client, t.state)
        for name in CLIENTS:  # and nothing a client still waits for was lost on the way
            for key in set(self.keys[name]) - self.dropped[name]:
                assert self.ends[name, key] == 1, (name, key)
        assert all(job.ended for job in cluster.scheduler.jobs.jobs.values())


ClusterMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestCluster = ClusterMachine.TestCase

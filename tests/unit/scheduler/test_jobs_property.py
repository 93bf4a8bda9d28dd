"""Property test of jobs under faults: random submits (arrays among them), starts, ends,
cancels, workers leaving and coming back, time passing beyond leases, and scheduler restarts
from the rows the journal was given.

The workers are simulated truthfully (what they received, what runs, what ended and is not yet
acknowledged; a worker away for longer than its lease kills what it runs), and the scheduler
state is checked after every step: every invariant holds, no two attempts of a job ever run
at once, and a job that did not ask to be queued again never has a second attempt start."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine, initialize, invariant, precondition, rule,
)

from dsched.jobs import ArraySpec, JobSpec, parse_job_key
from dsched.policy import SchedulerPolicy
from dsched.protocol import ops
from dsched.resources import Resources
from dsched.scheduler import SchedulerState, actions as act, events as ev

WORKERS = ["w1", "w2"]
LEASE, MARGIN = 10.0, 2.0
OPTIONS = dict(lease_margin=MARGIN, recovery_timeout=5.0, max_rejections=2)


class SimWorker:
    """What one worker really has: attempts received (not started), running, ended."""

    def __init__(self, name: str):
        self.name = name
        self.connected = False
        self.away_since = 0.0
        self.received: dict[str, None] = {}
        self.running: dict[str, None] = {}
        self.ended: dict[str, str] = {}

    @property
    def address(self) -> str:
        return f"tcp://{self.name}"


class JobsMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.state = SchedulerState(SchedulerPolicy(**OPTIONS))
        self.now = 0.0
        self.submitted = 0
        self.workers = {name: SimWorker(name) for name in WORKERS}
        self.started: dict[int, set[int]] = {}  # job -> attempts that ever started
        self.failures: dict[int, int] = {}  # job -> attempts that failed (retried, maybe)
        self.eager = True
        self.rows: dict[int, dict] = {}  # what the journal holds: the rows it was given

    @initialize(eager=st.booleans(), connected=st.sampled_from([(), ("w1",), WORKERS]))
    def workers_start_at_once(self, eager, connected):
        """Eager workers start what they receive at once (fewer steps to reach a fault);
        others wait for the ``start`` rule. Some workers are there from the start."""
        self.eager = eager
        for name in connected:
            self.join(self.workers[name])

    # -- plumbing -----------------------------------------------------------------------------

    def apply(self, event) -> None:
        actions = self.state.handle(event)
        self.state.validate()
        for a in actions:
            if isinstance(a, act.JournalWrite):
                self.rows.update((row["id"], row) for row in a.rows)
            w = self.workers.get(getattr(a, "worker", "").removeprefix("tcp://"))
            if isinstance(a, act.SendExecute) and a.job is not None:
                assert w is not None and w.connected, a
                assert a.key not in w.received and a.key not in w.running, a
                w.received[a.key] = None
            elif isinstance(a, act.SendStopTask) and w is not None and w.connected:
                if a.key in w.received:
                    del w.received[a.key]
                    self.later.append(ev.WorkerTaskStopped(key=a.key, worker=w.address, now=self.now))
                elif a.key in w.running:
                    self._end(w, a.key, "cancelled")
            elif isinstance(a, act.SendAttemptAck) and w is not None:
                for key in a.keys:
                    w.ended.pop(key, None)
            elif isinstance(a, act.JobsReply):
                assert not a.error, a.error

    def send(self, event) -> None:
        self.later = []
        self.apply(event)
        while True:
            if self.eager:
                for w in self.workers.values():
                    for key in list(w.received):
                        self._start(w, key)
            if not self.later:
                break
            later, self.later = self.later, []
            for e in later:
                self.apply(e)

    def _start(self, w: SimWorker, key: str) -> None:
        del w.received[key]
        w.running[key] = None
        job, attempt = parse_job_key(key)
        attempts = self.started.setdefault(job, set())
        attempts.add(attempt)
        # Each start after the first must follow a failure the job retries; else only a job
        # that asked to be queued again may start again.
        allowed = 1 + self.failures.get(job, 0)
        assert self.state.jobs.jobs[job].spec.requeue or len(attempts) <= allowed, (
            f"job {job} started again: attempts {sorted(attempts)}")
        self.later.append(ev.WorkerAttemptStarted(worker=w.address, now=self.now,
                                            report=ops.AttemptStarted(key=key, pid=1, log="l")))

    def _end(self, w: SimWorker, key: str, outcome: str) -> None:
        del w.running[key]
        w.ended[key] = outcome
        if outcome == "failed":
            job = parse_job_key(key)[0]
            self.failures[job] = self.failures.get(job, 0) + 1
        if w.connected:
            self.later.append(ev.WorkerAttemptEnded(worker=w.address, now=self.now, report=ops.AttemptEnded(
                key=key, outcome=outcome, exit_code=0 if outcome == "completed" else 1,
                started=1.0, ended=2.0)))

    def join(self, w: SimWorker) -> None:
        w.connected = True
        attempts = [ops.AttemptStarted(key=k, pid=1, log="l").to_wire() for k in w.running]
        attempts += [ops.AttemptEnded(key=k, outcome=o).to_wire() for k, o in w.ended.items()]
        self.send(ev.WorkerJoined(address=w.address, name=w.name, nthreads=2,
                                  resources=Resources.parse("GPU=1"), attempts=tuple(attempts),
                                  job_lease=LEASE, now=self.now))

    # -- rules --------------------------------------------------------------------------------

    @rule(demand=st.sampled_from([None, "GPU=1", "GPU=0.5", None, "GPU=2"]),
          hold=st.sampled_from([False, False, False, True]), requeue=st.booleans(),
          retries=st.sampled_from([0, 0, 1]), dep=st.sampled_from([False, False, True]),
          same=st.sampled_from([False, False, False, True]), n=st.integers(1, 3),
          array=st.sampled_from([None, None, None, "0-3", "0-4%2"]))
    def submit(self, demand, hold, requeue, retries, dep, same, n, array):
        specs = []
        known = self.state.jobs.jobs
        after = (max(known),) if dep and known else ()
        for _ in range(n):
            if not same or not self.submitted:
                self.submitted += 1
            specs.append(JobSpec(submission=f"s{self.submitted}", command=("true",),
                                 resources=Resources.parse(demand), hold=hold, requeue=requeue,
                                 retries=retries, after_ok=after,
                                 array=ArraySpec.parse(array) if array else None))
        self.send(ev.JobsSubmitted(client="c", request=1, jobs=tuple(specs), now=self.now))

    @rule(name=st.sampled_from(WORKERS))
    def connect(self, name):
        w = self.workers[name]
        if not w.connected:
            self.join(w)

    @rule(data=st.data())
    def disconnect(self, data):
        """Cut off a worker, one running jobs if there is one (the interesting case)."""
        busy = [n for n, w in self.workers.items() if w.connected and w.running]
        name = data.draw(st.sampled_from(busy or WORKERS))
        w = self.workers[name]
        if w.connected:
            w.connected, w.away_since = False, self.now
            w.received.clear()  # a worker drops what it had not started when cut off
            self.send(ev.WorkerLeft(address=w.address, now=self.now))

    @rule(name=st.sampled_from(WORKERS), data=st.data())
    def start(self, name, data):
        w = self.workers[name]
        if not (w.connected and w.received):
            return
        key = data.draw(st.sampled_from(sorted(w.received)))
        self.later = []
        self._start(w, key)
        for e in self.later:
            self.send(e)

    @rule(name=st.sampled_from(WORKERS), outcome=st.sampled_from(["completed", "failed",
                                                                  "timeout"]), data=st.data())
    def finish(self, name, outcome, data):
        w = self.workers[name]
        if not w.running:
            return
        key = data.draw(st.sampled_from(sorted(w.running)))
        self.later = []
        self._end(w, key, outcome)
        for e in self.later:
            self.send(e)

    @rule(job=st.integers(1, 16))
    def cancel(self, job):
        self.send(ev.JobsCancelled(client="c", request=2, jobs=(job,), now=self.now))

    @rule(job=st.integers(1, 16))
    def release(self, job):
        self.send(ev.JobsReleased(client="c", request=3, jobs=(job,), now=self.now))

    @rule(seconds=st.sampled_from([1.0, 6.0, 11.0]))
    def time_passes(self, seconds):
        self.now += seconds
        for w in self.workers.values():  # a worker away past its lease kills what it runs
            if not w.connected and self.now - w.away_since >= LEASE:
                for key in list(w.running):
                    self.later = []
                    self._end(w, key, "lost")
            elif w.connected:  # one still there was heard from meanwhile (a cut-off is a rule)
                self.send(ev.WorkerHeartbeat(address=w.address, now=self.now))
        self.send(ev.Tick(now=self.now))

    @precondition(lambda self: self.submitted)
    @rule()
    def restart(self):
        rows = tuple(self.rows[job_id] for job_id in sorted(self.rows))
        self.state = SchedulerState(SchedulerPolicy(**OPTIONS))
        for w in self.workers.values():
            if w.connected:
                w.connected, w.away_since = False, self.now
                w.received.clear()
        self.send(ev.JobsLoaded(rows=rows, now=self.now))

    @invariant()
    def one_attempt_at_a_time(self):
        running: dict[int, list[str]] = {}
        for w in self.workers.values():
            for key in w.running:
                running.setdefault(parse_job_key(key)[0], []).append(key)
        for job, keys in running.items():
            assert len(keys) == 1, f"job {job} runs {keys} at once"


TestJobsUnderFaults = JobsMachine.TestCase
TestJobsUnderFaults.settings = settings(
    max_examples=300, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])

"""Random event sequences keep WorkerState's books balanced and end with nothing held.

A hypothesis state machine plays the scheduler, the peers and the executor at once. After
every event: ``validate()`` holds; each task the worker took on is reported exactly once,
when it leaves; and the data the shell stores is exactly what the state says it holds. At the
end, everything runs to completion, every result is freed, and nothing is left.
"""

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from dsched.resources import Resources
from dsched.protocol.ops import (
    Execute, Free, MissingData, Replicate, ReplicateFailed, Replicated, StopTask, TaskErred,
    TaskFinished, TaskRejected, TaskStopped,
)
from dsched.worker.actions import FetchDependency, ReleaseResult, StartTask
from dsched.worker.events import (
    DependencyFetched, DependencyFetchFailed, DrainRequested, RunErred, RunFinished, RunStopped,
)
from dsched.worker.state import WorkerState

KEYS = [f"k{i}" for i in range(10)]
REPORTS = (TaskFinished, TaskErred, TaskStopped, TaskRejected, MissingData)
DEMANDS = ["", "GPU=0.25", "GPU=0.5", "GPU=0.75", "GPU=1", "GPU=2", "GPU=1.5", "GPU=3",
           "MEM=4", "MEM=10 GPU=0.5", "FOO=1"]
PEERS = ["me", "w1", "w2"]


class WorkerMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.state = WorkerState(nthreads=3, resources=Resources.parse("GPU=2 MEM=10"),
                                 address="me")
        self.open: set[str] = set()         # tasks taken on and not yet reported
        self.running: set[str] = set()      # StartTask given, no outcome sent yet
        self.fetching: dict[str, str] = {}  # FetchDependency given, no answer sent yet
        self.stored: set[str] = set()       # what the shell's data store holds
        self.copying: set[str] = set()      # copies the scheduler asked for, not yet answered

    def send(self, event):
        if isinstance(event, (RunFinished, DependencyFetched)):
            self.stored.add(event.key)
        actions = self.state.handle(event, 0.0)
        self.state.validate()
        for action in actions:
            if isinstance(action, REPORTS):
                if action.key in self.open:
                    self.open.remove(action.key)
                else:  # an answer to this very execute: refused, or already done here
                    assert isinstance(event, Execute) and event.key == action.key
            elif isinstance(action, StartTask):
                assert action.key not in self.running
                self.running.add(action.key)
            elif isinstance(action, FetchDependency):
                assert action.key not in self.fetching
                self.fetching[action.key] = action.worker
            elif isinstance(action, ReleaseResult):
                assert action.key in self.stored, action
                self.stored.remove(action.key)
            elif isinstance(action, (Replicated, ReplicateFailed)):
                assert action.key in self.copying, action
                self.copying.remove(action.key)
        if isinstance(event, Execute) and event.key in self.state.tasks:
            self.open.add(event.key)
        return actions

    @invariant()
    def books_balance(self):
        assert self.open == set(self.state.tasks)
        assert self.stored == set(self.state.results)
        assert len(self.running) <= self.state.nthreads

    @rule(key=st.sampled_from(KEYS), demand=st.sampled_from(DEMANDS),
          priority=st.integers(0, 2),
          deps=st.dictionaries(st.sampled_from(KEYS + ["x0", "x1"]),
                               st.lists(st.sampled_from(PEERS), max_size=3).map(tuple),
                               max_size=2))
    def execute(self, key, demand, priority, deps):
        self.send(Execute(key, b"", Resources.parse(demand), priority, deps))

    @precondition(lambda self: self.running)
    @rule(data=st.data(), outcome=st.sampled_from(["done", "failed", "stopped"]))
    def finish(self, data, outcome):
        key = data.draw(st.sampled_from(sorted(self.running)))
        self.running.remove(key)
        if outcome == "done":
            self.send(RunFinished(key, 7, 0.0, 1.0))
        elif outcome == "failed":
            self.send(RunErred(key, b"", "boom", 0.0, 1.0))
        else:
            self.send(RunStopped(key))

    @precondition(lambda self: self.fetching)
    @rule(data=st.data(), ok=st.booleans())
    def answer_fetch(self, data, ok):
        key = data.draw(st.sampled_from(sorted(self.fetching)))
        worker = self.fetching.pop(key)
        self.send(DependencyFetched(key, 3, worker) if ok else
                  DependencyFetchFailed(key, worker, "peer gone"))

    @rule(key=st.sampled_from(KEYS + ["x0", "x1"]),
          holders=st.lists(st.sampled_from(PEERS), max_size=3).map(tuple))
    def replicate(self, key, holders):
        self.copying.add(key)
        self.send(Replicate(key, holders, 3))

    @rule(key=st.sampled_from(KEYS))
    def cancel(self, key):
        self.send(StopTask(key))

    @rule(keys=st.lists(st.sampled_from(KEYS + ["x0"]), max_size=3))
    def free(self, keys):
        self.send(Free(tuple(keys)))

    @precondition(lambda self: not self.state.closing)
    @rule(when=st.integers(0, 9))
    def drain(self, when):
        if when == 0:  # rarely: a drained worker takes no more work
            self.send(DrainRequested())

    def teardown(self):
        # Let everything run out, then free every result: nothing may be left.
        for _ in range(100):
            if not (self.running or self.fetching):
                break
            for key in sorted(self.running):
                self.running.remove(key)
                self.send(RunFinished(key, 1, 0.0, 1.0))
            for key, worker in sorted(self.fetching.items()):
                del self.fetching[key]
                self.send(DependencyFetched(key, 1, worker))
        self.send(Free(tuple(self.state.results)))
        assert not self.open and not self.stored and not self.copying
        assert self.state.is_idle() and not self.state.results, self.state.snapshot()


WorkerMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40,
                                           deadline=None)
test_worker_state_machine = WorkerMachine.TestCase

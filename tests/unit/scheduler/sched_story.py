"""Helpers that let a scheduler test read as a story: a state, a clock, short event makers.

Every event goes through ``SchedulerState.handle`` and is followed by ``validate()``.
"""

from __future__ import annotations

from dsched.resources import Resources
from dsched.scheduler import SchedulerState, actions as act, events as ev


def task(key: str, resources: str | None = None, **kw) -> ev.TaskSpec:
    return ev.TaskSpec(key=key, resources=Resources.parse(resources), **kw)


def addr(name: str) -> str:
    return f"tcp://{name}"


def started(actions: list) -> list[tuple[str, str]]:
    """(task key, worker name) of each act.Execute, in order."""
    return [(a.key, a.worker.removeprefix("tcp://")) for a in actions if isinstance(a, act.Execute)]


def without_logs(actions: list) -> list:
    return [a for a in actions if not isinstance(a, act.Log)]


class Story:
    def __init__(self, **options):
        self.state = SchedulerState(**options)
        self.now = 0.0
        self.log: list = []

    def __call__(self, event) -> list:
        actions = self.state.handle(event)
        self.state.validate()
        self.log.extend(actions)
        return without_logs(actions)

    def at(self, now: float) -> Story:
        self.now = now
        return self

    def worker(self, name: str, nthreads: int = 1, resources: str | None = None) -> list:
        return self(ev.WorkerJoined(address=addr(name), name=name, nthreads=nthreads,
                                 resources=Resources.parse(resources), now=self.now))

    def leave(self, name: str) -> list:
        return self(ev.WorkerLeft(address=addr(name), now=self.now))

    def submit(self, *specs: ev.TaskSpec, client: str = "c") -> list:
        return self(ev.TasksSubmitted(client=client, tasks=specs, now=self.now))

    def where(self, key: str) -> str | None:
        """The worker name ``key`` is processing on."""
        t = self.state.tasks[key]
        return t.processing_on.removeprefix("tcp://") if t.processing_on else None

    def finish(self, key: str, worker: str | None = None, nbytes: int = 0,
               duration: float = 1.0) -> list:
        worker = worker or self.where(key)
        return self(ev.TaskFinished(key=key, worker=addr(worker), nbytes=nbytes,
                                 start=self.now - duration, stop=self.now, now=self.now))

    def err(self, key: str, worker: str | None = None, text: str = "boom") -> list:
        worker = worker or self.where(key)
        return self(ev.TaskErred(key=key, worker=addr(worker), exception=b"pickled", text=text,
                              now=self.now))

    def cancel(self, *keys: str, client: str = "c") -> list:
        return self(ev.CancelRequested(client=client, keys=keys, now=self.now))

    def confirm(self, key: str, worker: str) -> list:
        return self(ev.TaskStopped(key=key, worker=addr(worker), now=self.now))

    def release(self, *keys: str, client: str = "c") -> list:
        return self(ev.KeysReleased(client=client, keys=keys, now=self.now))

    def disconnect(self, client: str = "c") -> list:
        return self(ev.ClientDisconnected(client=client, now=self.now))

    def tick(self) -> list:
        return self(ev.Tick(now=self.now))

    def state_of(self, key: str) -> str:
        return self.state.tasks[key].state.value

"""Helpers that let a scheduler test read as a story: a state, a clock, short event makers.

Every event goes through ``SchedulerState.handle`` and is followed by ``validate()``.
"""

from __future__ import annotations

from dsched.policy import SchedulerPolicy
from dsched.resources import Resources
from dsched.scheduler import SchedulerState, actions as act, events as ev


def task(key: str, resources: str | None = None, **kw) -> ev.TaskSpec:
    return ev.TaskSpec(key=key, resources=Resources.parse(resources), **kw)


def gpu_memory(memory: tuple[float, ...]) -> dict:
    """A WorkerJoined's fields for devices 0, 1, ... with this much memory each (bytes)."""
    if not memory:
        return {}
    return {"devices": tuple(range(len(memory))),
            "gpus": tuple({"index": i, "memory_total": int(m)} for i, m in enumerate(memory))}


def addr(name: str) -> str:
    return f"tcp://{name}"


def started(actions: list) -> list[tuple[str, str]]:
    """(task key, worker name) of each act.SendExecute, in order."""
    return [(a.key, a.worker.removeprefix("tcp://")) for a in actions if isinstance(a, act.SendExecute)]


def without_logs(actions: list) -> list:
    return [a for a in actions if not isinstance(a, act.LogLine)]


class Story:
    """A scheduler core as the daemon runs it, unless ``options`` (fields of its
    ``SchedulerPolicy``) say otherwise."""

    def __init__(self, **options):
        self.state = SchedulerState(SchedulerPolicy(**options))
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

    def worker(self, name: str, nthreads: int = 1, resources: str | None = None,
               memory: tuple[float, ...] = ()) -> list:
        """``memory``: the GPU memory of each of its devices, in bytes (as NVML says it)."""
        return self(ev.WorkerJoined(address=addr(name), name=name, nthreads=nthreads,
                                 resources=Resources.parse(resources), now=self.now,
                                 **gpu_memory(memory)))

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
        return self(ev.WorkerTaskFinished(key=key, worker=addr(worker), nbytes=nbytes,
                                 start=self.now - duration, stop=self.now, now=self.now))

    def err(self, key: str, worker: str | None = None, text: str = "boom") -> list:
        worker = worker or self.where(key)
        return self(ev.WorkerTaskErred(key=key, worker=addr(worker), exception=b"pickled", text=text,
                              now=self.now))

    def cancel(self, *keys: str, client: str = "c") -> list:
        return self(ev.CancelRequested(client=client, keys=keys, now=self.now))

    def confirm(self, key: str, worker: str) -> list:
        return self(ev.WorkerTaskStopped(key=key, worker=addr(worker), now=self.now))

    def release(self, *keys: str, client: str = "c") -> list:
        return self(ev.KeysReleased(client=client, keys=keys, now=self.now))

    def disconnect(self, client: str = "c") -> list:
        return self(ev.ClientDisconnected(client=client, now=self.now))

    def tick(self) -> list:
        return self(ev.Tick(now=self.now))

    def heartbeat(self, *names: str) -> list:
        """Each worker of ``names`` is heard from: a story that skips ahead past the heartbeat
        timeout keeps the workers it wants alive this way, as their heartbeats would."""
        actions = []
        for name in names:
            actions += self(ev.WorkerHeartbeat(address=addr(name), now=self.now))
        return actions

    def state_of(self, key: str) -> str:
        return self.state.tasks[key].state.value


# -- jobs ---------------------------------------------------------------------------------------


def job(*command: str, resources: str | None = None, submission: str | None = None, **kw):
    from dsched.jobs import JobSpec

    job.count = getattr(job, "count", 0) + 1
    return JobSpec(submission=submission or f"s{job.count}", command=command or ("true",),
                   resources=Resources.parse(resources), **kw)


class JobStory(Story):
    """A Story with jobs: submit them, have workers start and end their attempts."""

    def worker(self, name: str, nthreads: int = 1, resources: str | None = None,
               attempts: tuple = (), job_lease: float = 100.0,
               memory: tuple[float, ...] = (), machine_restarted: bool = False) -> list:
        return self(ev.WorkerJoined(address=addr(name), name=name, nthreads=nthreads,
                                    resources=Resources.parse(resources), now=self.now,
                                    attempts=tuple(a.to_wire() for a in attempts),
                                    job_lease=job_lease, machine_restarted=machine_restarted,
                                    **gpu_memory(memory)))

    def jobs(self, *specs, client: str = "c", request: int = 1, watch: bool = False) -> list:
        return self(ev.JobsSubmitted(client=client, request=request, jobs=specs, at=1000.0,
                                     watch=watch, now=self.now))

    def ids(self, actions: list) -> list[int]:
        [reply] = [a for a in actions if isinstance(a, act.JobsReply)]
        assert not reply.error, reply.error
        return reply.value

    def job(self, job_id: int):
        return self.state.jobs.jobs[job_id]

    def view(self, job_id: int) -> dict:
        from dsched.scheduler.jobviews import job_view

        return job_view(self.state, self.job(job_id))

    def start(self, key: str, worker: str | None = None, pid: int = 100) -> list:
        from dsched.protocol import ops

        worker = worker or self.where(key)
        return self(ev.WorkerAttemptStarted(worker=addr(worker), now=self.now, report=ops.AttemptStarted(
            key=key, pid=pid, log=f"/jobs/{key}.log", started=self.now,
            gpus=self.state.tasks[key].gpus if key in self.state.tasks else ())))

    def end(self, key: str, outcome: str = "completed", worker: str | None = None,
            exit_code: int | None = 0, started: float | None = 0.0, **report) -> list:
        from dsched.protocol import ops

        worker = worker or self.where(key) or self.job(int(key[4:].split(".")[0])).worker
        return self(ev.WorkerAttemptEnded(worker=addr(worker), now=self.now, report=ops.AttemptEnded(
            key=key, outcome=outcome, exit_code=exit_code, error=f"{outcome}!", log="/x.log",
            started=started, ended=self.now, **report)))

    def cancel_jobs(self, *ids: int, client: str = "c") -> list:
        return self(ev.JobsCancelled(client=client, request=2, jobs=ids, now=self.now))

    def release_jobs(self, *ids: int, client: str = "c") -> list:
        return self(ev.JobsReleased(client=client, request=3, jobs=ids, now=self.now))

    def states(self) -> dict[int, str]:
        return {i: j.state.value for i, j in self.state.jobs.jobs.items()}


def journaled(actions: list) -> list[tuple[int, str]]:
    """(job id, state) of each row of the journal write, which must come first."""
    writes = [i for i, a in enumerate(actions) if isinstance(a, act.JournalWrite)]
    assert writes in ([], [0]), "the journal write comes first, once"
    return [(row["id"], row["state"]) for row in actions[0].rows] if writes else []

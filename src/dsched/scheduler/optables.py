"""The scheduler shell's translations, one table each way: the op a worker or a client sends
becomes the core's event (``WORKER_OPS``, ``CLIENT_OPS``, and ``joined`` for a worker's
``register``), and an action of the core becomes the op sent to a worker or to clients
(``TO_WORKER``, ``TO_CLIENTS``). Tables, not code: a new op is one line here
(``docs/architecture.md``, "How to add an op"). The in-memory cluster of the tests uses them
too, so both cores meet through exactly what the daemons send.

Pure: no I/O, no clock (the time comes with each op).
"""

from __future__ import annotations

from typing import Any, Callable

from ..protocol import ops
from . import actions as act
from . import events as ev


# -- what workers and clients say, as events -----------------------------------------------

#: op class -> event maker, for the ops a registered worker sends.
WORKER_OPS: dict[type, Callable[[Any, str, float], Any]] = {
    ops.TaskFinished: lambda o, w, now: ev.WorkerTaskFinished(
        key=o.key, worker=w, nbytes=o.nbytes, start=o.start, stop=o.stop, duration=o.duration,
        now=now),
    ops.TaskErred: lambda o, w, now: ev.WorkerTaskErred(
        key=o.key, worker=w, exception=o.exception, text=o.text, gpu=o.gpu, oom=o.oom, now=now),
    ops.TaskStopped: lambda o, w, now: ev.WorkerTaskStopped(key=o.key, worker=w, now=now),
    ops.TaskRejected: lambda o, w, now: ev.WorkerTaskRejected(
        key=o.key, worker=w, reason=o.reason, now=now),
    ops.MissingData: lambda o, w, now: ev.WorkerMissingData(
        key=o.key, worker=w, dependency=o.dependency, tried=o.tried, reason=o.reason,
        permanent=o.permanent, now=now),
    ops.Heartbeat: lambda o, w, now: ev.WorkerHeartbeat(
        address=w, metrics={"cpu": o.cpu, "memory": o.memory, "memory_limit": o.memory_limit,
                            "gpus": list(o.gpus), "executing": o.executing}, sent=o.sent,
        now=now),
    ops.Draining: lambda o, w, now: ev.WorkerDraining(address=w, now=now),
    ops.Replicated: lambda o, w, now: ev.WorkerReplicated(key=o.key, worker=w, nbytes=o.nbytes,
                                                    now=now),
    ops.ReplicateFailed: lambda o, w, now: ev.WorkerReplicateFailed(key=o.key, worker=w,
                                                              reason=o.reason, now=now),
    ops.AttemptStarted: lambda o, w, now: ev.WorkerAttemptStarted(worker=w, report=o, now=now),
    ops.AttemptEnded: lambda o, w, now: ev.WorkerAttemptEnded(worker=w, report=o, now=now),
    ops.GpuFenced: lambda o, w, now: ev.WorkerGpuFenced(worker=w, index=o.index,
                                                        reason=o.reason, now=now),
    ops.GpuReleased: lambda o, w, now: ev.WorkerGpuReleased(worker=w, index=o.index, now=now),
}

#: op class -> event maker, for the client ops that change the state (requests aside).
CLIENT_OPS: dict[type, Callable[[Any, str, float], Any]] = {
    ops.Submit: lambda o, c, now: ev.TasksSubmitted(
        client=c, tasks=tuple(ev.TaskSpec(**task) for task in o.tasks), request=o.id, now=now),
    ops.Cancel: lambda o, c, now: ev.CancelRequested(client=c, keys=o.keys, now=now),
    ops.Release: lambda o, c, now: ev.KeysReleased(client=c, keys=o.keys, now=now),
    ops.CancelJobs: lambda o, c, now: ev.JobsCancelled(client=c, request=o.id, jobs=o.jobs,
                                                       now=now),
    ops.ReleaseJobs: lambda o, c, now: ev.JobsReleased(client=c, request=o.id, jobs=o.jobs,
                                                       now=now),
    ops.WatchJobs: lambda o, c, now: ev.JobsWatched(client=c, jobs=o.jobs, now=now),
    ops.WatchWorkers: lambda o, c, now: ev.WorkersWatched(client=c, now=now),
    ops.ReleaseGpu: lambda o, c, now: ev.GpuReleaseRequested(client=c, request=o.id,
                                                             worker=o.worker, index=o.index,
                                                             now=now),
}


def joined(o: ops.Register, now: float) -> ev.WorkerJoined:
    return ev.WorkerJoined(
        address=o.address, name=o.name or o.address, nthreads=o.nthreads,
        resources=o.resources, gpus=o.gpus, held=tuple(o.held.items()), running=o.running,
        previous_exit=o.previous_exit, attempts=o.attempts, job_lease=o.job_lease,
        containment=o.containment, devices=o.devices, running_gpus=o.running_gpus,
        machine_restarted=o.machine_restarted, now=now)


# -- actions, as ops to send ------------------------------------------------------------------

#: action class -> op maker, for actions addressed to one worker.
TO_WORKER: dict[type, Callable[[Any], Any]] = {
    act.SendExecute: lambda a: ops.Execute(
        key=a.key, spec=a.spec, resources=a.resources, priority=a.priority,
        who_has=a.who_has, nbytes=a.nbytes, job=a.job, gpus=a.gpus, hold=a.hold),
    act.SendProceed: lambda a: ops.Proceed(keys=a.keys),
    act.SendAttemptAck: lambda a: ops.AttemptAck(keys=a.keys),
    act.SendStopTask: lambda a: ops.StopTask(key=a.key),
    act.SendFree: lambda a: ops.Free(keys=a.keys),
    act.SendReplicate: lambda a: ops.Replicate(key=a.key, who_has=(a.source,), nbytes=a.nbytes),
    act.SendRetire: lambda a: ops.Retire(),
    act.SendUnfenceGpu: lambda a: ops.UnfenceGpu(index=a.index),
    act.WorkerAccepted: lambda a: ops.Registered(address=a.worker),
    act.GrantLease: lambda a: ops.Lease(sent=a.sent),
}

#: action class -> op maker, for actions addressed to clients.
TO_CLIENTS: dict[type, Callable[[Any], Any]] = {
    act.TellFinished: lambda a: ops.FutureFinished(key=a.key, nbytes=a.nbytes, who_has=a.who_has),
    act.TellMoved: lambda a: ops.FutureMoved(key=a.key, who_has=a.who_has),
    act.TellErred: lambda a: ops.FutureErred(key=a.key, exception=a.exception, text=a.text,
                                             error=a.error),
    act.TellCancelled: lambda a: ops.FutureCancelled(key=a.key, reason=a.reason),
    act.TellWaiting: lambda a: ops.FutureWaiting(keys=a.keys, reason=a.reason),
    act.TellJobEnded: lambda a: ops.JobEnded(job=a.job),
    act.TellWorkerCount: lambda a: ops.WorkerCount(count=a.count),
}

"""Submission: a client's batch of task specs becomes tasks of the graph.

A key already known (and not erred) is that task, wanted by the client too; an erred key, or
one forgotten, runs afresh; a key of the form of a job's attempt is refused. Dependencies are
linked, and the new tasks are computed in dependency order within the batch, so that inputs
are computed before their dependents; a task whose dependency is unknown, or that is part of a
cycle, fails with the reason.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ..jobs import parse_job_key
from .actions import TellErred
from .events import TaskSpec
from .task import ERRED, Task, default_prefix

if TYPE_CHECKING:
    from .graph import TaskGraph


def submit(graph: TaskGraph, client: str, specs: Iterable[TaskSpec]) -> None:
    """Add ``specs``, submitted by ``client``, to ``graph``: queued, waiting or failed."""
    tasks = graph.tasks
    new: dict[Task, TaskSpec] = {}
    seen: set[str] = set()
    for spec in specs:
        key = spec.key
        if key in seen:
            continue
        seen.add(key)
        if key.startswith("job-") and parse_job_key(key) is not None:
            graph.out.actions.append(TellErred(
                key=key, clients=(client,), error="reserved_key",
                text="keys of the form job-<id>.<attempt> name the attempts of "
                     "shell-command jobs: choose another key"))
            continue
        old = tasks.get(key)
        if old is not None and old.state is not ERRED:
            if spec.wanted:
                graph.want(old, client)
            continue
        resources = graph.placer.queue.shape(spec.resources)
        restrict = frozenset(spec.workers) if spec.workers else None
        t = Task(
            key, spec.spec, resources, spec.priority, graph.next_order(spec.priority),
            max(0, spec.retries), restrict, spec.prefix or default_prefix(key),
            spec.gpu_memory_retry,
        )
        if old is not None:  # an erred or cancelled key submitted again runs afresh
            t.wanted_by = old.wanted_by
            for d in old.deps:
                d.dependents.pop(old, None)
                graph.release_work.append(d)
        tasks[key] = t
        new[t] = spec
    if not any(spec.dependencies for spec in new.values()):
        enqueue = graph.placer.enqueue
        for t, spec in new.items():  # the usual batch: independent tasks
            if spec.wanted and client not in t.wanted_by:
                t.wanted_by += (client,)
                graph.clients.setdefault(client, {})[t.key] = None
            enqueue(t)
            if not t.wanted_by:
                graph.release_work.append(t)
        return
    unknown: dict[Task, str] = {}
    for t, spec in new.items():
        deps: dict[Task, None] = {}
        for dep_key in spec.dependencies:
            d = tasks.get(dep_key)
            if d is None:
                unknown.setdefault(t, dep_key)
            elif d is not t:
                deps[d] = None
            else:
                unknown.setdefault(t, "")  # depends on itself: a cycle
        t.deps = tuple(deps)
        for d in deps:
            d.dependents[t] = None
        if spec.wanted and client not in t.wanted_by:
            t.wanted_by += (client,)
            graph.clients.setdefault(client, {})[t.key] = None
    # Kahn's order within the batch, so inputs are computed before their dependents.
    pending = {t: sum(1 for d in t.deps if d in new) for t in new}
    ordered = [t for t, n in pending.items() if n == 0]
    for t in ordered:
        for dd in t.dependents:
            if dd in pending:
                pending[dd] -= 1
                if pending[dd] == 0:
                    ordered.append(dd)
    for t in ordered:
        if t in unknown and unknown[t]:
            graph.fail(t, "unknown_dependency", f"unknown dependency {unknown[t]!r}")
        elif t in unknown:
            graph.fail(t, "cycle", "the task depends on itself")
        else:
            graph.compute(t)
    for t, n in pending.items():
        if n > 0:
            graph.fail(t, "cycle", "the task is part of (or depends on) a dependency cycle")
    for t in new:
        if not t.wanted_by:
            graph.release_work.append(t)

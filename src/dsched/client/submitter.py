"""From ``submit``, ``map``, a graph and ``cancel`` to the ops that carry them, and futures.

Tasks are built in the caller's thread (:mod:`.submission`) and queued on the client's outbox
in messages that stay well within a frame: a ``map`` of 10,000 small calls is a few ops, not
10,000. A graph's tasks go after their dependencies; a task whose dependents follow in a later
message is held by a future until they are queued. Any thread may call these.

Checks nothing about the client's connection (the client does, before calling) and sends
nothing itself: the outbox does.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from ..protocol import ops
from .future import PENDING, Future, FutureStatus, Owner
from .outbox import ClientOutbox
from .submission import KeyMaker, TaskBuilder, map_keys, task_options, task_size


def _is_future(value: Any) -> bool:
    return type(value) is Future


class Submitter:
    """One client's way from calls to Submit ops. ``limits`` are its connection's (read at
    each call): a message holds at most a quarter of ``max_frame_size`` of tasks."""

    def __init__(self, outbox: ClientOutbox, owner: Owner, limits: dict[str, int]):
        self.limits = limits
        self._outbox = outbox
        self._owner = owner
        self._keys = KeyMaker()

    def _future(self, key: str) -> tuple[Future, bool]:
        """A new Future of ``key``, and whether the key must be (re)submitted."""
        state, submit = self._outbox.hold(key)
        return Future(key, self._owner, state), submit

    def submit(self, fn: Callable, args: tuple, kwargs: dict, key: str | None,
               demands: tuple, pure: bool) -> Future:
        """``fn(*args, **kwargs)`` as a task; ``demands`` are ``task_options``' arguments."""
        builder = TaskBuilder(fn, task_options(*demands), _is_future, self._keys)
        task = builder.build(args, kwargs, key, pure)
        task_size(task, self.limits["max_message_size"])
        future, submit = self._future(task["key"])
        if submit:
            self._outbox.enqueue(ops.Submit(tasks=(task,)))
        return future

    def map(self, fn: Callable, iterables: tuple[Iterable, ...], kwargs: dict,
            key: str | Iterable[str] | None, demands: tuple, pure: bool) -> list[Future]:
        """A task per tuple of items from ``iterables``, in as few messages as fit."""
        if not iterables:
            raise TypeError("map() needs at least one iterable")
        calls = list(zip(*iterables))
        keys = map_keys(key, len(calls))
        prefix = keys if isinstance(keys, str) else None
        builder = TaskBuilder(fn, task_options(*demands), _is_future, self._keys, prefix=prefix)
        explicit = keys if isinstance(keys, list) else None
        tasks, futures, size = [], [], 0
        budget = self.limits["max_frame_size"] // 4
        for index, args in enumerate(calls):
            task = builder.build(args, kwargs, explicit[index] if explicit else None, pure)
            nbytes = task_size(task, self.limits["max_message_size"])
            future, submit = self._future(task["key"])
            futures.append(future)
            if submit:
                if tasks and size + nbytes > budget:  # keep each message well in a frame
                    self._outbox.enqueue(ops.Submit(tasks=tuple(tasks)))
                    tasks, size = [], 0
                tasks.append(task)
                size += nbytes
        if tasks:
            self._outbox.enqueue(ops.Submit(tasks=tuple(tasks)))
        return futures

    def graph(self, tasks: list[dict], wanted: set[str]) -> dict[str, Future]:
        """Submit built tasks, each after its dependencies, in as few ops as fit in a frame;
        a future of each ``wanted`` key. Other tasks go with ``"wanted": False`` (the
        scheduler keeps them while a dependent needs them); one whose dependents follow in a
        later op is held by a future until they are queued. Tasks behind keys this client
        already holds are not sent again."""
        limit = self.limits["max_frame_size"]
        sizes = {task["key"]: task_size(task, self.limits["max_message_size"]) for task in tasks}
        known = self._outbox.holds
        needed = {key for key in wanted if not known(key)}
        for task in reversed(tasks):  # only what a wanted key not yet known depends on
            if task["key"] in needed:
                needed.update(d for d in task.get("dependencies", ()) if not known(d))
        unknown = sorted(key for key in needed if key not in sizes)
        if unknown:
            raise ValueError(f"the graph depends on {unknown[:3]}, which neither it nor a "
                             "future of this client holds")
        futures = {key: self._future(key)[0] for key in wanted}
        parts: list[list[dict]] = [[]]
        size, part_of, holds = 0, {}, []
        for task in (task for task in tasks if task["key"] in needed):
            if parts[-1] and size + sizes[task["key"]] > limit // 4:
                parts.append([])
                size = 0
            for dep in task.get("dependencies", ()):
                if part_of.get(dep, len(parts)) < len(parts) - 1 and dep not in futures:
                    futures[dep] = self._future(dep)[0]
                    holds.append(dep)
            part_of[task["key"]] = len(parts) - 1
            parts[-1].append(task)
            size += sizes[task["key"]]
        for part in parts:
            for task in part:
                task["wanted"] = task["key"] in futures
            if part:
                self._outbox.enqueue(ops.Submit(tasks=tuple(part)))
        for key in holds:  # queued after the submits: released once their dependents are in
            del futures[key]
        return futures

    def cancel(self, futures: Iterable[Future]) -> None:
        """Cancel the tasks of those ``futures`` not yet ended: their futures say cancelled at
        once, and the scheduler cancels the tasks (and their dependents) and forgets them, so
        that a later submit of the same call runs afresh."""
        states = [f._state for f in futures if f._state.status is PENDING]
        if not states:
            return
        keys = tuple(state.key for state in states)
        self._outbox.forget(states)
        self._outbox.enqueue(ops.Cancel(keys=keys))
        self._outbox.enqueue(ops.Release(keys=keys))
        for state in states:
            state.finish(FutureStatus.cancelled, reason="cancelled by this client")

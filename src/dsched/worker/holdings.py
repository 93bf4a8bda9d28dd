"""The data one worker holds and fetches: results held here (computed here, copied here for
the scheduler, or fetched as inputs), fetches from peers under way, and which tasks here need
each input.

The rules of the data alone live here: a fetch tries each worker that holds its key in turn;
an input fetched for tasks here is held only while one of them needs it; a result computed
here, or copied here because the scheduler asked, is held until the scheduler frees it (and
then still while a task here needs it). What an input arriving or being lost means for the
tasks that wait for it is ``WorkerState``'s; the values themselves are the shell's
(``data.py``).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Iterable

from ..protocol import ops
from . import events as ev
from .actions import Action, FetchDependency, ReleaseResult
from .task import Fetch, HeldResult


class Holdings:
    """``results`` by key, ``fetches`` under way by key, and ``needed_by``: input key -> the
    tasks here that need it (missing or not). ``address``: this worker's own, never fetched
    from."""

    def __init__(self, address: str = ""):
        self.address = address
        self.results: dict[str, HeldResult] = {}
        self.fetches: dict[str, Fetch] = {}
        self.needed_by: dict[str, set[str]] = {}

    def sources(self, who_has: Iterable[str]) -> list[str]:
        """The workers in ``who_has`` this worker may fetch from."""
        return [worker for worker in who_has if worker != self.address]

    def fetch(self, key: str, workers: list[str], nbytes: int,
              replicate: bool = False) -> FetchDependency:
        """Start fetching ``key`` from the first of ``workers``, the others kept in reserve."""
        fetch = self.fetches[key] = Fetch(workers[0], workers[1:], [], nbytes,
                                          replicate=replicate)
        return FetchDependency(key, fetch.worker, fetch.nbytes)

    def need(self, task: str, dependencies: Iterable[str]) -> None:
        for dep in dependencies:
            self.needed_by.setdefault(dep, set()).add(task)

    def release(self, task: str, dependencies: Iterable[str]) -> list[Action]:
        """``task`` needs its inputs no more: drop the fetched ones nobody else here needs."""
        actions: list[Action] = []
        for dep in dependencies:
            needers = self.needed_by[dep]
            needers.discard(task)
            if needers:
                continue
            del self.needed_by[dep]
            held = self.results.get(dep)
            if held is not None and not held.owned:
                del self.results[dep]
                actions.append(ReleaseResult(dep))
        return actions

    def computed(self, report: ops.TaskFinished) -> None:
        """The result of a task here, held until the scheduler frees it."""
        self.results[report.key] = HeldResult(report.nbytes, owned=True, report=report)

    # -- what happened to a fetch, and what the scheduler asks ---------------------------------

    def fetched(self, event: ev.DependencyFetched,
                tracked: bool) -> tuple[list[Action], bool]:
        """A copy of ``event.key`` arrived (``tracked``: it is a task here). The actions, and
        whether it is held now as an input for the tasks here that wait for it."""
        key = event.key
        fetch = self.fetches.pop(key, None)
        if fetch is None:
            # Not asked for: drop the copy, unless it is data this worker tracks.
            return ([] if key in self.results or tracked else [ReleaseResult(key)]), False
        if fetch.replicate:
            report = ops.Replicated(key, event.nbytes)
            self.results[key] = HeldResult(event.nbytes, owned=True, report=report)
            return [report], True
        if not self.needed_by.get(key):
            return [ReleaseResult(key)], False  # the tasks that wanted it have gone
        self.results[key] = HeldResult(event.nbytes, owned=False)
        return [], True

    def fetch_failed(self, event: ev.DependencyFetchFailed) -> tuple[list[Action], Fetch | None]:
        """A try failed: try the next holder, or give up. The actions, and the fetch given up
        (None while it goes on, or for a late answer to one already settled)."""
        fetch = self.fetches.get(event.key)
        if fetch is None or fetch.worker != event.worker:
            return [], None  # a late answer to a fetch already settled
        fetch.tried.append(event.worker)
        if (fetch.replicate or self.needed_by.get(event.key)) and fetch.untried \
                and not event.permanent:
            fetch.worker = fetch.untried.pop(0)
            return [FetchDependency(event.key, fetch.worker, fetch.nbytes)], None
        del self.fetches[event.key]
        if fetch.replicate:
            return [ops.ReplicateFailed(event.key, event.reason or "fetch failed")], fetch
        return [], fetch

    def free(self, event: ops.Free) -> list[Action]:
        actions: list[Action] = []
        for key in event.keys:
            held = self.results.get(key)
            if held is None or not held.owned:
                continue  # fetched copies go when the tasks that need them do
            if key in self.needed_by:
                # Still an input of a task here: keep it as long as that task needs it.
                self.results[key] = HeldResult(held.nbytes, owned=False)
            else:
                del self.results[key]
                actions.append(ReleaseResult(key))
        return actions

    def replicate(self, event: ops.Replicate, refusal: str) -> list[Action]:
        """Keep a copy of ``event.key`` for the scheduler; ``refusal``: why this worker cannot
        fetch one now ("" when it can), for a key neither held nor on its way."""
        key = event.key
        held = self.results.get(key)
        if held is not None:
            if not held.owned:  # an input fetched for a task here: keep it for the scheduler
                report = ops.Replicated(key, held.nbytes)
                self.results[key] = HeldResult(held.nbytes, owned=True, report=report)
                return [report]
            return [ops.Replicated(key, held.nbytes)]
        fetch = self.fetches.get(key)
        if fetch is not None:  # already on its way (an input of a task here, or asked twice)
            fetch.replicate = True
            return []
        if refusal:
            return [ops.ReplicateFailed(key, refusal)]
        sources = self.sources(event.who_has)
        if not sources:
            return [ops.ReplicateFailed(key, "no other worker holds it")]
        return [self.fetch(key, sources, event.nbytes, replicate=True)]

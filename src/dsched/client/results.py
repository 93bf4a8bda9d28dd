"""Results: ``gather``, waiting for many futures at once, and fetching results from workers.

A ``gather`` of 10,000 futures hangs one countdown on them, not 10,000 waiters, and asks each
worker once for all the results it holds. Runs on the client's loop; blocking callers reach it
through the bridge. Sends nothing to the scheduler: results come from the workers alone.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from .. import serialize
from ..errors import SchedError
from ..peers import PeerPool
from .bridge import on_loop
from .future import PENDING, Future, FutureState, FutureStatus

FINISHED = FutureStatus.finished
#: Seconds the client keeps trying to fetch a finished task's result from its workers.
FETCH_PATIENCE = 10.0
#: Results asked for in one request to a worker, in bytes; a larger result gets a request of
#: its own (it travels in as many frames as it needs).
REQUEST_BYTES = 64 * 2**20
#: Stands for the result of a future that failed, in ``gather(errors="skip")``.
MISSING = object()


class Results:
    """The results of one client's futures, from the workers that hold them.

    ``peers`` (the client's PeerPool) is set once the client is connected. A fetch waits
    ``timeout`` seconds plus the time ``transfer_rate`` (bytes/s) gives the result's size, and
    gives up early once ``running()`` says the client has stopped.
    """

    def __init__(self, timeout: float, transfer_rate: float, request_bytes: int,
                 running: Callable[[], bool]):
        self.peers: PeerPool | None = None
        self._timeout = timeout
        self._transfer_rate = transfer_rate
        self._request_bytes = request_bytes
        self._running = running

    async def gather(self, futures: Any, errors: str = "raise") -> Any:
        """The results of futures, in the same structure (one future, or lists, tuples, sets
        and dicts of them). ``errors="skip"`` leaves failed ones out of lists."""
        if errors not in ("raise", "skip"):
            raise ValueError(f"errors must be 'raise' or 'skip', not {errors!r}")
        found: dict[str, Future] = {}

        def collect(value: Any) -> serialize.TaskRef | None:
            if type(value) is Future:
                found[value.key] = value
                return serialize.TaskRef(value.key)
            return None

        structure, _ = serialize.replace_futures(futures, collect)
        values = await self.values(list(found.values()), errors)
        data = {key: value for key, value in zip(found, values) if value is not MISSING}
        return substitute_present(structure, data)

    async def values(self, futures: list[Future], errors: str = "raise") -> list[Any]:
        """The result of each future once all have ended (MISSING for a failed one with
        ``errors="skip"``; with ``"raise"``, the first failure in order is raised)."""
        states = [future._state for future in futures]
        await wait_all(states, fail_fast=errors == "raise")
        if errors == "raise":
            for future in futures:
                future._raise_if_failed()
        values = await self._fetch([s for s in states if s.status is FINISHED])
        return [values.get(state.key, MISSING) for state in states]

    async def _fetch(self, states: list[FutureState]) -> dict[str, Any]:
        assert self.peers is not None
        rate = self._transfer_rate
        return await fetch_results(self.peers, states,
                                   timeout_for=lambda nbytes: self._timeout + nbytes / rate,
                                   still_running=self._running,
                                   request_bytes=self._request_bytes)


async def wait_all(states: list[FutureState], fail_fast: bool) -> None:
    """Until every state has ended, or (``fail_fast``) one has ended other than finished."""
    pending = [state for state in states if state.status is PENDING]
    if fail_fast and any(s.status is not FINISHED for s in states if s.status is not PENDING):
        return
    if not pending:
        return
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    left = len(pending)

    def ended(state: FutureState) -> None:
        nonlocal left
        left -= 1
        if (left == 0 or (fail_fast and state.status is not FINISHED)) and not done.done():
            done.set_result(None)

    def wake(state: FutureState) -> None:
        if on_loop(loop):
            ended(state)
        else:
            loop.call_soon_threadsafe(ended, state)

    for state in pending:
        if not state.on_done(wake):
            ended(state)
    await done


async def fetch_results(peers: PeerPool, states: list[FutureState],
                        timeout_for: Callable[[int], float], still_running: Callable[[], bool],
                        request_bytes: int = REQUEST_BYTES) -> dict[str, Any]:
    """The results of finished ``states`` straight from the workers holding them: few requests
    per worker (each at most ``request_bytes`` of results), retrying other holders (and new ones
    the scheduler reports) for a while; the error at the end says what went wrong last."""
    wanted = {state.key: state for state in states}
    values: dict[str, Any] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FETCH_PATIENCE
    attempt = 0
    failure: BaseException | None = None
    while True:
        for key, state in list(wanted.items()):
            if state.status is not FINISHED:  # lost meanwhile: wait for its new end
                await wait_all([state], fail_fast=True)
                if state.status is not FINISHED:
                    raise state.exception or SchedError(f"task {key}: {state.reason}")
                deadline = loop.time() + FETCH_PATIENCE
        requests = _requests(wanted, attempt, request_bytes)
        replies = await asyncio.gather(
            *(peers.get_data(worker, tuple(keys), timeout_for(nbytes))
              for worker, keys, nbytes in requests),
            return_exceptions=True)
        for reply in replies:
            if isinstance(reply, BaseException):
                failure = reply
                continue
            for key, payload in reply.data.items():
                if key in wanted:
                    values[key] = serialize.loads(payload)
                    del wanted[key]
            for key, text in reply.errors.items():
                if key in wanted:  # the worker cannot send it: no use asking again
                    raise SchedError(text)
        if not wanted:
            return values
        by_worker = [worker for worker, _, _ in requests]
        attempt += 1
        if loop.time() > deadline or not still_running():
            raise SchedError(f"could not fetch the results of {list(wanted)[:5]} from their "
                             f"workers {list(by_worker)[:5]}"
                             + (f": {failure or type(failure).__name__}" if failure else ""))
        await asyncio.sleep(min(0.05 * 2**attempt, 1.0))


def _requests(wanted: dict[str, FutureState], attempt: int,
              budget: int) -> list[tuple[str, list[str], int]]:
    """(worker, keys, bytes) per request: keys grouped by the worker asked this attempt, at
    most ``budget`` bytes of results in one request (a result over it alone in its own), so
    that a reply holds few large results at once."""
    requests: list[tuple[str, list[str], int]] = []
    open_request: dict[str, int] = {}
    for key, state in wanted.items():
        holders = state.who_has
        if not holders:
            continue
        worker = holders[attempt % len(holders)]
        index = open_request.get(worker)
        if index is None or requests[index][2] + state.nbytes > budget:
            open_request[worker] = index = len(requests)
            requests.append((worker, [], 0))
        _, keys, nbytes = requests[index]
        keys.append(key)
        requests[index] = (worker, keys, nbytes + state.nbytes)
    return requests


def substitute_present(obj: Any, data: dict[str, Any]) -> Any:
    """Like ``serialize.substitute``, but leaves out refs to keys not in ``data`` (the failed
    futures of ``gather(errors="skip")``)."""
    kind = type(obj)
    if kind is serialize.TaskRef:
        return data.get(obj.key)
    if kind in (list, tuple, set, frozenset):
        return kind(substitute_present(item, data) for item in obj
                    if type(item) is not serialize.TaskRef or item.key in data)
    if kind is dict:
        return {name: substitute_present(item, data) for name, item in obj.items()
                if type(item) is not serialize.TaskRef or item.key in data}
    return obj

"""Results: waiting for many futures at once, and fetching results from the workers.

A ``gather`` of 10,000 futures hangs one countdown on them, not 10,000 waiters, and asks each
worker once for all the results it holds. Runs on the client's loop.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from .. import serialize
from ..errors import SchedError
from ..peers import PeerPool
from .future import PENDING, FutureState, FutureStatus

FINISHED = FutureStatus.finished
#: Seconds the client keeps trying to fetch a finished task's result from its workers.
FETCH_PATIENCE = 10.0
#: Results asked for in one request to a worker, in bytes; a larger result gets a request of
#: its own (it travels in as many frames as it needs).
REQUEST_BYTES = 64 * 2**20
#: Stands for the result of a future that failed, in ``gather(errors="skip")``.
MISSING = object()


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
        if asyncio._get_running_loop() is loop:
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

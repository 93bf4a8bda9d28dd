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


async def fetch_results(peers: PeerPool, states: list[FutureState], timeout: float,
                        still_running: Callable[[], bool]) -> dict[str, Any]:
    """The results of finished ``states`` straight from the workers holding them: one request
    per worker, retrying other holders (and new ones the scheduler reports) for a while."""
    wanted = {state.key: state for state in states}
    values: dict[str, Any] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FETCH_PATIENCE
    attempt = 0
    while True:
        by_worker: dict[str, list[str]] = {}
        for key, state in wanted.items():
            holders = state.who_has
            if holders:
                by_worker.setdefault(holders[attempt % len(holders)], []).append(key)
        replies = await asyncio.gather(
            *(peers.request(worker, {"op": "get-data", "keys": keys}, timeout)
              for worker, keys in by_worker.items()),
            return_exceptions=True)
        for reply in replies:
            if isinstance(reply, BaseException):
                continue
            for key, payload in reply.get("data", {}).items():
                if key in wanted:
                    values[key] = serialize.loads(payload)
                    del wanted[key]
        if not wanted:
            return values
        attempt += 1
        if loop.time() > deadline or not still_running():
            raise SchedError(f"could not fetch the results of {list(wanted)[:5]} from their "
                             f"workers {list(by_worker)[:5]}")
        await asyncio.sleep(min(0.05 * 2**attempt, 1.0))


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

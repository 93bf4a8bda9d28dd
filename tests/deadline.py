"""The one way tests wait: poll a condition until it holds, or fail at a deadline.

``wait_until`` blocks the calling thread; ``wait_until_async`` waits on the running event loop.
Both return the predicate's first truthy value, so a test can wait for and read a state in one
step. Shipped by value to workers (tasks that wait for a test's signal use it too).
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any, Callable

import cloudpickle

cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: Seconds a test waits for something that should happen promptly.
DEFAULT_TIMEOUT = 30.0


def wait_until(predicate: Callable[[], Any], timeout: float = DEFAULT_TIMEOUT,
               interval: float = 0.02, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; AssertionError at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout:g}s")
        time.sleep(interval)


async def wait_until_async(predicate: Callable[[], Any], timeout: float = DEFAULT_TIMEOUT,
                           interval: float = 0.01, what: str = "condition") -> Any:
    """``wait_until`` for coroutines: polls without blocking the event loop."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout:g}s")
        await asyncio.sleep(interval)

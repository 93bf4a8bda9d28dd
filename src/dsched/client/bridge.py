"""The blocking bridge: an event loop on a thread of its own, and "run this coroutine on that
loop and wait" for code on any other thread.

A blocking :class:`~dsched.Client` drives its client on a :class:`LoopThread`; futures use
:func:`run_and_wait` and :func:`on_loop` (through the client that made them) to block their
caller, or to know that they must not. Knows nothing of clients or futures, and must never
wait on the loop it is called from: that would hang the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Coroutine


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, or None."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def on_loop(loop: asyncio.AbstractEventLoop | None) -> bool:
    """Whether the caller runs on ``loop``, where it must not block."""
    return loop is not None and running_loop() is loop


def run_and_wait(loop: asyncio.AbstractEventLoop, coroutine: Coroutine,
                 timeout: float | None = None) -> Any:
    """Run ``coroutine`` on ``loop`` (running in another thread) and block until it returns;
    TimeoutError, and the coroutine cancelled, after ``timeout`` seconds."""
    running = asyncio.run_coroutine_threadsafe(coroutine, loop)
    # Waited for apart from its result: concurrent.futures.TimeoutError is TimeoutError, so
    # catching it around result() would take the coroutine's own TimeoutError for this one.
    if not concurrent.futures.wait([running], timeout).done:
        running.cancel()
        raise TimeoutError(f"no answer within {timeout:g} seconds")
    return running.result()


class LoopThread:
    """A new event loop, run forever on a daemon thread until :meth:`stop`."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    @property
    def closed(self) -> bool:
        return self.loop.is_closed()

    def run(self, coroutine: Coroutine, timeout: float | None = None) -> Any:
        """Run ``coroutine`` on this thread's loop and wait for its value (see
        :func:`run_and_wait`)."""
        return run_and_wait(self.loop, coroutine, timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the loop and close it once its thread has ended (a thread still stuck after
        ``timeout`` keeps its loop open, since closing a running loop raises)."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()

"""Waiting on many futures: ``wait``, ``as_completed`` and ``progress``.

Each hangs a done-callback on the futures not yet ended and blocks on one event or queue, so
it wakes as soon as a task ends and costs O(1) per task, not a scan of all futures per wake.
``wait`` and ``as_completed`` also work in coroutines of an asynchronous client (``await
wait(...)``, ``async for future in as_completed(...)``).
"""

from __future__ import annotations

import asyncio
import collections
import sys
import threading
import time
from typing import Any, Iterable, Iterator, NamedTuple, TextIO

from .future import Future

FIRST_COMPLETED = "FIRST_COMPLETED"
ALL_COMPLETED = "ALL_COMPLETED"


class DoneAndNotDone(NamedTuple):
    done: set[Future]
    not_done: set[Future]


def _futures(futures: Iterable[Future] | Future) -> list[Future]:
    if isinstance(futures, Future):
        return [futures]
    futures = list(dict.fromkeys(futures))
    for future in futures:
        if not isinstance(future, Future):
            raise TypeError(f"expected futures, got a {type(future).__name__}")
    return futures


def _on_own_loop(futures: list[Future]) -> bool:
    return bool(futures) and futures[0]._owner.on_loop()


def wait(futures: Iterable[Future] | Future, timeout: float | None = None,
         return_when: str = ALL_COMPLETED) -> Any:
    """Block until all (or, with FIRST_COMPLETED, any) of ``futures`` end; ``(done,
    not_done)``. Raises TimeoutError after ``timeout`` seconds. A coroutine on the loop of an
    asynchronous client."""
    if return_when not in (FIRST_COMPLETED, ALL_COMPLETED):
        raise ValueError(f"return_when must be {FIRST_COMPLETED} or {ALL_COMPLETED}")
    futures = _futures(futures)
    if _on_own_loop(futures):
        return _wait_async(futures, timeout, return_when)
    event = threading.Event()
    _when_enough_done(futures, return_when, event.set)
    if not event.wait(timeout):
        _raise_timeout(futures, timeout)
    return _split(futures)


async def _wait_async(futures: list[Future], timeout: float | None,
                      return_when: str) -> DoneAndNotDone:
    loop = asyncio.get_running_loop()
    event = asyncio.Event()
    _when_enough_done(futures, return_when, lambda: loop.call_soon_threadsafe(event.set))
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except asyncio.TimeoutError:
        _raise_timeout(futures, timeout)
    return _split(futures)


def _when_enough_done(futures: list[Future], return_when: str, then: Any) -> None:
    """Call ``then()`` once all (or the first) of ``futures`` have ended."""
    pending = [future for future in futures if not future.done()]
    if not pending or (return_when == FIRST_COMPLETED and len(pending) < len(futures)):
        then()
        return
    needed = [1 if return_when == FIRST_COMPLETED else len(pending)]
    lock = threading.Lock()

    def one_done(state: Any = None) -> None:
        with lock:
            needed[0] -= 1
            enough = needed[0] == 0
        if enough:
            then()

    for future in pending:
        if not future._state.on_done(one_done):
            one_done()


def _split(futures: list[Future]) -> DoneAndNotDone:
    done = {future for future in futures if future.done()}
    return DoneAndNotDone(done, set(futures) - done)


def _raise_timeout(futures: list[Future], timeout: float | None) -> None:
    left = sum(1 for future in futures if not future.done())
    raise TimeoutError(f"{left} of {len(futures)} tasks did not finish within {timeout} seconds")


class as_completed:  # noqa: N801 (named like the function it mirrors)
    """Iterate over futures in the order they end; more may be added while iterating.

    ``with_results=True`` yields ``(future, result)`` pairs (raising a failed task's
    exception, unless ``raise_errors=False``, which yields the exception as the result).
    """

    def __init__(self, futures: Iterable[Future] | None = None, *, with_results: bool = False,
                 raise_errors: bool = True, timeout: float | None = None):
        self.with_results = with_results
        self.raise_errors = raise_errors
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._timeout = timeout
        self._ready: collections.deque[Future] = collections.deque()
        self._pending = 0
        self._condition = threading.Condition()
        self._async_waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future] | None = None
        if futures is not None:
            self.update(futures)

    def add(self, future: Future) -> None:
        """Also yield ``future`` once it ends."""
        with self._condition:
            self._pending += 1
        if not future._state.on_done(lambda state: self._ended(future)):
            self._ended(future)

    def update(self, futures: Iterable[Future]) -> None:
        for future in futures:
            self.add(future)

    def count(self) -> int:
        """Futures not yet yielded."""
        with self._condition:
            return self._pending + len(self._ready)

    def is_empty(self) -> bool:
        return self.count() == 0

    def _ended(self, future: Future) -> None:
        with self._condition:
            self._pending -= 1
            self._ready.append(future)
            self._condition.notify_all()
            waiter, self._async_waiter = self._async_waiter, None
        if waiter is not None:
            loop, wake = waiter
            loop.call_soon_threadsafe(lambda: wake.done() or wake.set_result(None))

    def _remaining(self) -> float | None:
        return None if self._deadline is None else self._deadline - time.monotonic()

    def _timed_out(self) -> TimeoutError:
        return TimeoutError(f"{self.count()} tasks did not finish within {self._timeout} seconds")

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        with self._condition:
            while not self._ready:
                if not self._pending:
                    raise StopIteration
                remaining = self._remaining()
                if remaining is not None and remaining <= 0:
                    raise self._timed_out()
                self._condition.wait(remaining)
            future = self._ready.popleft()
        if not self.with_results:
            return future
        return future, self._result_now(future)

    def _result_now(self, future: Future) -> Any:
        try:
            return future.result()
        except Exception as error:
            if self.raise_errors:
                raise
            return error

    def __aiter__(self) -> "as_completed":
        return self

    async def __anext__(self) -> Any:
        loop = asyncio.get_running_loop()
        while True:
            with self._condition:
                if self._ready:
                    future = self._ready.popleft()
                    break
                if not self._pending:
                    raise StopAsyncIteration
                wake = loop.create_future()
                self._async_waiter = (loop, wake)
            remaining = self._remaining()
            try:
                await asyncio.wait_for(wake, remaining)
            except asyncio.TimeoutError:
                raise self._timed_out() from None
        if not self.with_results:
            return future
        try:
            return future, await future
        except Exception as error:
            if self.raise_errors:
                raise
            return future, error

    def batches(self) -> Iterator[list[Any]]:
        """Yield lists of everything that has ended since the last list."""
        while True:
            try:
                first = next(self)
            except StopIteration:
                return
            batch = [first]
            with self._condition:
                ready, self._ready = list(self._ready), collections.deque()
            batch.extend((f, self._result_now(f)) if self.with_results else f for f in ready)
            yield batch


def progress(futures: Iterable[Future] | Future, *, width: int = 40,
             stream: TextIO | None = None, interval: float = 0.1) -> None:
    """Draw a text progress bar (on stdout, as Dask does) until every future has ended."""
    futures = _futures(futures)
    stream = stream or sys.stdout
    total = len(futures)
    start = time.monotonic()

    def draw(count: int, errors: int) -> None:
        filled = int(width * count / total) if total else width
        failed = f", {errors} failed" if errors else ""
        stream.write(f"\r[{'#' * filled}{' ' * (width - filled)}] | {count}/{total} done"
                     f"{failed} | {time.monotonic() - start:.1f}s")
        stream.flush()

    count = errors = 0
    drawn = 0.0
    draw(0, 0)
    for future in as_completed(futures):
        count += 1
        errors += future.status != "finished"
        now = time.monotonic()
        if now - drawn >= interval or count == total:
            draw(count, errors)
            drawn = now
    stream.write("\n")
    stream.flush()

"""A daemon's background activities, owned: each runs as a task of one group, and one that
raises stops the daemon with its reason instead of being lost.

The scheduler's activities are its ticker, its journal commits and its connections' handlers;
the worker's, its session with the scheduler, its heartbeats and what it runs. ``start`` makes
the group (in a task of its own); ``spawn`` adds an activity, or closes it unrun once the
daemon is stopping; the first activity that raises is said (``failed(what, error)``) and the
group cancels the others. Setting ``stop`` (the daemon's own event) ends the group: those
spawned ``until_stop`` are cancelled at once, the others may end for up to ``grace`` seconds
(None: as long as they take) and are cancelled after it; ``ended()`` returns once none is
left, and whether any was cancelled for the grace. No decision is taken here.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Coroutine


class Activities:
    """The task group of a daemon's background activities; see the module docstring. Its
    tasks are named ``"{name}: {what}"``."""

    def __init__(self, name: str, stop: asyncio.Event,
                 failed: Callable[[str, BaseException], None], grace: float | None = None):
        self.name, self.stop, self.grace = name, stop, grace
        self._failed = failed
        self._group: asyncio.TaskGroup | None = None
        self._runner: asyncio.Task | None = None
        self._until_stop: set[asyncio.Task] = set()
        self._said = False  # a failure was said: later ones are its consequences
        #: Whether the grace ran out with activities left (cancelled then).
        self.late = False

    async def start(self) -> None:
        """Make the group: ``spawn`` runs activities from now on."""
        loop = asyncio.get_running_loop()
        entered = loop.create_future()
        self._runner = loop.create_task(self._run(entered), name=f"{self.name}: activities")
        await entered

    @property
    def stopping(self) -> bool:
        """From ``stop`` on, or once the group has ended (an activity failed): nothing new
        starts."""
        return self._group is None or self.stop.is_set()

    def spawn(self, coroutine: Coroutine, what: str,
              until_stop: bool = False) -> asyncio.Task | None:
        """Run ``coroutine`` in the group (``what`` names it, should it fail); None, and it
        never runs, once stopping. ``until_stop``: cancelled as soon as ``stop`` is set."""
        if self._runner is None:
            coroutine.close()
            raise RuntimeError(f"{what}: the {self.name} is not started")
        if not self.stopping:
            assert self._group is not None
            guarded = self._guarded(coroutine, what)
            try:
                task = self._group.create_task(guarded, name=f"{self.name}: {what}")
            except RuntimeError:  # the group is shutting down, after a failure
                guarded.close()
            else:
                # Cancelled before its first step, it never awaited ``coroutine``: closed.
                task.add_done_callback(lambda _: coroutine.close())
                if until_stop:
                    self._until_stop.add(task)
                    task.add_done_callback(self._until_stop.discard)
                return task
        coroutine.close()
        return None

    async def ended(self) -> bool:
        """Once the group has ended (set ``stop`` first); whether the grace ran out."""
        if self._runner is not None:
            await self._runner
        return self.late

    async def _guarded(self, coroutine: Coroutine, what: str) -> None:
        """One activity. An exception that escapes it stops the daemon at once (the first is
        said, before any other activity runs again), then the group cancels the rest."""
        try:
            await coroutine
        except Exception as error:
            if not self._said:
                self._said = True
                self._failed(what, error)
            raise

    async def _run(self, entered: asyncio.Future) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(None) as limit:
                async with asyncio.TaskGroup() as group:
                    self._group = group
                    entered.set_result(None)
                    await self.stop.wait()
                    for task in list(self._until_stop):
                        task.cancel()
                    if self.grace is not None:
                        limit.reschedule(loop.time() + self.grace)
        except TimeoutError:
            self.late = True
        except Exception:  # noqa: BLE001 - each activity that raised was said (``_guarded``)
            pass
        finally:
            self._group = None
            if not entered.done():
                entered.set_result(None)

"""The journal's group commit: actions wait for the commit of the rows they promise.

A batch of actions from ``SchedulerState.handle`` that starts with a ``JournalWrite`` is held
until those rows are committed (on one journal thread), and every batch that comes meanwhile
waits behind it, so nothing is said before what it depends on is durable, and order is kept.
Batches that arrive while the event loop turns join the same transaction. The named failpoints
of the crash tests sit at these commits.

One thing goes ahead of its commit: a job attempt the write starts is sent as soon as the
journal's thread has the write, as a hold (``SendExecute.hold``), and its SendProceed takes its
place behind the commit. The worker prepares the attempt (its record, its supervisor) while
the journal reaches the disk, and spawns the command only on the Proceed; a hold whose session
ends first is dropped unreported, and the scheduler, which lost the session too, finds the
attempt unlisted when the worker comes back, and puts the job back in its queue (or has no row
of it, if it crashed before the commit). Nothing a hold does can be seen, so the promise
stands: nothing runs before what it depends on is durable.

It carries out nothing itself (``carry_out`` does) and decides nothing about jobs: that is the
state's. Its commits run as tasks of the scheduler's task group (``spawn``): one that raises
(a batch that cannot be carried out) fails there, and stops the scheduler. A commit that fails
calls ``fail``: no later promise could be kept.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Callable, Coroutine

from . import actions as act
from .failpoints import Failpoints
from .journal import Journal
from .optables import TO_WORKER

#: Where a cause's commit is the crash tests' failpoint, after it is durable.
_AFTER_COMMIT = (("submit", "after-submit-commit"), ("dispatch", "after-dispatch-commit"),
                 ("result", "after-result-commit"), ("reconcile", "in-reconciliation"))


class GroupCommit:
    """``carry_out_all(actions)`` for the scheduler's shell; see the module docstring."""

    def __init__(self, journal: Journal | None, carry_out: Callable[[Any], None],
                 fail: Callable[[str], None], committed: Callable[[float, int], None],
                 spawn: Callable[[Coroutine], asyncio.Task | None],
                 urgent: Callable[[Any], bool] = lambda action: type(action) in TO_WORKER,
                 flush: Callable[[], None] = lambda: None):
        self.journal = journal
        self.failpoints = Failpoints()
        self._carry_out, self._fail, self._timed = carry_out, fail, committed
        #: Called once what workers wait for is carried out: the attempts a commit starts,
        #: gone ahead (all of them: sent then, while the commit's thread writes), and, once it
        #: is committed, its ops to workers (sent before what clients are told is made). The
        #: shell sends each worker's in one message, then, not at the end of the loop's turn.
        self._flush = flush
        #: Which actions of a commit go first: the ops to workers, what a worker waits for to
        #: start a job (a client only hears of it). Each connection still gets its ops in order.
        self._urgent = urgent
        #: Starts a commit in the scheduler's task group; None once the scheduler is stopping.
        self._spawn = spawn
        #: Batches of actions waiting for a journal commit (None: none is pending), in order.
        self._held: list[list] | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="sched-journal")

    def carry_out_all(self, actions: list) -> None:
        """Carry out ``actions`` in order, once the journal write they start with (if any) is
        committed; while a commit is pending, later actions wait behind it."""
        if self._held is not None:
            if actions:
                self._held.append(actions)
            return
        if actions and type(actions[0]) is act.JournalWrite:
            self._held = [actions]
            if self._spawn(self._commit()) is None:  # stopping: nothing more is said
                self._held = []
            return
        for action in actions:
            self._carry_out(action)

    def _send_ahead(self, batches: list[list]) -> None:
        """Send each job attempt that the held batches' write starts now, as a hold, and put
        its SendProceed in its place; nothing to a worker whose Registered is among them, be
        it before or after (it must be the first op the worker hears)."""
        joining = {action.worker for actions in batches for action in actions
                   if type(action) is act.WorkerAccepted}
        for actions in batches:
            writes = type(actions[0]) is act.JournalWrite
            for i, action in enumerate(actions):
                if type(action) is act.SendExecute and writes and action.job is not None \
                        and action.worker not in joining:
                    self._carry_out(replace(action, hold=True))
                    actions[i] = act.SendProceed(worker=action.worker, keys=(action.key,))
        self._flush()

    def stop(self) -> None:
        """Say nothing more: what is not journaled was never promised."""
        self._held = []

    def close(self) -> None:
        """Once no commit runs (the scheduler has closed): let the journal's thread go."""
        self.stop()
        self._thread.shutdown(wait=False)

    async def _commit(self) -> None:
        """Commit what the held batches journal, in one transaction (more batches join while
        the event loop turns), then carry them out in order; again while more wait."""
        loop = asyncio.get_running_loop()
        reached = self.failpoints.reached
        while self._held:
            batches, self._held = self._held, []
            rows: dict[int, Any] = {}
            causes: set[str] = set()
            attempts: list = []
            for actions in batches:
                if type(actions[0]) is act.JournalWrite:
                    rows.update((row["id"], row) for row in actions[0].rows)
                    causes |= actions[0].causes
                    attempts += actions[0].attempts
            if rows or attempts:
                started = time.perf_counter()
                ended = (attempts,) if attempts else ()  # most commits end no attempt
                writing = loop.run_in_executor(self._thread, self.journal.write, rows.values(),
                                               *ended)
                if "dispatch" in causes:
                    # The thread writes; meanwhile the workers prepare what it will commit.
                    self._send_ahead(batches)
                    reached("before-dispatch-commit")
                try:
                    await writing
                except Exception as error:  # the disk is full or gone: no promise can be kept
                    self._fail(f"cannot write the journal {self.journal.path}: {error}")
                    return
                self._timed(time.perf_counter() - started, len(rows))  # thread hop included
                for cause, name in _AFTER_COMMIT:
                    if cause in causes:
                        reached(name)
            urgent = self._urgent
            for first in (True, False):
                for actions in batches:
                    for action in actions:
                        if type(action) is not act.JournalWrite and urgent(action) is first:
                            self._carry_out(action)
                if first:  # a Proceed's worker waits on it to spawn a job: sent now
                    self._flush()
        self._held = None

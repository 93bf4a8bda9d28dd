"""The worker's side of its jobs: the job directory, and one supervisor process per attempt.

``JobRunner`` locks the job directory for this worker process and reads what an earlier one
left there (``jobrecords.recover``); for each StartJob it records the attempt durably, then
has its spawner (``jobspawner``) fork a supervisor (in a session of its own, so a terminal's
signals do not reach it, and holding the lock on the job's log; without a spawner, it starts
``python -m dsched.worker.jobsupervisor`` instead) and hands what the supervisor says,
AttemptStarted then AttemptEnded, back as events. It writes new lease deadlines and
stops to the supervisors' stdin, and serves the logs. A supervisor that dies without saying how
its attempt ended takes the job with it (``lifeline``); the runner then records it lost. In the
worker's cgroup mode (``containment``) each attempt gets a cgroup, which its supervisor makes
(ahead of the attempt, where the spawner keeps one ready) and removes; the runner kills and
removes it too once the supervisor is gone, whatever became of it.

This is I/O: which attempts start, and what is reported, is ``WorkerState``'s decision.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from typing import Any, Callable, Coroutine, Mapping

from ..jobs import parse_job_key
from ..protocol import ops
from . import cgroups, containment
from .actions import IDLE, SHUTDOWN, StartJob
from .gpufaults import FAULT
from .spawnerclient import Spawner
from .jobrecords import (
    add_to_record, ended_of, lock_directory, log_path, machine_restarted, mark_boot, new_record,
    open_locked_log, read_log, read_record, record_path, recover, remove_record, write_record,
)
from .lifeline import describe_exit

logger = logging.getLogger("dsched.worker")

#: The most bytes of a log one GetLog is answered with.
MAX_LOG_CHUNK = 8 << 20
#: Seconds a worker process that starts waits for the supervisors of an earlier one to record
#: how their attempts ended (they kill their jobs at once when their worker goes).
RECOVERY_WAIT = 10.0


class JobRunner:
    """``await open()`` first (it returns the attempts found ended); ``run(start)`` for each
    StartJob, in the worker's task group; ``await close()`` at the end, which ends the jobs
    still running (their supervisors record them lost). ``env``: the environment supervisors,
    and so their jobs, start from (None: this process's); ``slots``: the attempts it may run
    at once (the worker's threads), as many supervisors as its spawner keeps for later ones."""

    def __init__(self, directory: str, worker_name: str, kill_grace: float,
                 on_event: Callable[[Any], None], env: Mapping[str, str] | None = None,
                 slots: int = 1):
        self.directory = directory
        self.slots = slots  # the attempts it may run at once (the worker's threads)
        self.env = env
        self.worker_name = worker_name
        self.kill_grace = kill_grace
        self._on_event = on_event
        self._lock_fd: int | None = None
        self._supervisors: dict[str, Any] = {}  # a Process, or a Spawned
        self._owners: dict[str, asyncio.Future] = {}  # the run each of those supervises
        self._spawner = Spawner(None if env is None else dict(env))
        #: A stop (or go) given to a run before its supervisor was started, by run.
        self._orders: dict[asyncio.Future, str] = {}
        #: Each attempt's run, by key, while it lasts: a held attempt dropped may be sent
        #: again under the same key, and then starts once the dropped one is gone.
        self._runs: dict[str, asyncio.Future] = {}
        self._dropped: set[asyncio.Future] = set()  # runs to end unreported (``drop``)
        #: The keys whose records go once what came with their acknowledgement is done
        #: (``forget``).
        self._forgetting: list[str] = []
        self.lease_until = 0.0
        #: Whether the machine started again since a scheduler last heard so (``open``): said
        #: to the scheduler until a session with it has opened (``restart_heard``).
        self.machine_restarted = True
        #: The worker's mode (set once it is known): a cgroup for each attempt, or none.
        self.containment = containment.Containment(containment.SUBREAPER)

    async def open(self, holder: str = "") -> list[ops.AttemptEnded]:
        """Lock the job directory (OSError if that cannot be done; ``holder``: who this process
        is, for the lock file) and recover what is there."""
        self._lock_fd = await asyncio.to_thread(lock_directory, self.directory, holder)
        self.machine_restarted = await asyncio.to_thread(machine_restarted, self.directory)
        await self._spawner.start()
        found = await asyncio.to_thread(recover, self.directory, RECOVERY_WAIT)
        if found:
            logger.info("Found %d job attempt(s) of an earlier worker process in %s; reporting "
                        "them to the scheduler", len(found), self.directory)
        return found

    def contain(self, chosen: containment.Containment) -> None:
        """The worker's mode is known: attempts run in cgroups of their own, or none; the
        spawner keeps a supervisor prepared ahead, in the cgroup of the next attempt."""
        self.containment = chosen
        self._spawner.prepare(chosen.cgroup_for("attempt-"), self.slots)

    # -- one attempt ----------------------------------------------------------------------------

    def run(self, start: StartJob) -> Coroutine[Any, Any, None]:
        """The attempt's run, to await: it starts once an earlier run of its key (a held
        attempt dropped, sent again) is over, and ``drop`` finds it from now on."""
        previous = self._runs.get(start.key)
        done = self._runs[start.key] = asyncio.get_running_loop().create_future()
        return self._run_after(previous, done, start)

    async def _run_after(self, previous: asyncio.Future | None, done: asyncio.Future,
                         start: StartJob) -> None:
        try:
            if previous is not None:
                await asyncio.shield(previous)
            await self._run(start, done)
        finally:
            done.set_result(None)
            self._dropped.discard(done)
            self._orders.pop(done, None)
            if self._runs.get(start.key) is done:
                del self._runs[start.key]

    async def _run(self, start: StartJob, this: asyncio.Future) -> None:
        key = start.key
        if this in self._dropped:  # dropped while an earlier run of its key ended
            return
        record, log = record_path(self.directory, key), log_path(self.directory, key)
        self.lease_until = max(self.lease_until, start.lease_until)
        try:  # in the page cache: a write, no wait for the disk (``jobrecords``)
            lock_fd = self._record(record, log, start)
        except OSError as error:
            return self._cannot_start(key, log, f"cannot record it in {self.directory}: "
                                                f"{error.strerror or error}")
        cgroup = self.containment.cgroup_for(key)
        process: Any = None
        # A supervisor forked by the spawner had orders told on its stdin as it was forked
        # (``_opened``); one started as a program in its place hears them once it runs.
        as_program = False
        try:
            if await self._spawner.ready():  # forked in a millisecond
                lease = self.lease_until  # the latest: the spawner may have just started
                try:
                    process = await self._spawner.spawn(
                        [record, str(lock_fd), repr(self.kill_grace), repr(lease), cgroup],
                        lock_fd, lambda spawned: self._opened(key, spawned, this, lease))
                except OSError:  # not sent, or not forked: nothing started
                    self._supervisors.pop(key, None)
                    self._owners.pop(key, None)
            if process is None:  # a fresh interpreter: a tenth of a second or more
                lease, as_program = self.lease_until, True
                process = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "dsched.worker.jobsupervisor", record, str(lock_fd),
                    repr(self.kill_grace), repr(lease), *((cgroup,) if cgroup else ()),
                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                    pass_fds=(lock_fd,), start_new_session=True,
                    env=None if self.env is None else dict(self.env))
        except OSError as error:
            why = f"cannot start its supervisor: {error.strerror or error}"
            return self._cannot_start(key, log, why, record)
        finally:
            os.close(lock_fd)
        self._supervisors[key], self._owners[key] = process, this
        cgroup = getattr(process, "cgroup", cgroup)  # a spare's, where it was handed one
        logger.debug("Started job attempt %s (supervisor pid %s)", key, process.pid)
        kept = self._orders.pop(this, None)
        if as_program:  # told only now, and only once: each line wakes the supervisor
            if self.lease_until > lease:  # it grew while the supervisor started
                self._tell(key, repr(self.lease_until))
            if kept is not None:
                self._tell(key, kept)
        ended = False
        assert process.stdout is not None
        async for line in process.stdout:
            report = self._decode(key, line)
            if report is not None:
                ended = ended or type(report) is ops.AttemptEnded
                self._tell_state(report)
        code = await process.wait()
        if process.stdin is not None:  # done with it: no more orders
            process.stdin.close()
        del self._supervisors[key], self._owners[key]
        self._spawner.forget(record)
        dropped = this in self._dropped
        if dropped:  # never spawned: as if never sent (``drop``)
            remove_record(self.directory, key)
        # Gone already, or kept emptied by a spare done with the attempt, unless the supervisor
        # was killed or could not finish: then it may take waiting for what is left to die.
        if cgroup and not getattr(process, "done", False) and os.path.isdir(cgroup):
            await asyncio.to_thread(cgroups.remove_cgroup, cgroup)
        if not ended and not dropped:
            self._tell_state(await asyncio.to_thread(self._supervisor_died, key, record, code))

    def _opened(self, key: str, spawned: Any, run: asyncio.Future, lease: float) -> None:
        """A supervisor is about to be forked with this stdin and the deadline ``lease``: a
        stop, or a later lease, given from now on goes there at once (and one given before is
        there already when it first looks)."""
        self._supervisors[key], self._owners[key] = spawned, run
        if self.lease_until > lease:  # it grew since its arguments were made
            self._tell(key, repr(self.lease_until))
        if run in self._orders:  # kept until the fork is known to have happened
            self._tell(key, self._orders[run])

    def _record(self, record: str, log: str, start: StartJob) -> int:
        # Here before the supervisor is asked for: a worker process that starts after this one
        # died finds it, whatever the supervisor did; the scheduler then knows the attempt may
        # have run (lost, never run again). Where the machine restarted, it may be gone: the
        # worker says so when it registers (``machine_restarted``), and the scheduler then
        # counts every attempt it does not list as one that may have run.
        written = new_record(start.key, dict(start.job), start.gpus, log, self.worker_name)
        if start.hold:  # its supervisor waits for "go" (``proceed``)
            written["hold"] = True
        write_record(record, written)
        return open_locked_log(log)

    def _decode(self, key: str, line: bytes) -> Any:
        try:
            report = ops.decode(json.loads(line))
        except (ValueError, ops.BadOp) as error:
            logger.warning("The supervisor of %s said something unexpected (%s)", key, error)
            return None
        if type(report) not in (ops.AttemptStarted, ops.AttemptEnded) or report.key != key:
            logger.warning("The supervisor of %s said %s", key, report.OP)
            return None
        return report

    def _supervisor_died(self, key: str, record: str, code: int | None) -> ops.AttemptEnded:
        """The supervisor ended without telling how its attempt ended: read it from the record,
        or record it lost (its job died with it)."""
        try:
            written = read_record(record)
            ended = ended_of(written)
            if ended is not None:
                return ended
        except (OSError, ValueError) as error:
            logger.warning("Cannot read the record of %s: %s", key, error)
            written = {"log": log_path(self.directory, key)}
        how = "ended" if code is None else describe_exit(code)
        ended = ops.AttemptEnded(key, "lost", None, f"its supervisor process {how}"
                                 "; the job was killed with it", written["log"],
                                 written.get("started"), time.time())
        logger.warning("Job attempt %s: %s", key, ended.error)
        try:
            add_to_record(record, {"ended": ended.to_wire()})
        except (OSError, KeyError, TypeError) as error:
            logger.warning("Cannot record how %s ended: %s", key, error)
        return ended

    def _cannot_start(self, key: str, log: str, why: str, record: str | None = None) -> None:
        ended = ops.AttemptEnded(key, "failed", None, f"cannot start: {why}", log, None,
                                 time.time())
        if record is not None:
            try:
                add_to_record(record, {"ended": ended.to_wire()})
            except (OSError, ValueError) as error:
                logger.warning("Cannot record how %s ended: %s", key, error)
        self._tell_state(ended)

    def _tell_state(self, report: Any) -> None:
        if type(report) is ops.AttemptEnded and report.started is None:
            logger.warning("Job attempt %s %s", report.key, report.error)
        else:
            logger.debug("Job attempt %s: %s", report.key, report.OP)
        self._on_event(report)

    # -- orders to the supervisors --------------------------------------------------------------

    def extend(self, until: float) -> None:
        self.lease_until = max(self.lease_until, until)
        for key in list(self._supervisors):
            self._tell(key, repr(self.lease_until))

    def kill(self, key: str, why: str, reason: str = "") -> None:
        self._order(key, "shutdown" if why == SHUTDOWN else f"fault {reason}" if why == FAULT
                    else f"idle {reason}" if why == IDLE else "kill")

    def proceed(self, key: str) -> None:
        """The held attempt ``key`` is committed: its supervisor spawns it (a stop given
        before stands)."""
        self._order(key, "go", keep=False)

    def drop(self, key: str) -> None:
        """The held attempt ``key`` never runs: its supervisor exits without spawning it or
        saying anything, and its record then goes (an attempt sent again under this key
        starts after that)."""
        run = self._runs.get(key)
        if run is not None:
            self._dropped.add(run)
            self._order(key, "drop")

    def _order(self, key: str, order: str, keep: bool = True) -> None:
        """Tell ``key``'s supervisor ``order``; while it is being started, the order is kept
        and told again once it is known to run (or to its replacement). ``keep=False``: not
        in place of an order kept already."""
        run = self._runs.get(key)
        process = self._supervisors.get(key)
        if process is not None and self._owners.get(key) is not run:
            process = None  # an earlier run's, on its way out: the order is the next run's
        if run is not None and (process is None or process.pid is None):
            if keep or run not in self._orders:
                self._orders[run] = order
        self._write(process, order)

    def pid_of(self, key: str) -> int | None:
        """The pid of the supervisor of ``key`` (the root of its processes), once known."""
        process = self._supervisors.get(key)
        return None if process is None else process.pid

    def _tell(self, key: str, line: str) -> None:
        self._write(self._supervisors.get(key), line)

    @staticmethod
    def _write(process: Any, line: str) -> None:
        if process is not None and process.stdin is not None and not process.stdin.is_closing():
            process.stdin.write(line.encode() + b"\n")

    def forget(self, key: str) -> None:
        """The scheduler has the end of ``key``: its record goes (an unlink, no wait for the
        disk), once the rest of what the scheduler said with it is done: the Proceed of the
        job to start in its place comes in the same message, and that job's supervisor waits
        for it. Its supervisor may still be writing the end it told: a line added to a record
        forgotten is not written (``add_to_record``). One left by a stop is found by the next
        worker process, whose scheduler has its end already."""
        if not self._forgetting:
            asyncio.get_running_loop().call_soon(self._forget_now)
        self._forgetting.append(key)

    def _forget_now(self) -> None:
        keys, self._forgetting = self._forgetting, []
        for key in keys:
            try:
                remove_record(self.directory, key)
            except OSError as error:  # it stays, and the next worker process reports it again
                logger.warning("Cannot remove the record of %s: %s", key,
                               error.strerror or error)

    def restart_heard(self) -> None:
        """A scheduler has heard ``machine_restarted``: not said again by this process, and
        the directory marked for this start of the machine (off the loop: it waits for the
        disk), so the next process does not say it either."""
        if not self.machine_restarted:
            return
        self.machine_restarted = False

        def mark() -> None:
            try:
                mark_boot(self.directory)
            except OSError as error:  # the next worker process says it again: safe
                logger.warning("Cannot mark the job directory %s with this start of the "
                               "machine: %s", self.directory, error.strerror or error)

        asyncio.get_running_loop().run_in_executor(None, mark)

    # -- logs ---------------------------------------------------------------------------------

    async def log(self, request: ops.GetLog, running: bool) -> ops.Log:
        """The answer to GetLog; ``running``: the attempt had not ended when it was asked, so
        that ``ended`` is only said once nothing more will be written."""
        key = request.key
        if parse_job_key(key) is None:
            return ops.Log(request.id, error=f"{key!r:.80} is not the key of a job attempt")
        if request.offset < 0 or request.limit < 0:
            return ops.Log(request.id, error="offset and limit must not be negative")
        try:
            data, size = await asyncio.to_thread(read_log, log_path(self.directory, key),
                                                 request.offset, min(request.limit, MAX_LOG_CHUNK))
        except FileNotFoundError:
            return ops.Log(request.id, error=f"no log of {key} on this worker")
        except OSError as error:
            return ops.Log(request.id, error=f"cannot read the log of {key}: {error.strerror}")
        return ops.Log(request.id, data=data, size=size, ended=not running)

    # -- the end ----------------------------------------------------------------------------------

    async def close(self, timeout: float = 10.0) -> None:
        """End of file to every supervisor (each kills its job at once and records it lost),
        then wait for them; release the job directory."""
        live = [p for p in self._supervisors.values() if p.returncode is None]
        for process in live:
            if process.stdin is not None and not process.stdin.is_closing():
                process.stdin.close()
        for process in live:
            try:
                await asyncio.wait_for(process.wait(), timeout)
            except asyncio.TimeoutError:  # a supervisor that will not end: its group dies with it
                process.kill()
                await process.wait()
        self._supervisors.clear()
        await self._spawner.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

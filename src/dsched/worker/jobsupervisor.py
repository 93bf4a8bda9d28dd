"""The supervisor of one job attempt: a small process per job, started by the worker as
``python -m dsched.worker.jobsupervisor RECORD LOCK_FD KILL_GRACE LEASE_UNTIL [CGROUP]``.

It reads what to run from the attempt's record (``jobrecords``), spawns the command as the
leader of a process group of its own (``jobcommand``: its environment, PATH, directory and
descriptors), guarded by ``lifeline`` (the group dies with this process, however it ends),
with stdout and stderr appended to the job's log, and watches:

- the command's exit (a pidfd wakes it at once where there is one), after which whatever the
  command left running is killed: the job ends with its command, and nothing it started
  outlives it. Not only its group: the supervisor is a child subreaper, so orphans among the
  job's descendants are handed to it (and reaped by it) wherever their sessions are; and with a
  ``CGROUP`` (``containment``), the job runs in that cgroup, which is killed and removed;
- its stdin from the worker, one line at a time: a number is a new lease deadline (the
  worker's ``time.monotonic()``, the same clock in every process of the machine); ``kill``
  cancels the job; ``shutdown`` stops it because the worker is shutting down; ``fault WHAT``
  stops it because its GPU failed (it ends lost); ``idle WHAT`` because it held its GPUs idle
  (outcome ``idle``: it ends cancelled); end of file means the worker is gone: the group is
  killed at once;
- the job's time limit and its lease deadline. A job that outlives its lease is killed here, so
  that happens even while the worker process is frozen or busy; and one whose lease is over
  when its supervisor would spawn it (the worker froze, or was slow, after deciding to start
  it) is not spawned at all.

Cancel, time limit, lease and shutdown send SIGTERM to the group, the job's other descendants
and its cgroup, and SIGKILL after ``KILL_GRACE`` seconds. The supervisor writes the outcome
into the record itself before it tells it, so the outcome survives the worker's death, and
tells the worker each step as one JSON line on stdout, as on the wire: the AttemptStarted once
the command has run ``SAY_STARTED_AFTER`` (2 ms), or with the end if it ended sooner (one
wakeup of the worker, and one message to the scheduler, for a short job), then the
AttemptEnded. It holds the lock on the job's log (``LOCK_FD``) while it lives.

It makes no scheduling decisions: it runs one command and says how it ended.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from typing import Callable

from ..protocol.ops import AttemptEnded, AttemptStarted
from . import cgroups, containment, jobcommand
from .jobrecords import add_to_record, json_line, read_record
from .jobguard import Prepared
from .lifeline import describe_exit

#: Seconds between looks at the command where no pidfd tells of its exit.
_POLL_INTERVAL = 0.05
#: Seconds a command's start is kept untold in case it ends: said with its end, one wakeup of
#: the worker for both (a short job's); said alone once the command has run this long.
SAY_STARTED_AFTER = 0.002

#: Why a job was stopped, in the words of its AttemptEnded; and the outcome.
CANCELLED = ("cancelled", "killed because it was cancelled")
SHUTDOWN = ("lost", "killed because its worker shut down")
LEASE_EXPIRED = ("lost", "killed because its worker lost the scheduler for longer than its "
                         "job lease")
WORKER_GONE = ("lost", "killed because its worker process ended while it ran")
#: The error of an attempt stopped (for each of those reasons) before its command was spawned.
NOT_STARTED = {
    CANCELLED: "cancelled before it started",
    SHUTDOWN: "not started: its worker shut down",
    LEASE_EXPIRED: "not started: its worker had lost the scheduler for longer than its job lease",
    WORKER_GONE: "not started: its worker process ended",
}


class Supervision:
    """One attempt, from spawn to outcome."""

    def __init__(self, path: str, record: dict, kill_grace: float, lease_until: float,
                 cgroup: str = "", prepared: Prepared | None = None):
        self.path, self.record = path, record
        self.cgroup = prepared.cgroup if prepared is not None else cgroup
        self.key, self.job, self.log = record["key"], record["job"], record["log"]
        self.kill_grace, self.lease_until = kill_grace, lease_until
        self.ending: tuple[str, str] | None = None  # (outcome, error) once it is being stopped
        self.kill_at: float | None = None
        self.leader: int | None = None  # the command's pid once spawned
        self.pending = b""  # a part of a line from the worker
        #: Its cgroup and the job group's guard, made ahead by a spawner (``Prepared``), else
        #: once the command is about to be spawned.
        self.prepared = prepared
        self.started = 0.0  # time.time() once the command is spawned
        #: Called once the command is spawned and said to be (a spawner's spare: it says so,
        #: and the spawner forks the next one).
        self.spawned: Callable[[], None] | None = None
        #: Whether all the attempt started is gone, and its cgroup: a spare that runs the next
        #: attempt must not carry anything of this one into it.
        self.clean = True
        #: Whether the guard is kept for a later attempt (a spare's): moved back into this
        #: process's group before the job's is killed at its end, and spared by the sweep.
        self.keep_guard = False
        #: Whether the cgroup is kept for a later attempt (a spare's), emptied, not removed:
        #: a cgroup made and removed per attempt cost the kernel a tenth of a millisecond.
        self.keep_cgroup = False
        #: Whether the job's cgroup was found with no process but this one once its command
        #: ended (``_others_in_cgroup``): none can come into it after.
        self.emptied = False
        #: An attempt sent ahead of the scheduler's commit waits for the worker's "go"; on
        #: "drop" it never runs (``_held``).
        self.held, self.dropped = bool(record.get("hold")), False
        #: What is to be told to the worker with the next line: its start, kept while the
        #: command may end at once (``SAY_STARTED_AFTER``).
        self.untold = b""
        #: Called once the outcome is recorded, before it is told: the bytes to tell after it
        #: (a spare frees the log's lock here and says it is done, in the same write).
        self.last_words: Callable[[], bytes] | None = None

    def run(self) -> None:
        command, cwd = list(self.job["command"]), self.job.get("cwd")
        env = jobcommand.job_environment(jobcommand.worker_environment(), self.key, self.job,
                                         tuple(self.record["gpus"]), self.record.get("worker", ""))
        problem = jobcommand.start_problem(command, cwd)
        # What the worker said while this process started: a newer lease, or a stop. A job
        # whose lease is over by now is not spawned: the scheduler may have queued it
        # elsewhere already.
        self._take_orders()
        if self.held and not self._held():  # dropped: nothing ran, nothing is said
            return self._drop()
        if self.record.get("hold"):  # told to go: no longer an attempt that never started
            add_to_record(self.path, {"hold": False})
        if self.ending is None and time.monotonic() >= self.lease_until:
            self.ending = LEASE_EXPIRED
        if self.ending is not None:
            self._discard()
            outcome = self.ending[0]
            error = NOT_STARTED.get(self.ending, f"not started: {self.ending[1]}")
            self._note(f"{self.key} {error}")
            return self._end(outcome, None, error)
        if not problem:
            problem = self._spawn(command, cwd, env)
        if self.leader is None:
            self._discard()
            self._note(f"cannot start {self.key}: {problem}")
            return self._end("failed", None, f"cannot start: {problem}")
        started = self.started
        self.record.update(pid=self.leader, started=started)
        # For a worker process that starts again (the job is then lost, with its start time).
        add_to_record(self.path, {"pid": self.leader, "started": started})
        self.untold = _line(AttemptStarted(self.key, self.leader, self.log,
                                           tuple(self.record["gpus"]), started))
        if self.spawned is not None:
            self.spawned()
        returncode = self._watch(time.monotonic())
        outcome, error = self.ending or (("completed", "") if returncode == 0
                                         else ("failed", describe_exit(returncode)))
        if self.ending:
            self._note(f"{self.key} {error}")
        self._end(outcome, returncode, error, started)

    def _watch(self, spawned: float) -> int:
        """Run until the command's leader exits; its returncode."""
        leader = self.leader
        assert leader is not None and self.prepared is not None  # made by _spawn
        limit = self.job.get("time_limit")
        limit_at = spawned + limit if limit else None
        poller = select.poll()
        poller.register(0, select.POLLIN)
        try:
            exit_fd = os.pidfd_open(leader)
            poller.register(exit_fd, select.POLLIN)
        except (AttributeError, OSError):  # no pidfd here: look every _POLL_INTERVAL
            exit_fd = None
        # Adopted orphans that end are reaped as they end (SIGCHLD wakes the poll), not at
        # the job's end: a long job must not pile up zombies.
        orphans, wake = os.pipe()
        os.set_blocking(wake, False)
        signal.set_wakeup_fd(wake, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        poller.register(orphans, select.POLLIN)
        say_started_at = spawned + SAY_STARTED_AFTER
        while not self._leader_exited():
            now = time.monotonic()
            if self.untold and now >= say_started_at:
                self._tell(b"")
            deadlines = [d for d in (limit_at, self.lease_until) if self.ending is None
                         and d is not None] + ([self.kill_at] if self.kill_at else [])
            if self.untold:
                deadlines.append(say_started_at)
            wait = min(deadlines, default=now + 60) - now
            if exit_fd is None:
                wait = min(wait, _POLL_INTERVAL)
            # Orders first: a lease extended in time must not lose to its own deadline.
            for fd, _ in poller.poll(max(0, wait) * 1000 + 1):
                if fd == 0 and not self._take_orders():
                    poller.unregister(0)
                elif fd == orphans:
                    os.read(orphans, 4096)
                    # Once the leader has ended, the sweep below reaps them all; reaping now
                    # would walk /proc to pass over the leader's unreaped end.
                    if not self._leader_exited():
                        # The guard too: if it died, its number stays its own till looked at.
                        containment.reap(spare={leader, self.prepared.guard})
            now = time.monotonic()
            if self.ending is None:
                if limit_at is not None and now >= limit_at:
                    self._stop(("timeout", f"killed after running past its time limit of "
                                           f"{limit:g} s"))
                elif now >= self.lease_until:
                    self._stop(LEASE_EXPIRED)
            if self.kill_at is not None and now >= self.kill_at:
                self._kill_group(signal.SIGKILL)
                self.kill_at = None
        # Whatever the leader left goes with it: its group, killed while the leader, not yet
        # reaped, still holds the group's number, and its cgroup; then, the leader reaped,
        # every descendant and the cgroup again, until none is left, before the outcome is
        # said (its GPUs are then free). Usually nothing is left, and the kernel says so
        # without a walk of /proc (``containment.sweep``).
        guards: set[int] = set()
        if self.keep_guard and self.prepared.recall():
            guards.add(self.prepared.guard)
        self._kill_group(signal.SIGKILL, tree=False)
        returncode = os.waitstatus_to_exitcode(os.waitpid(leader, 0)[1])
        left = containment.sweep(os.getpid(), "" if self.emptied else self.cgroup,
                                 spare=guards, dying=containment.CHILDLESS_WAIT)
        self.clean = not left
        if left:
            self._note(f"{self.key}: processes {', '.join(map(str, left))} it started did not "
                       f"die within {cgroups.SWEEP_TIMEOUT:g} s of SIGKILL")
        self._release()
        signal.set_wakeup_fd(-1)
        for fd in (orphans, wake) + ((exit_fd,) if exit_fd is not None else ()):
            os.close(fd)
        return returncode

    def _take_orders(self) -> bool:
        """Carry out what the worker has said on stdin (without waiting for more); False once
        it is gone."""
        while select.select([0], [], [], 0)[0]:
            data = os.read(0, 4096)
            if not data:  # the worker is gone: nobody will renew the lease or say more
                self.ending = self.ending or WORKER_GONE
                self._kill_group(signal.SIGKILL)
                return False
            *lines, self.pending = (self.pending + data).split(b"\n")
            for line in lines:
                self._order(line.decode(errors="replace").strip())
        return True

    def _held(self) -> bool:
        """Wait, prepared, for the worker to say "go" (the scheduler has committed the
        attempt), or a stop, or the end of the lease; False when it says "drop" (the session
        that sent the attempt ended first: the scheduler puts it back in its queue), or when
        the worker is gone before either (it never said go: the scheduler, which then loses
        the worker's session, puts it back too)."""
        while self.held and self.ending is None and not self.dropped:
            wait = self.lease_until - time.monotonic()
            if wait <= 0 or select.select([0], [], [], wait)[0] and not self._take_orders():
                break
        if self.held and self.ending == WORKER_GONE:
            self.dropped = True
        return not self.dropped

    def _drop(self) -> None:
        """Never spawned, never said: its record goes (a worker process that starts afresh
        does not list it), its guard and cgroup too."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self._discard()

    def _order(self, line: str) -> None:
        if line == "go":
            if not self.dropped:  # once dropped, it stays so
                self.held = False
        elif line == "drop":
            self.dropped = self.dropped or self.held
        elif line == "kill":
            self._stop(CANCELLED)
        elif line == "shutdown":
            self._stop(SHUTDOWN)
        elif line.startswith("fault "):  # its GPU failed: lost, with what the worker saw
            self._stop(("lost", f"killed: {line[6:]}"))
        elif line.startswith("idle "):  # it held its GPUs idle: cancelled, with reason idle
            self._stop(("idle", f"cancelled: {line[5:]}"))
        elif line:
            try:
                self.lease_until = max(self.lease_until, float(line))
            except ValueError:
                print(f"jobsupervisor: ignoring {line!r:.80} from the worker", file=sys.stderr)

    def _stop(self, why: tuple[str, str]) -> None:
        if self.ending is not None:
            return
        self.ending = why
        self._kill_group(signal.SIGTERM)
        self.kill_at = time.monotonic() + self.kill_grace

    def _leader_exited(self) -> bool:
        assert self.leader is not None
        # WNOWAIT: look without reaping, so the group's number stays the leader's until the
        # rest of the group is killed.
        return os.waitid(os.P_PID, self.leader,
                         os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None

    def _kill_group(self, signum: int, tree: bool = True) -> None:
        """Signal the job: its group, and its descendants and cgroup wherever their sessions
        (``tree``; else only the group, and the cgroup with SIGKILL)."""
        if self.leader is None:  # not spawned (yet): there is no group
            return
        try:
            os.killpg(self.leader, signum)
        except (ProcessLookupError, PermissionError):
            pass
        if tree:
            containment.signal_tree(os.getpid(), signum, self.cgroup, spare={self.leader})
        elif self.cgroup and signum == signal.SIGKILL and self._others_in_cgroup():
            cgroups.kill_cgroup(self.cgroup)

    def _others_in_cgroup(self) -> bool:
        """Whether the job's cgroup (or one below it) holds a process but this one: then this
        process leaves it, so that the cgroup can be killed as a whole. Usually the job has
        left none, and this process stays: two moves between cgroups an attempt fewer (each
        holds up every fork and exit on the machine while it runs). With none left, none can
        come: only a process in it forks into it."""
        prepared = self.prepared
        if prepared is None or not prepared.entered:
            return True
        if not set(cgroups.cgroup_pids(self.cgroup)) - {os.getpid()}:
            self.emptied = True  # and stays so: the sweep need not read it again
            return False
        return prepared.leave()  # else what is left is killed one by one (the sweep)

    def _spawn(self, command: list[str], cwd: str | None, env: dict[str, str]) -> str:
        """Spawn the command (``jobcommand.spawn``: no Python between its fork and its exec)
        as the leader of a new group of this session, with its guard (``Prepared``) moved into
        that group; "" or why it could not start. In cgroup mode this process is in the job's
        cgroup from its preparation on (``_others_in_cgroup``), so the command is born in it,
        and with all it starts stays there."""
        if self.prepared is None:
            self.prepared = Prepared(self.cgroup)
        prepared = self.prepared
        try:
            self.leader = jobcommand.spawn(command, cwd, env, self.log,
                                           lambda text: self._note(f"{self.key}: {text}"))
        except jobcommand.CannotStart as why:
            return str(why)
        self.started = time.time()
        try:  # the group lives while its leader is not reaped, even if it has exited
            os.setpgid(prepared.guard, self.leader)
        except OSError as error:  # the guard is gone: what it would do is left to us
            self._note(f"{self.key}: its guard could not join its group ({error.strerror})")
        if prepared.problem:
            self._note(f"{self.key}: {prepared.problem}")
            self._release()
        return ""

    def _discard(self) -> None:
        """Nothing was spawned: its guard (if forked) goes now, and its cgroup."""
        if self.prepared is not None:
            self.prepared.discard()
        self._release()

    def _release(self) -> None:
        """Kill what is left in the job's cgroup and remove it (a guard kept is told so); or,
        kept for the next attempt (``keep_cgroup``), only the cgroups the job made below it:
        its processes are gone (``_watch``'s sweep), or it never had any."""
        if self.cgroup:
            timeout = self.kill_grace + 5
            if self.keep_cgroup and self.clean and not (self.prepared and self.prepared.problem):
                self.clean = cgroups.remove_below(self.cgroup, timeout)
            else:
                # Killed and removed as a whole, from outside it.
                out = self.prepared is None or self.prepared.leave()
                if not (out and cgroups.remove_cgroup(self.cgroup, timeout=timeout)):
                    self.clean = False
                elif self.keep_guard and self.prepared is not None and not self.prepared.ended:
                    self.prepared.tell("")
            self.cgroup = ""

    def _end(self, outcome: str, returncode: int | None, error: str,
             started: float | None = None) -> None:
        ended = AttemptEnded(self.key, outcome, returncode, error, self.log, started, time.time())
        # Recorded first, told after (with its start, if untold, and a spare's last words: one
        # write, one wakeup of the worker): a worker process that starts afresh after this
        # process died finds it in the record. A record the worker forgot (the scheduler has
        # the end) is not written again (``add_to_record``). One that cannot be written (a
        # full disk) does not keep the end from the worker, which has it then to pass on.
        self.record["ended"] = ended.to_wire()
        try:
            add_to_record(self.path, {"ended": self.record["ended"]})
        except OSError as error:
            print(f"jobsupervisor: cannot record how {self.key} ended: "
                  f"{error.strerror or error}", file=sys.stderr)
        self._tell(_line(ended) + (self.last_words() if self.last_words else b""))

    def _note(self, text: str) -> None:
        """A line of dsched's own in the job's log, where its user will look."""
        try:
            with open(self.log, "ab") as out:
                out.write(f"sched: {text}\n".encode())
        except OSError:
            pass

    def _tell(self, data: bytes) -> None:
        """Write ``data`` to the worker, after what is untold (stdout, unbuffered: nothing of
        it is left to be written later, into whatever stdout is by then)."""
        data, self.untold = self.untold + data, b""
        try:
            while data:
                data = data[os.write(1, data):]
        except OSError:  # the worker is gone; the record says it all
            pass


def _line(op) -> bytes:
    """``op`` as a line to the worker."""
    return json_line(op.to_wire())


def main(argv: list[str]) -> None:
    if len(argv) not in (4, 5):
        sys.exit("usage: python -m dsched.worker.jobsupervisor RECORD LOCK_FD KILL_GRACE "
                 "LEASE_UNTIL [CGROUP]")
    path, lock_fd, kill_grace, lease_until = argv[:4]  # the lock is held by holding its fd
    cgroup = argv[4] if len(argv) == 5 else ""
    os.set_inheritable(int(lock_fd), False)  # held by this process, not by its job
    Supervision(path, read_record(path), float(kill_grace), float(lease_until), cgroup).run()


if __name__ == "__main__":
    main(sys.argv[1:])

"""The spawner: one small process per worker process that forks a job attempt's supervisor in
a millisecond, instead of a fresh interpreter importing dsched for each attempt.

The worker starts it once (``python -m dsched.worker.jobspawner``), joined by a Unix socket
of packets. For each attempt the worker sends the supervisor's arguments (as the command line
of ``python -m dsched.worker.jobsupervisor`` has them) with three descriptors: the end of the
pipe the supervisor reads its orders from, the end of the pipe it reports on, and the log's
lock. The spawner forks; the child starts a session of its own (the supervisor leads its own
group, as before) and runs the same ``Supervision`` that the command line runs, with those
pipes as its stdin and stdout. So every guarantee of a supervisor stays what it was: it kills
its job when its stdin ends (the worker is gone), it writes the outcome to the record before it
exits, it enforces the lease whatever the worker does, and it never spawns a job whose lease is
over. The spawner answers with the child's pid (and its cgroup), and once a supervisor has
exited, with the end of the attempt it ran (``{"exited": pid, "key": record, "code":
status}``); a spare that goes back to wait for the next says it is done with the attempt on
the attempt's stdout itself (``sparesupervisor.DONE``).

Once the worker has said where its cgroups go (``{"cgroups": PREFIX}``, "" for none), the
spawner keeps supervisors forked ahead (``_Spares``): prepared as far as each can be without
its job (``jobguard.Prepared``), they wait for requests, which the spawner passes on.
An attempt then costs no fork and no wait for the kernel's move into a cgroup. A spare whose
attempt has ended, its outcome recorded and told and all its job started gone, closes that
attempt's pipes and lock, prepares itself again and waits for the next request: the fork, the
pages it copies and the exit were most of an attempt's cost.

The spawner itself dies with its worker (a parent-death signal, and the end of the socket);
the supervisors it started do not depend on it. Where it cannot start or is gone, the worker
starts supervisors as before, one interpreter each.

Only the standard library and the supervisor's own modules are imported here, before any fork:
every supervisor starts as a copy of this process, and a fork costs what it copies. What a
forked supervisor does is ``sparesupervisor``'s; the worker's side, ``Spawner``, is in
``spawnerclient``.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import socket
import sys
import traceback

# Loaded here, once: every supervisor is a fork of this process and has them (imported in
# each, they cost 50 ms of CPU an attempt).
from . import cgroups
from .lifeline import die_with_parent
from .sparesupervisor import FDS_PER_REQUEST, MAX_MESSAGE, fork_supervisor, supervise



# -- the spawner process ----------------------------------------------------------------------


def serve(sock: socket.socket, worker_pid: int) -> None:
    """Fork a supervisor for each request on ``sock`` until it ends, or hand the request to
    the spare forked ahead; report each supervisor's pid (and cgroup), then its exit status
    once reaped."""
    die_with_parent(worker_pid)
    _warm()
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    poller.register(wake_read, select.POLLIN)
    spares = _Spares(poller)
    sock.send(b'{"ready":true}')
    while True:
        try:
            ready = poller.poll()
        except InterruptedError:
            continue
        for fd, _ in ready:
            if fd == wake_read:
                os.read(wake_read, 4096)
                _reap(sock, spares)
                continue
            if fd != sock.fileno():  # a spare says how its attempt goes
                spares.heard(fd)
                continue
            try:
                data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, FDS_PER_REQUEST)
            except InterruptedError:
                continue
            if not data:  # the worker is gone; its supervisors see their own stdin end
                return
            args = json.loads(data)
            if isinstance(args, dict):  # the cgroups to prepare spares in ("": none)
                spares.prepare(args["cgroups"], args.get("keep", 0))
                continue
            try:
                if len(fds) != FDS_PER_REQUEST:
                    raise OSError(f"{len(fds)} descriptors came with the request")
                pid, cgroup = spares.hand(data, fds, args[0])
                if pid is None:
                    pid, cgroup = fork_supervisor(fds, args), args[4]
                    spares.current[pid] = args[0]
            except OSError as error:  # nothing started: the worker may try otherwise
                sock.send(json.dumps({"key": args[0], "error": str(error)}).encode())
                continue
            finally:
                for fd in fds:
                    os.close(fd)
            sock.send(json.dumps({"key": args[0], "pid": pid, "cgroup": cgroup}).encode())
            spares.fork()  # where none is spawning, and fewer are ready than wanted


#: Supervisors kept ready: two, so that two attempts placed at once (a device freed on each
#: of two GPUs, a queue released) both start without a fork or a wait.
SPARES = 2


class _Spares:
    """The supervisors forked ahead of the next requests (spares), each prepared as far as it
    can be without its job (``jobguard.Prepared``: its session, its cgroup entered, its
    job's guard forked, or kept from its last attempt), and waiting on a socket of its own
    for a request. So an attempt starts in the time it takes to pass the request on and spawn
    the command. Spares are made once the worker says its cgroups (``prepare``); until then,
    and while none is ready, each request is forked. New spares are forked only while no
    spare handed a request is still spawning its job: on two cores, a fork and a preparation
    meanwhile slowed that spawn by milliseconds.

    A spare whose attempt has ended (its outcome recorded and told, its job and all it started
    gone, its stdin, stdout and the log's lock closed) prepares itself again and waits for the
    next request, up to ``kept`` ready and ``sparesupervisor.REUSES`` attempts each: a fork,
    its copied pages and an exit per attempt were most of what starting one cost. On its
    socket a spare says ``spawned`` where its request asks (``hand``), then ``ended CODE
    CGROUP`` (the attempt's supervision is over, which the worker knows already; CGROUP, the
    attempt's, emptied, is the one it prepares next, which the spawner removes if it dies
    before it is ready), then ``ready CGROUP`` once prepared again; where it is still in its
    cgroup (its job left nothing there), or has none, a preparation takes microseconds, and
    the two lines come in one message. A supervisor that
    could not kill all its attempt started, or remove its cgroup, is not used again: it exits,
    and its end is the attempt's."""

    def __init__(self, poller: select.poll):
        self.poller = poller
        self.cgroups: str | None = None  # where spares' cgroups go ("" none); None: no spares
        self.ready: list[tuple[int, socket.socket, str]] = []  # pid, its socket, its cgroup
        self.spares: dict[int, tuple[int, socket.socket]] = {}  # (pid, socket) by the fd
        self.spawning: set[int] = set()  # the fds of those handed a request, not spawned yet
        self.preparing: set[int] = set()  # the pids of those back from an attempt, not ready
        #: The attempt (its record's path) each supervisor runs, by pid, until it ends.
        self.current: dict[int, str] = {}
        #: The cgroups of spares ready and not handed a request (no one else knows of them).
        self.unused: dict[int, str] = {}
        self.made = 0
        #: Supervisors kept ready at most, those back from an attempt included (one whose
        #: attempt ended when as many wait already ends): ``SPARES`` more than the attempts
        #: the worker may run at once, so that a worker busy on all its threads neither forks
        #: a supervisor an attempt nor ends one (forks and exits were a fifth of the CPU an
        #: attempt cost with four threads and four kept).
        self.kept = SPARES

    def prepare(self, cgroups: str, keep: int = 0) -> None:
        """Spares from now on in ``cgroups`` ("": none), and up to ``keep`` more kept ready
        than ``SPARES`` (the attempts the worker may run at once)."""
        self.kept = SPARES + max(0, keep)
        for _, ours, _ in self.ready:  # prepared for other cgroups: each ends with its socket
            self._drop(ours)
        self.ready.clear()
        self.cgroups = cgroups
        self.fork()

    def fork(self) -> None:
        """Fork spares until ``SPARES`` are ready or on their way back from an attempt, where
        none is spawning its job."""
        while (self.cgroups is not None and not self.spawning
               and len(self.ready) + len(self.preparing) < SPARES):
            self.made += 1
            cgroup = f"{self.cgroups}{os.getpid()}-{self.made}" if self.cgroups else ""
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                pid = os.fork()
            except OSError:  # the next request is forked when it comes
                ours.close()
                theirs.close()
                return
            if pid == 0:
                supervise(cgroup, channel=theirs)
            theirs.close()
            self.add(pid, ours, cgroup)

    def add(self, pid: int, ours: socket.socket, cgroup: str) -> None:
        """A spare just forked, ready, on our end of its socket ``ours``. Not blocking:
        within one poll, a spare's number may be closed and given to a new spare, which has
        nothing to say yet (``heard``)."""
        ours.setblocking(False)
        self.ready.append((pid, ours, cgroup))
        self.unused[pid] = cgroup
        self.spares[ours.fileno()] = (pid, ours)
        self.poller.register(ours.fileno(), select.POLLIN)

    def hand(self, request: bytes, fds: list[int], key: str) -> tuple[int | None, str]:
        """Pass the request for attempt ``key`` to the spare ready longest; its pid and
        cgroup, or None where none is ready (or it is gone: it then never had it)."""
        while self.ready:
            pid, ours, cgroup = self.ready.pop(0)
            # Fewer ready than SPARES: more are forked once it has spawned its job, which it
            # then says. Else it says nothing of it: a wakeup here saved an attempt.
            wanted = len(self.ready) + len(self.preparing) < SPARES
            try:
                socket.send_fds(ours, [_say_spawned(request) if wanted else request], fds)
            except OSError:
                self._drop(ours)
                continue
            del self.unused[pid]
            if wanted:
                self.spawning.add(ours.fileno())
            self.current[pid] = key
            return pid, cgroup
        return None, ""

    def heard(self, fd: int) -> None:
        """What the spare on ``fd`` says, a line or two in a message: its attempt spawned (fork
        more if none is spawning now), ended (the worker knows: ``sparesupervisor.DONE``),
        that it is ready again (usually said with the end: one wakeup here); or that it is
        gone."""
        spare = self.spares.get(fd)
        if spare is None:  # a number closed since the poll said it
            return
        pid, ours = spare
        try:
            said = ours.recv(MAX_MESSAGE).decode()
        except BlockingIOError:  # a number given to a new spare since the poll said it
            return
        except OSError:
            said = ""
        for line in [line for line in said.split("\n") if line] if said else [""]:
            self._heard(fd, pid, ours, line)
        self.fork()

    def _heard(self, fd: int, pid: int, ours: socket.socket, said: str) -> None:
        word, _, rest = said.partition(" ")
        if word in ("spawned", "ended"):
            self.spawning.discard(fd)
        if word == "ended":  # "ended CODE NEXT": its next cgroup is ours to remove till ready
            # The worker knows already: the attempt's stdout said "done" before it ended.
            _, _, upcoming = rest.partition(" ")
            self.current.pop(pid, None)
            self.preparing.add(pid)
            if upcoming:
                self.unused[pid] = upcoming
        elif word == "ready":
            self.preparing.discard(pid)
            if len(self.ready) >= self.kept:
                self._drop(ours)  # it ends, and removes its cgroup
            else:
                self.ready.append((pid, ours, rest))
                self.unused[pid] = rest
        elif not said:  # it ended: reaped, and said, by ``_reap``
            self.preparing.discard(pid)
            self._drop(ours)

    def reaped(self, pid: int) -> str | None:
        """The attempt ``pid`` was running when it ended, if any; a spare never handed its
        last preparation's request has its cgroup removed (it may have died with its guard,
        which would have)."""
        for fd, (spare, ours) in list(self.spares.items()):
            if spare == pid:
                self._drop(ours)
        self.ready = [r for r in self.ready if r[0] != pid]
        self.preparing.discard(pid)
        cgroup = self.unused.pop(pid, None)
        if cgroup:
            cgroups.remove_cgroup(cgroup, timeout=5.0)
        return self.current.pop(pid, None)

    def _drop(self, ours: socket.socket) -> None:
        fd = ours.fileno()
        if self.spares.pop(fd, None) is not None:
            self.poller.unregister(fd)
            self.spawning.discard(fd)
        ours.close()


def _warm() -> None:
    """Before any fork: what every supervisor does once (an op's methods are compiled on
    first use) is done here, once, and shared; and the heap is frozen, so that a collection in
    a supervisor does not touch, and so copy, every page of it (a fork costs what its child
    writes to)."""
    from ..protocol.ops import AttemptEnded, AttemptStarted, decode
    from .containment import libc
    from .jobcommand import worker_environment

    libc()
    worker_environment()
    try:
        for op in (AttemptStarted("job-1.1", 1, "log", (0,), 1.0),
                   AttemptEnded("job-1.1", "completed", 0, "", "log", 1.0, 2.0)):
            decode(json.loads(json.dumps(op.to_wire())))
    except Exception:  # noqa: BLE001 - only a head start: each supervisor can do it itself
        traceback.print_exc()
    gc.collect()
    gc.freeze()


def _say_spawned(request: bytes) -> bytes:
    """``request`` asking its spare to say ``spawned`` once its job is."""
    return json.dumps([*json.loads(request)[:5], True]).encode()


def _reap(sock: socket.socket, spares: _Spares) -> None:
    """Reap the children that ended and say the end of each one's attempt, if it had one."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        key = spares.reaped(pid)
        if key is not None:  # else a spare between attempts: nobody waits for it
            _say_exit(sock, pid, key, os.waitstatus_to_exitcode(status))


def _say_exit(sock: socket.socket, pid: int, key: str, code: int) -> None:
    """Tell the worker that the supervisor of attempt ``key`` is done with it, with ``code``
    (its exit status where it ended)."""
    try:
        sock.send(json.dumps({"exited": pid, "key": key, "code": code}).encode())
    except OSError:
        pass


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        sys.exit("usage: python -m dsched.worker.jobspawner SOCKET_FD WORKER_PID")
    sock = socket.socket(fileno=int(argv[0]))
    try:
        serve(sock, int(argv[1]))
    except (KeyboardInterrupt, BrokenPipeError, ConnectionResetError):
        pass  # the worker is gone (it may never have needed us)


# -- the worker's side (``spawnerclient``: asyncio is not loaded here) ----------------------


def __getattr__(name: str):
    if name in ("Spawner", "Spawned"):
        from . import spawnerclient

        return getattr(spawnerclient, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main(sys.argv[1:])

"""A supervisor forked by the spawner (``jobspawner.py``): in a session of its own, prepared
as far as it can be without its job (``jobguard.Prepared``), given a request, or waiting for
one as a spare, then supervising the attempt with the same ``Supervision`` as the command
line's; a spare then prepares itself again for the next request, up to ``REUSES`` attempts.

Runs only in forked children of the spawner, with what the spawner imported before it forked.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import traceback

from . import cgroups
from .jobguard import Prepared
from .jobrecords import read_record
from .jobsupervisor import Supervision

#: The most bytes one request or reply takes (a record's path and four short arguments).
MAX_MESSAGE = 1 << 16
#: The descriptors each request carries: the supervisor's stdin, its stdout, the log's lock.
FDS_PER_REQUEST = 3
#: The attempts one supervisor runs before it ends (and a fresh fork takes its place): what
#: an attempt may leave behind in its process (a descriptor, memory) stays bounded.
REUSES = 1000
#: The last line a spare writes on an attempt's stdout: done with it, nothing of it is left.
DONE = b"done\n"


def fork_supervisor(fds: list[int], args: list) -> int:
    """Fork a supervisor for the request ``args`` (in the cgroup it names) with its
    descriptors ``fds``; its pid."""
    pid = os.fork()
    if pid == 0:
        supervise(args[4], fds=fds, args=args)
    return pid


def supervise(cgroup: str, channel: socket.socket | None = None,
               fds: list[int] | None = None, args: list | None = None) -> None:
    """In a forked child: a supervisor in a session of its own (it leads its own group, as one
    started as a program does), prepared, then given its request (``args`` and ``fds``, or
    from ``channel``: a spare), and then the same ``Supervision`` as the command line's, with
    the request's pipes as its stdin and stdout. A spare then closes them, prepares itself
    again and waits for the next request (``jobspawner._Spares``). Never returns."""
    code = 1
    prepared: Prepared | None = None
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        # Only its request's descriptors (or the socket it comes on) and its standard ones:
        # not the spawner's, another spare's, nor those of a request meant for another.
        keep = [*(fds or ()), *((channel.fileno(),) if channel else ())]
        _close_all_but(keep)
        ended = ""  # the end of its last attempt, where it is said with its "ready"
        for attempt in range(1, REUSES + 1):
            prepared = Prepared(cgroup, kept=prepared)  # its guard kept, if still there
            if channel is not None:
                try:
                    if attempt > 1:
                        channel.send(f"{ended}ready {cgroup}".encode())
                    data, fds, _, _ = socket.recv_fds(channel, MAX_MESSAGE, FDS_PER_REQUEST)
                except OSError:  # the spawner is gone
                    data = b""
                if not data:  # the spawner is gone, or keeps enough ready: no request comes
                    if prepared.discard() and cgroup:  # removed from outside it
                        cgroups.remove_cgroup(cgroup, timeout=5.0)
                    code = 0
                    return
                args = json.loads(data)
            assert fds is not None and args is not None
            again = channel is not None and attempt < REUSES
            clean = _supervise_one(args, fds, prepared, channel, again)
            if not again or not clean:
                code = 0  # its end, reaped, is the attempt's
                return
            ended = f"ended 0 {cgroup}\n"  # its cgroup, emptied, serves the next attempt
            # Prepared again in microseconds where it is still in its cgroup (its job left
            # nothing there) or has none: said with its "ready", one wakeup.
            if not cgroup or prepared.entered:
                continue
            try:  # entering its cgroup again may take the kernel milliseconds: said first
                channel.send(ended.encode())
            except OSError:  # the spawner is gone: so is the worker, nothing more comes
                cgroups.remove_cgroup(cgroup, timeout=5.0)
                code = 0
                return
            ended = ""
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            # Done with attempts, its guard goes; not after an error: the guard must then see
            # this process end, and end what it guards.
            if prepared is not None and code == 0:
                prepared.retire()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _supervise_one(args: list, fds: list[int], prepared: Prepared,
                   channel: socket.socket | None, again: bool = False) -> bool:
    """Supervise the attempt of ``args`` with the request's descriptors ``fds`` (its stdin,
    its stdout, the log's lock) until its outcome is recorded and told; then close them: the
    log's lock is free, and the worker sees the end of its stdout. Whether nothing of the
    attempt is left (else this process must not run another: ``Supervision.clean``).

    ``again``: a spare that runs another attempt after this one if it can. It keeps the guard
    and the attempt's cgroup (emptied, for the next), and, clean, says ``done`` as the last
    line on the attempt's stdout, in the same write as the attempt's end: the worker then
    knows the supervisor is done with it without a word from the spawner. ``args[5]``, where
    the request has it: say ``spawned`` to the spawner once the job is (it forks more spares
    only then)."""
    os.dup2(fds[0], 0)
    os.dup2(fds[1], 1)
    for closing in fds[:2]:
        os.close(closing)
    os.set_inheritable(fds[2], False)  # the log's lock is held by this process, not its job
    path, _lock, kill_grace, lease_until = args[:4]  # the lock is held as fds[2]
    supervision = Supervision(path, read_record(path), float(kill_grace), float(lease_until),
                              prepared=prepared)
    if channel is not None and len(args) > 5 and args[5]:
        supervision.spawned = lambda: _say(channel, b"spawned")
    supervision.keep_guard = channel is not None  # for its next attempt (or retired then)
    supervision.keep_cgroup = again  # for its next attempt
    freed: list[bool] = []

    def clean() -> bool:
        return supervision.clean and not prepared.problem

    def last_words() -> bytes:
        # The lock is free before the worker hears the attempt is over; "done" follows its
        # end in the same write.
        freed.append(True)
        try:
            os.close(fds[2])
        except OSError:  # the descriptor is released all the same
            pass
        return DONE if again and clean() else b""

    supervision.last_words = last_words
    supervision.run()
    if not freed and last_words():  # nothing was told (a held attempt dropped)
        _done()
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # as the next attempt's supervision starts
    return clean()


def _done() -> None:
    """The last line on an attempt's stdout: this supervisor is done with the attempt."""
    try:
        os.write(1, DONE)
    except OSError:  # the worker is gone
        pass


def _say(channel: socket.socket, word: bytes) -> None:
    """Tell the spawner ``word``, if it is still there (the attempt goes on without it)."""
    try:
        channel.send(word)
    except OSError:
        pass


def _close_all_but(keep: list[int]) -> None:
    """Close every descriptor of this process above 2 but those in ``keep``."""
    low = 3
    for fd in sorted(set(keep)):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))

"""The child process that runs Python tasks granted GPUs.

The worker starts one with ``CUDA_VISIBLE_DEVICES`` naming exactly the task's devices, so the
setting is in place before any task code (or CUDA library) loads, and reuses it for later tasks
on the same devices. It is started as ``python -m dsched.worker.child PARENT_PID LIFELINE_FD
[CGROUP]`` in a process group of its own, which ``lifeline.hold_group`` ties to the worker's life
before anything else runs: first into its cgroup, when it is given one (``containment``), and a
child subreaper either way, so that whatever a task starts, in whatever session, stays findable;
all of it is killed when the task ends, before its reply (the task's GPUs are then free).
Requests come on stdin and replies go out on a private copy of stdout; fd 1 itself is pointed at
stderr so that a task's prints reach the worker's log instead of corrupting the reply stream.

A frame is an 8-byte big-endian length and a pickle. Request: ``(key, function bytes,
arguments bytes)``; reply: ``("ok", result bytes, start, stop, peak_rss)`` or ``("error",
exception bytes, traceback text, start, stop, peak_rss)``. A result that cannot be pickled is
an error of its task, the SchedError a thread's task gives when its result is fetched: here no
one could ever fetch it.
"""

from __future__ import annotations

import os
import resource
import struct
import sys
import time

from . import cgroups, containment
from .lifeline import hold_group

HEADER = struct.Struct("!Q")


def read_frame(stream) -> bytes | None:
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (length,) = HEADER.unpack(header)
    body = stream.read(length)
    if len(body) < length:
        return None
    return body


def write_frame(stream, body: bytes) -> None:
    stream.write(HEADER.pack(len(body)))
    stream.write(body)
    stream.flush()


def peak_rss() -> int:
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main(argv: list[str]) -> None:
    cgroup = argv[2] if len(argv) > 2 else ""
    if cgroup:
        try:
            cgroups.make_cgroup(cgroup)
            cgroups.enter_cgroup(cgroup)
        except OSError as error:  # its descendants are still this subreaper's to find
            print(f"dsched: a GPU task process cannot use the cgroup {cgroup}: {error}",
                  file=sys.stderr)
            cgroup = ""
    guard = hold_group(int(argv[0]), int(argv[1]), cgroup, subreaper=True)
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    from dsched import serialize
    from dsched.errors import SchedError, cannot_send_result

    functions: dict[bytes, object] = {}
    while True:
        body = read_frame(requests)
        if body is None:
            return
        key, function_bytes, argument_bytes = serialize.loads(body)
        start = time.time()
        try:
            function = functions.get(function_bytes)
            if function is None:
                if len(functions) >= 64:
                    functions.clear()
                function = functions[function_bytes] = serialize.loads(function_bytes)
            args, kwargs = serialize.loads(argument_bytes)
            result = function(*args, **kwargs)
            try:
                payload = serialize.dumps(result)
            except Exception as error:
                raise SchedError(cannot_send_result(key, error)) from error
            reply = ("ok", payload, start, time.time(), peak_rss())
        except BaseException as exc:  # the task's error is data to report, not ours to handle
            payload, text = serialize.dumps_exception(exc)
            reply = ("error", payload, text, start, time.time(), peak_rss())
        # Nothing a task started outlives it; the guard stays for the next task.
        containment.sweep(os.getpid(), cgroup, spare={guard})
        write_frame(replies, serialize.dumps(reply))


if __name__ == "__main__":
    main(sys.argv[1:])

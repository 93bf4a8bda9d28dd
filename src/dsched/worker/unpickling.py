"""The task threads of a worker unpickle one at a time.

Loading a task's function (or a Dask node) imports the modules its pickle names, and a
worker does that on several threads. Two threads importing one package at once can fail:
Python waits for a module another thread is importing only if it is the module asked for or
a top-level package, not for a package in between. So the second thread gets a submodule
while the package's ``__init__`` is still running (a registry half filled; with Dask, "No
dispatch for numpy.ndarray"), or a deadlock error from the import system. Unpickling on
these threads holds ``LOCK``; it holds the GIL anyway, so taking turns costs next to nothing.

The event loop's own unpickling (arguments, fetched results) does not take the lock: it must
never wait for a task thread's import. Imports inside a task's body are Python's as usual.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from .. import serialize

LOCK = threading.RLock()


def loads(data: bytes) -> Any:
    """``serialize.loads`` on a task thread, in turn with the others."""
    with LOCK:
        return serialize.loads(data)


def _fresh_lock() -> None:
    global LOCK
    LOCK = threading.RLock()  # a forked child starts with no thread holding it


os.register_at_fork(after_in_child=_fresh_lock)

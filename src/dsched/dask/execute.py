"""A node of a Dask graph as it travels to a worker, and what the worker runs for it.

A node is pickled on its own, into bytes that ride in the task's arguments, so that the
worker unpickles it on the thread that runs it rather than on its event loop. The standard
pickler is tried first (several times faster than cloudpickle); cloudpickle takes over for
what only it can send: lambdas and local functions (the standard pickler refuses them) and
functions of ``__main__`` or of modules registered to travel by value (the standard pickler
would send a reference the worker cannot resolve).

Workers import this module by name when they unpickle a task's function, so it imports
nothing heavy; unpickling the node is what brings Dask into the worker.
"""

from __future__ import annotations

import pickle
from typing import Any, Iterable

import cloudpickle

from ..serialize import PICKLE_PROTOCOL


def dumps_node(node: Any, standard: bool = True) -> tuple[bytes, bool]:
    """The node's pickle, and whether the standard pickler made it (``standard=False``: go
    straight to cloudpickle, as for the other nodes of a layer that needed it)."""
    if standard:
        try:
            data = pickle.dumps(node, protocol=PICKLE_PROTOCOL)
        except Exception:  # PicklingError, or whatever a __reduce__ raises
            data = b""
        by_value = getattr(cloudpickle.cloudpickle, "_PICKLE_BY_VALUE_MODULES", None)
        if data and by_value is not None and b"__main__" not in data and not any(
                name.encode() in data for name in by_value):
            return data, True
    return cloudpickle.dumps(node, protocol=PICKLE_PROTOCOL), False


def run_node(node: bytes, inputs: Iterable[tuple[Any, Any]]) -> Any:
    """Run a pickled ``dask._task_spec`` node; ``inputs`` pairs each Dask key it depends on
    with that key's value (the worker put the values in place of the dsched keys)."""
    return pickle.loads(node)(dict(inputs))

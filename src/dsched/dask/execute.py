"""What a worker runs for one node of a Dask graph: the node, given the values of its inputs.

Workers import this module by name when they unpickle a task's function, so it imports
nothing heavy itself; unpickling the node is what brings Dask into the worker.
"""

from __future__ import annotations

from typing import Any, Iterable


def run_node(node: Any, inputs: Iterable[tuple[Any, Any]]) -> Any:
    """Run a ``dask._task_spec`` node; ``inputs`` pairs each Dask key it depends on with
    that key's value (the worker put the values in place of the dsched keys)."""
    return node(dict(inputs))

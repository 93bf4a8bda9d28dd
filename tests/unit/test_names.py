"""One name, one meaning: no two classes of the package share a name, so an op, a core's
event and a core's action are never confused when read or imported (the naming convention is
in docs/architecture.md, "Names")."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import dsched

ROOT = Path(dsched.__file__).parent


def test_no_two_classes_share_a_name():
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(str(path.relative_to(ROOT)))
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert shared == {}


def test_the_cores_name_each_direction_apart():
    from dsched.protocol import ops
    from dsched.scheduler import actions, events
    from dsched.worker import events as worker_events

    def classes(module):
        return {n for n, v in vars(module).items()
                if isinstance(v, type) and v.__module__ == module.__name__}

    # What a worker reports arrives as an event named for the worker; what the scheduler
    # does is an imperative (Send to a worker, Tell a client); what the executor saw is a Run.
    assert all(n.startswith("Worker") for n in classes(events)
               if n.removeprefix("Worker") in vars(ops))
    assert {n for n in classes(actions) if n.startswith(("Send", "Tell"))} >= {
        "SendExecute", "SendStopTask", "TellFinished", "TellErred"}
    assert {"RunFinished", "RunErred", "RunStopped"} <= classes(worker_events)
    assert not classes(ops) & (classes(events) | classes(actions) | classes(worker_events))

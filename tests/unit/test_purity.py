"""The pure cores stay pure, and the protocol stays sans-IO: checked on the source, so that a
module that starts reading a clock or opening a socket fails here, not in production.

A core module imports no I/O, clock, randomness or logging module, says so in its docstring,
and stays small enough to read in one sitting. Any module that says it is pure is held to
the same imports. The protocol's other modules touch no socket, loop, thread or clock."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import dsched

ROOT = Path(dsched.__file__).parent
FORBIDDEN = {"asyncio", "socket", "select", "selectors", "subprocess", "threading", "time",
             "pynvml", "tornado", "logging", "os", "random", "sqlite3", "signal"}
SANS_IO_FORBIDDEN = {"asyncio", "socket", "select", "selectors", "subprocess", "threading",
                     "time", "tornado", "sqlite3"}
SCHEDULER_CORE = [
    "__init__", "actions", "attemptrows", "backfill", "budget", "choice", "events", "fit", "graph",
    "invariants",
    "job", "jobbook", "jobrecovery", "membership", "oomretry", "optables", "outbox", "placer",
    "queue", "reasons", "reconcile", "state", "submission", "task", "views", "worker",
]
WORKER_CORE = ["actions", "attempts", "draining", "events", "gpufaults", "gpuuse", "holdings",
               "invariants", "ledger", "slots", "state", "task"]
CORES = ([f"scheduler/{name}.py" for name in SCHEDULER_CORE]
         + [f"worker/{name}.py" for name in WORKER_CORE]
         + ["protocol/fields.py", "protocol/ops.py", "resources.py", "devices.py", "jobs.py",
            "jobstates.py", "arrayspec.py", "plaintoml.py", "frozen.py",
            "oom.py", "settings.py", "policy.py", "environ.py", "sim.py"])
SANS_IO = ["protocol/__init__.py", "protocol/framing.py", "protocol/messages.py",
           "protocol/handshake.py"]
#: The longest a core module may grow.
MAX_LINES = 400
#: ops.py holds the op declarations alone (their machinery is fields.py): one table, read in
#: one place, that grows by one small class per op; cut in two it would only be harder to find.
LONGER = {"protocol/ops.py": 560}


def imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def says_pure(path: Path) -> bool:
    return "Pure" in (ast.get_docstring(ast.parse(path.read_text())) or "")


@pytest.mark.parametrize("name", CORES)
def test_a_core_module_is_pure_says_so_and_stays_small(name):
    path = ROOT / name
    assert not imports(path) & FORBIDDEN, f"{name} imports {imports(path) & FORBIDDEN}"
    assert says_pure(path), f"{name}: the module docstring says it is pure"
    assert len(path.read_text().splitlines()) <= LONGER.get(name, MAX_LINES)


@pytest.mark.parametrize("name", SANS_IO)
def test_the_protocol_is_sans_io(name):
    assert not imports(ROOT / name) & SANS_IO_FORBIDDEN


def test_every_module_that_says_it_is_pure_is():
    claims = [p for p in ROOT.rglob("*.py") if says_pure(p)]
    assert len(claims) >= len(CORES)
    for path in claims:
        assert not imports(path) & FORBIDDEN, (path, imports(path) & FORBIDDEN)

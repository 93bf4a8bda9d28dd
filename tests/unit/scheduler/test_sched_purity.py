"""The scheduler's core and the simulator stay pure: no I/O or clock modules imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import dsched

FORBIDDEN = {"asyncio", "socket", "subprocess", "threading", "time", "pynvml", "tornado",
             "logging", "os", "random"}
ROOT = Path(dsched.__file__).parent
CORE = ["__init__", "actions", "backfill", "events", "graph", "invariants", "job", "jobbook",
        "jobrecovery", "membership", "outbox", "placer", "queue", "reasons", "reconcile",
        "state", "task", "views", "worker"]
PURE = [ROOT / "scheduler" / f"{name}.py" for name in CORE] + [ROOT / "sim.py"]


@pytest.mark.parametrize("path", PURE, ids=lambda p: p.name)
def test_pure_modules_import_no_io_or_clock(path):
    tree = ast.parse(path.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert not imported & FORBIDDEN, imported & FORBIDDEN
    assert "Pure" in (ast.get_docstring(tree) or ""), "the module docstring says it is pure"
    assert len(path.read_text().splitlines()) <= 400

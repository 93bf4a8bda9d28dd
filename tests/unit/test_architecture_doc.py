"""docs/architecture.md stays true to the code: every op is in its op table, and every module
it names exists."""

from __future__ import annotations

import re
from pathlib import Path

import dsched
from dsched.protocol import ops

REPO = Path(__file__).parents[2]
DOC = REPO / "docs" / "architecture.md"
ROOT = Path(dsched.__file__).parent


def test_every_op_is_in_the_op_table():
    text = DOC.read_text()
    table = text[text.index("## The ops"):text.index("## State machines")]
    named = set(re.findall(r"`([a-z-]+)`", table))
    assert set(ops.OPS) - named == set(), "ops missing from the table in docs/architecture.md"


def test_the_modules_it_names_exist():
    text = DOC.read_text()
    for name in set(re.findall(r"`((?:[a-z_]+/)*[a-z_]+\.py)`", text)):
        candidates = [ROOT / name, *ROOT.glob(f"**/{name}"), REPO / name,
                      *(REPO / "tests").glob(f"**/{name}")]
        assert any(p.exists() for p in candidates), f"docs/architecture.md names {name}"

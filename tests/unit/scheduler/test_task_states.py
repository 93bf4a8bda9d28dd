"""A scheduler task's state changes only through the named transitions of ``TRANSITIONS``
(``Task.move``), and the state diagram in docs/architecture.md is drawn from them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import dsched
from dsched.reference import architecture
from dsched.resources import EMPTY
from dsched.scheduler.task import TRANSITIONS, IllegalTransition, Task, TaskState, mermaid

SCHEDULER = Path(dsched.__file__).parent / "scheduler"
DOC = Path(__file__).parents[3] / "docs" / "architecture.md"


def a_task() -> Task:
    return Task("t", b"", EMPTY, 0, 1, 0, None, "t")


def test_a_task_moves_by_name_and_a_move_the_table_does_not_have_raises():
    t = a_task()
    assert t.state is TaskState.waiting
    with pytest.raises(IllegalTransition, match="task 't' cannot finish from waiting"):
        t.move("finish")
    assert t.state is TaskState.waiting  # unchanged
    for name in ("queue", "start", "finish", "lose", "wait"):
        t.move(name)
    assert t.state is TaskState.waiting
    t.move("fail")
    with pytest.raises(IllegalTransition):
        t.move("queue")  # an erred task is never queued again: its key runs afresh
    with pytest.raises(KeyError):
        t.move("explode")


def test_each_name_leads_to_one_state_and_every_state_is_reached():
    targets: dict[str, set] = {}
    for _, target, name, _ in TRANSITIONS:
        targets.setdefault(name, set()).add(target)
    assert all(len(states) == 1 for states in targets.values()), targets
    assert {target for _, target, _, _ in TRANSITIONS} == set(TaskState)
    assert len({(s, t, name) for s, t, name, _ in TRANSITIONS}) == len(TRANSITIONS)


def test_the_scheduler_changes_a_tasks_state_only_through_a_named_transition():
    """No ``t.state = ...`` outside task.py (a Job's state, ``job.state``, is the job book's);
    every name moved by is in the table."""
    names = {name for _, _, name, _ in TRANSITIONS}
    for path in sorted(SCHEDULER.glob("*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for each in (target.elts if isinstance(target, ast.Tuple) else [target]):
                        if (isinstance(each, ast.Attribute) and each.attr == "state"
                                and path.name != "task.py"):
                            owner = ast.unparse(each.value)
                            assert owner in ("self", "job"), f"{path.name}:{node.lineno}"
        used = set(re.findall(r"\.move\(\"(\w+)\"\)", source))
        assert used <= names, (path.name, used - names)


def test_the_diagram_in_the_architecture_doc_is_drawn_from_the_table():
    text = DOC.read_text()
    assert f"```mermaid\n{mermaid()}```" in text
    assert architecture(text) == text, "run python -m dsched.reference to draw it again"
    for source, target, name, why in TRANSITIONS:
        assert ";" not in why  # Mermaid would end the line there

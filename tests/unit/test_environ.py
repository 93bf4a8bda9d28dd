"""Every environment variable dsched reads or sets is named in ``dsched.environ``, and only
there: the config loader takes its list of the SCHED_* variables that are not settings from
it, and every setting's variable is made by one function."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import dsched
from dsched import config, environ, settings

ROOT = Path(dsched.__file__).parent
#: A name of dsched's own, as it would appear in a string.
OURS = re.compile(rf"\b{environ.PREFIX}[A-Z]")
#: The other names, used as names (HOME and PATH are words too: a metavar, say).
OTHERS = {name for name in environ.VARIABLES if "_" in name}


def strings(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module, docstrings (prose) aside, with their line."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                       ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


def test_no_module_but_environ_writes_a_variable_name():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == ROOT / "environ.py":
            continue
        for line, text in strings(path):
            if OURS.search(text) or text in OTHERS:
                found.append(f"{path.relative_to(ROOT)}:{line}: {text!r}")
    assert not found, "name these in dsched/environ.py and import them:\n" + "\n".join(found)


def test_every_variable_has_a_meaning_and_none_of_ours_is_taken_for_a_setting():
    assert all(meaning and meaning[0].isupper() for meaning in environ.VARIABLES.values())
    ours = {name for name in environ.VARIABLES if name.startswith(environ.PREFIX)}
    assert ours == environ.NOT_SETTINGS and len(ours) >= 10
    # A worker's task that loads the config (a Client inside it) sees them all, and no error.
    told = {name: "1" for name in ours - {environ.CONFIG_ENV}}
    loaded = config.load(env={**told, "HOME": "/nonexistent"})
    assert loaded["worker"] == config.load(env={"HOME": "/nonexistent"})["worker"]


def test_a_settings_variable_is_made_from_its_key():
    assert environ.setting_variable("scheduler.prefetch") == "SCHED_SCHEDULER__PREFETCH"
    assert environ.setting_variable("worker.resources.GPU") == "SCHED_WORKER__RESOURCES__GPU"
    for key, variable, _, _ in settings.reference():
        assert variable == environ.setting_variable(key)
        assert variable not in environ.NOT_SETTINGS
    env = {environ.setting_variable("scheduler.prefetch"): "7", "HOME": "/nonexistent"}
    assert config.load(env=env)["scheduler"]["prefetch"] == 7

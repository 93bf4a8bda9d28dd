"""The README's first lines give the two commands a newcomer needs, and CI runs the second."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    lines = (ROOT / "README.md").read_text().splitlines()
    return [line.strip() for line in lines[:12] if line.startswith("    ")]


def test_readme_opens_with_an_install_and_run_command_and_a_test_command():
    run, test = readme_commands()[:2]
    assert "pip install" in run and "pytest" not in run
    assert "pip install" in test and "pytest" in test


def test_ci_runs_exactly_the_readme_test_command():
    test = readme_commands()[1]
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test in ci_lines

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


# -- the locks ----------------------------------------------------------------------------------

def pins(lock: Path) -> dict[tuple[str, str], str]:
    """``{(name, marker): version}`` of a lock written by scripts/lock, checking each has hashes."""
    import re

    found = {}
    text = lock.read_text()
    for entry in re.split(r"\n(?=[A-Za-z0-9])", text):
        match = re.match(r"([A-Za-z0-9_.\-]+)==(\S+)(?: ; (.*?))? \\\n", entry)
        if match:
            assert "--hash=sha256:" in entry, f"{lock.name}: {match[1]} has no hash"
            found[(match[1].lower(), match[3] or "")] = match[2]
    return found


def test_the_readme_and_ci_install_from_the_committed_locks():
    run, test = readme_commands()[:2]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "--require-hashes -r requirements/run.txt" in run
    assert "--require-hashes -r requirements/test.txt" in test
    assert "--require-hashes -r requirements/test.txt" in ci
    for command in (run, test):  # dsched itself adds nothing unlocked
        assert "--no-deps --no-build-isolation -e ." in command
        assert "'.[" not in command and ".[test]" not in command


def test_the_locks_pin_what_pyproject_asks_for_and_agree_with_each_other():
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    test_pins = pins(ROOT / "requirements" / "test.txt")
    run_pins = pins(ROOT / "requirements" / "run.txt")
    wanted = [Requirement(text) for text in project["project"]["dependencies"]]
    wanted += [Requirement(text) for text in project["project"]["optional-dependencies"]["test"]
               if not text.startswith("dsched")]
    wanted += [Requirement(text) for text in project["build-system"]["requires"]]
    for requirement in wanted:
        versions = [version for (name, _), version in test_pins.items()
                    if name == requirement.name.lower()]
        assert versions, f"{requirement.name} is not in requirements/test.txt: run scripts/lock"
        for version in versions:
            assert requirement.specifier.contains(version, prereleases=True), (
                f"{requirement.name}=={version} is outside {requirement}: run scripts/lock")
    assert run_pins.items() <= test_pins.items(), "run.txt must use test.txt's versions"
    assert {name for name, _ in run_pins} >= {
        Requirement(text).name.lower() for text in project["project"]["dependencies"]}

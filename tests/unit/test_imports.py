"""A program pays for what it uses: importing dsched loads none of its parts, and the ``sched``
command does not load the client or the op classes to parse its arguments (``--version``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def loaded_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\n"
         "print(json.dumps([m for m in sys.modules if m.split('.')[0] in ('dsched', 'dask')]))"],
        capture_output=True, text=True, check=True, timeout=60)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_importing_dsched_loads_none_of_its_parts_until_one_is_used():
    assert loaded_after("import dsched") == {"dsched", "dsched.lazy"}  # how it loads them
    used = loaded_after("import dsched\ndsched.Client")
    assert "dsched.client" in used and "dask" not in used  # Dask itself: never


def test_the_public_names_are_all_there():
    import dsched

    for name in dsched.__all__:
        assert getattr(dsched, name) is not None, name
    assert set(dsched.__all__) <= set(dir(dsched))


def test_the_sched_command_parses_without_the_client_or_the_ops():
    loaded = loaded_after("import dsched.cli.sched")
    assert not {"dsched.client", "dsched.protocol.ops", "dsched.scheduler"} & loaded


def loaded_modules_after(code: str) -> set[str]:
    """Every module loaded (the standard library's too) after running ``code`` afresh."""
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(list(sys.modules)))"],
        capture_output=True, text=True, check=True, timeout=60)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_reading_the_config_and_an_address_loads_no_event_loop_tls_or_op_classes():
    # What every `sched` command pays for before it connects.
    loaded = loaded_modules_after("import dsched.client.settings, dsched.comm.addresses, "
                                  "dsched.auth")
    assert not {"asyncio", "ssl", "dsched.protocol.ops", "dsched.client.client",
                "dsched.client.cluster"} & loaded


def test_sched_version_loads_no_client_event_loop_or_tls():
    loaded = loaded_modules_after(
        "import sys\nfrom dsched.cli.sched import main\nsys.argv = ['sched', '--version']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass")
    assert not {"asyncio", "ssl", "dsched.client", "dsched.protocol.ops"} & loaded


def test_the_console_scripts_entry_reads_submit_and_status_without_click_or_asyncio():
    # Up to the connection: the fast path (cli/quick.py) parses, reads the config, builds the
    # job spec and the ops; the connection itself is tested against a scheduler
    # (tests/integration/test_sched_fastpath.py).
    loaded = loaded_modules_after(
        "from dsched.cli.options import parse\n"
        "from dsched.cli import quick, calls\nfrom dsched.client import plain, settings\n"
        "from dsched.jobspec import job_spec\nfrom dsched.protocol import ops\n"
        "p = parse(['-s', 'h:1', 'submit', '--array', '0-9', '--', 'true'])\n"
        "ops.SubmitJobs(id=1, jobs=(job_spec(p.params['command'], array='0-9').to_wire(),))"
        ".to_wire()\nassert parse(['status', '3']) and parse(['--version'])")
    assert not {"click", "asyncio", "ssl", "dsched.client.client", "dsched.cli.sched",
                "dsched.cli.params"} & loaded


def test_sched_version_through_the_console_scripts_entry_loads_next_to_nothing():
    loaded = loaded_modules_after(
        "import sys\nfrom dsched.cli.quick import main\nsys.argv = ['sched', '--version']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass")
    assert not {"click", "asyncio", "ssl", "dsched.settings", "dsched.protocol.ops",
                "msgpack", "dataclasses"} & loaded


def test_settings_load_no_handshake_or_hashlib_for_the_frame_sizes():
    loaded = loaded_modules_after("import dsched.settings")
    assert not {"hashlib", "hmac", "msgpack", "dsched.protocol.handshake"} & loaded


#: The ``sched`` script in the repository, which an install puts on the PATH.
SCHED_SCRIPT = Path(__file__).resolve().parents[2] / "bin" / "sched"


def test_the_sched_script_loads_no_re_before_the_command():
    # A console-script entry's launcher, as pip writes one, imports re first: about 9 ms of
    # each call. The script is our own, and a plain call loads re nowhere.
    out = subprocess.run([sys.executable, "-X", "importtime", str(SCHED_SCRIPT), "--version"],
                         capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout == f"sched, version {__import__('dsched').__version__}\n"
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()}
    assert "dsched.cli.quick" in imported and "re" not in imported


def test_an_installed_sched_is_the_script_not_a_launcher():
    installed = Path(sys.executable).parent / "sched"
    if not installed.exists():
        pytest.skip("dsched is not installed in this interpreter's environment")
    ours = SCHED_SCRIPT.read_text().split("\n", 1)[1]
    assert installed.read_text().split("\n", 1)[1] == ours  # all but the rewritten #! line


@pytest.mark.parametrize(("where", "package"), [
    (".framing", "dsched.protocol"), ("..errors", "dsched.client"), (".dask.requires", "dsched"),
    ("...jobs", "dsched.scheduler.http"), (".client", "dsched"),
])
def test_a_lazy_name_comes_from_the_module_importlib_would_load(where, package):
    import importlib

    from dsched.lazy import _load

    assert _load(where, package) is importlib.import_module(where, package)

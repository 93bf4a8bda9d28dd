"""A program pays for what it uses: importing dsched loads none of its parts, and the ``sched``
command does not load the client or the op classes to parse its arguments (``--version``)."""

from __future__ import annotations

import json
import subprocess
import sys


def loaded_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\n"
         "print(json.dumps([m for m in sys.modules if m.split('.')[0] in ('dsched', 'dask')]))"],
        capture_output=True, text=True, check=True, timeout=60)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_importing_dsched_loads_none_of_its_parts_until_one_is_used():
    assert loaded_after("import dsched") == {"dsched"}
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

"""What ``sched submit`` and ``sched status`` load, from a shell loop: the fast path
(``cli/quick.py``) reads its config, finds its token, builds its job and its ops, connects and
prints its table with no more of the library than those need. Each module kept out here cost a
call several milliseconds; so do the helpers that stand in for pathlib, uuid and strftime, and
each must say what those said."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from dsched import auth, config, settings
from dsched.cli.jobtext import _clock, clock
from dsched.jobspec import submission_id

#: What the fast path must not load: each is costly, and none is needed for a plain call.
HEAVY = {"click", "asyncio", "ssl", "threading", "logging", "pathlib", "secrets", "uuid",
         "platform", "urllib.parse", "encodings.idna", "shlex", "dsched.client.client",
         "dataclasses", "inspect",
         "dsched.cli.sched", "dsched.cli.params", "typing", "decimal"}

FAST_PATH = """
import json, sys
from dsched.cli import quick
from dsched.client.settings import plain_client_from_config
from dsched.protocol import ops
from dsched.jobspec import job_spec

class StandIn:
    def submit_command(self, command, **options):
        job_spec(command, **options)
        return type("Job", (), {"job_id": lambda self: 7})()
    def resolve_jobs(self, jobs):
        return list(jobs)
    def jobs(self, jobs=(), states=(), expand=False):
        view = {"id": 7, "name": "a", "state": "held", "reason": "held", "detail": "",
                "resources": "", "worker": "", "gpus": [], "submitted": 1000.0,
                "started": None, "duration": None, "exit_code": None}
        return {"jobs": [view], "counts": {"held": 1}, "total": 1}
    def close(self):
        pass

quick.connect = lambda cfg: StandIn()
quick._echo = lambda text, err=False: None
assert quick.run(["-s", "127.0.0.1:1", "submit", "--hold", "--env", "A=1", "--time", "2h",
                  "--array", "0-9%2", "--", "true"]) == 0
assert quick.run(["-s", "127.0.0.1:1", "status", "7", "12_3", "--state", "held"]) == 0
ops.SubmitJobs(id=1, jobs=(job_spec(["true"]).to_wire(),)).to_wire()
try:  # the plain connection itself, as far as a refused connect: token, address, socket
    plain_client_from_config(quick.load_config(None, {
        "client.scheduler_address": "127.0.0.1:1", "client.token_file": None}))
except OSError:
    pass
from dsched import settings
made = "__dataclass_fields__" in vars(settings.SECTIONS["client"])
print(json.dumps({"modules": list(sys.modules), "made": made}))
"""


def test_the_fast_path_loads_no_heavy_module(tmp_path):
    env = {name: value for name, value in os.environ.items() if not name.startswith("SCHED_")}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_STATE_HOME=str(tmp_path / "state"), SCHED_TOKEN="t")
    out = subprocess.run([sys.executable, "-c", FAST_PATH], env=env, capture_output=True,
                         text=True, check=True, timeout=60)
    loaded = json.loads(out.stdout.splitlines()[-1])
    assert not HEAVY & set(loaded["modules"])
    assert not loaded["made"]  # the settings' dataclasses: read as declared, not made


def test_the_settings_are_made_dataclasses_when_first_asked_for():
    import dataclasses

    comm = settings.CommConfig  # made now, if no test made them before
    assert dataclasses.is_dataclass(comm) and comm is settings.SECTIONS["comm"]
    assert settings.CommConfig is comm  # once
    assert [f.name for f in dataclasses.fields(settings.ServerTlsConfig)] == [
        "cert", "key", "ca", "require_client_cert"]
    made = {name: {f.name: f.default for f in dataclasses.fields(cls)
                   if f.default is not dataclasses.MISSING}
            for name, cls in settings.SECTIONS.items()}
    declared = settings.defaults()
    for name, values in made.items():  # the declarations say what the dataclasses say
        assert values.items() <= declared[name].items()
    assert settings.build(comm, config.load()["comm"]) == comm()
    with pytest.raises(AttributeError):
        settings.NoSuchConfig  # noqa: B018


@pytest.mark.parametrize("text", [
    "/a/b", "a/b", "/", "//a", "///a", "a//b", "a/./b", "./a", "a/.", "a/", "a/../b", ".", "..",
    "~/x", "a b/c", "/x/y/", "/.x/..y", "a/.b.", "", "/a\0b", "x" * 300,
])
def test_path_text_writes_a_path_as_pathlib_does(text):
    assert auth.path_text(text) == str(Path(text))
    assert auth.path_text(Path(text)) == str(Path(text))


def test_path_text_agrees_with_pathlib_on_random_paths():
    rng = random.Random(7)
    for _ in range(3000):
        text = "".join(rng.choice(["/", "a", ".", "..", "b/", "//", "./", "~"])
                       for _ in range(rng.randint(0, 8)))
        assert auth.path_text(text) == str(Path(text)), text


def test_the_state_directory_is_as_pathlib_made_it(tmp_path):
    for env in ({"XDG_STATE_HOME": "/s//t/./"}, {"XDG_STATE_HOME": "rel"}, {"HOME": "/h/"},
                {"HOME": str(tmp_path)}, {"XDG_STATE_HOME": "/x", "HOME": "/h"}):
        home = env.get("HOME") or os.path.expanduser("~")
        expected = Path(env.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state"))
        assert auth.default_state_dir_text(env) == str(expected / "sched")
        assert auth.default_state_dir(env) == expected / "sched"


def test_a_config_file_is_looked_for_as_pathlib_looks(tmp_path):
    (tmp_path / "file").write_text("")
    (tmp_path / "dir").mkdir()
    for name in ("file", "dir", "missing", "file/below", "missing/below", "a\0b"):
        path = os.path.join(tmp_path, name)
        assert config._is_file(path) == Path(path).is_file(), name


def test_a_token_file_is_read_and_named_as_before(tmp_path):
    (tmp_path / "token").write_text(" secret \n")
    os.chmod(tmp_path / "token", 0o600)
    assert auth.read_token_file(f"{tmp_path}//./token") == "secret"
    with pytest.raises(auth.ConfigError, match=f"token file {tmp_path}/gone does not exist"):
        auth.read_token_file(f"{tmp_path}/./gone/")


def test_a_submission_id_is_a_random_version_4_uuid():
    ids = {submission_id() for _ in range(1000)}
    assert len(ids) == 1000
    for text in ids:
        parsed = uuid.UUID(text)
        assert parsed.hex == text and parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_the_status_table_writes_times_as_strftime_did():
    rng = random.Random(3)
    now = 1.7e9
    today = dt.datetime.fromtimestamp(now).date()
    for _ in range(2000):
        when = now + rng.uniform(-4e7, 4e5)
        moment = dt.datetime.fromtimestamp(when)
        expected = moment.strftime("%H:%M:%S" if moment.date() == today else "%m-%d %H:%M")
        assert _clock(when, today) == clock(when, now) == expected
    assert _clock(None, today) == clock(None, now) == ""


@pytest.mark.parametrize(("module", "kept_out"), [
    ("dsched.protocol.handshake", {"typing"}),
    ("dsched.protocol.messages", {"typing", "dataclasses"}),
    ("dsched.resources", {"typing", "decimal", "math"}),
    ("dsched.cli.options", {"typing"}),
])
def test_the_protocol_and_resources_load_neither_typing_nor_decimal(module, kept_out):
    out = subprocess.run([sys.executable, "-c", f"import json, sys, {module}\n"
                          "print(json.dumps(list(sys.modules)))"],
                         capture_output=True, text=True, check=True, timeout=60)
    assert not kept_out & set(json.loads(out.stdout.splitlines()[-1]))


def test_the_command_line_records_are_the_tuples_they_were():
    from dsched.cli.options import GROUP, Opt, Parsed, parse

    opt = Opt(("--x",), "x", "text", "help")
    assert opt.extra == {} and opt == (("--x",), "x", "text", "help", {})
    assert opt._replace(dest="y").dest == "y" and type(opt._replace()) is Opt
    assert repr(opt) == "Opt(names=('--x',), dest='x', kind='text', help='help', extra={})"
    assert all(type(o) is Opt for o in GROUP)
    parsed = parse(["--version"])
    assert parsed == Parsed("version", parsed.group, {}) and parsed.command == "version"
    command, group, params = parse(["status", "7"])
    assert (command, params["job_ids"]) == ("status", (7,))


def test_the_frame_and_alias_names_are_still_there():
    from dsched import auth, resources
    from dsched.protocol import framing, messages

    assert framing.Frame(0, b"x") == (0, b"x") and framing.Frame(0, b"x").body == b"x"
    assert isinstance(b"", messages.Chunk) and isinstance(memoryview(b""), framing.Body)
    assert resources.Resources in resources.ResourcesLike.__args__
    assert isinstance("/x", auth.PathLike)
    assert isinstance(resources.EMPTY, resources.Mapping)

"""dsched.config: defaults, the file, SCHED_* variables, set() and command-line overrides.

Every test runs with HOME, the XDG directories and /etc/sched moved under tmp_path and every
SCHED_* variable removed, so the real user's configuration is never read.
"""

from __future__ import annotations

import os
import threading

import pytest

from dsched import config
from dsched.errors import ConfigError
from dsched.resources import Resources

MiB = 2**20


# Every test here runs with no SCHED_* variables and a fresh home (the ``home`` fixture).
pytestmark = pytest.mark.usefixtures("home")


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def user_file(home):
    return home / ".config" / "sched" / "config.toml"


# -- defaults ------------------------------------------------------------------------------


def test_a_loaded_config_shares_nothing_that_can_change(user_file):
    write(user_file, '[worker.resources]\nGPU = 2\n[worker]\ngpu_fault_xids = [48, 79]\n')
    with config.set({"client.connect_timeout": 7}):
        loaded, expected = config.load(), config.load()
        containers = [loaded]
        while containers:  # each value a dict or list (made again) or unchangeable (shared)
            node = containers.pop()
            for value in (node.values() if isinstance(node, dict) else node):
                if isinstance(value, (dict, list)):
                    containers.append(value)
                else:
                    assert isinstance(value, (str, int, float, type(None), tuple,
                                              Resources)), value
            node.clear()
        assert config.load() == expected and expected["worker"]["resources"] == {"GPU": 2}


def test_defaults_without_file_or_environment(home):
    cfg = config.load()
    assert cfg["scheduler"]["port"] == 8786
    assert cfg["scheduler"]["dashboard_port"] == 8787
    assert cfg["scheduler"]["allowed_failures"] == 3
    assert cfg["scheduler"]["no_worker_timeout"] is None
    assert cfg["worker"]["resources"] == {}
    assert cfg["worker"]["nthreads"] is None
    assert cfg["worker"]["nworkers"] == 1
    assert cfg["worker"]["gpus"] == "auto"
    assert cfg["comm"]["max_frame_size"] == 256 * MiB
    assert cfg["comm"]["max_message_size"] == 4096 * MiB
    state_dir = str(home / ".local" / "state" / "sched")
    assert cfg["scheduler"]["state_dir"] == state_dir
    token = os.path.join(state_dir, "token")
    assert cfg["scheduler"]["token_file"] == cfg["worker"]["token_file"] == token
    assert cfg["client"]["token_file"] == token


def test_state_dir_follows_xdg_state_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert config.get("scheduler.state_dir") == str(tmp_path / "state" / "sched")


def test_every_default_has_a_rule_and_passes_it():
    # _FLAT is the table of rules; a default added without a rule would be unsettable.
    def leaves(table, prefix=()):
        for key, value in table.items():
            if isinstance(value, dict) and prefix + (key,) != ("worker", "resources"):
                yield from leaves(value, prefix + (key,))
            else:
                yield prefix + (key,), value

    defaults = dict(leaves(config.DEFAULTS))
    assert sorted(defaults) == sorted(p for p, rule in config._FLAT.items() if rule is not None)
    for path, value in defaults.items():
        assert config.check_value(".".join(path), value) == value


# -- the file ------------------------------------------------------------------------------


def test_file_in_home_config_is_read(user_file):
    write(user_file, "[scheduler]\nport = 9000\n[worker.resources]\nGPU = 2\nMEMORY = 100e9\n")
    cfg = config.load()
    assert cfg["scheduler"]["port"] == 9000
    assert cfg["worker"]["resources"] == {"GPU": 2, "MEMORY": 100_000_000_000}


def test_xdg_config_home_is_used_instead_of_home_config(tmp_path, user_file, monkeypatch):
    write(user_file, "[scheduler]\nport = 1\n")
    write(tmp_path / "xdg" / "sched" / "config.toml", "[scheduler]\nport = 2\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config.get("scheduler.port") == 2


def test_system_file_is_read_only_when_no_user_file(user_file):
    write(config.SYSTEM_CONFIG, "[scheduler]\nport = 1111\n")
    assert config.get("scheduler.port") == 1111
    write(user_file, "[worker]\nnworkers = 2\n")
    assert config.get("scheduler.port") == 8786  # the first file found is the only one read


def test_sched_config_names_the_file(tmp_path, user_file, monkeypatch):
    write(user_file, "[scheduler]\nport = 1\n")
    chosen = write(tmp_path / "chosen.toml", "[scheduler]\nport = 2\n")
    monkeypatch.setenv("SCHED_CONFIG", str(chosen))
    assert config.get("scheduler.port") == 2
    explicit = write(tmp_path / "explicit.toml", "[scheduler]\nport = 3\n")
    assert config.load(explicit)["scheduler"]["port"] == 3


def test_missing_explicit_file_is_an_error(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="nope.toml does not exist"):
        config.load(tmp_path / "nope.toml")
    monkeypatch.setenv("SCHED_CONFIG", str(tmp_path / "gone.toml"))
    with pytest.raises(ConfigError, match="SCHED_CONFIG: .*gone.toml does not exist"):
        config.load()


def test_unknown_key_in_file_names_file_and_key(user_file):
    write(user_file, "[scheduler]\nprot = 9000\n")
    with pytest.raises(ConfigError) as info:
        config.load()
    message = str(info.value)
    assert str(user_file) in message
    assert "'scheduler.prot'" in message and "did you mean 'scheduler.port'" in message


def test_unknown_section_in_file(user_file):
    write(user_file, "[shceduler]\nport = 1\n")
    with pytest.raises(ConfigError, match="unknown key 'shceduler'; did you mean 'scheduler'"):
        config.load()
    write(user_file, "[nonsense]\nx = 1\n")
    with pytest.raises(ConfigError, match="unknown key 'nonsense'; the sections are: scheduler,"):
        config.load()


def test_mistyped_value_in_file(user_file):
    write(user_file, '[scheduler]\nport = "abc"\n')
    with pytest.raises(ConfigError) as info:
        config.load()
    assert str(info.value) == (f"config file {user_file}: scheduler.port must be an integer "
                               "from 0 to 65535, got 'abc'")


def test_invalid_toml_names_the_file(user_file):
    write(user_file, "[scheduler\nport = 1\n")
    with pytest.raises(ConfigError, match=f"config file {user_file}: invalid TOML"):
        config.load()


def test_invalid_resource_in_file_reports_the_spec_error(user_file):
    write(user_file, "[worker.resources]\nGPU = -1\n")
    with pytest.raises(ConfigError) as info:
        config.load()
    message = str(info.value)
    assert str(user_file) in message and "'GPU=-1'" in message and "NAME=VALUE" in message


def test_file_keys_are_case_insensitive_but_resource_names_are_not(user_file):
    write(user_file, "[Scheduler]\nDashboard-Port = 9999\n[worker.resources]\ngpu = 1\nGPU = 2\n")
    cfg = config.load()
    assert cfg["scheduler"]["dashboard_port"] == 9999
    assert cfg["worker"]["resources"] == {"gpu": 1, "GPU": 2}


def test_a_key_given_twice_by_case_is_an_error(user_file):
    write(user_file, "[scheduler]\nport = 1\nPort = 2\n")
    with pytest.raises(ConfigError, match="'scheduler.port' is given twice"):
        config.load()


# -- the environment -----------------------------------------------------------------------


def test_env_resource_keeps_its_case(monkeypatch):
    monkeypatch.setenv("SCHED_WORKER__RESOURCES__GPU", "2")
    monkeypatch.setenv("SCHED_WORKER__RESOURCES__gpu0", "0.5")
    assert config.get("worker.resources") == {"GPU": 2, "gpu0": 0.5}
    assert config.get("worker.resources.GPU") == 2


def test_env_levels_are_case_insensitive_and_values_are_toml_literals(monkeypatch):
    monkeypatch.setenv("SCHED_SCHEDULER__PORT", "8786")
    monkeypatch.setenv("SCHED_scheduler__host", "0.0.0.0")  # not TOML: kept as text
    monkeypatch.setenv("SCHED_SCHEDULER__TLS__REQUIRE_CLIENT_CERT", "false")
    monkeypatch.setenv("SCHED_SCHEDULER__HEARTBEAT_TIMEOUT", "2.5")
    monkeypatch.setenv("SCHED_WORKER__NAME", '"w1"')
    monkeypatch.setenv("SCHED_SCHEDULER__DASHBOARD_PORT", "none")
    cfg = config.load()
    assert cfg["scheduler"]["port"] == 8786 and cfg["scheduler"]["host"] == "0.0.0.0"
    assert cfg["scheduler"]["tls"]["require_client_cert"] is False
    assert cfg["scheduler"]["heartbeat_timeout"] == 2.5
    assert cfg["worker"]["name"] == "w1"
    assert cfg["scheduler"]["dashboard_port"] is None


def test_env_whole_table_then_single_names(monkeypatch):
    monkeypatch.setenv("SCHED_WORKER__RESOURCES", "GPU=2 MEMORY=100e9")
    monkeypatch.setenv("SCHED_WORKER__RESOURCES__GPU", "4")
    assert config.get("worker.resources") == {"GPU": 4, "MEMORY": 100_000_000_000}


def test_env_whole_section_as_an_inline_table(monkeypatch):
    monkeypatch.setenv("SCHED_WORKER", "{nthreads = 2, resources = {GPU = 1}}")
    assert config.get("worker.nthreads") == 2
    assert config.get("worker.resources") == {"GPU": 1}


def test_env_unknown_key_names_the_variable(monkeypatch):
    monkeypatch.setenv("SCHED_SCHEDULER__PROT", "1")
    with pytest.raises(ConfigError, match="environment variable SCHED_SCHEDULER__PROT: "
                                          "unknown key 'scheduler.prot'"):
        config.load()


def test_env_mistyped_value(monkeypatch):
    monkeypatch.setenv("SCHED_SCHEDULER__PORT", "abc")
    with pytest.raises(ConfigError, match="SCHED_SCHEDULER__PORT: scheduler.port must be an "
                                          "integer from 0 to 65535, got 'abc'"):
        config.load()


def test_env_invalid_resource_reports_the_spec_error(monkeypatch):
    monkeypatch.setenv("SCHED_WORKER__RESOURCES__GPU", "x")
    with pytest.raises(ConfigError) as info:
        config.load()
    message = str(info.value)
    assert "SCHED_WORKER__RESOURCES__GPU" in message
    assert "'GPU=x'" in message and "NAME=VALUE" in message


def test_env_with_single_underscores_is_reported_not_ignored(monkeypatch):
    monkeypatch.setenv("SCHED_WORKER_RESOURCES_GPU", "2")
    with pytest.raises(ConfigError, match="double underscores"):
        config.load()


def test_env_variables_that_are_not_settings_are_left_alone(monkeypatch):
    monkeypatch.setenv("SCHED_TOKEN", "secret")
    monkeypatch.setenv("SCHED_UNRELATED", "1")
    assert "secret" not in repr(config.load())


def test_env_value_cannot_smuggle_other_keys(monkeypatch):
    monkeypatch.setenv("SCHED_WORKER__NAME", "w\nport = 1")
    assert config.get("worker.name") == "w\nport = 1"


# -- precedence ----------------------------------------------------------------------------


def test_command_line_over_environment_over_file(user_file, monkeypatch):
    write(user_file, "[scheduler]\nport = 1000\nhost = 'file'\nprefetch = 5\n")
    monkeypatch.setenv("SCHED_SCHEDULER__PORT", "2000")
    monkeypatch.setenv("SCHED_SCHEDULER__HOST", "env")
    cfg = config.load(overrides={"scheduler.port": 3000}, source="command line")
    assert cfg["scheduler"]["port"] == 3000
    assert cfg["scheduler"]["host"] == "env"
    assert cfg["scheduler"]["prefetch"] == 5


def test_resources_merge_by_name_and_command_line_replaces_the_table(user_file, monkeypatch):
    write(user_file, "[worker.resources]\nGPU = 1\nMEMORY = 8e9\n")
    monkeypatch.setenv("SCHED_WORKER__RESOURCES__GPU", "2")
    assert config.get("worker.resources") == {"GPU": 2, "MEMORY": 8_000_000_000}
    cfg = config.load(overrides={"worker.resources": "GPU=4"})
    assert cfg["worker"]["resources"] == {"GPU": 4}


def test_set_wins_over_environment_and_command_line_wins_over_set(monkeypatch):
    monkeypatch.setenv("SCHED_WORKER__NTHREADS", "8")
    with config.set({"worker.nthreads": 4}):
        assert config.get("worker.nthreads") == 4
        assert config.load(overrides={"worker.nthreads": 2})["worker"]["nthreads"] == 2
    assert config.get("worker.nthreads") == 8


def test_bad_override_names_its_source():
    with pytest.raises(ConfigError, match="command line: worker.nworkers must be an integer >= 1"):
        config.load(overrides={"worker": {"nworkers": 0}}, source="command line")


# -- set() ---------------------------------------------------------------------------------


def test_set_as_context_manager_restores_on_exit():
    with config.set({"worker.resources.GPU": 2}):
        assert config.get("worker.resources") == {"GPU": 2}
    assert config.get("worker.resources") == {}


def test_set_restores_after_an_exception():
    with pytest.raises(RuntimeError):
        with config.set({"scheduler.port": 1}):
            raise RuntimeError
    assert config.get("scheduler.port") == 8786


def test_nested_set_innermost_wins_and_outer_comes_back():
    with config.set({"worker": {"nthreads": 2, "resources": {"GPU": 1}}}):
        with config.set({"worker.resources.MEMORY": 10}, worker__nthreads=4):
            assert config.get("worker.nthreads") == 4
            assert config.get("worker.resources") == {"GPU": 1, "MEMORY": 10}
        assert config.get("worker.nthreads") == 2
        assert config.get("worker.resources") == {"GPU": 1}
    assert config.get("worker.nthreads") is None


def test_plain_set_call_stays_until_restored():
    override = config.set({"scheduler.prefetch": 0})
    try:
        assert config.get("scheduler.prefetch") == 0
        with config.set({"scheduler.prefetch": 7}):
            assert config.get("scheduler.prefetch") == 7
        assert config.get("scheduler.prefetch") == 0
    finally:
        override.restore()
    assert config.get("scheduler.prefetch") == 2


def test_set_blocks_may_end_out_of_order():
    first = config.set({"scheduler.prefetch": 1})
    second = config.set({"scheduler.allowed_failures": 9})
    first.restore()
    assert config.get("scheduler.prefetch") == 2
    assert config.get("scheduler.allowed_failures") == 9
    second.restore()
    assert config.get("scheduler.allowed_failures") == 3


def test_set_checks_at_once_and_applies_nothing_when_wrong():
    with pytest.raises(ConfigError, match=r"config.set\(\): unknown key 'worker.nthread'"):
        config.set({"worker.nworkers": 3, "worker.nthread": 2})
    with pytest.raises(ConfigError, match="worker.resources.GPU: invalid resource 'GPU=nan'"):
        config.set({"worker.resources.GPU": "nan"})
    assert config.get("worker.nworkers") == 1


def test_set_is_seen_by_threads_started_inside_the_block():
    seen = []
    with config.set({"worker.resources.GPU": 2}):
        thread = threading.Thread(target=lambda: seen.append(config.get("worker.resources")))
        thread.start()
        thread.join()
    assert seen == [{"GPU": 2}]


# -- get() and values ------------------------------------------------------------------------


def test_get_is_case_insensitive_copies_and_has_defaults():
    assert config.get("Scheduler.Port") == 8786
    config.get("worker.resources")["GPU"] = 99  # a copy: the config is unchanged
    assert config.get("worker.resources") == {}
    assert config.get("worker.resources.GPU", 0) == 0
    with pytest.raises(KeyError):
        config.get("scheduler.nope")


@pytest.mark.parametrize("key, given, expected", [
    ("worker.memory_limit", "4GiB", 4 * 2**30),
    ("worker.memory_limit", "100e9", 100_000_000_000),
    ("worker.memory_limit", 0.5, 0.5),
    ("worker.memory_limit", "none", None),
    ("worker.gpus", "0,1", [0, 1]),
    ("worker.gpus", ["GPU-1a2b", 3], ["GPU-1a2b", 3]),
    ("worker.gpus", "None", "none"),
    ("comm.max_frame_size", "1 MiB", MiB),
    ("comm.max_message_size", "8GiB", 8 * 2**30),
    ("scheduler.log_level", "DEBUG", "debug"),
    ("scheduler.no_worker_timeout", 30, 30.0),
])
def test_values_are_normalized(key, given, expected):
    assert config.check_value(key, given) == expected


def test_paths_expand_the_home_directory(home):
    assert config.check_value("worker.local_directory", "~/scratch") == str(home / "scratch")


@pytest.mark.parametrize("key, given, expected_words", [
    ("worker.memory_limit", "lots", "a size such as '4GiB'"),
    ("worker.gpus", "0,0", "distinct device indices"),
    ("worker.nthreads", 0, "an integer >= 1, or 'none'"),
    ("worker.nworkers", True, "an integer >= 1"),
    ("scheduler.heartbeat_timeout", -1, "a positive number of seconds"),
    ("scheduler.tls.require_client_cert", "yes", "true or false"),
    ("scheduler.log_level", "loud", "one of debug, info"),
    ("scheduler.tls", "x", "is a table of settings"),
])
def test_bad_values_say_what_was_expected(key, given, expected_words):
    with pytest.raises(ConfigError, match=expected_words) as info:
        config.check_value(key, given, source="test")
    assert str(info.value).startswith(f"test: {key}")


def test_settings_that_go_together(tmp_path):
    with pytest.raises(ConfigError, match="scheduler.tls.cert and scheduler.tls.key"):
        config.load(overrides={"scheduler.tls.cert": str(tmp_path / "c.pem")})
    with pytest.raises(ConfigError, match="reconnect_backoff_min must not exceed"):
        config.load(overrides={"worker.reconnect_backoff_min": 60})


def test_a_message_limit_below_the_frame_limit_is_refused(home):
    with pytest.raises(ConfigError, match=r"comm.max_message_size \(1048576\) must be at least "
                                          r"comm.max_frame_size \(2097152\)"):
        config.load(overrides={"comm.max_message_size": "1MiB", "comm.max_frame_size": "2MiB"})


def test_set_accepts_dasks_distributed_prefix_so_seed_code_runs_unchanged():
    with config.set({"distributed.worker.resources.GPU": 2}):
        assert config.get("worker.resources") == {"GPU": 2}
    assert config.get("worker.resources") == {}


def test_the_reference_pages_in_docs_are_up_to_date():
    from pathlib import Path

    from dsched.reference import PAGES

    docs = Path(__file__).resolve().parents[2] / "docs"
    assert {"configuration.md", "cli.md"} <= set(PAGES)
    for name, page in PAGES.items():
        assert (docs / name).read_text() == page(), (
            f"docs/{name} is stale: run python -m dsched.reference")


def test_every_setting_is_declared_with_a_kind_a_default_that_passes_it_and_a_help():
    from dsched import settings

    keys = list(settings.reference())
    assert len(keys) == len({key for key, *_ in keys}) > 40
    for key, env, default, text in keys:
        assert text and text[0].isupper() and env == "SCHED_" + key.upper().replace(".", "__")
        assert config.check_value(key, default) == default, key

"""Token files: created private (0600) by the scheduler, found by clients and workers, and
looked up in the order explicit token, SCHED_TOKEN, --token-file, default file."""

from __future__ import annotations

import logging
import os
import stat
import threading

import pytest

from dsched.auth import (
    create_token_file,
    default_token_path,
    ensure_token,
    find_token,
    load_token,
    read_token_file,
)
from dsched.environ import TOKEN_ENV
from dsched.errors import ConfigError


@pytest.fixture
def default_path(tmp_path):
    return tmp_path / "config" / "sched" / "token"


def test_the_default_path_is_in_the_schedulers_state_directory(tmp_path):
    assert default_token_path({"XDG_STATE_HOME": str(tmp_path)}) == tmp_path / "sched" / "token"
    home_default = default_token_path({"HOME": str(tmp_path)})
    assert home_default == tmp_path / ".local" / "state" / "sched" / "token"
    # where the daemons' configuration puts the token file when none is given
    from dsched import config

    cfg = config.load(env={"HOME": str(tmp_path)})
    assert cfg["scheduler"]["token_file"] == str(home_default)


def test_the_scheduler_creates_a_private_random_token_file_when_none_exists(default_path):
    token = ensure_token(env={}, default_path=default_path)
    assert len(token) == 64 and int(token, 16) >= 0  # 32 random bytes, hex
    assert stat.S_IMODE(default_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(default_path.parent.stat().st_mode) == 0o700
    assert default_path.read_text().strip() == token
    # A second start, and any local client, find the same token.
    assert ensure_token(env={}, default_path=default_path) == token
    assert load_token(env={}, default_path=default_path) == token
    assert [p.name for p in default_path.parent.iterdir()] == ["token"]  # no temporary left


def test_schedulers_starting_at_once_agree_on_one_token(default_path):
    tokens = []
    threads = [threading.Thread(target=lambda: tokens.append(create_token_file(default_path)))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(tokens)) == 1 and default_path.read_text().strip() == tokens[0]


def test_lookup_precedence(tmp_path, default_path):
    token_file = tmp_path / "given"
    token_file.write_text("from-file\n")
    default_path.parent.mkdir(parents=True)
    default_path.write_text("from-default")
    env = {TOKEN_ENV: "from-env"}
    kwargs = dict(token_file=token_file, default_path=default_path)
    assert find_token("explicit", env=env, **kwargs) == "explicit"
    assert find_token(None, env=env, **kwargs) == "from-env"
    assert find_token(None, env={}, **kwargs) == "from-file"
    assert find_token(None, env={}, default_path=default_path) == "from-default"
    assert find_token(None, env={}, default_path=tmp_path / "absent") is None
    # The scheduler follows the same order before it creates anything.
    assert ensure_token("explicit", env=env, **kwargs) == "explicit"
    assert ensure_token(None, env=env, **kwargs) == "from-env"
    assert ensure_token(None, env={}, **kwargs) == "from-file"


def test_the_environment_is_read_when_none_is_passed(monkeypatch, default_path):
    monkeypatch.setenv(TOKEN_ENV, "from-real-env")
    assert find_token(default_path=default_path) == "from-real-env"


def test_a_client_without_any_token_gets_an_error_saying_where_to_put_one(default_path):
    with pytest.raises(ConfigError, match=f"--token-file FILE or the {TOKEN_ENV} environment "
                       f"variable.*{default_path}"):
        load_token(env={}, default_path=default_path)


def test_a_named_token_file_that_is_missing_or_empty_is_an_error(tmp_path, default_path):
    with pytest.raises(ConfigError, match=f"does not exist; give the scheduler's token with "
                       f"--token-file FILE .* or the {TOKEN_ENV} environment variable"):
        find_token(env={}, token_file=tmp_path / "missing", default_path=default_path)
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        read_token_file(tmp_path / "empty")


def test_the_scheduler_creates_a_named_token_file_that_is_missing(tmp_path):
    path = tmp_path / "deploy" / "token"
    token = ensure_token(env={}, token_file=path)
    assert read_token_file(path) == token
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_a_token_file_others_can_read_is_used_with_a_warning(tmp_path, caplog):
    path = tmp_path / "token"
    path.write_text("open-secret")
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="dsched.auth"):
        assert read_token_file(path) == "open-secret"
    assert "chmod 600" in caplog.text

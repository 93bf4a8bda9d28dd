"""Credentials: the shared token (its file, and where each program looks for it) and TLS contexts.

Where a token comes from, first match wins: an explicit token, the ``SCHED_TOKEN`` environment
variable, a ``--token-file`` path, then the default file, ``token`` in the scheduler's state
directory (``$XDG_STATE_HOME/sched/token``, or ``~/.local/state/sched/token``). The scheduler creates the default file (mode 0600) on first start,
so clients and workers on the same machine find it without configuration. This module reads
and writes only the files named to it; it opens no connections.
"""

from __future__ import annotations

import os
import stat

from .environ import HOME_ENV, TOKEN_ENV, XDG_STATE_HOME_ENV
from .errors import ConfigError

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:  # ssl is imported where a context is made: a program without TLS (most
    import ssl     # sched commands) does not pay for loading it; pathlib where a Path is
    from pathlib import Path  # made, which a client that reads its token need not
    from typing import Any, Mapping

#: Random bytes in a generated token (written as hex).
TOKEN_BYTES = 32

PathLike = str | os.PathLike[str]


def default_state_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/sched``, or ``~/.local/state/sched`` without XDG_STATE_HOME: where
    the scheduler keeps its token file and journal unless told otherwise."""
    from pathlib import Path

    return Path(default_state_dir_text(env))


def default_state_dir_text(env: Mapping[str, str] | None = None) -> str:
    """``str(default_state_dir(env))``: what the config says ``scheduler.state_dir`` is."""
    env = os.environ if env is None else env
    home = env.get(HOME_ENV) or os.path.expanduser("~")
    return path_text(os.path.join(env.get(XDG_STATE_HOME_ENV)
                                  or os.path.join(home, ".local", "state"), "sched"))


def path_text(path: PathLike) -> str:
    """``str(Path(path))``: ``path`` as pathlib writes it (no empty or ``.`` part, no ``/`` at
    the end). pathlib is loaded only for a path that it would change: a ``sched`` command
    that reads its config and token need not pay for it."""
    text = os.fspath(path)
    if isinstance(text, str) and all(part not in ("", ".")
                                     for part in text.removeprefix("/").split("/")):
        return text  # one leading '/' at most, and only named parts: written as it is
    from pathlib import Path

    return str(Path(path))


def default_token_path(env: Mapping[str, str] | None = None) -> Path:
    """The token file in :func:`default_state_dir`."""
    return default_state_dir(env) / "token"


def generate_token() -> str:
    import secrets  # loaded where a token is made: a client that reads one need not pay for it

    return secrets.token_hex(TOKEN_BYTES)


def _logger() -> Any:
    """This module's logger; ``logging`` is loaded where something is logged, not by every
    program that reads a token (``sched submit``)."""
    import logging

    return logging.getLogger(__name__)


def read_token_file(path: PathLike) -> str:
    """The token in ``path`` (surrounding whitespace removed); ConfigError if none is there."""
    path = path_text(path)  # as Path(path) read it and said it
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read().strip()
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ConfigError(
            f"token file {path} does not exist; give the scheduler's token with --token-file "
            f"FILE (a copy of the scheduler's token file) or the {TOKEN_ENV} environment "
            "variable") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read token file {path}: {error}") from error
    if not text:
        raise ConfigError(f"token file {path} is empty")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        _logger().warning(
            "Token file %s can be read by other users (mode %o); run: chmod 600 %s",
            path, stat.S_IMODE(mode), path,
        )
    return text


def create_token_file(path: PathLike) -> str:
    """Write a new random token to ``path`` (mode 0600) unless a file is there; return the token.

    The token is written to a private temporary file and linked into place, so a concurrent
    reader never sees a half-written token and two schedulers starting at once agree on one.
    """
    import secrets
    from pathlib import Path

    path = Path(path)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if path.exists():
            return read_token_file(path)
        token = generate_token()
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as file:
                file.write(token + "\n")
            os.link(temporary, path)
        except FileExistsError:
            return read_token_file(path)
        finally:
            temporary.unlink(missing_ok=True)
    except OSError as error:
        raise ConfigError(f"cannot create token file {path}: {error}") from error
    _logger().info("Created a new token file %s", path)
    return token


def find_token(
    token: str | None = None,
    *,
    token_file: PathLike | None = None,
    env: Mapping[str, str] | None = None,
    default_path: PathLike | None = None,
) -> str | None:
    """The token by the precedence above, or None when no source has one.

    An explicit ``token_file`` that does not exist is an error, not a reason to look further.
    """
    env = os.environ if env is None else env
    if token:
        return token
    if env.get(TOKEN_ENV):
        return env[TOKEN_ENV]
    if token_file is not None:
        return read_token_file(token_file)
    from pathlib import Path

    default = Path(default_path) if default_path is not None else default_token_path(env)
    if default.exists():
        return read_token_file(default)
    return None


def load_token(
    token: str | None = None,
    *,
    token_file: PathLike | None = None,
    env: Mapping[str, str] | None = None,
    default_path: PathLike | None = None,
) -> str:
    """For clients and workers: the token, or a ConfigError saying where it was looked for."""
    found = find_token(token, token_file=token_file, env=env, default_path=default_path)
    if found is None:
        default = default_path if default_path is not None else default_token_path(env)
        raise ConfigError(
            f"no token found: give the scheduler's token with --token-file FILE or the "
            f"{TOKEN_ENV} environment variable, or copy the scheduler's token file to {default} "
            "(the scheduler creates it on first start)"
        )
    return found


def ensure_token(
    token: str | None = None,
    *,
    token_file: PathLike | None = None,
    env: Mapping[str, str] | None = None,
    default_path: PathLike | None = None,
) -> str:
    """For the scheduler: like :func:`load_token`, but creates the token file when missing
    (at ``token_file`` if given, else at the default path)."""
    env = os.environ if env is None else env
    if token:
        return token
    if env.get(TOKEN_ENV):
        return env[TOKEN_ENV]
    if token_file is None:
        token_file = default_path if default_path is not None else default_token_path(env)
    return create_token_file(token_file)


# -- TLS --------------------------------------------------------------------------------------


def server_ssl_context(
    cert: PathLike,
    key: PathLike | None = None,
    *,
    ca: PathLike | None = None,
    require_client_cert: bool = False,
) -> ssl.SSLContext:
    """A server context from PEM files; with ``require_client_cert``, clients must present a
    certificate signed by ``ca``."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load(context.load_cert_chain, cert, key)
    if ca is not None:
        _load(context.load_verify_locations, ca)
    if require_client_cert:
        if ca is None:
            raise ConfigError("requiring client certificates needs a CA file to check them")
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_ssl_context(
    *,
    ca: PathLike | None = None,
    cert: PathLike | None = None,
    key: PathLike | None = None,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """A client context that checks the server against ``ca`` (the system CAs when None) and
    presents ``cert`` when given."""
    import ssl

    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca is not None:
        _load(context.load_verify_locations, ca)
    context.check_hostname = check_hostname
    if cert is not None:
        _load(context.load_cert_chain, cert, key)
    return context


def _load(method, *paths: PathLike | None) -> None:
    import ssl

    try:
        method(*(os.fspath(path) if path is not None else None for path in paths))
    except (OSError, ssl.SSLError) as error:
        named = ", ".join(os.fspath(path) for path in paths if path is not None)
        raise ConfigError(f"cannot load TLS file(s) {named}: {error}") from error

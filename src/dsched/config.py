"""Configuration: the defaults, the TOML file, ``SCHED_*`` environment variables, overrides.

Takes every setting's default and kind from ``settings.py``, where each is declared once, and
merges the layers, each over the one before: defaults, then the file, then the environment, then
:class:`set` (in-process), then the command line (``load(overrides=...)``). ``set()`` wins over
the environment and the file, as ``dask.config.set`` does, because code that sets it in-process
(a LocalCluster, a test, a notebook) means it for that block; the command line wins over
everything because it is what the user just typed. Within ``worker.resources`` a layer that
names one resource (``SCHED_WORKER__RESOURCES__GPU=2``, ``set({"worker.resources.GPU": 2})``)
changes that name only; a layer that gives the whole table (``--resources``, ``[worker.resources]``,
``set({"worker.resources": {...}})``) replaces it.

The file is the explicit path (``--config``, ``load(path=...)``), else ``$SCHED_CONFIG``, else
``$XDG_CONFIG_HOME/sched/config.toml`` (``~/.config/sched/config.toml``), else
``/etc/sched/config.toml``: the first that exists; an explicit path or ``SCHED_CONFIG`` naming a
missing file is an error. Environment variables are ``SCHED_<SECTION>__<KEY>[__<KEY>]``; levels
are case-insensitive, resource names keep their case; values are read as TOML literals when they
parse (``2``, ``0.5``, ``true``, ``"text"``, ``[0, 1]``) and as text otherwise. The other
``SCHED_*`` variables (``SCHED_CONFIG``, ``SCHED_TOKEN``, what a worker tells its tasks: all
named in ``environ.py``) are not settings, and are passed by.

Every key and value is checked: an unknown key or a bad value raises :class:`ConfigError` naming
the key and where it came from (file, variable, ``config.set()``). This module must not log,
start anything, or read any file but the config file.
"""

from __future__ import annotations

import _thread
import os
import stat
from collections.abc import Mapping


from . import plaintoml, settings
from .auth import default_state_dir_text, path_text
from .environ import (CONFIG_ENV, HOME_ENV, LEVEL, NOT_SETTINGS, PREFIX, XDG_CONFIG_HOME_ENV,
                      setting_variable)
from .config_kinds import Bad as _Bad
from .config_kinds import resource_table as _resource_table
from .errors import ConfigError, ResourceSpecError

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:  # pathlib: loaded where a config file is found, not by every command
    from pathlib import Path
    from typing import Any, Callable

#: The last place looked for a config file (a module attribute so tests can move it).
SYSTEM_CONFIG: str | os.PathLike = "/etc/sched/config.toml"

#: The defaults, and the kind of every key, from the declarations in ``settings.py``.
DEFAULTS: dict[str, dict[str, Any]] = settings.defaults()
_KINDS: dict[str, dict[str, Any]] = settings.kinds()


_RESOURCES = ("worker", "resources")
KeyPath = tuple[str, ...]


def _flatten_kinds(kinds: Mapping[str, Any], prefix: KeyPath = ()) -> dict[KeyPath, Any]:
    flat: dict[KeyPath, Any] = {}
    for key, kind in kinds.items():
        if isinstance(kind, Mapping):
            flat[prefix + (key,)] = None  # a table of settings, not a setting
            flat.update(_flatten_kinds(kind, prefix + (key,)))
        else:
            flat[prefix + (key,)] = kind
    return flat


_FLAT = _flatten_kinds(_KINDS)
_TABLES = frozenset(p for p, kind in _FLAT.items() if kind is None) | {()}


# -- keys and entries: (path, value, source) triples, checked before any is applied ---------


def _key_path(parts: list[str], joiner: str, prefix: KeyPath = ()) -> KeyPath:
    """Levels are case-insensitive ('-' reads as '_'); a resource name keeps its case."""
    path = prefix
    for i, part in enumerate(parts):
        if path == _RESOURCES:
            return path + (joiner.join(parts[i:]),)
        path += (part.strip().lower().replace("-", "_"),)
    return path


def _entries(mapping: Mapping, source: str, split: bool, prefix: KeyPath = ()) -> list:
    """Flatten nested tables (and, with ``split``, dotted keys) down to single settings."""
    out = []
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise ConfigError(f"{source}: key {key!r} is not a string")
        path = _key_path(key.split(".") if split else [key], ".", prefix)
        if path in _TABLES and isinstance(value, Mapping):
            out.extend(_entries(value, source, split, path))
        else:
            out.append((path, value, source))
    return out


def _unknown(path: KeyPath, source: str) -> ConfigError:
    key = ".".join(path)
    known = [".".join(p) for p in _FLAT]  # settings and tables: '[shceduler]' is a typo too
    import difflib  # only for a mistake: every command reads the config

    close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    if close:
        hint = f"did you mean {close[0]!r}?"
    elif path[:1] in _TABLES:
        names = [p[-1] for p in _FLAT if len(p) == 2 and p[0] == path[0]]
        hint = f"the keys of [{path[0]}] are: {', '.join(names)}"
    else:
        hint = f"the sections are: {', '.join(_KINDS)}"
    return ConfigError(f"{source + ': ' if source else ''}unknown key {key!r}; {hint}")


def _check(path: KeyPath, value: Any, source: str) -> Any:
    key = ".".join(path)
    where = f"{source}: " if source else ""
    if path in _TABLES:
        raise ConfigError(f"{where}{key} is a table of settings, got {value!r}")
    if len(path) == 3 and path[:2] == _RESOURCES:
        kind: Callable[[Any], Any] = lambda v: _resource_table({path[2]: v})[path[2]]
    elif path in _FLAT:
        kind = _FLAT[path]
    else:
        raise _unknown(path, source)
    try:
        return kind(value)
    except ResourceSpecError as e:
        raise ConfigError(f"{where}{key}: {e}") from None
    except _Bad as e:
        raise ConfigError(f"{where}{key} must be {e}, got {value!r}") from None


def _checked(entries: list) -> list[tuple[KeyPath, Any]]:
    seen: dict[KeyPath, str] = {}
    checked = []
    for path, value, source in entries:
        if path in seen:
            raise ConfigError(f"{source}: {'.'.join(path)!r} is given twice (also by {seen[path]})")
        seen[path] = source
        checked.append((path, _check(path, value, source)))
    # A whole resource table first, so that single names given beside it are kept.
    return sorted(checked, key=lambda entry: len(entry[0]))


def _fresh(value: Any) -> Any:
    """``value`` sharing nothing that can change: its dicts and lists made again, the rest
    kept, since a checked setting is otherwise immutable (text, numbers, None, tuples,
    Resources). ``copy.deepcopy`` did the same at 2.5 ms to load for each ``sched`` call."""
    if isinstance(value, dict):
        return {key: _fresh(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_fresh(item) for item in value]
    return value


def _apply(cfg: dict, entries: list[tuple[KeyPath, Any]]) -> None:
    for path, value in entries:
        node = cfg
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = _fresh(value)


def check_value(key: str, value: Any, source: str = "") -> Any:
    """Check one setting (``"worker.memory_limit"``) and return it normalized, or raise."""
    return _check(_key_path(key.split("."), "."), value, source)


# -- sources ---------------------------------------------------------------------------------


def find_config_file(path: str | os.PathLike | None = None,
                     env: Mapping[str, str] | None = None) -> Path | str | None:
    """The config file to read, or None; raises ConfigError for a missing explicit one. One
    found where it is looked for is named by its text, as pathlib writes it: pathlib (with
    the ``re`` and ``urllib`` it loads) would cost each ``sched`` call about 10 ms."""
    env = os.environ if env is None else env
    for explicit, where in ((path, "config file"), (env.get(CONFIG_ENV), CONFIG_ENV)):
        if explicit:
            from pathlib import Path

            chosen = Path(explicit).expanduser()
            if not chosen.is_file():
                raise ConfigError(f"{where}: {chosen} does not exist or is not a file")
            return chosen
    home = env.get(HOME_ENV) or os.path.expanduser("~")
    config_home = env.get(XDG_CONFIG_HOME_ENV) or os.path.join(home, ".config")
    for candidate in (os.path.join(config_home, "sched", "config.toml"), SYSTEM_CONFIG):
        if _is_file(candidate):
            return path_text(candidate)
    return None


def _is_file(path: str | os.PathLike) -> bool:
    """``Path(path).is_file()``, without loading pathlib where nothing is there (the usual
    answer: most commands have no config file); anything else is asked of pathlib."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except (OSError, ValueError):  # pathlib says False, or raises, as it always did
        from pathlib import Path

        return Path(path).is_file()


def _read(file: Path | str) -> bytes:
    try:
        with open(file, "rb") as opened:
            return opened.read()
    except OSError as e:
        raise ConfigError(f"config file {file}: cannot be read: {e.strerror}") from None


def _file_entries(file: Path | str, content: bytes) -> list:
    source = f"config file {file}"
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{source}: invalid TOML: {e}") from None
    data = plaintoml.loads(text)
    if data is plaintoml.UNREAD:  # more than plain TOML: tomllib reads it, or says why not
        import tomllib

        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{source}: invalid TOML: {e}") from None
    return _entries(data, source, split=False)


def parse_literal(text: str) -> Any:
    """Text as a TOML literal when it is one (``2``, ``0.5``, ``true``, ``[0, 1]``), else text.

    How ``SCHED_*`` values (and the command line's free-form options) are read.
    """
    value = plaintoml.literal(text)
    if value is not plaintoml.UNREAD:
        return text if value is plaintoml.NOT_TOML else value
    import tomllib  # loaded only for more than plain TOML (see plaintoml.py)

    try:
        parsed = tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        return text
    return parsed["v"] if list(parsed) == ["v"] else text  # "1\nx = 2" is text, not two keys


def _env_entries(env: Mapping[str, str]) -> list:
    out = []
    for name in sorted(env):
        if not name.startswith(PREFIX) or name in NOT_SETTINGS:
            continue
        source = f"environment variable {name}"
        rest = name[len(PREFIX):]
        if LEVEL not in rest and rest.lower() not in _KINDS:  # SCHED_WORKER='{...}' is a table
            # SCHED_WORKER_RESOURCES_GPU looks meant for us: say so rather than ignore it.
            if rest.lower().split("_")[0] in _KINDS:
                raise ConfigError(f"{source}: levels are separated by double underscores, as "
                                  f"in {setting_variable('worker.resources.GPU')}=2")
            continue
        path, value = _key_path(rest.split(LEVEL), LEVEL), parse_literal(env[name])
        if path in _TABLES and isinstance(value, Mapping):
            out.extend(_entries(value, source, split=False, prefix=path))
        else:
            out.append((path, value, source))
    return out


_cache: dict[str, tuple] = {}


def _base(path: Any, env: Mapping[str, str]) -> dict:
    """Defaults, file and environment merged; parsed again only when the file or SCHED_* change.

    The key holds the file's bytes, not its mtime: two edits within one clock tick look alike.
    """
    file = find_config_file(path, env)
    content = _read(file) if file is not None else b""
    variables = tuple(sorted((k, v) for k, v in env.items() if k.startswith(PREFIX)))
    key = (str(file), content, variables)
    cached = _cache.get("base")
    if cached is not None and cached[0] == key:
        return cached[1]
    cfg = _fresh(DEFAULTS)
    if file is not None:
        _apply(cfg, _checked(_file_entries(file, content)))
    _apply(cfg, _checked(_env_entries(env)))
    _cache["base"] = (key, cfg)
    return cfg


def _resolve(cfg: dict, env: Mapping[str, str]) -> None:
    scheduler = cfg["scheduler"]
    if scheduler["state_dir"] is None:
        scheduler["state_dir"] = default_state_dir_text(env)
    if scheduler["token_file"] is None:
        scheduler["token_file"] = os.path.join(scheduler["state_dir"], "token")
    for section in ("worker", "client"):  # same machine: find the token where it is made
        if cfg[section]["token_file"] is None:
            cfg[section]["token_file"] = scheduler["token_file"]


def _check_together(cfg: dict) -> None:
    for section in ("scheduler", "worker", "client"):
        tls = cfg[section]["tls"]
        if (tls["cert"] is None) != (tls["key"] is None):
            raise ConfigError(f"{section}.tls.cert and {section}.tls.key must be given together")
    tls = cfg["scheduler"]["tls"]
    if tls["require_client_cert"] and (tls["ca"] is None or tls["cert"] is None):
        raise ConfigError("scheduler.tls.require_client_cert needs scheduler.tls.cert, .key and "
                          ".ca (the CA that signed the client certificates)")
    comm = cfg["comm"]
    if comm["max_message_size"] < comm["max_frame_size"]:
        raise ConfigError(f"comm.max_message_size ({comm['max_message_size']}) must be at least "
                          f"comm.max_frame_size ({comm['max_frame_size']})")
    worker = cfg["worker"]
    if worker["reconnect_backoff_min"] > worker["reconnect_backoff_max"]:
        raise ConfigError("worker.reconnect_backoff_min must not exceed reconnect_backoff_max")


# -- the public reading API ------------------------------------------------------------------

_lock = _thread.allocate_lock()  # threading.Lock, without loading threading
_layers: list[list[tuple[KeyPath, Any]]] = []  # active set() calls, oldest first
_MISSING = object()


def load(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None,
         overrides: Mapping[str, Any] | None = None, *, source: str = "overrides") -> dict:
    """The merged, checked config as a fresh nested dict.

    ``path`` is an explicit config file; ``env`` replaces ``os.environ``; ``overrides`` (dotted
    keys or nested dicts, as from the command line, named ``source`` in errors) win over
    everything; a None value there sets the key to None. Paths come back resolved:
    ``scheduler.state_dir`` and every ``token_file`` are never None.
    """
    env = os.environ if env is None else env
    cfg = _fresh(_base(path, env))
    with _lock:
        layers = list(_layers)
    for entries in layers:
        _apply(cfg, entries)
    if overrides:
        _apply(cfg, _checked(_entries(overrides, source, split=True)))
    _resolve(cfg, env)
    _check_together(cfg)
    return cfg


def get(key: str, default: Any = _MISSING) -> Any:
    """The effective value of ``key`` (``"scheduler.port"``, ``"worker.resources"``)."""
    node: Any = load()
    for part in _key_path(key.split("."), "."):
        if not isinstance(node, dict) or part not in node:
            if default is _MISSING:
                raise KeyError(key)
            return default
        node = node[part]
    return node


#: The prefix of Dask's distributed settings, which ``set()`` accepts and drops.
DASK_PREFIX = "distributed."


class set:  # noqa: N801 - named as dask.config.set, which users know
    """Override settings in this process: ``with config.set({"worker.resources.GPU": 2}):``.

    Keys are dotted or nested dicts (or keyword arguments with ``__`` for dots); Dask's
    ``distributed.`` prefix is accepted (``"distributed.worker.resources.GPU"``). They are
    checked at once, take effect at once, and stay in effect until the ``with`` block ends (or
    :meth:`restore` is called); nested blocks stack, the innermost winning. The overrides are
    process-wide, not per thread, so workers started in threads inside the block see them.
    """

    def __init__(self, arg: Mapping[str, Any] | None = None, /, **kwargs: Any):
        mapping = dict(arg or {})
        mapping.update({key.replace("__", "."): value for key, value in kwargs.items()})
        # Dask's keys carry a "distributed." prefix; accept it so code written for
        # dask.config.set runs with only the import changed.
        mapping = {key.removeprefix(DASK_PREFIX) if isinstance(key, str) else key: value
                   for key, value in mapping.items()}
        self._entries = _checked(_entries(mapping, "config.set()", split=True))
        with _lock:
            _layers.append(self._entries)

    def __enter__(self) -> "set":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.restore()

    def restore(self) -> None:
        """Remove these overrides, wherever they are in the stack (blocks may end out of order)."""
        with _lock:
            for i in range(len(_layers) - 1, -1, -1):
                if _layers[i] is self._entries:
                    del _layers[i]
                    break

"""The kind of every configuration value: each kind checks and normalizes one value, or
raises :class:`Bad` saying what it expected. ``KINDS`` mirrors ``config.DEFAULTS`` key for key.

Pure: no I/O, no environment, no logging.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Callable, Mapping

from .resources import Resources, check_offer

class Bad(ValueError):
    """A value of the wrong type or range; the message says what was expected."""


def _kind(expected: str, accept: Callable[[Any], bool],
          convert: Callable[[Any], Any] = lambda v: v) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if accept(v):
            return convert(v)
        raise Bad(expected)

    return check


def _nullable(kind: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if v is None or (isinstance(v, str) and v.strip().lower() in ("", "none", "off")):
            return None
        try:
            return kind(v)
        except Bad as e:
            raise Bad(f"{e}, or 'none'") from None

    return check


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _integer(lo: int, hi: int | None = None) -> Callable[[Any], Any]:
    expected = f"an integer from {lo} to {hi}" if hi is not None else f"an integer >= {lo}"
    return _kind(expected, lambda v: isinstance(v, int) and not isinstance(v, bool)
                 and lo <= v and (hi is None or v <= hi))


_LEVELS = ("debug", "info", "warning", "error", "critical")
_text = _kind("a non-empty string", lambda v: isinstance(v, str) and v.strip() != "", str.strip)
_path = _kind("a path", lambda v: isinstance(v, (str, os.PathLike)) and str(v).strip() != "",
              lambda v: os.path.expanduser(str(v).strip()))
_flag = _kind("true or false", lambda v: isinstance(v, bool))
_seconds = _kind("a positive number of seconds", lambda v: _is_number(v) and v > 0, float)
_log_level = _kind("one of " + ", ".join(_LEVELS),
                   lambda v: isinstance(v, str) and v.strip().lower() in _LEVELS,
                   lambda v: v.strip().lower())
_SIZE = re.compile(r"\s*(\d*\.?\d+(?:e[+-]?\d+)?)\s*([kmgtp]i?)?b?\s*", re.I)


def _bytes(v: Any) -> int:
    if isinstance(v, str) and (m := _SIZE.fullmatch(v)):
        unit = (m.group(2) or "").lower()
        v = float(m.group(1)) * (1024 if unit.endswith("i") else 1000) ** (
            "kmgtp".index(unit[0]) + 1 if unit else 0)
    if _is_number(v) and v >= 1:
        return int(v)
    raise Bad("a size in bytes such as 268435456, '256MiB' or '100e9'")


def _memory_limit(v: Any) -> Any:
    if isinstance(v, str) and v.strip().lower() == "auto":
        return "auto"
    if isinstance(v, float) and 0 < v <= 1:
        return v  # a fraction of the machine's memory, as in Dask
    try:
        return _bytes(v)
    except Bad:
        raise Bad("'auto', a fraction in (0, 1] or a size such as '4GiB'") from None


def _device(item: Any) -> int | str | None:
    if isinstance(item, str) and item.strip():
        return int(item.strip()) if item.strip().isdigit() else item.strip()
    return item if isinstance(item, int) and not isinstance(item, bool) and item >= 0 else None


def _gpus(v: Any) -> Any:
    if v is None or (isinstance(v, str) and v.strip().lower() in ("auto", "none")):
        return "none" if v is None else v.strip().lower()
    items = v.split(",") if isinstance(v, str) else [v] if isinstance(v, int) else v
    devices = [_device(item) for item in items] if isinstance(items, list) else []
    if not devices or None in devices or len(devices) != len({str(d) for d in devices}):
        raise Bad("'auto', 'none', or distinct device indices or UUIDs as in '0,1' or [0, 1]")
    return devices


def resource_table(v: Any) -> dict[str, int | float]:
    # Resources.parse is the one parser; its ResourceSpecError reaches the user unchanged.
    if not isinstance(v, (str, Mapping)):
        raise Bad("a resource spec such as 'GPU=2 MEMORY=100e9' or a table such as {GPU = 2}")
    parsed = check_offer(Resources.parse(v))
    return {name: parsed.quantity(name) for name in parsed}


_TLS = {"cert": _nullable(_path), "key": _nullable(_path), "ca": _nullable(_path)}
_PORT = _integer(0, 65535)
KINDS: dict[str, dict[str, Any]] = {
    "scheduler": {
        "host": _text, "port": _PORT, "dashboard_port": _nullable(_PORT),
        "state_dir": _nullable(_path), "token_file": _nullable(_path),
        "tls": {**_TLS, "require_client_cert": _flag}, "allowed_failures": _integer(0),
        "no_worker_timeout": _nullable(_seconds), "heartbeat_timeout": _seconds,
        "drain_timeout": _seconds,
        "prefetch": _integer(0), "log_level": _log_level,
    },
    "worker": {
        "scheduler_address": _nullable(_text), "host": _text, "port": _PORT,
        "resources": resource_table,
        "nthreads": _nullable(_integer(1)), "nanny": _flag, "nworkers": _integer(1),
        "name": _nullable(_text),
        "gpus": _gpus, "memory_limit": _nullable(_memory_limit),
        "local_directory": _nullable(_path), "heartbeat_interval": _seconds,
        "reconnect_backoff_min": _seconds, "reconnect_backoff_max": _seconds,
        "drain_timeout": _seconds, "death_timeout": _nullable(_seconds),
        "token_file": _nullable(_path), "tls": dict(_TLS), "log_level": _log_level,
    },
    "comm": {
        "max_frame_size": _bytes, "max_message_size": _bytes, "outbox_limit": _bytes,
        "connect_timeout": _seconds, "handshake_timeout": _seconds,
    },
    "client": {
        "scheduler_address": _nullable(_text), "connect_timeout": _seconds,
        "token_file": _nullable(_path), "tls": dict(_TLS),
    },
}

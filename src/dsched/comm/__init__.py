"""Asyncio TCP connections (TLS optional) that carry dsched frames: connect, listen, Comm.

``connect`` and ``listen`` give :class:`Comm` objects only after the handshake and the mutual
token check, so nothing from an unauthenticated peer reaches code that unpickles. A Comm only
moves batches of ops and applies flow control (every buffer bounded); what ops mean is for the
daemons. Limits are keyword arguments whose defaults are the constants below.
"""

import importlib
from typing import Any

#: Where each name lives, loaded on first use: a program that only parses an address (the
#: sched command) does not load asyncio and ssl with the connections.
_PUBLIC = {
    **dict.fromkeys(("ANSWER_TIMEOUT", "CLOSE_TIMEOUT", "Comm", "HANDSHAKE_TIMEOUT",
                     "INBOX_LIMIT", "OUTBOX_LIMIT"), ".connection"),
    **dict.fromkeys(("Handler", "Listener", "listen"), ".listener"),
    **dict.fromkeys(("format_address", "parse_address"), ".addresses"),
    "FrameStream": ".stream",
    **dict.fromkeys(("MAX_FRAME_SIZE", "MAX_MESSAGE_SIZE", "PeerInfo"), "..protocol"),
    **dict.fromkeys(("connect", "TLS_HOW"), ".dial"),
}


def __getattr__(name: str) -> Any:
    where = _PUBLIC.get(name)
    if where is None:
        raise AttributeError(f"module 'dsched.comm' has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


__all__ = [
    "ANSWER_TIMEOUT",
    "CLOSE_TIMEOUT",
    "Comm",
    "HANDSHAKE_TIMEOUT",
    "Handler",
    "INBOX_LIMIT",
    "Listener",
    "MAX_FRAME_SIZE",
    "MAX_MESSAGE_SIZE",
    "OUTBOX_LIMIT",
    "PeerInfo",
    "connect",
    "format_address",
    "listen",
    "parse_address",
]

"""Asyncio TCP connections (TLS optional) that carry dsched frames: connect, listen, Comm.

``connect`` and ``listen`` give :class:`Comm` objects only after the handshake and the mutual
token check, so nothing from an unauthenticated peer reaches code that unpickles. A Comm only
moves batches of ops and applies flow control (every buffer bounded); what ops mean is for the
daemons. Limits are keyword arguments whose defaults are the constants below.
"""

from ..lazy import lazy_names

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


__getattr__, __dir__ = lazy_names(__name__, _PUBLIC, globals())



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

"""The dsched wire protocol, sans-IO: bytes in, frames, batches of ops and handshakes out.

``framing`` cuts the byte stream into length-prefixed frames (a buffer too large for one frame
goes as several parts), ``messages`` packs batches of op dicts (with large payloads out of
band) and ``handshake`` opens each connection with magic, version and mutual token
authentication. Nothing here touches a socket, asyncio or a clock, and nothing here unpickles:
payloads are opaque bytes. ``ops`` names every op the daemons exchange, one frozen class
each, checked when it arrives by code that ``fields`` generates from its annotations.
``dsched.comm`` carries it all over TCP.
"""

from ..lazy import lazy_names

#: Where each public name lives. Importing the package (as ``from .framing import ...`` does)
#: loads none of them: ``dsched.settings`` reads two frame-size constants and need not pay
#: for msgpack, hashlib and hmac; the op classes are built only for a program that sends ops.
_PUBLIC = {
    **dict.fromkeys(("HEADER", "KIND_BUFFER", "KIND_OPS", "KIND_PART", "MAX_FRAME_SIZE",
                     "MAX_MESSAGE_SIZE", "Frame", "FrameDecoder"), ".framing"),
    **dict.fromkeys(("ACCEPTOR", "HANDSHAKE_MAX_FRAME", "INITIATOR", "MAGIC",
                     "PROTOCOL_VERSION", "ROLES", "Handshake", "PeerInfo"), ".handshake"),
    **dict.fromkeys(("OOB_THRESHOLD", "Batch", "MessageDecoder", "Payload", "close_op",
                     "decode_ops", "encode_ops"), ".messages"),
    "ops": ".ops",
}


__getattr__, __dir__ = lazy_names(__name__, _PUBLIC, globals(), modules=frozenset({"ops"}))


__all__ = [
    "ACCEPTOR",
    "Batch",
    "Frame",
    "FrameDecoder",
    "HANDSHAKE_MAX_FRAME",
    "HEADER",
    "Handshake",
    "INITIATOR",
    "KIND_BUFFER",
    "KIND_OPS",
    "KIND_PART",
    "MAGIC",
    "MAX_FRAME_SIZE",
    "MAX_MESSAGE_SIZE",
    "MessageDecoder",
    "OOB_THRESHOLD",
    "PROTOCOL_VERSION",
    "Payload",
    "PeerInfo",
    "ROLES",
    "close_op",
    "decode_ops",
    "encode_ops",
    "ops",
]

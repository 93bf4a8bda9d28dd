"""The dsched wire protocol, sans-IO: bytes in, frames, batches of ops and handshakes out.

``framing`` cuts the byte stream into length-prefixed frames (a buffer too large for one frame
goes as several parts), ``messages`` packs batches of op dicts (with large payloads out of
band) and ``handshake`` opens each connection with magic, version and mutual token
authentication. Nothing here touches a socket, asyncio or a clock, and nothing here unpickles:
payloads are opaque bytes. ``ops`` names every op the daemons exchange, one frozen dataclass
each, checked when it arrives by code that ``fields`` generates from its annotations.
``dsched.comm`` carries it all over TCP.
"""

from .framing import (
    HEADER,
    KIND_BUFFER,
    KIND_OPS,
    KIND_PART,
    MAX_FRAME_SIZE,
    MAX_MESSAGE_SIZE,
    Frame,
    FrameDecoder,
)
from .handshake import (
    ACCEPTOR,
    HANDSHAKE_MAX_FRAME,
    INITIATOR,
    MAGIC,
    PROTOCOL_VERSION,
    ROLES,
    Handshake,
    PeerInfo,
)
from .messages import (
    OOB_THRESHOLD,
    Batch,
    MessageDecoder,
    Payload,
    close_op,
    decode_ops,
    encode_ops,
)


def __getattr__(name: str):
    """``ops`` is loaded when first used (it builds a class and its checks for every op, which
    a program that only reads a setting need not pay for)."""
    if name == "ops":
        import importlib

        return importlib.import_module(".ops", __name__)
    raise AttributeError(f"module 'dsched.protocol' has no attribute {name!r}")


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

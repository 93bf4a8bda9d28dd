"""A connection's handshake ends quietly when no one is left to hear how: a connect cancelled
before it got its stream must not leave "Future exception was never retrieved" in the log."""

import asyncio
import gc

from dsched.comm import FrameStream
from dsched.protocol import INITIATOR, Handshake


async def test_a_handshake_that_fails_with_no_one_waiting_is_not_reported():
    loop = asyncio.get_running_loop()
    reported = []
    loop.set_exception_handler(lambda _, context: reported.append(context["message"]))
    try:
        stream = FrameStream(Handshake(INITIATOR, role="client", name="c", token="t"),
                             max_frame_size=2**20, max_message_size=2**20, outbox_limit=2**20,
                             inbox_limit=2**20, handshake_timeout=5)
        stream.connection_lost(None)  # the peer went away before the handshake was done
        assert stream.ready.done()
        del stream
        gc.collect()
        assert reported == []
    finally:
        loop.set_exception_handler(None)

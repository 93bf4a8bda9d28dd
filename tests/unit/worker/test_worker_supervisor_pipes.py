"""The worker's ends of a supervisor's pipes (``spawnerclient.OrderPipe``, ``ReportPipe``):
orders are written in order however full the pipe is, and never raise once the supervisor is
gone; reports come a line at a time however the pipe cuts them, until the supervisor closes
it."""

from __future__ import annotations

import asyncio
import os

from deadline import wait_until_async
from dsched.worker.spawnerclient import OrderPipe, ReportPipe


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return b"".join(chunks)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


async def test_orders_the_pipe_cannot_take_yet_follow_in_order_once_it_can():
    read, write = os.pipe()
    os.set_blocking(read, False)
    orders = OrderPipe(write, asyncio.get_running_loop())
    lines = [f"{i:08d}".encode() * 512 + b"\n" for i in range(40)]  # 160 KB: over a pipe's 64
    for line in lines:
        orders.write(line)
    assert orders._pending  # kept, not lost
    got = bytearray()

    def drained() -> bool:  # the loop writes what is pending as the pipe empties
        got.extend(_read_all(read))
        return len(got) == sum(map(len, lines))

    await wait_until_async(drained, what="every order")
    assert got == b"".join(lines) and not orders._pending
    orders.close()
    assert orders.is_closing() and os.read(read, 10) == b""  # end of file
    os.close(read)


async def test_an_order_to_a_supervisor_that_is_gone_is_dropped_without_an_error():
    read, write = os.pipe()
    os.close(read)
    orders = OrderPipe(write, asyncio.get_running_loop())
    orders.write(b"kill\n")  # EPIPE: closed, nothing raised
    assert orders.is_closing()
    orders.write(b"go\n")
    orders.close()


async def test_reports_come_a_line_at_a_time_until_the_end_of_the_pipe():
    read, write = os.pipe()
    reports = ReportPipe(read, asyncio.get_running_loop())
    got: list[bytes] = []

    async def collect():
        async for line in reports:
            got.append(line)

    collecting = asyncio.ensure_future(collect())
    os.write(write, b'{"op":"attempt-sta')  # a line cut in two by the pipe
    await wait_until_async(lambda: reports._partial, what="the first half read")
    os.write(write, b'rted"}\n{"op":"attempt-ended"}\n{"last":')
    await wait_until_async(lambda: len(got) == 2, what="two whole lines")
    os.write(write, b"1}")  # its last line, without its newline
    os.close(write)
    await asyncio.wait_for(collecting, 10)
    assert got == [b'{"op":"attempt-started"}\n', b'{"op":"attempt-ended"}\n', b'{"last":1}']
    assert reports.fd == -1  # closed at the end
    assert await reports.read() == b""


async def test_a_spare_done_with_its_attempt_ends_it_without_a_word_from_the_spawner():
    # A spare back from its attempt says "done" as the attempt's last line; the spawner says
    # nothing more of it (the worker heard its exit from the spawner once per attempt).
    from dsched.worker.spawnerclient import Spawned

    loop = asyncio.get_running_loop()
    orders_read, orders_write = os.pipe()
    read, write = os.pipe()
    spawned = Spawned(OrderPipe(orders_write, loop), ReportPipe(read, loop))
    spawned.pid = os.getpid()  # not to be killed: see below
    spawned._ended = loop.create_future()  # the spawner's, never settled here
    os.write(write, b'{"op":"attempt-ended"}\ndone\n')
    os.close(write)
    assert [line async for line in spawned.stdout] == [b'{"op":"attempt-ended"}\n']
    assert await asyncio.wait_for(spawned.wait(), 10) == 0
    assert spawned.done and spawned.stdin.is_closing()
    spawned.kill()  # done with the attempt: this process (its pid here) is not signalled
    os.close(orders_read)


async def test_done_said_before_the_spawner_says_the_pid_still_ends_the_attempt():
    from dsched.worker.spawnerclient import Spawned

    loop = asyncio.get_running_loop()
    read, write = os.pipe()
    spawned = Spawned(OrderPipe(os.open(os.devnull, os.O_WRONLY), loop), ReportPipe(read, loop))
    os.write(write, b"done\n")
    os.close(write)
    assert await spawned.stdout.read() == b""
    assert spawned.done and spawned._ended is None
    spawned.forked(os.getpid(), "", loop.create_future())  # the spawner's answer, late
    assert await asyncio.wait_for(spawned.wait(), 10) == 0

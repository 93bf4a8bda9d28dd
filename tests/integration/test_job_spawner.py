"""The worker's job spawner on its own: a request it cannot carry out is answered with the
reason and starts nothing (the worker then starts a supervisor as a program), and the end of
a supervisor it forked is known even when the spawner is gone by then."""

from __future__ import annotations

import os
import socket

import pytest

from dsched.worker.jobspawner import Spawner


@pytest.fixture
async def spawner():
    s = Spawner()
    assert await s.start() and await s.ready()
    yield s
    await s.close()


async def test_a_request_it_cannot_carry_out_is_refused_with_the_reason(spawner, monkeypatch,
                                                                        tmp_path):
    real = socket.send_fds

    def short(sock, buffers, fds, *rest):  # one descriptor missing
        return real(sock, buffers, fds[:2], *rest)

    monkeypatch.setattr(socket, "send_fds", short)
    opened: list = []
    lock = os.open(tmp_path / "log", os.O_CREAT | os.O_WRONLY)
    try:
        with pytest.raises(OSError, match="2 descriptors came with the request"):
            await spawner.spawn([str(tmp_path / "record"), str(lock), "1.0", "0.0", ""], lock,
                                opened.append)
    finally:
        os.close(lock)
    assert spawner._sock is not None  # and it goes on serving


async def test_the_end_of_a_supervisor_is_known_after_the_spawner_is_gone(spawner, tmp_path):
    lock = os.open(tmp_path / "log", os.O_CREAT | os.O_WRONLY)
    try:  # no record there: the supervisor fails at once, after the spawner said its pid
        spawned = await spawner.spawn([str(tmp_path / "missing"), str(lock), "1.0", "0.0", ""],
                                      lock, lambda handle: None)
    finally:
        os.close(lock)
    spawner._process.kill()
    await spawner._process.wait()
    assert await spawned.stdout.read() == b""
    assert await spawned.wait() in (1, None)  # said by the spawner, or unknown: never hangs


async def test_a_supervisor_done_with_an_attempt_is_not_killed_for_it(tmp_path):
    # A spare back from attempt A may be running attempt B by the time A's handle is killed
    # (a worker closing): killing A's handle must not take B down with it.
    import asyncio
    import subprocess
    import sys

    from dsched.worker.spawnerclient import Spawned

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        handle = Spawned(stdin=None, stdout=None)
        handle.pid = other.pid
        handle._ended = asyncio.get_running_loop().create_future()
        handle._ended.set_result(0)  # its supervisor said it was done with this attempt
        handle.kill()
        assert other.poll() is None
        handle._ended = asyncio.get_running_loop().create_future()  # not done: killed
        handle.kill()
        assert other.wait(10) == -9
    finally:
        other.kill()
        other.wait()

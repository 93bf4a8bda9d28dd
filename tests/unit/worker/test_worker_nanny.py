"""The nanny keeps N processes up, restarts one that dies, and stops them all."""

import asyncio
import os
import signal
import sys
import time

from deadline import wait_until_async

from dsched.worker.nanny import Nanny

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


async def wait_for(predicate, timeout=20.0):
    await wait_until_async(predicate, timeout)


async def test_nanny_restarts_a_dead_process_and_stops_all():
    nanny = Nanny([(f"w{i}", SLEEPER, dict(os.environ)) for i in range(3)], min_backoff=0.05)
    supervising = asyncio.ensure_future(nanny.run())
    try:
        await wait_for(lambda: len(nanny.pids()) == 3)
        victim = nanny.pids()[0]
        os.kill(victim, signal.SIGKILL)
        await wait_for(lambda: len(nanny.pids()) == 3 and victim not in nanny.pids())
        assert sum(child.restarts for child in nanny.children) == 1
        pids = nanny.pids()
    finally:
        await nanny.stop(deadline=10)
        await asyncio.wait_for(supervising, 10)
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


async def test_stop_kills_a_process_that_ignores_sigterm_after_the_deadline():
    stubborn = [sys.executable, "-c",
                "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"]
    nanny = Nanny([("w0", stubborn, dict(os.environ))])
    supervising = asyncio.ensure_future(nanny.run())
    await wait_for(lambda: len(nanny.pids()) == 1)
    started = time.monotonic()
    await nanny.stop(deadline=0.5)
    await asyncio.wait_for(supervising, 10)
    assert nanny.pids() == [] and time.monotonic() - started < 10

"""Results move between workers directly: the scheduler carries only their sizes.

The proof counts bytes in the kernel rather than trusting our own code: ``ss -ti`` reports
``bytes_received`` and ``bytes_sent`` for every TCP connection, so summing them over the
connections on the scheduler's port gives every byte the scheduler exchanged with anyone
(workers and client alike). Two 1 MB results crossing to a third worker must leave that sum
far below 1 MB, while the same count on the first two workers' ports shows that their bytes
did leave them.
"""

from __future__ import annotations

import hashlib
import random
import re
import shutil
import subprocess
import sys

import cloudpickle
import pytest

cloudpickle.register_pickle_by_value(sys.modules[__name__])

PAYLOAD = 1_000_000

pytestmark = pytest.mark.skipif(shutil.which("ss") is None,
                                reason="needs `ss` (iproute2) to count bytes per connection")


def make(seed: int, size: int) -> bytes:
    import random

    # Random bytes, so that no compression on the wire could hide them.
    return random.Random(seed).randbytes(size)


def combine(a: bytes, b: bytes) -> tuple[str, int, str]:
    import hashlib
    import os

    return hashlib.sha256(a + b).hexdigest(), len(a) + len(b), os.environ["SCHED_WORKER_NAME"]


def tcp_bytes(port: int) -> tuple[int, int]:
    """(received, sent) summed over the established TCP connections whose local port is ``port``."""
    out = subprocess.run(["ss", "-tin", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True, check=True).stdout
    received = sum(int(n) for n in re.findall(r"bytes_received:(\d+)", out))
    sent = sum(int(n) for n in re.findall(r"bytes_sent:(\d+)", out))
    return received, sent


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_dependencies_travel_worker_to_worker_not_through_the_scheduler(daemons):
    scheduler = daemons.scheduler()
    for name in ("w1", "w2", "w3"):
        daemons.worker("--name", name, "--nthreads", "1")
    client = daemons.client()
    info = daemons.wait_for_workers(client, 3)
    port = {w["name"]: port_of(address) for address, w in info["workers"].items()}

    a = client.submit(make, 1, PAYLOAD, workers=["w1"])
    b = client.submit(make, 2, PAYLOAD, workers=["w2"])
    c = client.submit(combine, a, b, workers=["w3"])
    digest, size, ran_on = c.result(timeout=60)

    expected = hashlib.sha256(random.Random(1).randbytes(PAYLOAD)
                              + random.Random(2).randbytes(PAYLOAD)).hexdigest()
    assert (digest, size, ran_on) == (expected, 2 * PAYLOAD, "w3")

    # Every byte the scheduler took in or gave out, over its whole life so far.
    received, sent = tcp_bytes(port_of(scheduler))
    assert 0 < received < PAYLOAD // 10, received
    assert 0 < sent < PAYLOAD // 10, sent
    # And w1's and w2's results left them on their own data ports (to w3, the only reader).
    assert tcp_bytes(port["w1"])[1] >= PAYLOAD
    assert tcp_bytes(port["w2"])[1] >= PAYLOAD
    assert tcp_bytes(port["w3"])[1] < PAYLOAD // 10

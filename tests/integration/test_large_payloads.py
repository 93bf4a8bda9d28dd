"""Many large payloads at once stay within the frame limit: batches are split, fetches are
sized, and a task too large for any frame is refused at submit time.

Every process runs with a 1 MiB frame limit, so a handful of 300 kB payloads is "large"."""

import sys

import cloudpickle
import pytest

from dsched import Client

cloudpickle.register_pickle_by_value(sys.modules[__name__])

LIMIT = {"SCHED_COMM__MAX_FRAME_SIZE": str(2**20)}


def size_of(data):
    return len(data)


def make(n):
    return bytes(n)


def test_many_large_tasks_and_results_fit_through_a_small_frame_limit(daemons, monkeypatch):
    monkeypatch.setenv("SCHED_COMM__MAX_FRAME_SIZE", str(2**20))
    daemons.env.update(LIMIT)
    address = daemons.scheduler()
    with Client(address, token=daemons.token) as client:
        # Queued before any worker exists, so the worker gets them all in one tick.
        sizes = client.map(size_of, [bytes([i]) * 300_000 for i in range(6)])
        daemons.worker("--nthreads", "6")
        assert client.gather(sizes, timeout=60) == [300_000] * 6
        blobs = client.map(make, [300_000 + i for i in range(6)])  # all on the one worker
        assert [len(b) for b in client.gather(blobs, timeout=60)] == [300_000 + i for i in range(6)]
        with pytest.raises(ValueError, match="over half the frame limit"):
            client.submit(size_of, bytes(600_000))
        assert client.submit(size_of, b"ok").result(timeout=30) == 2

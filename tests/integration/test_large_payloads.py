"""Large payloads: results and arguments larger than a frame travel in pieces, between workers
and to clients; many large payloads at once stay within the limits; a result or a task over the
message limit gets an error that names comm.max_message_size.

The small-limit cluster runs every process with an 8 MiB frame limit, a 48 MiB message limit
and a 16 MiB outbox limit, so that 20 MB is "larger than a frame", 60 MB "over the message
limit", and two 20 MB messages queued at once would trip an outbox that counted them."""

import hashlib
import random
import signal
import sys
import time

import cloudpickle
import pytest

from cluster_helpers import Daemons
from deadline import wait_until
from dsched import Client, config
from dsched.errors import SchedError

cloudpickle.register_pickle_by_value(sys.modules[__name__])

MiB = 2**20
SMALL_LIMITS = {"comm.max_frame_size": 8 * MiB, "comm.max_message_size": 48 * MiB,
                "comm.outbox_limit": 16 * MiB}
SMALL_LIMITS_ENV = {f"SCHED_COMM__{key.split('.')[1].upper()}": str(value)
                    for key, value in SMALL_LIMITS.items()}


def size_of(data):
    return len(data)


def make(n):
    return bytes(n)


def pattern(n, seed):
    return random.Random(seed).randbytes(n)


def counted_pattern(n, seed, runs_file):
    with open(runs_file, "a") as runs:  # one line per run, to show it was computed once
        runs.write("run\n")
    return pattern(n, seed)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


class Blob:
    """A result whose size estimate (sys.getsizeof) is far below its pickle's size."""

    def __init__(self, data):
        self.data = data


def blob(n, seed):
    return Blob(pattern(n, seed))


@pytest.fixture(scope="module")
def small_limits(tmp_path_factory):
    daemons = Daemons(tmp_path_factory.mktemp("small-limits"))
    daemons.env.update(SMALL_LIMITS_ENV)
    try:
        daemons.scheduler()
        daemons.worker("--name", "a", "--nthreads", "2", "--resources", "GPU=1")
        daemons.worker("--name", "b", "--nthreads", "2")
        yield daemons
    finally:
        daemons.stop()


@pytest.fixture
def client(small_limits):
    with config.set(SMALL_LIMITS):
        with Client(small_limits.address, token=small_limits.token) as client:
            client.wait_for_workers(2, timeout=30)
            yield client


def test_a_result_larger_than_a_frame_is_fetched_whole_and_used_on_another_worker(client,
                                                                                tmp_path):
    runs = tmp_path / "runs"
    big = client.submit(counted_pattern, 20 * MiB, 1, str(runs), workers=["a"])
    digest = client.submit(sha256, big, workers=["b"])  # b fetches it from a, peer to peer
    expected = pattern(20 * MiB, 1)
    assert digest.result(timeout=60) == sha256(expected)
    assert big.result(timeout=60) == expected
    assert runs.read_text() == "run\n"  # computed once: no fetch failed, nothing recomputed


def test_arguments_larger_than_a_frame_reach_their_tasks(client):
    arguments = [pattern(20 * MiB, seed) for seed in range(4)]
    # Submitted back to back (pure=False: no hashing in between), each goes out while the ones
    # before are still on their way: more than the outbox limit in flight, yet not piling up.
    digests = [client.submit(sha256, data, pure=False) for data in arguments]
    assert client.gather(digests, timeout=60) == [sha256(data) for data in arguments]


def test_a_large_argument_reaches_a_task_in_a_gpu_process(client):
    # GPU tasks run in a child process: the argument, received as a view of the message's
    # buffer, is pickled on to it.
    data = pattern(20 * MiB, 4)
    assert client.submit(sha256, data, resources={"GPU": 1}).result(timeout=60) == sha256(data)


def test_a_worker_slow_to_take_large_arguments_is_not_disconnected(daemons):
    daemons.env.update(SMALL_LIMITS_ENV)
    daemons.scheduler()
    # No nanny: SIGSTOP must stop the worker process itself, not a nanny above it.
    worker = daemons.worker("--name", "slow", "--no-nanny", "--nthreads", "4")
    with config.set(SMALL_LIMITS):
        client = daemons.client()
    daemons.wait_for_workers(client, 1)
    arguments = [pattern(20 * MiB, seed) for seed in range(3)]
    worker.send_signal(signal.SIGSTOP)  # reads nothing until SIGCONT
    try:
        digests = [client.submit(sha256, data, pure=False) for data in arguments]
        # The scheduler sends each on as it arrives: 60 MB waits for a worker that is not reading.
        wait_until(lambda: [w["executing"] for w in client.scheduler_info()["workers"].values()]
                   == [3], what="three tasks sent to the stopped worker")
    finally:
        worker.send_signal(signal.SIGCONT)
    assert client.gather(digests, timeout=60) == [sha256(data) for data in arguments]
    assert "not reading" not in daemons.scheduler_log()


def test_large_results_from_one_worker_are_fetched_one_after_another(client):
    results = [client.submit(pattern, 20 * MiB, seed, workers=["a"]) for seed in (5, 6)]
    assert client.gather(results, timeout=60) == [pattern(20 * MiB, 5), pattern(20 * MiB, 6)]


def test_results_that_together_outgrow_a_message_come_in_several_replies(client):
    # Their size estimates are tiny, so the client asks for all three in one request, and the
    # worker must split its 60 MB answer to stay within the 48 MiB message limit.
    blobs = [client.submit(blob, 20 * MiB, seed, workers=["a"]) for seed in (7, 8, 9)]
    received = client.gather(blobs, timeout=60)
    assert [b.data for b in received] == [pattern(20 * MiB, seed) for seed in (7, 8, 9)]


def test_a_result_over_the_message_limit_is_an_error_that_names_the_setting(client):
    too_big = client.submit(make, 60 * MiB)  # the task succeeds; sending its result cannot
    started = time.monotonic()
    with pytest.raises(SchedError, match=r"message limit of 50331648 bytes "
                                         r"\(comm.max_message_size\)"):
        too_big.result(timeout=60)
    assert time.monotonic() - started < 30  # said at once, not after retrying for a while
    assert client.submit(size_of, b"ok").result(timeout=30) == 2  # and the cluster goes on


def test_a_client_with_a_lower_message_limit_says_so_when_it_cannot_take_a_result(client,
                                                                                 small_limits):
    big = client.submit(make, 20 * MiB)
    big.result(timeout=60)  # this client, with the cluster's limits, can take it
    with config.set({"comm.max_message_size": 16 * MiB}):
        strict = Client(small_limits.address, token=small_limits.token)
    with strict:
        with pytest.raises(SchedError, match=r"could not fetch .*limit of 16777216 bytes "
                                             r"\(comm.max_message_size\)"):
            strict.gather([strict.submit(make, 20 * MiB)], timeout=60)


def test_many_large_tasks_and_results_fit_through_a_small_frame_limit(daemons, monkeypatch):
    limits = {"SCHED_COMM__MAX_FRAME_SIZE": str(MiB), "SCHED_COMM__MAX_MESSAGE_SIZE": str(4 * MiB)}
    for name, value in limits.items():
        monkeypatch.setenv(name, value)
    daemons.env.update(limits)
    address = daemons.scheduler()
    with Client(address, token=daemons.token) as client:
        # Queued before any worker exists, so the worker gets them all in one tick.
        sizes = client.map(size_of, [bytes([i]) * 300_000 for i in range(6)])
        daemons.worker("--nthreads", "6")
        assert client.gather(sizes, timeout=60) == [300_000] * 6
        blobs = client.map(make, [300_000 + i for i in range(6)])  # all on the one worker
        assert [len(b) for b in client.gather(blobs, timeout=60)] == [300_000 + i for i in range(6)]
        with pytest.raises(ValueError, match=r"message limit of 4194304 bytes "
                                             r"\(comm.max_message_size\)"):
            client.submit(size_of, bytes(5 * MiB))
        assert client.submit(size_of, bytes(3 * MiB)).result(timeout=30) == 3 * MiB


def repeated(n):
    return bytes(range(256)) * (n // 256)


@pytest.mark.large
def test_a_300_mb_result_with_the_default_limits_reaches_the_client(daemons):
    n = 300 * 10**6 // 256 * 256
    address = daemons.scheduler()
    daemons.worker("--nthreads", "1")
    with Client(address, token=daemons.token) as client:
        result = client.submit(repeated, n).result(timeout=120)
        # Byte-exact without a second 300 MB copy: n/256 non-overlapping copies of the pattern.
        assert len(result) == n and result.count(bytes(range(256))) == n // 256

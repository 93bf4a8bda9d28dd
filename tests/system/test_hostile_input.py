"""Over 100,000 malformed, truncated and random frames and handshakes at a live scheduler and a
live worker's data port, many connections at once: both daemons stay up, a real client's tasks
keep completing all the while, every hostile connection is closed or answered, and nothing sent
before authentication is ever unpickled (each such byte string carries pickles that would leave
a mark on disk)."""

from __future__ import annotations

import asyncio
import collections
import pickle
import random
import sys
import threading
import time

import cloudpickle
import pytest

from deadline import wait_until
from hostile import (GOODBYE, JOB_LEASE, STRANGERS, UNREGISTER, Marks, Tally, bad_client_op,
                     bad_data_op, bad_register, bad_worker_op, impostor, insider, one_bad_op,
                     stranger, worse_worker_op)

cloudpickle.register_pickle_by_value(sys.modules[__name__])

STRANGERS_EACH = 45_000  # per daemon
IMPOSTORS_EACH = 500
CLIENT_INSIDERS = 6_000  # each an authenticated connection with one malformed op
WORKER_INSIDERS = 3_000  # likewise, after a valid register
BAD_REGISTERS = 1_000
WORSE_WORKER_OPS = 500
BAD_DATA_OPS = 1_000
AT_ONCE = 64  # connections in flight
#: The whole attack must end by then (it takes a fraction of it).
BUDGET = 240.0


def inc(x):
    return x + 1


class RealClient(threading.Thread):
    """Submits small batches and checks their results, until told to stop."""

    def __init__(self, daemons):
        super().__init__(daemon=True)
        self.client = daemons.client()
        self.rounds = 0
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                base = self.rounds * 10
                futures = self.client.map(inc, range(base, base + 10), resources={"real": 1},
                                          pure=False)
                assert self.client.gather(futures, timeout=60) == list(range(base + 1,
                                                                             base + 11))
                self.rounds += 1
                self.stop.wait(0.05)  # a steady trickle, not a second flood
        except BaseException as error:  # reported by the test
            self.error = error

    def rounds_now(self) -> int:
        assert self.error is None, self.error
        return self.rounds


async def attack(scheduler_port: int, worker_port: int, token: str, marks: Marks,
                 rng: random.Random, served) -> Tally:
    tally = Tally()
    jobs = []
    for port in (scheduler_port, worker_port):
        for _ in range(STRANGERS_EACH):
            make = rng.choice(STRANGERS)
            data, eof = make(rng, marks)
            jobs.append(lambda p=port, d=data, e=eof, w=make.__name__:
                        stranger(p, d, e, tally, w))
        for _ in range(IMPOSTORS_EACH):
            role = rng.choice(["client", "worker"])
            jobs.append(lambda p=port, r=role: impostor(p, r, marks, tally))
    for n in range(CLIENT_INSIDERS):
        jobs.append(lambda op=bad_client_op(rng, n):
                    insider(scheduler_port, token, "client", op, tally))
    for n in range(WORKER_INSIDERS):
        # An address in TEST-NET: nothing holds a result there, so nothing connects to it.
        register = {"op": "register", "name": f"insider-{n}", "address": f"192.0.2.1:{n + 1}",
                    "nthreads": 1, "job_lease": JOB_LEASE}
        jobs.append(lambda op=bad_worker_op(rng, n), first=register:
                    insider(scheduler_port, token, "worker", op, tally, first=first))
    for n in range(BAD_REGISTERS):
        jobs.append(lambda op=bad_register(rng, n):
                    one_bad_op(scheduler_port, token, "worker", op, tally, last=UNREGISTER))
    for n in range(WORSE_WORKER_OPS):
        register = {"op": "register", "name": f"worse-{n}", "address": f"192.0.2.2:{n + 1}",
                    "nthreads": 1, "job_lease": JOB_LEASE}
        jobs.append(lambda op=worse_worker_op(rng, n), first=register:
                    one_bad_op(scheduler_port, token, "worker", op, tally, first=first,
                               last=UNREGISTER))
    for n in range(BAD_DATA_OPS):
        jobs.append(lambda op=bad_data_op(rng, n), r=rng.choice(["client", "worker"]):
                    one_bad_op(worker_port, token, r, op, tally, last=GOODBYE))
    rng.shuffle(jobs)

    queue = iter(jobs)
    progress = {"last": served(), "at": time.monotonic()}

    async def lane() -> None:
        for job in queue:
            await job()
            now = served()
            if now > progress["last"]:
                progress.update(last=now, at=time.monotonic())
            # "Throughout": the real client never goes long without a finished round.
            assert time.monotonic() - progress["at"] < 30, "the real client stopped being served"

    await asyncio.wait_for(asyncio.gather(*(lane() for _ in range(AT_ONCE))), BUDGET)
    return tally


def tracebacks(log: str) -> str:
    """Each distinct last line of the tracebacks in ``log``, with how often it occurs."""
    lines = log.splitlines()
    ends = collections.Counter(lines[i - 1] for i, line in enumerate(lines)
                               if i and line.startswith("20") and lines[i - 1][:1].isalpha()
                               and "Error" in lines[i - 1])
    return "tracebacks in the log:\n" + "\n".join(f"{n} x {end}" for end, n in ends.items())


@pytest.mark.timeout(300)  # 45-80 s alone; more on a busy machine
def test_daemons_shrug_off_100k_hostile_frames_and_unpickle_nothing(daemons, tmp_path):
    rng = random.Random(20241123)
    marks_dir = tmp_path / "marks"
    marks_dir.mkdir()
    control = tmp_path / "control"
    control.mkdir()
    # The marks work: loading one of these pickles does leave its directory behind.
    pickle.loads(Marks(str(control)).pickle())
    assert (control / "mark-1").is_dir()

    env = {"SCHED_COMM__HANDSHAKE_TIMEOUT": "5"}
    daemons.scheduler(env=env)
    with open(tmp_path / "worker.log", "wb") as log:
        worker = daemons.worker("--name", "real", "--nthreads", "2", "--resources", "real=100",
                                env=env, stderr=log)
    real = RealClient(daemons)
    (worker_address,) = daemons.wait_for_workers(real.client, 1)["workers"]
    real.start()
    try:
        wait_until(lambda: real.rounds_now() >= 1, 30, what="the real client's first round")
        started = time.monotonic()
        tally = asyncio.run(attack(int(daemons.address.rsplit(":", 1)[1]),
                                   int(worker_address.rsplit(":", 1)[1]), daemons.token,
                                   Marks(str(marks_dir)), rng, real.rounds_now))
        elapsed = time.monotonic() - started
        rounds = real.rounds_now()
        wait_until(lambda: real.rounds_now() > rounds, 30, what="one more round afterwards")
    finally:
        real.stop.set()
        real.join(60)
    assert real.error is None, real.error

    print(f"hostile frames and handshakes: {tally.frames} over {tally.connections} connections "
          f"in {elapsed:.1f} s; real rounds meanwhile: {rounds}")
    assert daemons.scheduler_process.poll() is None and worker.poll() is None
    assert list(marks_dir.iterdir()) == []
    with daemons.client() as client:  # and a newcomer is served as usual
        assert client.submit(inc, 41, resources={"real": 1}).result(timeout=30) == 42
    assert tally.frames >= 100_000
    assert tally.not_closed == []
    assert tally.wrong == []
    assert tally.answers == CLIENT_INSIDERS + WORKER_INSIDERS  # each told why it was closed
    # Bad input gets a clear one-line error, not a traceback.
    for log in (daemons.scheduler_log(), (tmp_path / "worker.log").read_text()):
        assert "Traceback" not in log, tracebacks(log)

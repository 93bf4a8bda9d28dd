"""The scheduler killed with -9 mid-run and started again on the same port: its clients learn
what was lost (SchedulerLostError on every pending future), the workers come back by
themselves, and a new client is served at once, beside the tasks the old run left running."""

from __future__ import annotations

import sys
import time

import cloudpickle
import pytest

from deadline import wait_until
from dsched import SchedulerLostError
from task_ledger import Ledger, leaf

cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: Seconds a new client's first task may take, workers' reconnection included (their
#: back-off starts at 0.5 s).
AT_ONCE = 15.0


def where() -> str:
    import os

    return os.environ["SCHED_WORKER_NAME"]


def test_a_restarted_scheduler_serves_a_new_client_at_once(daemons, tmp_path):
    address = daemons.scheduler()
    port = int(address.rsplit(":", 1)[1])
    # Two threads each for the old run's long tasks (they hold a "slot"), two left free.
    workers = {name: daemons.worker("--name", name, "--nthreads", "4", "--resources", "slot=2")
               for name in ("a", "b")}
    old_clients = [daemons.client(), daemons.client()]
    daemons.wait_for_workers(old_clients[0], 2)
    ledger, hold = Ledger(tmp_path / "ledger"), tmp_path / "hold"
    hold.touch()  # the old run's tasks never end by themselves
    try:
        pending = [client.map(leaf, [str(ledger.path)] * 100, [str(hold)] * 100,
                              [f"{n}-{i}" for i in range(100)], range(100), [0.0] * 100,
                              resources={"slot": 1}, pure=False)
                   for n, client in enumerate(old_clients)]
        wait_until(lambda: ledger.executing_count() == 4, 30,
                   what="both workers running two of the old run's tasks each")

        daemons.scheduler_process.kill()
        daemons.scheduler_process.wait()

        for client, futures in zip(old_clients, pending):
            for future in futures:
                with pytest.raises(SchedulerLostError, match=f"lost the scheduler at {address}"):
                    future.result(timeout=30)
            with pytest.raises(SchedulerLostError, match="lost the scheduler"):
                client.submit(where)

        assert daemons.scheduler(port=port) == address
        started = time.monotonic()
        new_client = daemons.client()
        # No waiting for workers first: the task waits at the scheduler until one is back.
        assert new_client.submit(where, pure=False).result(timeout=AT_ONCE) in workers
        assert time.monotonic() - started < AT_ONCE
        info = daemons.wait_for_workers(new_client, 2)
        assert sorted(w["name"] for w in info["workers"].values()) == ["a", "b"]
        assert all(process.poll() is None for process in workers.values())
        # The old run's tasks still hold their threads: the new client was served beside them.
        assert ledger.executing_count() == 4
    finally:
        hold.unlink()


def test_job_numbers_are_never_given_twice_even_after_the_journal_loses_its_wal(daemons,
                                                                              tmp_path):
    """Storage loss: the scheduler killed, then its journal's -wal file (the commits not yet
    copied into the database file) gone. The jobs in it are lost; their numbers, which clients
    and workers (in ``job-N.A``, an attempt's fence) knew, are never given again, and the
    scheduler says at start that acknowledged jobs were lost."""
    state = tmp_path / "state-dir"
    daemons.scheduler("--state-dir", str(state))
    client = daemons.client()
    acknowledged = []
    # Two waves: the first job's commit reserves numbers up to 101 in the mark; the second
    # wave crosses them, and the mark, written again, records how far the journal reached.
    # Had one commit held all 150 (the client batches), the mark would know of no commit,
    # and the loss could not be told from numbers reserved and never used.
    for wave in (1, 149):
        futures = [client.submit_command("true", hold=True) for _ in range(wave)]
        acknowledged += [future.job_id(timeout=30) for future in futures]
    assert acknowledged == list(range(1, 151))
    daemons.scheduler_process.kill()
    daemons.scheduler_process.wait()
    for lost in ("jobs.sqlite-wal", "jobs.sqlite-shm"):
        (state / lost).unlink()

    daemons.scheduler("--state-dir", str(state))
    again = daemons.client()
    kept = [view["id"] for view in again.jobs()["jobs"]]
    assert len(kept) < 150  # the loss happened: else this test proves nothing
    new = again.submit_command("true", hold=True).job_id(timeout=30)
    assert new > max(acknowledged)
    [warning] = [line for line in daemons.scheduler_log().splitlines() if "WARNING" in line]
    assert (f"The journal {state / 'jobs.sqlite'} holds no job numbered above "
            f"{max(kept, default=0)}, but jobs up to ") in warning
    assert "acknowledged jobs were lost" in warning

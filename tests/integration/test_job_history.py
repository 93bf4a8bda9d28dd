"""``sched history`` against a real scheduler and worker: each ended attempt (both of a job
retried, each element of an array) from the journal, filtered by job, state, name and time,
as a table and as JSON; the query runs beside the event loop, not on it; and a scheduler that
keeps no journal says it has no history."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from dsched import SchedError
from sched_helpers import sched, submit

CLUSTER_WORKERS = (("--name", "w", "--nthreads", "4", "--no-nanny"),)


def history(cluster, *args: str) -> list[dict]:
    done = sched(cluster, "history", "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_ended_attempt_is_in_the_history_and_each_filter_narrows_it(cluster, client):
    ok = submit(cluster, "--name", "hist-ok", "--", "true")
    retried = submit(cluster, "--name", "hist-fail", "--retries", "1", "--", "sh", "-c",
                     "exit 3")
    sweep = submit(cluster, "--name", "hist-sweep", "--array", "4-5", "--", "true")
    assert sched(cluster, "wait", str(ok), str(retried), str(sweep)).returncode == 1

    shown = history(cluster, "--name", "hist-*")
    assert sorted((a["id"], a["attempt"], a["state"]) for a in shown) == [
        (ok, 1, "completed"), (retried, 1, "failed"), (retried, 2, "failed"),
        (sweep + 1, 1, "completed"), (sweep + 2, 1, "completed")]
    assert [a["ended"] for a in shown] == sorted((a["ended"] for a in shown), reverse=True)
    first = next(a for a in shown if a["id"] == retried and a["attempt"] == 1)
    assert (first["exit_code"], first["worker"], first["gpus"], first["gpu_hours"]) == (
        3, "w", 0.0, 0.0)
    assert first["duration"] >= 0 and first["efficiency"] is None

    assert [(a["id"], a["attempt"]) for a in history(cluster, "--state", "failed", "--name",
                                                     "hist-*")] == [(retried, 2), (retried, 1)]
    assert {(a["array_id"], a["array_index"]) for a in history(cluster, str(sweep))} == {
        (sweep, 4), (sweep, 5)}
    assert [a["id"] for a in history(cluster, f"{sweep}_5")] == [sweep + 2]
    assert len(history(cluster, "--name", "hist-*", "--since", "1h", "--limit", "2")) == 2
    assert history(cluster, "--name", "hist-*", "--until", "1h") == []

    table = sched(cluster, "history", str(retried))
    assert table.returncode == 0, table.stderr
    header, second, first_line, totals = table.stdout.splitlines()
    assert header.startswith("JOB  ATTEMPT  NAME")
    assert second.split()[:5] == [str(retried), "2", "hist-fail", "failed", "w"]
    assert first_line.split()[:4] == [str(retried), "1", "hist-fail", "failed"]
    assert totals == "2 attempts, 0.00 GPU-hours"


async def test_a_query_runs_off_the_event_loop_and_no_journal_means_no_history(
        tmp_path, monkeypatch):
    from dsched import Client
    from dsched.scheduler import history as queries
    from dsched.scheduler.journal import Journal
    from dsched.scheduler.server import Scheduler
    from dsched.settings import CommConfig, SchedulerConfig

    journal = Journal(str(tmp_path / "jobs.sqlite"))
    held, release = threading.Event(), threading.Event()
    real = queries.query

    def slow(*args):  # a query of a big journal, held until the test has asked something else
        held.set()
        release.wait(30)
        return real(*args)

    monkeypatch.setattr(queries, "query", slow)
    for keeps in (journal, None):
        scheduler = Scheduler(SchedulerConfig(host="127.0.0.1", port=0), CommConfig(),
                              token="t", journal=keeps)
        await scheduler.start()
        client = await Client(scheduler.address, token="t", asynchronous=True, timeout=5)
        try:
            if keeps is None:
                with pytest.raises(SchedError, match="keeps no journal, so it has no history"):
                    await client.history()
                continue
            asked = asyncio.ensure_future(client.history(states=["failed"]))
            await asyncio.get_running_loop().run_in_executor(None, held.wait, 10)
            assert (await client.scheduler_info())["address"] == scheduler.address
            release.set()
            assert await asked == []
        finally:
            await client.close()
            await scheduler.close()
    journal.close()


async def test_numbers_too_large_for_the_journal_match_nothing_and_stop_nothing(tmp_path):
    from dsched import Client
    from dsched.scheduler.journal import Journal
    from dsched.scheduler.server import Scheduler
    from dsched.settings import CommConfig, SchedulerConfig

    journal = Journal(str(tmp_path / "jobs.sqlite"))
    scheduler = Scheduler(SchedulerConfig(host="127.0.0.1", port=0), CommConfig(),
                          token="t", journal=journal)
    await scheduler.start()
    client = await Client(scheduler.address, token="t", asynchronous=True, timeout=5)
    try:
        # 2**63 to 2**64 pass the wire (msgpack's uint64); SQLite cannot bind them
        assert await client.history(since=2**63) == []
        assert await client.history(until=2**63) == []
        with pytest.raises(ValueError, match="a job number must be from 1"):
            await client.history(jobs=[2**63])  # the client's own check
        assert not scheduler.fatal.done()
        assert (await client.scheduler_info())["address"] == scheduler.address
    finally:
        await client.close()
        await scheduler.close()
        journal.close()

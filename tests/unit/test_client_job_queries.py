"""The client library's job queries behind ``sched logs``, ``sched wait`` and ``sched
workers``, against a scripted stand-in for the scheduler and workers (no sockets): a log read
once or followed through a retry to the job's end, from where its worker is now, waiting for a
worker that is away; waiting for jobs with updates, a prompt wake-up when one ends, a timeout,
a scheduler lost and got back (or not); workers joined with the GPUs their jobs hold."""

from __future__ import annotations

import asyncio

import pytest

from dsched.client.joblogs import JobLog, WorkerUnreachable, read_latest
from dsched.client.jobs import JobFuture
from dsched.client.jobwait import wait_for_jobs
from dsched.client.workerview import workers_view
from dsched.errors import SchedError, SchedulerLostError
from dsched.protocol import ops


def view(job: int, state: str, attempt: int = 1, address: str = "", log: str = "",
         **fields) -> dict:
    return {"id": job, "state": state, "attempt": attempt, "address": address, "log": log,
            "detail": "", "worker": "", "gpus": [], "resources": "", **fields}


class Scripted:
    """Enough of an AsyncClient for the queries: each ``jobs()`` call moves to the next
    snapshot (the last one stays), a pair of the views it answers and the logs the workers
    hold then (by address and attempt key)."""

    _timeout = 5.0

    def __init__(self, *snapshots, info=None):
        self.snapshots = list(snapshots)
        self.now = 0
        self.info = info
        self.watched: list[JobFuture] = []
        self._peers = self

    async def jobs(self, ids=(), states=(), offset=0, limit=1000) -> dict:
        views, _ = self.snapshots[min(self.now, len(self.snapshots) - 1)]
        self.now += 1
        chosen = [v for v in views if (not ids or v["id"] in ids)
                  and (not states or v["state"] in states)]
        return {"jobs": chosen, "total": len(chosen), "counts": {}, "recovering": False}

    async def get_log(self, address, key, offset, limit, timeout) -> ops.Log:
        _, logs = self.snapshots[min(self.now, len(self.snapshots)) - 1]
        data = logs.get((address, key))
        if data is None:
            return ops.Log(1, error=f"no log of {key} on this worker")
        return ops.Log(1, data[offset:offset + limit], len(data))

    async def watch_jobs(self, jobs) -> list[JobFuture]:
        return [JobFuture(self, None, job) for job in jobs]

    async def scheduler_info(self) -> dict:
        return self.info


def connected(name: str, address: str) -> dict:
    """``scheduler_info()`` with the worker ``name`` connected at ``address``."""
    return {"workers": {address: {"name": name}}}


async def read_all(log: JobLog) -> list[bytes]:
    return [chunk async for chunk in log]


async def test_following_a_log_reads_each_attempt_to_its_end_and_stops_once_the_job_ended():
    one, two = ("a:1", "job-1.1"), ("b:2", "job-1.2")
    client = Scripted(
        ([view(1, "queued")], {}),  # not started yet: a follower waits
        ([view(1, "running", 1, "a:1", "/j/1.1")], {one: b"one\n"}),
        ([view(1, "running", 1, "a:1", "/j/1.1")], {one: b"one\ntwo\n"}),
        # It failed and is queued for its retry; its first attempt wrote a last line.
        ([view(1, "queued", 2)], {one: b"one\ntwo\nthree\n"}),
        ([view(1, "running", 2, "b:2", "/j/1.2")], {one: b"one\ntwo\nthree\n", two: b"re\n"}),
        ([view(1, "completed", 2, "b:2", "/j/1.2")], {two: b"re\ndone\n"}))
    chunks = await read_all(JobLog(client, 1, follow=True, interval=0))
    assert chunks == [b"one\n", b"two\n", b"three\n", b"re\n", b"done\n"]


async def test_reading_a_log_once_reads_what_is_there_in_chunks_and_stops():
    key = ("a:1", "job-4.1")
    client = Scripted(([view(4, "running", 1, "a:1", "/j/4.1")], {key: b"0123456789"}))
    assert await read_all(JobLog(client, 4, limit=4)) == [b"0123", b"4567", b"89"]


async def test_a_log_that_does_not_exist_yet_or_any_more_is_an_error_in_words():
    queued = Scripted(([view(2, "queued", detail="no workers connected yet")], {}))
    with pytest.raises(SchedError, match=r"job 2 has no log yet: it is queued \(no workers"):
        await read_all(JobLog(queued, 2))
    with pytest.raises(SchedError, match="no job 3"):
        await read_all(JobLog(queued, 3))
    gone = Scripted(([view(2, "completed", 1, "a:1", "/j/2.1")], {}))
    with pytest.raises(SchedError, match="no log of job-2.1 on this worker"):
        await read_all(JobLog(gone, 2, follow=True))


async def test_a_log_is_read_where_its_worker_is_connected_now_else_where_it_was():
    moved = Scripted(([view(5, "completed", 1, "old:1", "/j/5.1", worker="w1")],
                      {("new:2", "job-5.1"): b"kept\n"}), info=connected("w1", "new:2"))
    assert (await read_latest(moved, 5, 0, 100)).data == b"kept\n"
    assert await read_all(JobLog(moved, 5)) == [b"kept\n"]
    assert await read_all(JobLog(moved, 5, follow=True, interval=0)) == [b"kept\n"]
    away = Scripted(([view(5, "completed", 1, "old:1", "/j/5.1", worker="w1")],
                     {("old:1", "job-5.1"): b"there\n"}), info=connected("w2", "new:2"))
    assert await read_all(JobLog(away, 5)) == [b"there\n"]


class Away(Scripted):
    """A worker "w1" that is away (its reads fail) until ``back`` is set, then connected at
    "new:2"."""

    def __init__(self, *snapshots):
        super().__init__(*snapshots, info={"workers": {}})
        self.back = False
        self.tries = 0

    async def get_log(self, address, key, offset, limit, timeout) -> ops.Log:
        if not self.back or address != "new:2":
            self.tries += 1
            raise ConnectionRefusedError(111, "Connect call failed")
        return await super().get_log(address, key, offset, limit, timeout)

    async def scheduler_info(self) -> dict:
        return connected("w1", "new:2") if self.back else {"workers": {}}


async def test_following_a_log_waits_for_its_worker_to_come_back_saying_so_once():
    client = Away(([view(6, "completed", 1, "old:1", "/j/6.1", worker="w1")],
                   {("new:2", "job-6.1"): b"done\n"}))
    said = []

    def waiting(worker):
        said.append(worker)

    log = JobLog(client, 6, follow=True, interval=0, on_wait=waiting)
    reading = asyncio.ensure_future(read_all(log))
    while client.tries < 3:
        await asyncio.sleep(0.01)
    client.back = True
    assert await asyncio.wait_for(reading, 10) == [b"done\n"]
    assert said == ["w1"]
    with pytest.raises(WorkerUnreachable, match="cannot read the log of job 6 from its worker at "
                       "old:1"):  # once, not following: no wait
        await read_all(JobLog(Away(*client.snapshots), 6))
    gone = Away(*client.snapshots)
    gone._timeout = 0.3
    with pytest.raises(WorkerUnreachable, match="the worker was not back within 0.3 s"):
        await read_all(JobLog(gone, 6, follow=True, interval=0))


class Restarting(Scripted):
    """A scheduler lost under the first ``lost`` reads of jobs; the client gets it back
    unless ``gives_up``."""

    def __init__(self, *snapshots, lost: int = 1, gives_up: bool = False):
        super().__init__(*snapshots)
        self.lost, self.gives_up, self.reconnects = lost, gives_up, 0

    async def jobs(self, ids=(), states=(), offset=0, limit=1000) -> dict:
        if self.lost:
            self.lost -= 1
            raise SchedulerLostError("lost the scheduler at s:1: connection reset")
        return await super().jobs(ids, states, offset, limit)

    async def connected_again(self) -> None:
        self.reconnects += 1
        if self.gives_up:
            raise SchedulerLostError("lost the scheduler at s:1: connection reset; not back "
                                     "within 30 s")


async def test_waiting_and_following_go_on_once_the_client_has_its_scheduler_again():
    back = Restarting(([view(1, "running")], {}), ([view(1, "completed")], {}), lost=2)
    assert [v["state"] for v in await wait_for_jobs(back, [1], interval=0)] == ["completed"]
    assert back.reconnects == 2
    key = ("a:1", "job-1.1")
    back = Restarting(([view(1, "completed", 1, "a:1", "/j/1.1")], {key: b"all\n"}))
    assert await read_all(JobLog(back, 1, follow=True, interval=0)) == [b"all\n"]
    assert back.reconnects == 1
    gone = Restarting(([view(1, "running")], {}), gives_up=True)
    with pytest.raises(SchedulerLostError, match="not back within 30 s"):
        await wait_for_jobs(gone, [1], interval=0)


async def test_waiting_for_jobs_reports_each_read_and_returns_once_all_ended():
    client = Scripted(([view(1, "running"), view(2, "queued")], {}),
                      ([view(1, "completed"), view(2, "running")], {}),
                      ([view(1, "completed"), view(2, "failed")], {}))
    seen = []
    views = await wait_for_jobs(client, [2, 1, 2], seen.append, interval=0)
    assert [v["state"] for v in views] == ["failed", "completed"]  # in the order asked for
    assert [[v["state"] for v in vs] for vs in seen] == [
        ["queued", "running"], ["running", "completed"], ["failed", "completed"]]


async def test_waiting_wakes_when_a_job_ends_not_at_the_next_interval():
    client = Scripted(([view(1, "running")], {}), ([view(1, "completed")], {}))
    real_watch = client.watch_jobs

    async def watch(jobs):
        client.watched = await real_watch(jobs)
        return client.watched

    client.watch_jobs = watch
    waiting = asyncio.ensure_future(wait_for_jobs(client, [1], interval=3600))
    while not client.watched:
        await asyncio.sleep(0)
    client.watched[0]._end(view(1, "completed"))  # the scheduler's job-ended
    assert (await asyncio.wait_for(waiting, 10))[0]["state"] == "completed"


async def test_waiting_past_the_timeout_or_for_an_unknown_job_raises():
    client = Scripted(([view(1, "running")], {}))
    with pytest.raises(TimeoutError, match="1 of 1 jobs had not ended within 0.05 s"):
        await wait_for_jobs(client, [1], timeout=0.05, interval=0.01)
    with pytest.raises(SchedError, match="no jobs 8, 9"):
        await wait_for_jobs(client, [1, 8, 9])


async def test_workers_show_resources_and_which_jobs_hold_which_gpus():
    info = {"workers": {
        "tcp://b": {"name": "b", "nthreads": 2, "executing": 0, "draining": True,
                    "resources": {"GPU": 1}, "used": {"GPU": 0}, "free": {"GPU": 1},
                    "gpus": [{"index": 0, "name": "H100", "uuid": "GPU-0",
                              "memory_total": 80, "memory_used": 1, "utilization": 0.25}]},
        "tcp://a": {"name": "a", "nthreads": 4, "executing": 2, "draining": False,
                    "resources": {"gpu0": 1, "gpu1": 1, "foo": 12},
                    "used": {"gpu0": 1, "gpu1": 1, "foo": 5},
                    "free": {"gpu0": 0, "gpu1": 0, "foo": 7}, "gpus": []}}}
    client = Scripted(([view(4, "running", worker="a", gpus=[0], resources="foo=5 gpu0=1"),
                        # assigned, not started: it holds the device it names already
                        view(6, "assigned", worker="a", resources="gpu1=1")], {}), info=info)
    a, b = await workers_view(client)
    assert (a["name"], a["address"], a["busy"], a["nthreads"], a["jobs"]) == (
        "a", "tcp://a", 2, 4, [4, 6])
    assert a["resources"]["foo"] == {"total": 12, "used": 5, "free": 7}
    assert [(g["index"], g["jobs"]) for g in a["gpus"]] == [(0, [4]), (1, [6])]
    assert b["draining"] and b["jobs"] == []
    assert [(g["name"], g["utilization"], g["jobs"]) for g in b["gpus"]] == [("H100", 0.25, [])]

"""The job runner's orders to supervisors: an order for an attempt whose key an earlier run
still holds (a held attempt dropped, then sent again under the same key) waits for the next
run's supervisor; it is never told to the earlier one, which is on its way out. A Proceed is
told before the record of the end acknowledged with it goes."""

from __future__ import annotations

import asyncio
import json
import os

from dsched.worker.jobrunner import JobRunner


class Stdin:
    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        self.lines.append(data)

    def close(self) -> None:
        pass


class Supervisor:
    def __init__(self, pid: int) -> None:
        self.pid, self.stdin = pid, Stdin()

    async def wait(self) -> int:
        return 0


async def test_an_order_for_the_next_run_of_a_key_is_kept_for_it(tmp_path):
    runner = JobRunner(str(tmp_path), "w1", 1.0, on_event=lambda event: None)
    loop = asyncio.get_running_loop()
    old, new = loop.create_future(), loop.create_future()
    dropped = Supervisor(41)
    runner._supervisors["job-1.1"], runner._owners["job-1.1"] = dropped, old
    runner._runs["job-1.1"] = old

    runner.proceed("job-1.1")  # the old run's own: told at once
    assert dropped.stdin.lines == [b"go\n"] and runner._orders == {}

    runner._runs["job-1.1"] = new  # sent again; the old supervisor is not gone yet
    runner.kill("job-1.1", "cancel")
    assert dropped.stdin.lines == [b"go\n"]  # not the old one's
    assert runner._orders == {new: "kill"}  # told to the new run's once it is forked


async def test_an_order_kept_for_one_run_of_a_key_is_not_another_runs(tmp_path):
    runner = JobRunner(str(tmp_path), "w1", 1.0, on_event=lambda event: None)
    loop = asyncio.get_running_loop()
    first, second = loop.create_future(), loop.create_future()
    runner._runs["job-1.1"] = first  # its supervisor is being forked: orders are kept
    runner.drop("job-1.1")
    runner._runs["job-1.1"] = second  # the same attempt sent again, held, then committed
    runner.proceed("job-1.1")
    assert runner._orders == {first: "drop", second: "go"}


class StandInReports:
    """A supervisor's stdout: what it says of its attempt, then its end."""

    def __init__(self, key: str) -> None:
        from dsched.protocol import ops

        said = [ops.AttemptStarted(key, 7, "log", (), 1.0),
                ops.AttemptEnded(key, "completed", 0, "", "log", 1.0, 2.0)]
        self.lines = [json.dumps(op.to_wire()).encode() + b"\n" for op in said]

    def __aiter__(self):
        return self

    async def __anext__(self) -> bytes:
        if not self.lines:
            raise StopAsyncIteration
        return self.lines.pop(0)


class StandInSpawner:
    """Forks nothing: each attempt's supervisor is a ``Supervisor`` that says its attempt ran;
    ``meanwhile`` runs while it is being 'forked'."""

    def __init__(self, meanwhile=lambda: None) -> None:
        self.meanwhile, self.leases, self.spawned = meanwhile, [], []

    async def ready(self) -> bool:
        return True

    async def spawn(self, args, lock_fd, opened):
        self.leases.append(float(args[3]))
        supervisor = Supervisor(40 + len(self.spawned))
        supervisor.stdout = StandInReports(os.path.basename(args[0])[:-len(".json")])
        supervisor.cgroup = ""
        self.meanwhile()  # while its pipes are made: not yet told what the runner tells all
        opened(supervisor)
        self.spawned.append(supervisor)
        return supervisor

    def forget(self, record: str) -> None:
        pass


async def _one_attempt(runner: JobRunner, spawner: StandInSpawner) -> Supervisor:
    from dsched.worker.actions import StartJob

    runner._spawner = spawner
    await runner.run(StartJob("job-1.1", {"command": ["true"]}, lease_until=100.0))
    supervisor, = spawner.spawned
    return supervisor


async def test_a_supervisor_is_told_its_lease_again_only_if_it_grew_while_it_started(tmp_path):
    # Each line told wakes the supervisor: one that started with the latest lease hears
    # nothing more of it; one whose lease was extended while it was being forked hears the
    # new one (it may have missed it).
    for extended, told in ((None, []), (250.0, [b"250.0\n"])):
        runner = JobRunner(str(tmp_path), "w1", 1.0, on_event=lambda event: None)
        spawner = StandInSpawner(lambda: extended and runner.extend(extended))
        supervisor = await _one_attempt(runner, spawner)
        assert spawner.leases == [100.0]
        assert supervisor.stdin.lines == told


async def test_a_lease_extended_while_its_supervisor_is_forked_is_told_once(tmp_path):
    # Its stdin is open: the extension goes there at once, and not again once forked.
    runner = JobRunner(str(tmp_path), "w1", 1.0, on_event=lambda event: None)

    class Forking(StandInSpawner):
        async def spawn(self, args, lock_fd, opened):
            supervisor = await super().spawn(args, lock_fd, opened)
            runner.extend(300.0)  # a heartbeat's lease, while the spawner forks
            return supervisor

    supervisor = await _one_attempt(runner, Forking())
    assert supervisor.stdin.lines == [b"300.0\n"]


async def test_an_order_given_while_its_supervisor_is_forked_is_told_once(tmp_path):
    # "go" (the commit) or a stop given while the spawner forks: written at once to the stdin
    # the supervisor will read, and not again once its pid is known (each line wakes it).
    runner = JobRunner(str(tmp_path), "w1", 1.0, on_event=lambda event: None)

    class Forking(StandInSpawner):
        async def spawn(self, args, lock_fd, opened):
            supervisor = await super().spawn(args, lock_fd, opened)
            supervisor.pid = None  # the spawner has not said it yet
            runner.proceed("job-1.1")
            supervisor.pid = 40
            return supervisor

    supervisor = await _one_attempt(runner, Forking())
    assert supervisor.stdin.lines == [b"go\n"]


async def test_an_order_given_while_its_supervisor_is_forked_goes_to_its_replacement(
        tmp_path, monkeypatch):
    # The spawner could not fork it after all: the supervisor started as a program instead
    # is told what the one never forked was told.
    runner = JobRunner(str(tmp_path), "w1", 1.0, on_event=lambda event: None)
    replacement = Supervisor(50)
    replacement.stdout = StandInReports("job-1.1")

    class Failing(StandInSpawner):
        async def spawn(self, args, lock_fd, opened):
            supervisor = await super().spawn(args, lock_fd, opened)
            supervisor.pid = None
            runner.kill("job-1.1", "cancel")
            raise OSError("cannot fork")

    async def started_as_a_program(*args, **kwargs):
        return replacement

    monkeypatch.setattr(asyncio, "create_subprocess_exec", started_as_a_program)
    spawner = Failing()
    await _one_attempt(runner, spawner)
    assert spawner.spawned[0].stdin.lines == [b"kill\n"]  # never forked: nobody reads it
    assert replacement.stdin.lines == [b"kill\n"]


async def test_an_acknowledged_record_goes_after_the_proceed_that_came_with_it(tmp_path):
    # The scheduler acknowledges an end and lets the job in its place start in one message:
    # that job's supervisor waits on its "go", the unlink of the record does not.
    from dsched.worker.jobrecords import new_record, record_path, write_record

    runner = JobRunner(str(tmp_path), "w1", 1.0, on_event=lambda event: None)
    ended = record_path(str(tmp_path), "job-1.1")
    write_record(ended, new_record("job-1.1", {"command": ["true"]}, (), "log", "w1"))
    held, run = Supervisor(42), asyncio.get_running_loop().create_future()
    runner._supervisors["job-2.1"], runner._owners["job-2.1"] = held, run
    runner._runs["job-2.1"] = run
    seen: list = []
    held.stdin.write = lambda data: seen.append((data, os.path.exists(ended)))
    runner.forget("job-1.1")
    runner.proceed("job-2.1")
    assert seen == [(b"go\n", True)]  # told while the record is still there
    await asyncio.sleep(0)  # the rest of the loop's turn
    assert not os.path.exists(ended)


async def test_a_record_that_cannot_be_removed_is_said_and_the_others_still_go(tmp_path,
                                                                             monkeypatch,
                                                                             caplog):
    from dsched.worker import jobrunner
    from dsched.worker.jobrecords import new_record, record_path, write_record

    runner = JobRunner(str(tmp_path), "w1", 1.0, on_event=lambda event: None)
    paths = {}
    for key in ("job-1.1", "job-2.1"):
        paths[key] = record_path(str(tmp_path), key)
        write_record(paths[key], new_record(key, {"command": ["true"]}, (), "log", "w1"))
    removing = jobrunner.remove_record

    def failing(directory: str, key: str) -> None:
        if key == "job-1.1":
            raise OSError(5, "Input/output error")
        removing(directory, key)

    monkeypatch.setattr(jobrunner, "remove_record", failing)
    runner.forget("job-1.1")
    runner.forget("job-2.1")
    await asyncio.sleep(0)  # the rest of the loop's turn
    assert os.path.exists(paths["job-1.1"]) and not os.path.exists(paths["job-2.1"])
    assert "Cannot remove the record of job-1.1: Input/output error" in caplog.text

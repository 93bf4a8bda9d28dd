"""The job runner's orders to supervisors: an order for an attempt whose key an earlier run
still holds (a held attempt dropped, then sent again under the same key) waits for the next
run's supervisor; it is never told to the earlier one, which is on its way out."""

from __future__ import annotations

import asyncio

from dsched.worker.jobrunner import JobRunner


class Stdin:
    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        self.lines.append(data)


class Supervisor:
    def __init__(self, pid: int) -> None:
        self.pid, self.stdin = pid, Stdin()


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

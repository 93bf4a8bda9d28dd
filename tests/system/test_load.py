"""Load: 20 client processes submit 2,000 tasks each at once, three rounds over; every result is
right, and the scheduler's memory comes back to its level before each round once they have
gone."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from deadline import wait_until

CLIENTS, TASKS = 20, 2_000
ROUNDS = 3
#: How far above its baseline the scheduler's RSS may stay once a round's clients are gone.
SLACK = 0.10
CLIENT_SCRIPT = Path(__file__).with_name("load_client.py")


def start_round(daemons, round_number: int, *extra: str) -> list[subprocess.Popen]:
    """Every client process of a round, started at once."""
    return [subprocess.Popen([sys.executable, str(CLIENT_SCRIPT), daemons.address, str(TASKS),
                              str(round_number * CLIENTS + i), *extra],
                             env=daemons.env, stdout=subprocess.PIPE, text=True)
            for i in range(CLIENTS)]


def finish_round(clients: list[subprocess.Popen]) -> None:
    """Wait for each client; each must have had all its results right."""
    try:
        for client in clients:
            out, _ = client.communicate(timeout=300)
            report = json.loads(out.strip().splitlines()[-1])
            assert client.returncode == 0 and report["wrong"] == 0, report
            assert report["tasks"] == TASKS, report
    finally:
        for client in clients:
            if client.poll() is None:
                client.kill()
                client.wait()


@pytest.mark.timeout(300)  # 45-80 s alone; more on a busy machine
def test_twenty_clients_lose_nothing_and_the_scheduler_gives_its_memory_back(daemons):
    daemons.scheduler()
    for name in ("a", "b"):
        daemons.worker("--name", name, "--nthreads", "4")
    monitor = daemons.client()
    daemons.wait_for_workers(monitor, 2)
    scheduler = psutil.Process(daemons.scheduler_process.pid)

    def settled() -> bool:
        info = monitor.scheduler_info()
        return not info["tasks"] and all(w["executing"] == 0 for w in info["workers"].values())

    # The baseline is taken after a warm-up round whose tasks all wait (the hold) until every
    # client has submitted, so that all 40,000 are alive in the scheduler at once: the most
    # any round can hold. Its tables, the allocator's arenas and the caches grow to that size
    # and are reused by the rounds after; from a cold start, or after a warm-up where tasks
    # ended while others were still arriving, that growth would look like a leak.
    hold = daemons.tmp_path / "hold"
    hold.touch()
    warm_up = start_round(daemons, 0, str(hold))
    wait_until(lambda: sum(monitor.scheduler_info()["tasks"].values()) == CLIENTS * TASKS, 120,
               what="every warm-up task submitted")
    hold.unlink()
    finish_round(warm_up)
    wait_until(settled, 60, what="the warm-up round to be forgotten")
    baseline = scheduler.memory_info().rss

    for round_number in range(1, ROUNDS + 1):
        started = time.monotonic()
        finish_round(start_round(daemons, round_number))
        seconds = time.monotonic() - started
        wait_until(settled, 60, what=f"round {round_number} to be forgotten")
        rss = wait_until(lambda: (rss := scheduler.memory_info().rss) <= baseline * (1 + SLACK)
                         and rss, 30, what=f"the scheduler's RSS to come back within "
                         f"{SLACK:.0%} of {baseline} bytes after round {round_number}")
        print(f"round {round_number}: {CLIENTS * TASKS} tasks in {seconds:.1f} s; scheduler RSS "
              f"{rss / 2**20:.1f} MiB (baseline {baseline / 2**20:.1f} MiB)")

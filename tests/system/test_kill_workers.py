"""Worker processes killed with -9 in the middle of a 5,000-task graph: every result is still
right, and only the tasks that were executing in a killed process count its death. A task
whose workers keep dying fails, past ``allowed_failures``, with an error that says so.

The workers run under their nanny (``--nworkers``), which restarts each killed process.
"""

from __future__ import annotations

import collections
import os
import random
import sys

import cloudpickle
import psutil
import pytest

from deadline import wait_until
from dsched import TaskFailedError
from task_ledger import Ledger, leaf, total

cloudpickle.register_pickle_by_value(sys.modules[__name__])

PROCESSES, THREADS = 3, 4
GROUPS, LEAVES = 500, 9  # 500 sums of 9 leaves each: 5,000 tasks
KILLS = 10
ALLOWED_FAILURES = 3  # the scheduler's default
FREEZES = 4  # times a kill freezes the cluster to find a process to kill, at most
SEED = int(os.environ.get("DSCHED_TEST_SEED", random.randrange(2**32)))


def submit_graph(client, ledger: Ledger, hold, rng: random.Random) -> tuple[list, list[int]]:
    """Submit the graph and keep only the futures of the sums (the leaves' are dropped, so
    their results go once their sum has them); return those and the expected sums."""
    roots, expected = [], []
    for group in range(GROUPS):
        leaves = [client.submit(leaf, str(ledger.path), str(hold), f"leaf-{group}-{i}",
                                group * LEAVES + i, rng.uniform(0.005, 0.04),
                                key=f"leaf-{group}-{i}")
                  for i in range(LEAVES)]
        roots.append(client.submit(total, str(ledger.path), str(hold), f"sum-{group}",
                                   rng.uniform(0.005, 0.04), leaves, key=f"sum-{group}"))
        expected.append(sum(group * LEAVES + i for i in range(LEAVES)))
        del leaves
    return roots, expected


def worker_processes(nanny) -> list[psutil.Process]:
    return psutil.Process(nanny.pid).children()


def kill_an_executing_process(nanny, ledger: Ledger, hold, rng: random.Random,
                              deaths: collections.Counter):
    """Freeze the cluster (the hold), wait for a worker process with every thread executing,
    kill it, lift the hold; return its pid and the tasks it was executing.

    With every thread held, no task can end there nor start, so what the ledger says it
    executes is exactly what it executes when it dies. A process is spared while it runs a
    task that ``allowed_failures`` deaths (``deaths`` counts them) would fail: a restarted
    process runs the tasks lost with the last one first, and killing it again and again
    would fail them on purpose (the other test here does that) rather than by chance. Where
    every process runs such a task (kills close together, on a slow machine, pile deaths on
    the same few tasks), the hold is lifted until a few more tasks have ended, and the
    cluster frozen again.
    """
    def busy() -> list:
        executing = ledger.executing()
        return [(p.pid, executing[p.pid]) for p in worker_processes(nanny)
                if sum(executing.get(p.pid, {}).values()) == THREADS
                and all(deaths[key] < ALLOWED_FAILURES for key in executing[p.pid])]

    for _ in range(FREEZES):
        hold.touch()
        try:
            try:
                found = wait_until(busy, 15, what=f"a worker process executing {THREADS} "
                                                  "tasks, none of them near its last death")
            except AssertionError:  # every process runs such a task
                found = []
            if found:
                pid, keys = rng.choice(found)
                victim = psutil.Process(pid)
                victim.kill()
                victim.wait(10)
        finally:
            hold.unlink()
        if found:
            deaths.update(keys)
            return pid, keys
        ended = ledger.count("end")  # let them end, then freeze again
        wait_until(lambda: ledger.count("end") >= ended + PROCESSES * THREADS, 60,
                   what="more tasks ended")
    raise AssertionError(f"no worker process to kill in {FREEZES} freezes; seed {SEED}")


def test_ten_kills_lose_nothing_and_count_only_executing_tasks(daemons, tmp_path):
    rng = random.Random(SEED)
    daemons.scheduler()
    nanny = daemons.worker("--nworkers", str(PROCESSES), "--nthreads", str(THREADS))
    client = daemons.client()
    daemons.wait_for_workers(client, PROCESSES)
    ledger, hold = Ledger(tmp_path / "ledger"), tmp_path / "hold"

    roots, expected = submit_graph(client, ledger, hold, rng)
    # Random moments: after random numbers of finished tasks, spread over the first 70%.
    moments = sorted(rng.sample(range(100, int(GROUPS * (LEAVES + 1) * 0.7)), KILLS))
    kills, deaths = [], collections.Counter()
    for moment in moments:
        wait_until(lambda: ledger.count("end") >= moment, 120, what=f"{moment} tasks ended")
        kills.append(kill_an_executing_process(nanny, ledger, hold, rng, deaths))

    assert client.gather(roots, timeout=240) == expected, f"seed {SEED}"
    killed = {pid for pid, _ in kills}
    assert len(killed) == KILLS
    # Whatever still runs (work the kills made redundant) ends: nothing hangs but what died.
    wait_until(lambda: set(ledger.executing()) <= killed, 60, what="the last tasks to end")
    expected_deaths = sum(sum(keys.values()) for _, keys in kills)
    print(f"{KILLS} kills; {ledger.count('start')} task runs for {GROUPS * (LEAVES + 1)} tasks; "
          f"{expected_deaths} tasks executing in the killed processes; seed {SEED}")
    counters = client.scheduler_info()["counters"]
    assert counters["deaths"] == expected_deaths, (
        f"seed {SEED}: executing at each kill: {[dict(keys) for _, keys in kills]}")


def test_a_task_fails_once_more_workers_died_running_it_than_allowed(daemons, tmp_path):
    daemons.scheduler(env={"SCHED_SCHEDULER__ALLOWED_FAILURES": "1"})
    daemons.worker("--nworkers", "2", "--nthreads", "1")
    client = daemons.client()
    daemons.wait_for_workers(client, 2)
    ledger, hold = Ledger(tmp_path / "ledger"), tmp_path / "hold"
    hold.touch()  # never lifted: the task runs until its process is killed

    future = client.submit(leaf, str(ledger.path), str(hold), "doomed", 1, 0, key="doomed")
    killed: list[int] = []
    for _ in range(2):
        def running_in_a_new_process():
            return [pid for pid in ledger.executing() if pid not in killed]

        (pid,) = wait_until(running_in_a_new_process, 60, what="the task to start again")
        psutil.Process(pid).kill()
        killed.append(pid)

    with pytest.raises(TaskFailedError, match=r"2 worker\(s\) died while running task \S+ "
                       ) as failed:
        future.result(timeout=60)
    assert failed.value.error == "killed_worker"
    assert "allowed_failures=1" in str(failed.value)
    assert ledger.count("start") == 2  # not run a third time

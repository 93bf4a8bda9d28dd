"""A large job array under crashes: the scheduler killed with -9 at random moments and a
worker process killed with -9 while elements run, during one array of ``ELEMENTS`` elements.

Every element writes its attempts to a ledger (``job_ledger.py``). At the end: the array is
one job and its elements the block of numbers after it, nothing else; every element ran
exactly once, or, its worker process killed under it, once and ended ``lost`` (the array was
submitted without ``--requeue``); no two attempts of an element overlapped; no element's
process is left; the array ended as its elements did.
"""

from __future__ import annotations

import collections
import os
import random

import psutil
import pytest

from deadline import wait_until
from job_ledger import JobLedger
from test_jobs_crash import WORKER_ENV, ledger, wait_killed  # noqa: F401 - the fixture

SEED = int(os.environ.get("DSCHED_TEST_SEED", random.randrange(2**32)))
#: The size of the array (DSCHED_TEST_ARRAY_ELEMENTS to try another).
ELEMENTS = int(os.environ.get("DSCHED_TEST_ARRAY_ELEMENTS", 1000))


@pytest.mark.timeout(600)
def test_an_array_runs_each_element_once_through_scheduler_and_worker_kills(ledger, daemons,
                                                                            tmp_path):
    rng = random.Random(SEED)
    state_dir = str(tmp_path / "state")
    address = daemons.scheduler("--state-dir", state_dir)
    port = int(address.rsplit(":", 1)[1])
    nanny = daemons.worker("--name", "a", "--nthreads", "4", env=WORKER_ENV)
    daemons.worker("--name", "b", "--no-nanny", "--nthreads", "4", env=WORKER_ENV)
    client = daemons.client()
    daemons.wait_for_workers(client, 2)
    # Every 100th element works for 2 s (a worker kill finds one running), the others 10 ms.
    seconds = '$([ $((SCHED_ARRAY_INDEX % 100)) = 0 ] && echo 2 || echo 0.01)'
    future = client.submit_command(ledger.command(seconds), array=f"0-{ELEMENTS - 1}")
    array = future.job_id(timeout=60)

    def started() -> int:
        return sum(1 for line in ledger.lines() if line.event == "start")

    def kill_the_scheduler() -> None:
        target = started() + rng.randrange(50, ELEMENTS // 4)
        wait_until(lambda: started() >= target, 300, what=f"{target} elements started")
        process = daemons.scheduler_process
        process.kill()
        wait_killed(process, daemons)
        daemons.scheduler("--state-dir", state_dir, port=port)

    def kill_worker_a() -> None:
        """Kill a's worker process while an element runs there (a slow one: it is still
        running when the kill lands)."""
        def slow_one_on_a():
            children = psutil.Process(nanny.pid).children()
            lines = ledger.lines()
            slow = {line.pid for line in lines if line.event == "start" and line.worker == "a"
                    and (line.job - array - 1) % 100 == 0}
            return (len(children) == 1 and ledger.live_pids(ledger.running(lines) & slow)
                    and children[0])

        worker = wait_until(slow_one_on_a, 300, what="a slow element running on a")
        worker.kill()
        worker.wait(10)

    kill_the_scheduler()
    kill_worker_a()
    kill_the_scheduler()

    result = future.result(timeout=540)
    found = client.jobs([array], expand=True, limit=ELEMENTS + 1)
    views = found["jobs"]
    assert [v["id"] for v in views] == list(range(array, array + ELEMENTS + 1))
    elements = {v["id"]: v for v in views[1:]}
    assert client.jobs(limit=10)["total"] == 1, "the scheduler holds a job nobody was told of"
    lines = ledger.lines()
    assert ledger.overlaps(lines) == [], "two attempts of an element ran at once"
    starts = ledger.starts(lines)
    assert set(starts) <= set(elements), "a stranger ran"
    assert [job for job, runs in starts.items() if len(runs) > 1] == [], "one ran twice"
    unended = ledger.running(lines)  # started and never ended: killed with a, none other
    cut = [line for line in lines if line.event == "start" and line.pid in unended]
    assert {line.worker for line in cut} == {"a"}, cut
    killed = {line.job for line in cut}
    states = collections.Counter(v["state"] for v in elements.values())
    assert states["completed"] + states["lost"] == ELEMENTS, states
    lost = {job for job, v in elements.items() if v["state"] == "lost"}
    # Those lost were on a when it was killed: running, or on their way (never started).
    assert {elements[job]["worker"] for job in lost} <= {"a"}
    assert killed and killed <= lost and set(elements) - set(starts) <= lost
    assert all(v["reason"] == "worker_lost" for job, v in elements.items() if job in lost)
    assert result.state == ("lost" if states["lost"] else "completed")
    assert views[0]["array"]["counts"] == dict(states)
    wait_until(lambda: not ledger.live_pids(), 30, what="every element's process to end")
    print(f"{ELEMENTS} elements, 2 scheduler kills, 1 worker kill (killing {sorted(killed)}); "
          f"{dict(states)}; seed {SEED}")

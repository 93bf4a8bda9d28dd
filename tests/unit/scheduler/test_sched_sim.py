"""The scheduler in the discrete-event simulator: whole workloads, checked after every event."""

from __future__ import annotations

import random

import pytest

from dsched.policy import SchedulerPolicy
from dsched.resources import Resources
from dsched.scheduler import SchedulerState
from dsched.sim import SimTask, SimWorker, Simulation, SimulationError


def test_guild_staged_runs_take_three_task_lengths_not_four():
    workers = [SimWorker("w", nthreads=4, resources="gpu0=1 gpu1=1")]
    runs = [SimTask("aaa", 2.0, "gpu0=1"), SimTask("bbb", 2.0, "gpu0=1"),
            SimTask("ccc", 2.0, "gpu0=1 gpu1=1"), SimTask("ddd", 2.0, "gpu1=1")]
    report = Simulation(workers, runs, validate=True).run()
    assert report.makespan == 6.0
    assert report.starts == {"aaa": 0.0, "ddd": 0.0, "bbb": 2.0, "ccc": 4.0}


def test_fractional_gpus_fill_one_gpu_and_free_it_exactly():
    workers = [SimWorker("w", nthreads=20, resources="GPU=1")]
    tasks = [SimTask(f"t{i}", 1.0, "GPU=0.1") for i in range(20)]
    state = SchedulerState()
    report = Simulation(workers, tasks, state=state, validate=True).run()
    assert report.makespan == 2.0
    w = state.workers["sim://w"]
    assert w.free == Resources.parse("GPU=1") and w.assigned == 0


def test_dying_workers_lose_no_work_and_killed_worker_ends_it():
    workers = [SimWorker("a", nthreads=2, leave_at=1.5), SimWorker("b", nthreads=2, join_at=1.0)]
    tasks = [SimTask(f"t{i}", 1.0) for i in range(6)]
    report = Simulation(workers, tasks, validate=True).run()
    assert set(report.outcomes.values()) == {"finished"}

    doomed = [SimWorker(f"w{i}", join_at=i, leave_at=i + 0.5) for i in range(4)]
    state = SchedulerState(SchedulerPolicy(allowed_failures=2))
    report = Simulation(doomed, [SimTask("long", 10.0)], state=state, validate=True).run()
    assert report.outcomes == {"long": "erred"}
    assert report.placements["long"] == ["sim://w0", "sim://w1", "sim://w2"]


def test_retries_rerun_tasks_that_raise():
    workers = [SimWorker("w")]
    tasks = [SimTask("flaky", 1.0, retries=1, errors=1), SimTask("broken", 1.0, retries=1,
                                                                   errors=2)]
    report = Simulation(workers, tasks, validate=True).run()
    assert report.outcomes == {"flaky": "finished", "broken": "erred"}


def test_prefetch_keeps_threads_busy_without_overcommitting():
    workers = [SimWorker("w", nthreads=2, resources="GPU=1")]
    tasks = [SimTask(f"cpu{i}", 1.0) for i in range(6)] + [SimTask("gpu", 1.0, "GPU=1")]
    state = SchedulerState(SchedulerPolicy(prefetch=2))
    report = Simulation(workers, tasks, state=state, validate=True).run()
    assert not report.unfinished
    assert report.makespan == 4.0


def test_a_simulated_worker_refuses_more_than_it_has():
    greedy = SchedulerState()
    place = greedy.placer.place

    def place_forgetting_the_thread_limit(t, w, q):
        w.nthreads += 1
        place(t, w, q)

    greedy.placer.place = place_forgetting_the_thread_limit
    workers = [SimWorker("w", nthreads=1)]  # it may hold two more, the prefetch
    with pytest.raises(SimulationError, match="over its 1 threads and prefetch"):
        Simulation(workers, [SimTask(key, 1.0) for key in "abcd"], state=greedy).run()


@pytest.mark.parametrize("seed", range(5))
def test_random_graphs_on_a_changing_cluster_keep_every_invariant(seed):
    rng = random.Random(seed)
    workers = [
        SimWorker(f"w{i}", nthreads=rng.randint(1, 4),
                  resources=rng.choice([None, "GPU=1", "GPU=2", "GPU=2 MEMORY=16"]),
                  join_at=rng.uniform(0, 5),
                  leave_at=rng.choice([None, None, rng.uniform(5, 30)]))
        for i in range(6)
    ] + [SimWorker("last", nthreads=4, resources="GPU=2 MEMORY=16", join_at=40)]
    tasks = []
    for i in range(150):
        deps = tuple(rng.sample([t.key for t in tasks], k=min(len(tasks), rng.randint(0, 2))))
        tasks.append(SimTask(
            f"t{i}", rng.uniform(0.1, 3), rng.choice([None, None, "GPU=1", "GPU=0.5",
                                                      "GPU=2", "MEMORY=8"]),
            dependencies=deps, priority=rng.randint(0, 2), prefix=f"p{i % 3}",
            submit_at=i * 0.07, nbytes=rng.randint(0, 1000),
            retries=1, errors=rng.choice([0, 0, 0, 1])))
    state = SchedulerState(SchedulerPolicy(allowed_failures=3))
    report = Simulation(workers, tasks, state=state, validate=True, tick=1.0).run()
    assert report.unfinished == []
    assert list(report.outcomes.values()).count("finished") > 100
    assert all(state.workers[a].assigned == 0 for a in state.workers)

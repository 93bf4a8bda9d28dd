"""Every invariant of WorkerState, checked by ``WorkerState.validate()``: threads, resources
and devices in use match what runs; the ready queue, inputs, fetches and results agree; the
attempt book agrees with the jobs held.

For tests (after every event); never on the daemon's hot path.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..resources import EMPTY, GPU, named_devices
from .task import RUNNING, WorkerTaskState

if TYPE_CHECKING:
    from .state import WorkerState


def check(s: WorkerState) -> None:
    _check_accounting(s)
    _check_tasks(s)
    jobs = [t for t in s.tasks.values() if t.job is not None]
    s.attempts.validate({t.key for t in jobs if t.state in RUNNING},
                        {t.key for t in jobs if t.state not in RUNNING})


def _check_accounting(s: WorkerState) -> None:
    running = [t for t in s.tasks.values() if t.state in RUNNING]
    assert 0 <= s.free_threads == s.nthreads - len(running), (
        f"free threads {s.free_threads}, running {len(running)} of {s.nthreads}"
    )
    assert sum((t.resources for t in running), EMPTY) == s.used, f"used {s.used}"
    assert s.used.fits(s.total), f"using {s.used} of {s.total}"
    s.ledger.validate()
    assert set(s.ledger.holders()) <= {t.key for t in running}
    # A task's devices: the ledger's grant for GPU=N and those its gpu<N> resources name.
    assert all({*s.ledger.held(t.key), *named_devices(t.resources)} == set(t.gpus)
               for t in running)
    assert s.ledger.in_use() == s.used.get(GPU)
    assert all(s.ledger.units_held(t.key) == t.resources.get(GPU) for t in running)


def _check_tasks(s: WorkerState) -> None:
    assert s.ready == sorted(s.ready)
    assert {e[2] for e in s.ready} == {
        t.key for t in s.tasks.values() if t.state is WorkerTaskState.READY
    } and len(s.ready) == len(set(s.ready))
    for task in s.tasks.values():
        assert task.key not in s.results and task.key not in s.fetches, task.key
        assert task.missing == {d for d in task.dependencies if d not in s.results}
        assert bool(task.missing) == (task.state is WorkerTaskState.FETCHING), task
        assert all(d in s.fetches or d in s.tasks for d in task.missing), task
        assert all(task.key in s.needed_by.get(d, ()) for d in task.dependencies)
        assert not (s.closing and task.state not in RUNNING), task
    for dep, needers in s.needed_by.items():
        assert needers and all(dep in s.tasks[k].dependencies for k in needers), dep
    for key, held in s.results.items():
        assert held.owned or key in s.needed_by, f"fetched {key} is held for nobody"
        assert held.owned == (held.report is not None), key
    for key in s.fetches:
        assert key not in s.results and key not in s.tasks, key

"""The fit (``fit.py``): each condition of the one rule, the room it keeps, and the placer's
search, its booking of what a returning worker runs, and backfill all asking that same rule."""

from __future__ import annotations

import itertools
import random

from dsched.resources import Resources
from dsched.scheduler.fit import Fit, Shape, allowed_workers, could_host
from dsched.scheduler.outbox import Outbox
from dsched.scheduler.placer import Placer
from dsched.scheduler.task import Task
from dsched.scheduler.worker import WorkerInfo


def worker(name: str = "w", nthreads: int = 2, resources: str | None = None) -> WorkerInfo:
    return WorkerInfo(f"tcp://{name}", name, nthreads, Resources.parse(resources), (), 0.0,
                      1800.0)


ORDERS = itertools.count(1000)  # the queue order of a task made without one: each its own


def task(key: str, resources: str | None = None, *, order: int | None = None,
         restrict: frozenset[str] | None = None, priority: int = 0) -> Task:
    return Task(key, b"", Resources.parse(resources), priority,
                next(ORDERS) if order is None else order, 0, restrict, key)


def shape(t: Task) -> Shape:
    return Shape(t.resources, t.restrict, {})


def busy(w: WorkerInfo, *keys: str, prefetched: bool = False, order: int | None = None,
         priority: int = 0) -> None:
    """Assign resource-free tasks to ``w`` (holding its threads)."""
    for key in keys:
        t = task(key, order=order, priority=priority)
        t.prefetched = prefetched
        w.processing[key] = t


def nothing_ahead(order: int, w: WorkerInfo) -> bool:
    return False


FIT = Fit(0, nothing_ahead)


def startable(t: Task, w: WorkerInfo, fit: Fit = FIT) -> bool:
    return fit.startable(t, shape(t), w)


# -- each condition of startable -------------------------------------------------------------


def test_a_worker_with_a_free_thread_and_the_resources_starts_a_task():
    w = worker(resources="GPU=1")
    assert startable(task("a"), w)
    assert startable(task("g", "GPU=1"), w)


def test_a_draining_worker_starts_nothing():
    w = worker()
    w.draining = True
    assert not startable(task("a"), w)


def test_a_restriction_allows_only_the_workers_it_names_by_name_or_address():
    w = worker("w")
    assert startable(task("a", restrict=frozenset({"w"})), w)
    assert startable(task("a", restrict=frozenset({"tcp://w"})), w)
    assert not startable(task("a", restrict=frozenset({"v"})), w)


def test_a_worker_without_a_free_thread_takes_nothing_beyond_its_prefetch():
    w = worker(nthreads=1)
    busy(w, "running")
    assert not startable(task("a"), w)  # prefetch 0
    assert startable(task("a"), w, Fit(1, nothing_ahead))  # sent ahead, to start next
    busy(w, "waiting", prefetched=True)
    assert not startable(task("b"), w, Fit(1, nothing_ahead))  # its one extra slot is taken


def test_a_task_is_not_sent_ahead_past_a_queue_ahead_of_it_that_could_use_the_thread():
    w = worker(nthreads=1)
    busy(w, "running")
    assert not startable(task("a"), w, Fit(1, lambda order, w: True))


def test_a_job_attempt_is_never_sent_ahead():
    w = worker(nthreads=1)
    busy(w, "running")
    t = task("job-1.1")
    t.job = object()
    assert not startable(t, w, Fit(1, nothing_ahead))


def test_a_task_with_resources_is_sent_ahead_only_before_a_task_of_lower_priority_waiting():
    w = worker(nthreads=1, resources="GPU=1")
    busy(w, "running")
    fit = Fit(3, nothing_ahead)
    assert not startable(task("g", "GPU=1", order=10), w, fit)
    busy(w, "later", prefetched=True, order=30)  # of equal priority: the worker starts it first
    assert not startable(task("g", "GPU=1", order=10), w, fit)
    busy(w, "lower", prefetched=True, priority=-1)
    assert startable(task("g", "GPU=1", order=10), w, fit)
    assert not startable(task("g", "GPU=1", priority=-1), w, fit)


def test_a_worker_must_have_every_demanded_resource_free():
    w = worker(resources="GPU=2 MEMORY=8e9")
    assert startable(task("g", "GPU=2"), w)
    assert not startable(task("g", "GPU=3"), w)
    assert startable(task("gm", "GPU=1 MEMORY=8e9"), w)
    assert not startable(task("gm", "GPU=1 MEMORY=9e9"), w)
    assert not startable(task("x", "TPU=1"), w)
    FIT.take(task("held", "GPU=1.5"), shape(task("held", "GPU=1.5")), w)
    assert not startable(task("g", "GPU=1"), w)
    assert startable(task("g", "GPU=0.5"), w)


def test_a_worker_still_stopping_a_run_of_the_same_key_does_not_start_it_again():
    w = worker()
    w.stopping["a"] = task("a")
    assert not startable(task("a"), w)
    assert startable(task("b"), w)


def test_startable_now_needs_a_thread_free_now():
    w = worker(nthreads=1)
    busy(w, "running")
    fit = Fit(1, nothing_ahead)
    t = task("a")
    assert fit.startable(t, shape(t), w) and not fit.startable_now(t, shape(t), w)


# -- the room, and what a worker could ever start ----------------------------------------------


def test_take_and_give_keep_the_room_and_say_whether_it_changed():
    w = worker(resources="GPU=2 MEMORY=8e9")
    g = task("g", "GPU=1 MEMORY=2e9")
    assert FIT.take(g, shape(g), w)
    assert w.free == Resources.parse("GPU=1 MEMORY=6e9") == Resources(w.room.units)
    assert not FIT.take(task("a"), shape(task("a")), w)
    assert FIT.give(g, w) and not FIT.give(task("a"), w)
    assert w.free == w.resources and w.room.units == w.resources.to_wire()


def test_could_host_looks_at_what_a_worker_offers_not_at_its_load():
    w = worker(nthreads=1, resources="GPU=1")
    busy(w, "running")
    FIT.take(task("g", "GPU=1"), shape(task("g", "GPU=1")), w)
    assert could_host(shape(task("g", "GPU=1")), w)
    assert not could_host(shape(task("g", "GPU=2")), w)
    assert not could_host(shape(task("g", "GPU=1", restrict=frozenset({"v"}))), w)


def test_allowed_workers_are_the_connected_ones_named_that_take_work():
    a, b, c = worker("a"), worker("b"), worker("c")
    c.draining = True
    workers = {w.address: w for w in (a, b, c)}
    by_name = {w.name: w.address for w in (a, b, c)}
    assert allowed_workers(frozenset({"b", "tcp://a", "c", "gone"}), workers, by_name) == [b, a]


# -- everyone asks the same rule ------------------------------------------------------------------


SHAPES = [None, "GPU=1", "GPU=2", "GPU=0.5 MEMORY=4e9", "MEMORY=8e9"]
OFFERS = [None, "GPU=1", "GPU=2 MEMORY=8e9", "MEMORY=16e9"]


def random_cluster(rng: random.Random) -> tuple[Placer, list[WorkerInfo]]:
    """A placer with a few workers under random loads, some draining or stopping tasks."""
    workers: dict[str, WorkerInfo] = {}
    placer = Placer(workers, Outbox(), prefetch=0, duration_weight=0.5)
    for i in range(4):
        w = worker(f"w{i}", rng.randint(1, 3), rng.choice(OFFERS))
        workers[w.address] = w
        placer.add_worker(w)
        for j in range(rng.randint(0, 3)):
            placer.book(task(f"load-{i}-{j}", rng.choice(SHAPES)), w)
        if w.processing and rng.random() < 0.3:
            key = next(iter(w.processing))
            w.stopping[key] = w.processing.pop(key)
        if rng.random() < 0.2:
            w.draining = True
            placer.withdraw_worker(w)
    return placer, list(workers.values())


def spelled_out(t: Task, w: WorkerInfo) -> bool:
    """The rule as the documentation states it, for a placer without prefetch."""
    return (not w.draining
            and (t.restrict is None or w.name in t.restrict or w.address in t.restrict)
            and len(w.processing) + len(w.stopping) < w.nthreads
            and t.resources.fits(w.free)
            and t.key not in w.stopping)


def test_the_search_booking_adoption_and_backfill_agree_with_the_rule():
    rng = random.Random(3)
    for case in range(300):
        placer, workers = random_cluster(rng)
        fit = placer.fit
        w = rng.choice(workers)
        restrict = rng.choice([None, frozenset({w.name}), frozenset({"elsewhere"})])
        key = rng.choice([f"t{case}", *w.stopping])
        t = task(key, rng.choice(SHAPES), restrict=restrict)
        expected = spelled_out(t, w)
        assert fit.startable(t, shape(t), w) is expected, (t, w)
        assert fit.startable_now(t, shape(t), w) is expected, (t, w)

        placer.enqueue(t)
        q = t.queue
        assert (placer.choice.best_of(t, q, [w], None, None) is w) is expected, (t, w)
        for x_key, x_resources in [("big", "GPU=2 MEMORY=8e9"), ("small", "GPU=1")]:
            x = task(x_key, x_resources, order=1)
            xq = Shape(x.resources, None, {})
            if not could_host(xq, w):  # backfill holds nothing for a task w could never start
                assert not placer.backfill.blocks(t, q, w, x, xq)
        assert placer.adopt(t, w) is expected, (t, w)

        u = task(f"u{case}", rng.choice(SHAPES))
        expected = spelled_out(u, w)
        assert placer.book(u, w) is expected, (u, w)


def test_the_pass_places_a_task_only_where_the_rule_allows_it():
    rng = random.Random(5)
    for case in range(100):
        placer, workers = random_cluster(rng)
        allowed = {}
        queued = [task(f"q{case}-{i}", rng.choice(SHAPES), order=100 + i) for i in range(6)]
        for t in queued:
            allowed[t.key] = {w.address for w in workers if spelled_out(t, w)}
            placer.enqueue(t)
        placer.schedule()
        for t in queued:
            if t.processing_on is not None:
                assert t.processing_on in allowed[t.key], (t, allowed[t.key])

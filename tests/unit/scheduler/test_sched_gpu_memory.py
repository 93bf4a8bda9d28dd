"""GPU devices in the scheduler's fit: tasks and jobs get devices whose share and memory are
free, through the same rule (``fit.py`` with ``dsched.devices``), and wait with a reason that
says what is short where none are."""

from __future__ import annotations

from dsched.scheduler import actions as act
from dsched.scheduler.views import worker_info

from sched_story import JobStory, Story, job, started, task

GB = 10**9


def sent_gpus(actions: list) -> dict[str, tuple[int, ...]]:
    return {a.key: a.gpus for a in actions if isinstance(a, act.SendExecute)}


def test_four_tasks_of_18_gb_share_one_80_gb_device_and_a_fifth_waits():
    s = Story()
    s.worker("big", nthreads=8, resources="GPU=1 GPU_MEMORY=80e9", memory=(80 * GB,))
    actions = s.submit(*(task(f"t{i}", "GPU_MEMORY=18G") for i in range(5)))
    assert sent_gpus(actions) == {f"t{i}": (0,) for i in range(4)}
    assert s.state_of("t4") == "queued"
    actions = s.finish("t0")
    assert sent_gpus(actions) == {"t4": (0,)}


def test_four_jobs_of_18_gb_share_one_80_gb_device_and_a_fifth_waits_with_its_reason():
    s = JobStory()
    s.worker("big", nthreads=8, resources="GPU=1 GPU_MEMORY=80e9", memory=(80 * GB,))
    ids = s.ids(s.jobs(*(job("train", resources="GPU_MEMORY=18G") for _ in range(5))))
    running = [i for i in ids if s.job(i).state.value == "running" or s.job(i).worker]
    assert len(running) == 4
    waiting = s.view(ids[4])
    assert waiting["state"] == "queued"
    assert "GPU_MEMORY: at most 8 GB free on any device (18 GB asked)" in waiting["detail"]


def test_a_fraction_goes_only_where_one_device_has_it_free_not_where_the_sum_is():
    s = Story()
    s.worker("w", nthreads=4, resources="GPU=2")
    s.submit(task("a", "GPU=0.6"), task("b", "GPU=0.6"))
    assert {s.where("a"), s.where("b")} == {"w"}
    assert sorted(s.state.tasks[k].gpus for k in "ab") == [(0,), (1,)]
    # GPU=0.8 is free on the worker in all, but on no one device: it waits here, not there
    actions = s.submit(task("c", "GPU=0.8"))
    assert started(actions) == [] and s.state_of("c") == "queued"
    actions = s.finish("a")
    assert started(actions) == [("c", "w")]


def test_whole_devices_go_to_the_smallest_that_is_enough_across_mixed_devices():
    s = Story()
    s.worker("mixed", nthreads=4, resources="GPU=3 GPU_MEMORY=152e9", memory=(80 * GB, 24 * GB,
                                                                              48 * GB))
    actions = s.submit(task("small", "GPU=1"), task("mid", "GPU=1 GPU_MEMORY=30G"),
                       task("large", "GPU=1 GPU_MEMORY=60G"))
    assert sent_gpus(actions) == {"small": (1,), "mid": (2,), "large": (0,)}


def test_more_memory_than_any_one_device_has_is_never_runnable_and_says_so():
    s = Story()
    s.worker("two", nthreads=2, resources="GPU=2 GPU_MEMORY=160e9", memory=(80 * GB, 80 * GB))
    s.submit(task("huge", "GPU_MEMORY=100G"))
    q = s.state.tasks["huge"].queue
    assert q.reason_kind == "too_large"
    assert q.reason == "GPU_MEMORY: at most 80 GB on any device (100 GB asked)"


def test_a_job_found_running_on_a_returning_worker_is_booked_on_its_own_device():
    from dsched.protocol import ops

    s = JobStory()
    s.worker("w", resources="GPU=2 GPU_MEMORY=160e9", memory=(80 * GB, 80 * GB))
    [job_id] = s.ids(s.jobs(job("train", resources="GPU_MEMORY=50G")))
    key = s.job(job_id).key
    assert s.state.tasks[key].gpus == (0,)
    s.start(key)
    s.leave("w")
    report = ops.AttemptStarted(key=key, pid=100, log="/x.log", gpus=(1,), started=0.0)
    s.worker("w", resources="GPU=2 GPU_MEMORY=160e9", memory=(80 * GB, 80 * GB),
             attempts=(report,))
    assert s.state.tasks[key].gpus == (1,)
    assert s.state.workers["tcp://w"].room.devices.devices_of(key) == (1,)


def test_memory_others_use_on_a_device_lowers_what_is_granted_within_one_heartbeat():
    from dsched.scheduler import events as ev

    def heartbeat(outside: int) -> list:
        gpus = ({"index": 0, "memory_used": outside, "memory_total": 80 * GB,
                 "memory_outside": outside},)
        return s(ev.WorkerHeartbeat(address="tcp://big", metrics={"gpus": gpus}, now=s.now))

    s = JobStory()
    s.worker("big", nthreads=8, resources="GPU=1 GPU_MEMORY=80e9", memory=(80 * GB,))
    heartbeat(40 * GB)
    ids = s.ids(s.jobs(*(job("train", resources="GPU_MEMORY=18G") for _ in range(3))))
    assert [s.job(i).state.value for i in ids] == ["assigned", "assigned", "queued"]
    assert s.view(ids[2])["detail"].startswith(
        "waiting for GPU_MEMORY: at most 4 GB free on any device (18 GB asked; processes dsched "
        "did not start use 40 GB)")
    assert sent_gpus(heartbeat(0)) == {s.job(ids[2]).key: (0,)}


def test_a_fenced_device_gets_no_grant_until_an_operator_releases_it():
    from dsched.scheduler import events as ev

    s = Story()
    s.worker("w", nthreads=4, resources="GPU=2 GPU_MEMORY=160e9", memory=(80 * GB, 80 * GB))
    reason = "gpu fault: Xid 79 on gpu1 (GPU-1)"
    s(ev.WorkerGpuFenced(worker="tcp://w", index=1, reason=reason, now=s.now))
    assert s.state.workers["tcp://w"].room.devices.fenced == {1: reason}
    actions = s.submit(task("a", "GPU=1"), task("b", "GPU=1"), task("c", "GPU_MEMORY=1G"))
    assert sent_gpus(actions) == {"a": (0,)}  # b and c wait: device 1 is fenced
    shown = worker_info(s.state)["tcp://w"]["gpus"]
    assert [g["fenced"] for g in shown] == ["", reason]

    def release(worker: str, index: int) -> list:
        return s(ev.GpuReleaseRequested(client="c", request=5, worker=worker, index=index,
                                        now=s.now))

    assert [a.error for a in release("x", 1)] == ["no worker named x is connected"]
    assert [a.error for a in release("w", 0)] == ["GPU 0 of worker w is not fenced"]
    assert release("w", 1) == [act.SendUnfenceGpu(worker="tcp://w", index=1),
                               act.JobsReply(client="c", request=5, value=True)]
    actions = s(ev.WorkerGpuReleased(worker="tcp://w", index=1, now=s.now))
    assert sent_gpus(actions) == {"b": (1,)}


def test_a_task_still_running_on_a_returning_worker_is_booked_on_its_own_devices():
    from dsched.resources import Resources
    from dsched.scheduler import events as ev

    s = Story()
    s.worker("w", nthreads=4, resources="GPU=2 GPU_MEMORY=160e9", memory=(80 * GB, 80 * GB))
    s.submit(task("first", "GPU=1"), task("p", "GPU=1"))
    assert s.state.tasks["p"].gpus == (1,)
    s.leave("w")
    actions = s(ev.WorkerJoined(
        address="tcp://w", name="w", nthreads=4, resources=Resources.parse("GPU=2 "
                                                                           "GPU_MEMORY=160e9"),
        devices=(0, 1), running=("p",), running_gpus={"p": [1]}, now=s.now,
        gpus=({"index": 0, "memory_total": 80 * GB}, {"index": 1, "memory_total": 80 * GB})))
    assert s.where("p") == "w" and s.state.tasks["p"].gpus == (1,)  # not the best fit, 0
    assert sent_gpus(actions)["first"] == (0,)  # queued again, and placed on the other


def test_a_worker_offering_gpus_that_are_not_whole_devices_or_too_many_is_refused():
    from dsched.resources import Resources
    from dsched.scheduler import events as ev

    s = Story()
    for offer in ("GPU=2e6", "GPU=1.5"):
        [refused] = [a for a in s(ev.WorkerJoined(address="tcp://x", name="x", nthreads=1,
                                                  resources=Resources.parse(offer), now=s.now))
                     if isinstance(a, act.CloseWorker)]
        assert refused.refused and "invalid worker resource GPU" in refused.reason


def test_a_memory_request_is_not_starved_by_a_stream_of_fractions():
    s = Story()
    s.worker("w", nthreads=8, resources="GPU=1 GPU_MEMORY=80e9", memory=(80 * GB,))
    s.submit(task("half-0", "GPU=0.5", prefix="half"))
    s.submit(task("big", "GPU_MEMORY=60G", prefix="big"))  # 40 GB held: it waits
    s.submit(task("half-1", "GPU=0.5", prefix="half"))  # would fit, but would delay big
    assert s.where("half-1") is None
    s.now += 1
    actions = s.finish("half-0")
    assert started(actions)[0] == ("big", "w")


def test_a_returning_job_that_lists_its_named_devices_too_is_booked_on_its_gpu_devices():
    from dsched.resources import Resources
    from dsched.scheduler.fit import devices_for
    from dsched.devices import DeviceBook

    book = DeviceBook({0: 80 * GB, 1: 80 * GB})
    assert devices_for(Resources.parse("GPU=1 gpu5=1"), book, (1, 5)) == (1,)
    assert devices_for(Resources.parse("GPU=2"), book, (1,)) is None


def test_a_device_task_starts_beside_a_reserved_one_on_another_device_but_not_on_its_own():
    s = Story()
    s.worker("w", nthreads=8, resources="GPU=3 GPU_MEMORY=152e9",
             memory=(24 * GB, 48 * GB, 80 * GB))
    s.submit(task("big1", "GPU_MEMORY=50G"), task("fill", "GPU_MEMORY=40G"))
    assert (s.state.tasks["big1"].gpus, s.state.tasks["fill"].gpus) == ((2,), (1,))
    s.submit(task("big2", "GPU_MEMORY=60G"))  # only the 80 GB device holds it: it waits there
    assert s.state_of("big2") == "queued"
    # 10 GB fits on the 24 GB device, which the waiting 60 GB task will never need: it starts
    actions = s.submit(task("small", "GPU_MEMORY=10G"))
    assert sent_gpus(actions) == {"small": (0,)}
    # 25 GB would go on the 80 GB device, and leave no room for 60 GB there when big1 ends
    actions = s.submit(task("medium", "GPU_MEMORY=25G"))
    assert sent_gpus(actions) == {} and s.state_of("medium") == "queued"
    actions = s.finish("big1")
    assert sent_gpus(actions) == {"big2": (2,)}


def test_a_reservation_is_made_again_when_others_take_memory_or_a_device_is_fenced():
    from dsched.scheduler import events as ev

    s = Story()
    s.worker("w", nthreads=8, resources="GPU=3 GPU_MEMORY=152e9",
             memory=(24 * GB, 48 * GB, 80 * GB))
    s.submit(task("a0", "GPU_MEMORY=20G"), task("fill", "GPU_MEMORY=40G"),
             task("big1", "GPU_MEMORY=50G"))
    s.submit(task("big2", "GPU_MEMORY=60G"))  # waits for the 80 GB device
    backfill, x = s.state.placer.backfill, s.state.tasks["big2"]

    def reservation():
        return backfill.reserve(x, x.queue)

    first = reservation()
    assert first.book.outside[2] == 0 and reservation() is first  # kept while nothing changed
    gpus = tuple({"index": i, "memory_used": 0, "memory_total": size, "memory_outside": 0}
                 for i, size in enumerate((24 * GB, 48 * GB, 80 * GB)))
    gpus[2]["memory_outside"] = 10 * GB  # another program takes 10 GB of the 80 GB device
    s(ev.WorkerHeartbeat(address="tcp://w", metrics={"gpus": gpus}, now=s.now))
    second = reservation()
    assert second is not first and second.book.outside[2] > 0  # counted at its start
    s(ev.WorkerGpuFenced(worker="tcp://w", index=0, reason="Xid 79", now=s.now))
    third = reservation()
    assert third is not second and 0 in third.book.fenced

"""The read-only views behind scheduler_info: worker resources, task counts, waiting reasons."""

from sched_story import Story, task

from dsched.resources import Resources

from dsched.scheduler.views import task_counts, waiting, worker_info


def test_waiting_reasons_are_counted_by_reason_and_clear_when_a_worker_fits():
    story = Story()
    story.submit(task("a", "TPU=1"), task("b", "TPU=1"))
    assert waiting(story.state) == {"no workers connected yet": 2}
    story.worker("w", resources="GPU=1")
    assert waiting(story.state) == {"no worker offers resource TPU": 2}
    story.worker("small", resources="TPU=0.5")
    assert waiting(story.state) == {"needs TPU=1 but the largest worker offers TPU=0.5": 2}
    story.worker("tpu", resources="TPU=1")
    assert waiting(story.state) == {}
    assert task_counts(story.state) == {"processing": 1, "queued": 1}


def test_worker_info_shows_total_used_and_free():
    story = Story()
    story.worker("w", nthreads=2, resources="GPU=2")
    story.submit(task("a", "GPU=0.5"))
    (info,) = worker_info(story.state).values()
    assert info["resources"] == {"GPU": 2}
    assert info["used"] == {"GPU": 0.5} and info["free"] == {"GPU": 1.5}
    assert info["executing"] == 1 and info["nthreads"] == 2


# -- the dashboard's views ------------------------------------------------------------------

from dsched.scheduler import events as ev  # noqa: E402
from dsched.scheduler.reasons import REASON_KINDS  # noqa: E402
from dsched.scheduler.views import pending, tasks_by_state, workers  # noqa: E402


def kinds(story):
    return pending(story.state, tasks_by_state(story.state))["by_reason"]


def test_every_unrunnable_reason_has_its_kind():
    story = Story()
    story.submit(task("early", "TPU=1"))
    assert kinds(story) == {"no_workers": 1}
    story.worker("w", nthreads=4, resources="GPU=2 TPU=0.5")
    story.worker("x", nthreads=1, resources="MEM=8")
    story.submit(task("odd", "GPU=1.5"), task("fpga", "FPGA=1"),
                 task("pinned", workers=("elsewhere",)), task("both", "TPU=0.5 MEM=8"),
                 task("first", "GPU=2"), task("second", "GPU=2"))
    assert kinds(story) == {"too_large": 1, "invalid_request": 1, "missing_resource": 1,
                            "restricted": 1, "no_single_worker": 1, "capacity": 1}
    story(ev.WorkerDraining(address="tcp://w", now=0))
    story(ev.WorkerDraining(address="tcp://x", now=0))
    assert kinds(story) == {"all_draining": 5, "invalid_request": 1}  # "first" runs on
    assert set(REASON_KINDS) == {"invalid_request", "no_workers", "all_draining", "restricted",
                                 "missing_resource", "too_large", "no_single_worker"}


def test_pending_names_each_group_with_its_demand_reason_and_age():
    story = Story()
    story.worker("w", nthreads=1, resources="GPU=1")
    story.submit(task("a", "GPU=1"), task("b", "GPU=1"), task("c", "TPU=2"))
    story.submit(task("d", dependencies=("a",)))
    story.at(5)
    story(ev.Tick(now=5))
    view = pending(story.state, tasks_by_state(story.state))
    assert view["total"] == 3 and view["groups_total"] == 3
    tpu, gpu, deps = view["groups"]  # the unrunnable first, then the largest
    assert (tpu["reason"], tpu["text"], tpu["resources"], tpu["tasks"], tpu["unrunnable_for"]) \
        == ("missing_resource", "no worker offers resource TPU", "TPU=2", 1, 5)
    assert (gpu["reason"], gpu["tasks"], gpu["unrunnable_for"]) == ("capacity", 1, None)
    assert (deps["reason"], deps["tasks"]) == ("dependencies", 1)
    assert pending(story.state, tasks_by_state(story.state), limit=1)["groups"] == [tpu]


def test_workers_show_resources_threads_and_gpus_from_heartbeats():
    story = Story()
    story(ev.WorkerJoined(address="tcp://g", name="g", nthreads=2,
                          resources=Resources.parse("GPU=2"),
                          gpus=({"index": 0, "name": "A", "uuid": "GPU-0",
                                 "memory_total": 100},
                                {"index": 1, "name": "A", "uuid": "GPU-1",
                                 "memory_total": 100}), now=0))
    story.submit(task("a", "GPU=1"))
    (w,) = workers(story.state)
    assert w["resources"] == [{"name": "GPU", "used": 1, "total": 2}]
    assert (w["threads_busy"], w["nthreads"], w["state"]) == (1, 2, "connected")
    assert [g["memory_used"] for g in w["gpus"]] == [None, None]  # no heartbeat yet
    story.at(3)
    story(ev.WorkerHeartbeat(address="tcp://g", now=3, metrics={
        "cpu": 10, "memory": 50, "memory_limit": 200, "executing": 1,
        "gpus": [{"index": 1, "utilization": 40, "memory_used": 30, "memory_total": 100}]}))
    story.at(4)
    story(ev.Tick(now=4))
    (w,) = workers(story.state)
    first, second = w["gpus"]
    assert (first["memory_used"], first["utilization"]) == (None, None)
    assert (second["name"], second["memory_used"], second["utilization"]) == ("A", 30, 0.4)
    (info,) = worker_info(story.state).values()  # what client.scheduler_info() says
    assert [(g["uuid"], g["utilization"]) for g in info["gpus"]] == [("GPU-0", None),
                                                                     ("GPU-1", 0.4)]
    assert (w["memory"], w["memory_limit"], w["heartbeat_age"]) == (50, 200, 1)
    assert tasks_by_state(story.state) == {"waiting": 0, "queued": 0, "processing": 1,
                                           "memory": 0, "released": 0, "erred": 0}


def test_job_attempts_are_jobs_not_tasks_in_the_task_counts():
    from sched_story import JobStory, job

    from dsched.scheduler.jobviews import jobs_view

    s = JobStory()
    s.worker("w")
    s.submit(task("t"))
    s.jobs(job(), job(resources="GPU=1"))  # job 1 waits for the thread, job 2 for a GPU
    assert task_counts(s.state) == {"processing": 1}
    assert tasks_by_state(s.state)["queued"] == 0
    assert pending(s.state, tasks_by_state(s.state))["by_reason"] == {}
    assert waiting(s.state) == {}
    # ...and a page of jobs shows those on workers first, however many wait
    s.finish("t")
    s.jobs(*(job() for _ in range(5)), request=2)
    assert [v["id"] for v in jobs_view(s.state, limit=3)["jobs"]] == [1, 7, 6]


def test_a_page_of_jobs_takes_any_integer_the_wire_can_carry():
    from sched_story import JobStory, job

    from dsched.scheduler.jobviews import jobs_view

    s = JobStory()
    s.jobs(job(), job())
    huge = 2**63  # beyond what islice takes; a client asking it must not stop the scheduler
    assert jobs_view(s.state, offset=huge)["jobs"] == []
    assert [v["id"] for v in jobs_view(s.state, limit=huge)["jobs"]] == [2, 1]
    assert [v["id"] for v in jobs_view(s.state, states=("queued",), limit=huge)["jobs"]] == [2, 1]
    assert jobs_view(s.state, offset=-huge, limit=-huge)["jobs"] == []

"""The read-only views behind scheduler_info: worker resources, task counts, waiting reasons."""

from sched_story import Story, task

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

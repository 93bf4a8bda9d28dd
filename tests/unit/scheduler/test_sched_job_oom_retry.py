"""A job whose attempt ran out of GPU memory is queued once more, asking for more of it
(``scheduler/oomretry.py``); a job its worker found holding its GPUs idle ends cancelled, with
reason ``idle``."""

from __future__ import annotations

from dsched.devices import GPU_MEMORY
from dsched.resources import SCALE
from dsched.scheduler import actions as act

from sched_story import JobStory, job

GB = 10**9


def logged(s: JobStory) -> list[str]:
    return [a.message() for a in s.log if isinstance(a, act.LogLine)]


def asked_memory(s: JobStory, job_id: int) -> int:
    return s.job(job_id).spec.resources.get(GPU_MEMORY, 0) // SCALE


def mixed_worker(s: JobStory) -> None:
    s.worker("w", nthreads=4, resources="GPU=2 GPU_MEMORY=104e9", memory=(24 * GB, 80 * GB))


def test_a_job_out_of_gpu_memory_runs_once_more_asking_twice_as_much_then_fails_for_good():
    s = JobStory()
    mixed_worker(s)
    [job_id] = s.ids(s.jobs(job("train", resources="GPU_MEMORY=18G", retries=0)))
    first = s.job(job_id).key
    assert s.state.tasks[first].gpus == (0,)  # the 24 GB device: the best fit
    s.start(first)
    s.end(first, "failed", exit_code=1, oom=True, gpu={"mem_peak": 20 * GB})
    j = s.job(job_id)
    assert j.state.value in ("assigned", "queued") and j.attempt == 2
    assert asked_memory(s, job_id) == 36 * GB  # twice what it held, more than 1.25 x its peak
    assert j.spec.gpu_memory_retry is False and j.retries_left == 0
    assert ("Job 1: attempt 1 ran out of GPU memory (peak 20 GB, 18 GB held); retrying once "
            "with GPU_MEMORY=36 GB") in logged(s)
    second = j.key
    assert s.state.tasks[second].gpus == (1,)  # 36 GB fits only on the 80 GB device
    s.start(second)
    s.end(second, "failed", exit_code=1, oom=True, gpu={"mem_peak": 40 * GB})
    assert s.job(job_id).state.value == "failed" and s.job(job_id).attempt == 2


def test_the_retry_asks_a_quarter_more_than_the_peak_where_that_is_more_than_twice_its_grant():
    s = JobStory()
    mixed_worker(s)
    [job_id] = s.ids(s.jobs(job("train", resources="GPU_MEMORY=10G")))
    key = s.job(job_id).key
    s.start(key)
    s.end(key, "failed", exit_code=1, oom=True, gpu={"mem_peak": 40 * GB})
    assert asked_memory(s, job_id) == 50 * GB


def test_a_whole_gpu_job_retries_only_when_asked_and_then_on_a_larger_device():
    s = JobStory()
    mixed_worker(s)
    for options in ({}, {"gpu_memory_retry": True}):
        [job_id] = s.ids(s.jobs(job("train", resources="GPU=1", **options)))
        key = s.job(job_id).key
        assert s.state.tasks[key].gpus == (0,)  # the smallest whole device first
        s.start(key)
        s.end(key, "failed", exit_code=1, oom=True)
    assert s.job(1).state.value == "failed"
    retried = s.job(2)
    assert retried.attempt == 2 and asked_memory(s, 2) == 48 * GB
    assert s.state.tasks[retried.key].gpus == (1,)


def test_no_retry_where_no_device_is_larger_and_none_without_the_workers_word():
    s = JobStory()
    s.worker("w", nthreads=4, resources="GPU=1 GPU_MEMORY=80e9", memory=(80 * GB,))
    whole, other = s.ids(s.jobs(job("a", resources="GPU=1", gpu_memory_retry=True),
                                job("b", resources="GPU_MEMORY=1G", retries=1)))
    key = s.job(whole).key
    s.start(key)
    s.end(key, "failed", exit_code=1, oom=True)
    assert s.job(whole).state.value == "failed"  # it held the largest device there is
    key = s.job(other).key
    s.start(key)
    s.end(key, "failed", exit_code=1)  # not out of memory: its --retries, as always
    assert s.job(other).retries_left == 0 and asked_memory(s, other) == 1 * GB


def test_a_job_its_worker_found_idle_ends_cancelled_with_reason_idle():
    s = JobStory()
    s.worker("w", nthreads=1, resources="GPU=1")
    [job_id] = s.ids(s.jobs(job("train", resources="GPU=1", requeue=True)))
    key = s.job(job_id).key
    s.start(key)
    s.end(key, "idle", exit_code=None)
    view = s.view(job_id)
    assert (view["state"], view["reason"]) == ("cancelled", "idle")


def test_a_job_on_a_named_device_gets_no_memory_retry_even_when_asked():
    s = JobStory()
    s.worker("w", nthreads=2, resources="GPU=2 GPU_MEMORY=160e9 gpu0=1 gpu1=1",
             memory=(80 * GB, 80 * GB))
    [job_id] = s.ids(s.jobs(job("train", resources="gpu0=1", gpu_memory_retry=True)))
    key = s.job(job_id).key
    s.start(key)
    s.end(key, "failed", exit_code=1, oom=True, gpu={"mem_peak": 20 * GB})
    assert s.job(job_id).state.value == "failed" and asked_memory(s, job_id) == 0

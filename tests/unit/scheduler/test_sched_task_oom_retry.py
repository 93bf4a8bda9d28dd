"""A Python task submitted with ``gpu_memory_retry=True`` whose attempt ran out of GPU memory
(its worker says so: ``TaskErred.oom``) runs once more at once, asking for more of it, without
spending its ``retries``; a second failure, or a task without the option, fails as any other,
its error saying what the retry was (``scheduler/oomretry.py``)."""

from __future__ import annotations

from dsched.devices import GPU_MEMORY, format_memory
from dsched.oom import larger
from dsched.protocol import ops
from dsched.resources import SCALE
from dsched.scheduler import actions as act, events as ev
from dsched.scheduler.actions import INFO
from dsched.scheduler.optables import WORKER_OPS

from sched_story import Story, addr, task

GB = 10**9
#: What the retry of an 18 GB request with a 17 GB peak asks, on 80 GB devices (the rule of
#: ``dsched.oom``: twice what it held), and as its words say it.
TWICE_18_GB = larger(18 * GB, 17 * GB, 80 * GB)
SAID = format_memory(TWICE_18_GB * SCALE)
OOM_TEXT = "Traceback ...\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"


def gpu_story(*memory: int) -> Story:
    """A scheduler with one worker per device size (``memory``, bytes): ``w0``, ``w1``..."""
    s = Story()
    for i, size in enumerate(memory):
        s.worker(f"w{i}", nthreads=4, resources=f"GPU=1 GPU_MEMORY={size}", memory=(size,))
    return s


def ran_out(s: Story, key: str, peak: int | None = 17 * GB, oom: bool = True,
            text: str = OOM_TEXT) -> list:
    """The worker running ``key`` says it failed, out of GPU memory (``oom``), its measured
    peak ``peak`` (None: never sampled)."""
    gpu = None if peak is None else {"uuids": ["GPU-0"], "samples": 3, "util_avg": 50.0,
                                     "util_peak": 90.0, "mem_avg": peak // 2, "mem_peak": peak}
    return s(ev.WorkerTaskErred(key=key, worker=addr(s.where(key)), exception=b"pickled",
                                text=text, gpu=gpu, oom=oom, now=s.now))


def sent(actions: list) -> dict[str, act.SendExecute]:
    return {a.key: a for a in actions if isinstance(a, act.SendExecute)}


def erred(actions: list) -> dict[str, act.TellErred]:
    return {a.key: a for a in actions if isinstance(a, act.TellErred)}


def info_lines(s: Story) -> list[str]:
    return [a.msg % a.args for a in s.log if isinstance(a, act.LogLine) and a.level == INFO]


def test_a_task_that_ran_out_runs_once_more_at_once_asking_twice_the_memory():
    s = gpu_story(80 * GB)
    s.submit(task("train", "GPU_MEMORY=18G", gpu_memory_retry=True))
    actions = ran_out(s, "train")
    again = sent(actions)["train"]
    assert again.resources.get(GPU_MEMORY) // SCALE == TWICE_18_GB  # held as units of 1e-4
    assert again.gpus == (0,)
    assert erred(actions) == {}
    t = s.state.tasks["train"]
    assert t.exceptions == 0 and not t.oom_retry  # its retries are not spent; no second retry
    assert info_lines(s)[-1] == ("Task train ran out of GPU memory (peak 17 GB, 18 GB held); "
                                 f"retrying once with GPU_MEMORY={SAID}")


def test_it_is_retried_once_only_and_its_error_then_says_what_the_retry_was():
    s = gpu_story(80 * GB)
    s.submit(task("train", "GPU_MEMORY=18G", gpu_memory_retry=True))
    ran_out(s, "train")
    actions = ran_out(s, "train", peak=34 * GB)
    told = erred(actions)["train"]
    assert told.error == "exception"
    assert told.text == ("ran out of GPU memory (peak 17 GB, 18 GB held); retried once with "
                         f"GPU_MEMORY={SAID}; it failed again:\n{OOM_TEXT}")
    assert told.exception == b"pickled"
    assert s.state_of("train") == "erred"
    assert s.state.tasks["train"].end_reason == told.text


def test_without_the_option_a_task_that_ran_out_fails_after_one_attempt():
    s = gpu_story(80 * GB)
    s.submit(task("train", "GPU_MEMORY=18G"))
    actions = ran_out(s, "train")
    assert sent(actions) == {}
    assert erred(actions)["train"].text == OOM_TEXT
    assert s.state_of("train") == "erred"


def test_a_failure_that_is_not_for_want_of_memory_is_not_retried_so():
    s = gpu_story(80 * GB)
    s.submit(task("train", "GPU_MEMORY=18G", gpu_memory_retry=True))
    actions = ran_out(s, "train", oom=False, text="ValueError: bad input")
    assert sent(actions) == {}
    assert erred(actions)["train"].text == "ValueError: bad input"


def test_the_retry_does_not_spend_retries_and_a_later_failure_does():
    s = gpu_story(80 * GB)
    s.submit(task("train", "GPU_MEMORY=18G", gpu_memory_retry=True, retries=1))
    ran_out(s, "train")
    actions = ran_out(s, "train", oom=False, text="ValueError: bad input")
    assert sent(actions)["train"].resources.get(GPU_MEMORY) // SCALE == TWICE_18_GB
    assert s.state.tasks["train"].exceptions == 1
    actions = ran_out(s, "train", oom=False, text="ValueError: bad input")
    assert erred(actions)["train"].text.endswith("it failed again:\nValueError: bad input")


def test_a_measured_peak_above_twice_what_it_held_sizes_the_retry():
    s = gpu_story(80 * GB)
    s.submit(task("train", "GPU_MEMORY=10G", gpu_memory_retry=True))
    actions = ran_out(s, "train", peak=40 * GB)  # a quarter more than 40 GB: 50 GB
    assert sent(actions)["train"].resources.get(GPU_MEMORY) // SCALE == larger(10 * GB, 40 * GB,
                                                                               80 * GB)


def test_a_whole_device_that_ran_out_moves_to_a_larger_device_elsewhere():
    s = gpu_story(24 * GB, 80 * GB)
    s.submit(task("train", "GPU=1", gpu_memory_retry=True))
    assert s.where("train") == "w0"  # the smallest device that is enough
    actions = ran_out(s, "train", peak=24 * GB)
    again = sent(actions)["train"]
    assert again.worker == addr("w1")
    assert again.resources.get(GPU_MEMORY) // SCALE == larger(24 * GB, 24 * GB, 80 * GB)
    assert "(peak 24 GB, 24 GB held)" in info_lines(s)[-1]


def test_where_no_device_is_larger_there_is_no_retry():
    s = gpu_story(80 * GB)
    s.submit(task("train", "GPU=1", gpu_memory_retry=True))
    actions = ran_out(s, "train")
    assert sent(actions) == {}
    assert erred(actions)["train"].text == OOM_TEXT  # it failed as it would have
    assert s.state.tasks["train"].oom_retried is None


def test_a_task_never_sampled_is_retried_on_what_it_held_alone():
    s = gpu_story(80 * GB)
    s.submit(task("train", "GPU_MEMORY=18G", gpu_memory_retry=True))
    ran_out(s, "train", peak=None)
    assert info_lines(s)[-1] == ("Task train ran out of GPU memory (18 GB held); retrying once "
                                 f"with GPU_MEMORY={SAID}")  # twice what it held, as before


def test_a_worker_says_so_on_the_wire_and_the_scheduler_hears_it():
    gpu = {"uuids": ["GPU-0"], "samples": 1, "mem_peak": 17 * GB}
    op = ops.TaskErred(key="train", text=OOM_TEXT, gpu=gpu, oom=True)
    back = ops.TaskErred.from_wire(op.to_wire())
    event = WORKER_OPS[ops.TaskErred](back, addr("w0"), 1.0)
    assert (event.oom, event.gpu, event.text) == (True, gpu, OOM_TEXT)


def test_a_task_kept_to_some_workers_asks_no_more_than_their_largest_device():
    s = gpu_story(24 * GB, 80 * GB)
    s.submit(task("train", "GPU_MEMORY=10G", gpu_memory_retry=True, workers=("w0",)))
    actions = ran_out(s, "train", peak=22 * GB)  # a quarter more would be 27.5 GB
    again = sent(actions)["train"]
    assert again.worker == addr("w0")
    assert again.resources.get(GPU_MEMORY) // SCALE == 24 * GB  # all of its one device


def test_a_job_and_a_task_that_ran_out_alike_ask_the_same_and_say_it_alike():
    from sched_story import JobStory, job

    jobs = JobStory()
    jobs.worker("w0", nthreads=4, resources="GPU=1 GPU_MEMORY=80e9", memory=(80 * GB,))
    [job_id] = jobs.ids(jobs.jobs(job("train", resources="GPU_MEMORY=18G")))
    key = jobs.job(job_id).key
    jobs.start(key)
    jobs.end(key, "failed", exit_code=1, oom=True, gpu={"mem_peak": 23 * GB})
    assert jobs.job(job_id).spec.resources.get(GPU_MEMORY) // SCALE == larger(18 * GB, 23 * GB,
                                                                              80 * GB)
    said = f"ran out of GPU memory (peak 23 GB, 18 GB held); retrying once with GPU_MEMORY={SAID}"
    assert info_lines(jobs)[-1] == f"Job {job_id}: attempt 1 {said}"

    tasks = gpu_story(80 * GB)
    tasks.submit(task("train", "GPU_MEMORY=18G", gpu_memory_retry=True))
    ran_out(tasks, "train", peak=23 * GB)
    assert info_lines(tasks)[-1] == f"Task train {said}"

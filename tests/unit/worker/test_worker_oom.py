"""The worker says that a GPU task failed for want of GPU memory: its traceback names the
error, or its measured peak reached what it held (``dsched.oom``). The ``TaskErred`` it sends
says so (``oom``) with what the task did with its devices (``gpu``); a task on a thread holds
no device and never ran out of one. A job attempt's end (``AttemptEnded``) says the same, its
log's tail in place of a traceback. Driven through the shell's ``_ended`` and ``_job_report``,
as the executor and the job runner call them, with the heartbeat's samples handed to its
``gpu_reports`` and the scheduler's session replaced by a list."""

from __future__ import annotations

import pytest

from dsched.protocol import ops
from dsched.resources import Resources
from dsched.settings import CommConfig, WorkerConfig
from dsched.worker.events import SessionOpened
from dsched.worker.executor import Outcome
from dsched.worker.gpus import GpuDevice
from dsched.worker.gpuuse import Sample
from dsched.worker.server import Worker, WorkerSetup

GB = 10**9
OOM = ("Traceback (most recent call last):\n  File \"train.py\", line 3, in train\n"
       "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB")
PLAIN = "Traceback (most recent call last):\nValueError: bad input"


@pytest.fixture
def worker(monkeypatch, tmp_path):
    """A worker with one 80 GB device, not started: what it would send is in ``worker.sent``."""
    config = WorkerConfig(scheduler_address="127.0.0.1:9", host="127.0.0.1",
                          local_directory=str(tmp_path))
    setup = WorkerSetup(token="t", nthreads=2,
                        resources=Resources.parse("GPU=1 GPU_MEMORY=80e9"),
                        gpus=(GpuDevice(0, "GPU-0", "fake", 80 * GB),), ledger_indices=(0,))
    w = Worker(config, CommConfig(), setup)
    w.sent = []
    monkeypatch.setattr(w, "_stopping", lambda: False)
    monkeypatch.setattr(w.session, "send", w.sent.append)
    yield w
    w.threads.close()


def running(worker: Worker, key: str, resources: str, gpus: tuple[int, ...] = ()) -> None:
    """``key`` runs on ``worker`` (on ``gpus``), as the scheduler asked."""
    worker.state.handle(ops.Execute(key, (b"f", b"a"), Resources.parse(resources), gpus=gpus),
                        0.0)


def sampled(worker: Worker, key: str, memory: int, full: bool = True) -> None:
    """A heartbeat saw ``key``'s processes use ``memory`` bytes of its device (``full``: a
    device with no memory left)."""
    worker.gpu_reports.use.sampled(1.0, {key: Sample(("GPU-0",), 90.0, memory, full)})


def failed(worker: Worker, key: str, traceback: str) -> ops.TaskErred:
    worker._ended(key, Outcome(ok=False, start=1.0, stop=2.0, exception=b"exc",
                               traceback=traceback))
    [erred] = [op for op in worker.sent if type(op) is ops.TaskErred]
    return erred


def test_a_gpu_task_whose_traceback_says_cuda_out_of_memory_ran_out(worker):
    running(worker, "train", "GPU_MEMORY=18G", gpus=(0,))
    sampled(worker, "train", 10 * GB)
    erred = failed(worker, "train", OOM)
    assert erred.oom
    assert erred.gpu == {"uuids": ["GPU-0"], "samples": 1, "util_avg": 90.0, "util_peak": 90.0,
                         "mem_avg": 10 * GB, "mem_peak": 10 * GB}
    assert (erred.text, erred.exception, erred.start, erred.stop) == (OOM, b"exc", 1.0, 2.0)
    assert "train" not in worker.gpu_reports.use.uses  # its samples go with its end


def test_a_gpu_task_whose_peak_reached_what_it_held_ran_out_whatever_it_printed(worker):
    running(worker, "train", "GPU_MEMORY=18G", gpus=(0,))
    sampled(worker, "train", 18 * GB)
    erred = failed(worker, "train", PLAIN)
    assert erred.oom and erred.gpu["mem_peak"] == 18 * GB


def test_a_gpu_task_that_failed_otherwise_did_not_run_out(worker):
    running(worker, "train", "GPU_MEMORY=18G", gpus=(0,))
    sampled(worker, "train", 5 * GB)
    erred = failed(worker, "train", PLAIN)
    assert not erred.oom and erred.gpu["mem_peak"] == 5 * GB


def test_a_peak_at_its_grant_on_a_device_with_room_left_is_not_out_of_memory(worker):
    running(worker, "train", "GPU_MEMORY=18G", gpus=(0,))
    sampled(worker, "train", 18 * GB, full=False)  # it could have taken more: it did not run out
    erred = failed(worker, "train", PLAIN)
    assert not erred.oom and erred.gpu["mem_peak"] == 18 * GB


def test_a_task_on_a_thread_holds_no_device_and_never_ran_out_of_one(worker):
    running(worker, "count", "")
    erred = failed(worker, "count", OOM)  # it printed the words, but held no GPU memory
    assert not erred.oom and erred.gpu is None


def running_job(worker: Worker, key: str, resources: str, gpus: tuple[int, ...]) -> None:
    """The job attempt ``key`` runs on ``worker`` (on ``gpus``), as the scheduler asked once
    the session opened (a job runs under its lease)."""
    worker.state.handle(SessionOpened(0.0), 0.0)
    worker.state.handle(ops.Execute(key, (b"", b""), Resources.parse(resources), gpus=gpus,
                                    job={"command": ["train"], "env": {}, "cwd": None,
                                         "time_limit": None, "name": "n"}), 0.0)


def job_ended(worker: Worker, key: str, outcome: str, log: str) -> ops.AttemptEnded:
    worker._job_report(ops.AttemptEnded(key, outcome, 1, "exit 1", log, 1.0, 2.0))
    [ended] = [op for op in worker.sent if type(op) is ops.AttemptEnded]
    return ended


def test_a_job_whose_log_ends_saying_cuda_out_of_memory_ran_out(worker, tmp_path):
    log = tmp_path / "job.log"
    log.write_text("epoch 1\n" + OOM + "\n")
    running_job(worker, "job-1.1", "GPU_MEMORY=18G", gpus=(0,))
    sampled(worker, "job-1.1", 10 * GB)
    ended = job_ended(worker, "job-1.1", "failed", str(log))
    assert ended.oom
    assert ended.gpu == {"uuids": ["GPU-0"], "samples": 1, "util_avg": 90.0, "util_peak": 90.0,
                         "mem_avg": 10 * GB, "mem_peak": 10 * GB}
    assert (ended.outcome, ended.exit_code, ended.error, ended.log, ended.started,
            ended.ended) == ("failed", 1, "exit 1", str(log), 1.0, 2.0)
    assert "job-1.1" not in worker.gpu_reports.use.uses  # its samples go with its end


def test_a_job_that_completed_did_not_run_out_whatever_its_log_or_peak_says(worker, tmp_path):
    log = tmp_path / "job.log"
    log.write_text(OOM)
    running_job(worker, "job-1.1", "GPU_MEMORY=18G", gpus=(0,))
    sampled(worker, "job-1.1", 18 * GB)
    ended = job_ended(worker, "job-1.1", "completed", str(log))
    assert not ended.oom and ended.gpu["mem_peak"] == 18 * GB


def test_a_job_being_cancelled_is_sampled_to_its_end_and_keeps_its_figures(worker):
    from dsched.worker.gpus import GpuUsage
    from dsched.worker.gpusample import ProcessTree

    key = "job-1.1"
    running_job(worker, key, "GPU=1", gpus=(0,))
    for at in range(10):  # it ran a while, busy
        worker.gpu_reports.use.sampled(float(at), {key: Sample(("GPU-0",), 90.0, 10 * GB)})
    worker.state.handle(ops.StopTask(key), 0.0)  # the user cancels: it is being stopped
    worker.gpu_reports.sample([GpuUsage(0, 90, 10 * GB, 80 * GB)], {0: {}}, ProcessTree())
    ended = job_ended(worker, key, "cancelled", "")
    assert ended.gpu["samples"] == 11


async def test_the_heartbeats_thread_reads_the_devices_and_the_loop_folds_them(worker,
                                                                             monkeypatch):
    import asyncio
    import threading

    from dsched.worker import gpureports
    from dsched.worker.gpus import GpuUsage

    loop = asyncio.get_running_loop()
    worker.gpu_reports.loop = loop
    threads = {}

    def usage(indices, ours, processes):
        threads["read"] = threading.get_ident()
        return [GpuUsage(0, 0, GB, 80 * GB)]

    def sample(*args):
        threads["folded"] = threading.get_ident()
        folded.set()

    folded = asyncio.Event()
    monkeypatch.setattr(gpureports, "gpu_usage", usage)
    monkeypatch.setattr(worker.gpu_reports, "sample", sample)
    monkeypatch.setattr(worker._process, "cpu_percent", lambda: 0.0)
    beat = await loop.run_in_executor(None, worker._heartbeat)
    await asyncio.wait_for(folded.wait(), 5)
    assert beat.gpus and threads["read"] != threading.get_ident()
    assert threads["folded"] == threading.get_ident()  # the loop's: beside the state

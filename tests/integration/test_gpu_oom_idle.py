"""Out of GPU memory and idle GPUs, end to end against the NVML stand-in: a job that runs out
of memory (as its output says, or as the worker measured) runs once more, asking for more; a
job that holds its GPU at 0% for ``worker.gpu_idle_timeout`` is warned of, or cancelled with
reason ``idle``, while a busy one runs on."""

from __future__ import annotations

import json
import sys

from cluster_helpers import write_atomically
from deadline import wait_until

from dsched.resources import Resources

GB = 10**9
FAST = {"SCHED_WORKER__HEARTBEAT_INTERVAL": "0.2"}


def one_device(tmp_path, **device) -> str:
    nvml = tmp_path / "nvml.json"
    write_atomically(nvml, json.dumps({"gpus": [{"memory_total": 80 * GB, **device}]}))
    return str(nvml)


def test_a_job_whose_output_says_cuda_out_of_memory_runs_once_more_asking_twice_as_much(
        daemons, tmp_path):
    daemons.scheduler()
    daemons.worker(env={"SCHED_FAKE_NVML": one_device(tmp_path), **FAST})
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    marker = tmp_path / "first-attempt-ran"
    script = (f"if [ ! -e {marker} ]; then touch {marker}; echo 'torch.OutOfMemoryError: CUDA "
              "out of memory. Tried to allocate 20.00 GiB' >&2; exit 1; fi")
    future = client.submit_command(["sh", "-c", script], resources="GPU_MEMORY=18G")
    result = future.result(60)
    assert result.ok
    [view] = client.jobs([future.job_id()])["jobs"]
    assert view["attempt"] == 2
    assert Resources.parse(view["resources"]) == Resources.parse("GPU_MEMORY=36G")
    # without the retry (or when it asked no memory) the same failure is the job's end
    marker.unlink()
    once = client.submit_command(["sh", "-c", script], resources="GPU_MEMORY=18G",
                                 gpu_memory_retry=False)
    assert once.result(60).state == "failed"
    assert client.jobs([once.job_id()])["jobs"][0]["attempt"] == 1


def test_a_job_that_failed_at_the_memory_the_worker_measured_is_out_of_memory(daemons,
                                                                             tmp_path):
    nvml = tmp_path / "nvml.json"
    write_atomically(nvml, json.dumps({"gpus": [{"memory_total": 40 * GB}]}))
    nvml = str(nvml)
    daemons.scheduler()
    daemons.worker(env={"SCHED_FAKE_NVML": nvml, **FAST})
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    release, marker = tmp_path / "release", tmp_path / "first-attempt-ran"
    # The job "allocates" 39 GB of its 40 GB device (the stand-in lists its process): the
    # device is full. It waits until the test has seen a heartbeat measure it, and fails
    # without a word the first time.
    allocate = (
        "import json, os, sys, time\n"
        f"nvml, release, marker = {nvml!r}, {str(release)!r}, {str(marker)!r}\n"
        "if os.path.exists(marker): sys.exit(0)\n"
        "open(marker, 'w').close()\n"
        "d = json.load(open(nvml))\n"
        f"d['gpus'][0]['processes'] = [{{'pid': os.getpid(), 'memory': {39 * GB}}}]\n"
        "open(nvml + '.tmp', 'w').write(json.dumps(d)); os.replace(nvml + '.tmp', nvml)\n"
        "while not os.path.exists(release): time.sleep(0.02)\n"
        "sys.exit(3)\n")
    future = client.submit_command([sys.executable, "-c", allocate],
                                   resources="GPU_MEMORY=18G")
    wait_until(lambda: client.workers()[0]["gpus"][0].get("memory_used") == 39 * GB,
               what="a heartbeat that measured the job's 39 GB")
    wait_until(lambda: client.workers()[0]["gpus"][0].get("memory_used") == 39 * GB
               and marker.exists(), what="a second heartbeat, to be sure it was sampled")
    release.touch()
    assert future.result(60).ok
    [view] = client.jobs([future.job_id()])["jobs"]
    # 39 GB measured, 18 GB held: the retry asks a quarter more than the peak, and so the
    # whole of the largest device there is
    assert view["attempt"] == 2
    assert Resources.parse(view["resources"]) == Resources.parse("GPU_MEMORY=40G")
    # its record: both attempts, the first out of memory at its measured peak, on its device
    second, first = client.history([future.job_id()])
    assert (first["attempt"], first["state"], first["oom"]) == (1, "failed", True)
    assert first["mem_peak"] == 39 * GB and first["gpu_uuids"][0].startswith("GPU-fa4e")
    assert (second["attempt"], second["state"], second["oom"]) == (2, "completed", False)


def test_an_idle_job_is_cancelled_with_reason_idle_while_a_busy_one_runs_on(daemons,
                                                                           tmp_path):
    nvml = tmp_path / "nvml.json"
    write_atomically(nvml, json.dumps({"gpus": [{"utilization": 0}, {"utilization": 60}]}))
    daemons.scheduler()
    daemons.worker("--nthreads", "2", env={
        "SCHED_FAKE_NVML": str(nvml), "SCHED_WORKER__GPU_IDLE_TIMEOUT": "0.6",
        "SCHED_WORKER__GPU_IDLE_ACTION": "cancel", **FAST})
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    idle = client.submit_command(["sleep", "600"], resources="GPU=1")  # device 0 first
    wait_until(lambda: client.jobs([idle.job_id()])["jobs"][0]["gpus"] == [0],
               what="the first job to run on device 0")
    busy = client.submit_command(["sleep", "600"], resources="GPU=1")

    def ended(job) -> bool:
        return client.jobs([job.job_id()])["jobs"][0]["state"] == "cancelled"

    wait_until(lambda: ended(idle), what="the idle job to be cancelled")
    views = {job["id"]: job for job in client.jobs([idle.job_id(), busy.job_id()])["jobs"]}
    idle_view, busy_view = views[idle.job_id()], views[busy.job_id()]
    assert idle_view["reason"] == "idle"
    assert "idle: held GPU-" in idle_view["detail"] and "at 0% utilisation" in idle_view["detail"]
    assert busy_view["state"] == "running"
    assert busy_view["gpus"] == [1]
    client.cancel_jobs([busy.job_id()])
    wait_until(lambda: ended(busy), what="the busy job to be cancelled")


def test_an_idle_job_is_only_warned_of_by_default(daemons, tmp_path):
    nvml = tmp_path / "nvml.json"
    write_atomically(nvml, json.dumps({"gpus": [{"utilization": 0}]}))
    daemons.scheduler()
    log = tmp_path / "worker.log"
    with open(log, "wb") as stderr:
        daemons.worker(env={"SCHED_FAKE_NVML": str(nvml),
                            "SCHED_WORKER__GPU_IDLE_TIMEOUT": "0.4", **FAST}, stderr=stderr)
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    job = client.submit_command(["sleep", "600"], resources="GPU=1")
    wait_until(lambda: "at 0% utilisation for" in log.read_text(), what="the idle warning")
    line = next(line for line in log.read_text().splitlines() if "utilisation" in line)
    assert "WARNING" in line and "it is left running" in line
    assert client.jobs([job.job_id()])["jobs"][0]["state"] == "running"
    client.cancel_jobs([job.job_id()])
    wait_until(lambda: client.jobs([job.job_id()])["jobs"][0]["state"] == "cancelled",
               what="the job to be cancelled")

"""A GPU that faults, end to end against the NVML stand-in (two 80 GB devices, faults injected
by rewriting its file): an application's Xid 43 changes nothing; an Xid 79 fences the device
within a heartbeat, its running job ends lost with the fault and is queued again exactly once
(``--requeue``) while the fenced device takes nothing; ``sched gpu release`` brings it back."""

from __future__ import annotations

import json
import subprocess
import sys

from cluster_helpers import write_atomically
from dashboard_helpers import get_json
from deadline import wait_until


def test_an_xid_79_fences_its_device_and_requeues_its_job_once_while_an_xid_43_does_not(
        daemons, tmp_path):
    nvml = tmp_path / "nvml.json"

    def devices(events_on_gpu1: list) -> None:
        gpus = [{"memory_total": 80 * 10**9},
                {"memory_total": 80 * 10**9, "events": events_on_gpu1}]
        write_atomically(nvml, json.dumps({"gpus": gpus}))

    devices([])
    daemons.scheduler()
    log = tmp_path / "worker.log"
    with open(log, "w") as stderr:
        daemons.worker("--nthreads", "4", "--name", "gpu-a", stderr=stderr,
                       env={"SCHED_FAKE_NVML": str(nvml),
                            "SCHED_WORKER__HEARTBEAT_INTERVAL": "0.2"})
    client = daemons.client()
    daemons.wait_for_workers(client, 1)

    def sleeper(name: str) -> list[str]:
        return ["sh", "-c", f"echo $CUDA_VISIBLE_DEVICES >> {tmp_path}/{name}.seen; "
                            f"while [ ! -e {tmp_path}/{name}.done ]; do sleep 0.05; done"]

    first = client.submit_command(sleeper("first"), resources="GPU=1")
    wait_until(lambda: (tmp_path / "first.seen").exists(), what="the first job to start")
    second = client.submit_command(sleeper("second"), resources="GPU=1", requeue=True)
    wait_until(lambda: (tmp_path / "second.seen").exists(), what="the second job to start")
    assert [(tmp_path / f"{n}.seen").read_text() for n in ("first", "second")] == ["0\n", "1\n"]

    def job(future) -> dict:
        return client.jobs([future.job_id()])["jobs"][0]

    def gpu1() -> dict:
        [worker] = client.workers()
        return worker["gpus"][1]

    devices([{"xid": 43}])  # an application's error: nothing changes
    wait_until(lambda: "GPU 1 reported Xid 43, which does not fence it" in log.read_text(),
               what="the worker to see the Xid 43")
    assert gpu1()["fenced"] == "" and job(second)["state"] == "running"
    devices([{"xid": 43}, {"xid": 79}])
    reason_words = "gpu fault: Xid 79 on gpu1 (GPU-fa4e0001-0000-4000-8000-000000000001)"
    wait_until(lambda: gpu1()["fenced"] == reason_words, what="gpu1 to be fenced")
    wait_until(lambda: job(second)["state"] == "queued" and job(second)["attempt"] == 2,
               what="the job on gpu1 to be queued again")
    waiting = job(second)
    assert waiting["error"] == f"killed: {reason_words}"
    assert f"GPU 1 fenced: {reason_words}" in waiting["detail"]
    assert job(first)["state"] == "running"  # gpu0 is not touched
    panels = get_json(daemons.dashboard, "api/v1/panels")["panels"]
    assert f"fenced: {reason_words}" in panels["workers"]  # as the dashboard shows it

    (tmp_path / "first.done").touch()  # gpu0 frees: the second job runs again, there
    assert first.result(60).ok
    wait_until(lambda: (tmp_path / "second.seen").read_text() == "1\n0\n",
               what="the second job to run again on gpu0")
    (tmp_path / "second.done").touch()
    result = second.result(60)
    assert result.ok and job(second)["attempt"] == 2  # queued again exactly once

    released = subprocess.run(
        [sys.executable, "-m", "dsched.cli.sched", "-s", daemons.address, "gpu", "release",
         "gpu-a", "1"], env=daemons.env, capture_output=True, text=True, timeout=60)
    assert (released.returncode, released.stdout) == (0, "GPU 1 of worker gpu-a released\n")
    wait_until(lambda: gpu1()["fenced"] == "", what="gpu1 to take work again")
    again = subprocess.run(
        [sys.executable, "-m", "dsched.cli.sched", "-s", daemons.address, "gpu", "release",
         "gpu-a", "1"], env=daemons.env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "GPU 1 of worker gpu-a is not fenced" in again.stderr

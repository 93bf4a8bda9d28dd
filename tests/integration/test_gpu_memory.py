"""GPU memory as a consumable, end to end: a worker finds an 80 GB device through the NVML
stand-in, offers its memory, and the scheduler runs four jobs asking 18 GB at once on it,
pinned to it, while a fifth waits and says why."""

from __future__ import annotations

import json

from cluster_helpers import write_atomically
from deadline import wait_until

ONE_80_GB_DEVICE = {"SCHED_FAKE_NVML": json.dumps({"gpus": [{"memory_total": 80 * 10**9}]})}


def test_four_18_gb_jobs_share_one_80_gb_device_and_a_fifth_waits_with_its_reason(daemons,
                                                                                 tmp_path):
    daemons.scheduler()
    daemons.worker("--nthreads", "8", env=ONE_80_GB_DEVICE)
    client = daemons.client()
    (worker,) = daemons.wait_for_workers(client, 1)["workers"].values()
    assert worker["resources"] == {"GPU": 1, "GPU_MEMORY": 80 * 10**9}

    release = tmp_path / "release"
    futures = [client.submit_command(
        ["sh", "-c", f"echo $CUDA_VISIBLE_DEVICES > {tmp_path}/seen-$SCHED_JOB_ID; "
                     f"while [ ! -e {release} ]; do sleep 0.05; done"],
        resources="GPU_MEMORY=18G") for _ in range(5)]
    ids = [future.job_id() for future in futures]

    def states() -> dict:
        return {job["id"]: job for job in client.jobs(ids)["jobs"]}

    wait_until(lambda: sum(j["state"] == "running" for j in states().values()) == 4,
               what="four jobs to run at once")
    [waiting] = [j for j in states().values() if j["state"] == "queued"]
    assert "GPU_MEMORY: at most 8 GB free on any device (18 GB asked)" in waiting["detail"]

    release.touch()
    results = [future.result(60) for future in futures]
    assert all(r.ok for r in results)
    seen = {p.read_text().strip() for p in tmp_path.glob("seen-*")}
    assert seen == {"0"}  # each pinned to the device it was granted


def test_memory_an_outside_process_takes_lowers_what_is_offered_within_one_heartbeat(
        daemons, tmp_path):
    nvml = tmp_path / "nvml.json"

    def outside(gigabytes: int) -> None:
        processes = [{"pid": 999999, "memory": gigabytes * 10**9}] if gigabytes else []
        write_atomically(nvml, json.dumps({"gpus": [{"memory_total": 80 * 10**9,
                                                     "processes": processes}]}))

    outside(40)
    daemons.scheduler()
    daemons.worker("--nthreads", "8", env={"SCHED_FAKE_NVML": str(nvml),
                                           "SCHED_WORKER__HEARTBEAT_INTERVAL": "0.2"})
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    wait_until(lambda: client.workers()[0]["gpus"][0].get("memory_used") == 40 * 10**9,
               what="a heartbeat that measured the outside process")

    release = tmp_path / "release"
    futures = [client.submit_command(["sh", "-c", f"while [ ! -e {release} ]; do sleep 0.05; "
                                                  "done"], resources="GPU_MEMORY=18G")
               for _ in range(3)]
    ids = [future.job_id() for future in futures]

    def states() -> list[dict]:
        return sorted(client.jobs(ids)["jobs"], key=lambda job: job["id"])

    wait_until(lambda: [j["state"] for j in states()].count("running") == 2,
               what="two jobs to run beside the outside process")
    [waiting] = [j for j in states() if j["state"] == "queued"]
    assert "processes dsched did not start use 40 GB" in waiting["detail"]

    outside(0)  # the outside process ends: the third starts within a heartbeat or so
    wait_until(lambda: [j["state"] for j in states()].count("running") == 3, timeout=10,
               what="the third job to start once the outside process has gone")
    release.touch()
    assert all(future.result(60).ok for future in futures)

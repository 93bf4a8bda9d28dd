"""GPU detection end to end, with the fake NVML standing in for a machine with four GPUs.

A worker that finds GPUs and is given no ``GPU`` resource advertises them all; ``--nworkers``
divides them among its processes; the worker's own ``CUDA_VISIBLE_DEVICES`` limits what it
offers, and tasks are pinned to physical device numbers within that limit. What was found is
logged once, by the nanny. A process started with ``SCHED_FAKE_NVML`` sees the fake devices, and
one started with a task's environment reads its devices back with ``get_gpu_ids()``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import cloudpickle

from dsched.environ import FAKE_NVML_ENV
from dsched.gpu_ids import task_environment

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FOUR_GPUS = {"SCHED_FAKE_NVML": json.dumps({"count": 4})}


def pinned(seconds: float) -> tuple[str, list[int]]:
    import os
    import time

    import dsched

    time.sleep(seconds)
    return os.environ["CUDA_VISIBLE_DEVICES"], dsched.get_gpu_ids()


def devices(worker: dict) -> list[int]:
    return sorted(gpu["index"] for gpu in worker["gpus"])


def test_worker_finding_four_gpus_advertises_them_all(daemons):
    daemons.scheduler()
    daemons.worker(env=FOUR_GPUS)
    client = daemons.client()
    (worker,) = daemons.wait_for_workers(client, 1)["workers"].values()

    # and their memory together (16 GiB each, the stand-in's): each device's is its own
    assert worker["resources"] == {"GPU": 4.0, "GPU_MEMORY": 4 * 16 * 2**30}
    assert devices(worker) == [0, 1, 2, 3]
    assert len({gpu["uuid"] for gpu in worker["gpus"]}) == 4


def test_nworkers_2_divides_four_gpus_between_the_processes(daemons):
    daemons.scheduler()
    daemons.worker("--nworkers", "2", env=FOUR_GPUS)
    client = daemons.client()
    workers = list(daemons.wait_for_workers(client, 2)["workers"].values())

    assert len(workers) == 2
    assert [w["resources"] for w in workers] == [{"GPU": 2.0, "GPU_MEMORY": 32 * 2**30}] * 2
    assert sorted(map(devices, workers)) == [[0, 1], [2, 3]]


def test_cuda_visible_devices_limits_the_worker_and_its_tasks(daemons):
    daemons.scheduler()
    daemons.worker("--nthreads", "2", env={**FOUR_GPUS, "CUDA_VISIBLE_DEVICES": "2,3"})
    client = daemons.client()
    (worker,) = daemons.wait_for_workers(client, 1)["workers"].values()

    assert worker["resources"] == {"GPU": 2.0, "GPU_MEMORY": 32 * 2**30}
    assert devices(worker) == [2, 3]

    futures = [client.submit(pinned, 0.2, resources={"GPU": 1}, pure=False) for _ in range(4)]
    seen = client.gather(futures, timeout=60)
    assert {visible for visible, _ in seen} == {"2", "3"}
    assert all(ids == [int(visible)] for visible, ids in seen), seen


def test_what_a_nanny_found_is_logged_once_not_again_by_each_process(daemons, tmp_path):
    log_path = tmp_path / "worker.log"
    daemons.scheduler()
    with open(log_path, "wb") as log:
        daemons.worker("--nworkers", "2", env=FOUR_GPUS, stderr=log)
    client = daemons.client()
    daemons.wait_for_workers(client, 2)  # each process detected its share before registering

    found = [line for line in log_path.read_text().splitlines() if "Found" in line]
    assert len(found) == 1 and "Found 4 GPU(s)" in found[0], found


def test_a_worker_process_started_with_sched_fake_nvml_sees_four_gpus(tmp_path):
    path = tmp_path / "four.json"
    path.write_text(json.dumps({"count": 4}))
    code = "from dsched.worker.gpus import detect_gpus; print(detect_gpus(visible=None).indices)"
    out = subprocess.run([sys.executable, "-c", code], env={FAKE_NVML_ENV: str(path)},
                         capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "(0, 1, 2, 3)"


def test_get_gpu_ids_inside_a_task_process():
    env = task_environment((3,), os.environ)
    code = "from dsched.gpu_ids import get_gpu_ids; print(get_gpu_ids())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[3]"

"""The dashboard's JSON API, health endpoints and Prometheus metrics against a real scheduler
with its dashboard on 127.0.0.1 and a port the OS chose, after a known workload."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

from prometheus_client.parser import text_string_to_metric_families

from dashboard_helpers import TWO_GPUS, fail, get_json, hold, request, square
from deadline import wait_until


def start(daemons, *scheduler_args, nthreads: int = 2):
    """A scheduler, a worker "gpu-a" offering GPU=2 on two fake GPUs, and a client."""
    daemons.scheduler(*scheduler_args)
    assert daemons.dashboard.startswith("http://127.0.0.1:")
    daemons.worker("--name", "gpu-a", "--nthreads", str(nthreads), "--resources", "GPU=2",
                   env=TWO_GPUS)
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    return client, daemons.dashboard


def test_the_api_shows_workers_their_gpus_tasks_waiting_work_and_failures(daemons, tmp_path):
    client, url = start(daemons)
    release = str(tmp_path / "release")
    running = client.submit(hold, release, resources={"GPU": 1})
    stuck = client.submit(square, 3, resources={"TPU": 1})
    failed = client.submit(fail, "boom")
    assert type(failed.exception(timeout=30)) is ValueError

    def settled():
        tasks = get_json(url, "api/v1/tasks")
        return tasks["counts"]["processing"] == 1 and tasks["counts"]["queued"] == 1 and tasks
    tasks = wait_until(settled, what="one task running, one queued")
    assert tasks["counts"]["erred"] == 1
    assert tasks["pending"]["by_reason"] == {"missing_resource": 1}
    (group,) = tasks["pending"]["groups"]
    assert group["text"] == "no worker offers resource TPU" and group["resources"] == "TPU=1"
    (failure,) = tasks["failures"]
    assert failure["key"] == failed.key and failure["error"] == "exception"
    assert failure["message"] == "ValueError: boom"
    assert failure["worker"] == "gpu-a"  # by its name, as job failures name theirs
    assert tasks["failed"] == {"exception": 1} and tasks["counters"]["placed"] == 2

    def gpus_reported():
        (worker,) = get_json(url, "api/v1/workers")["items"]
        return worker["gpus"] and worker["gpus"][0]["memory_used"] is not None and worker
    worker = wait_until(gpus_reported, what="a heartbeat with GPU use")
    assert worker["name"] == "gpu-a" and worker["state"] == "connected"
    # a whole device holds all its memory (16 GiB of the stand-in's two)
    assert worker["resources"] == [{"name": "GPU", "used": 1, "total": 2},
                                   {"name": "GPU_MEMORY", "used": 16 * 2**30,
                                    "total": 32 * 2**30}]
    assert (worker["nthreads"], worker["threads_busy"]) == (2, 1)
    first, second = worker["gpus"]
    assert (first["index"], first["name"], first["memory_used"], first["memory_total"],
            first["utilization"]) == (0, "dsched Fake GPU", 6 * 2**30, 16 * 2**30, 0.37)
    assert second["index"] == 1 and second["utilization"] == 0
    assert get_json(url, "api/v1/workers/gpu-a")["address"] == worker["address"]

    cluster = get_json(url, "api/v1/cluster")
    assert cluster["ready"] and cluster["clients"] == 1
    assert cluster["resources"] == {"GPU": {"used": 1, "total": 2},
                                    "GPU_MEMORY": {"used": 16 * 2**30, "total": 32 * 2**30}}
    (tmp_path / "release").touch()
    assert running.result(timeout=30) is None
    del stuck


def test_lists_are_paged_and_filtered_and_bad_arguments_get_a_one_line_error(daemons):
    client, url = start(daemons)
    assert get_json(url, "api/v1/workers?limit=1") == {
        "items": get_json(url, "api/v1/workers")["items"], "total": 1, "offset": 0, "limit": 1}
    assert get_json(url, "api/v1/workers?offset=1")["items"] == []
    assert get_json(url, "api/v1/workers?state=draining")["total"] == 0
    assert get_json(url, "api/v1/workers?state=draining&state=connected")["total"] == 1
    assert get_json(url, "api/v1/tasks/failures?error=exception")["total"] == 0
    for path, status, words in (
            ("api/v1/workers?limit=5000", 400, "limit must be a whole number from 1 to 1000"),
            ("api/v1/workers?offset=-1", 400, "offset must be a whole number"),
            ("api/v1/workers?colour=red", 400, "unknown argument 'colour'"),
            ("api/v1/workers/nobody", 404, "no worker 'nobody'"),
            ("api/v1/workers?%0d%0aX-Evil:%201=1", 400, "unknown argument '\\r\\nX-Evil: 1'"),
            ("api/v1/nothing", 404, "")):
        got, headers, body = request(url, path)
        assert got == status, (path, got, body)
        assert "x-evil" not in headers
        if words:
            assert words in json.loads(body)["error"]
    assert get_json(url, "healthz") == {"status": "ok"}  # and the scheduler goes on
    assert client.submit(square, 4).result(timeout=30) == 16


def test_readyz_is_200_while_it_takes_work_and_503_while_it_drains(daemons, tmp_path):
    client, url = start(daemons)
    assert get_json(url, "readyz") == {"ready": True}
    running = client.submit(hold, str(tmp_path / "release"), 1)
    wait_until(lambda: get_json(url, "api/v1/tasks")["counts"]["processing"],
               what="a task running")
    daemons.scheduler_process.send_signal(signal.SIGTERM)  # drains: waits for that task

    def draining():
        status, _, body = request(url, "readyz")
        return status == 503 and json.loads(body)
    answer = wait_until(draining, what="readyz saying 503")
    assert answer["ready"] is False and "draining" in answer["reasons"]
    assert get_json(url, "healthz") == {"status": "ok"}  # alive, not ready
    (tmp_path / "release").touch()
    assert running.result(timeout=30) == 1
    assert daemons.scheduler_process.wait(30) == 0


def test_metrics_after_a_known_workload(daemons, tmp_path):
    client, url = start(daemons)
    assert client.gather(client.map(square, range(5), resources={"GPU": 1})) == [
        0, 1, 4, 9, 16]
    failed = client.submit(fail, "boom")
    failed.exception(timeout=30)
    stuck = client.submit(square, 1, resources={"TPU": 1})
    running = client.submit(hold, str(tmp_path / "release"), resources={"GPU": 1})
    keys = {failed.key, stuck.key, running.key}

    def scraped():
        status, headers, body = request(url, "metrics")
        assert status == 200 and headers["content-type"].startswith("text/plain")
        samples = {}
        for family in text_string_to_metric_families(body.decode()):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        ready = samples.get(("dsched_tasks", (("state", "processing"),))) == 1 and \
            samples.get(("dsched_gpu_utilization_ratio", (("gpu", "0"), ("worker", "gpu-a"))))
        return ready and samples
    samples = wait_until(scraped, what="metrics of the workload")

    def value(name, **labels):
        return samples[(name, tuple(sorted(labels.items())))]
    assert value("dsched_build_info", version="0.1.0",
                 python=".".join(map(str, sys.version_info[:3]))) == 1
    assert value("dsched_ready") == 1 and value("dsched_clients_connected") == 1
    assert value("dsched_placements_total") == 7
    assert value("dsched_tasks", state="erred") == 1
    assert value("dsched_tasks", state="queued") == 1
    assert value("dsched_tasks_pending", reason="missing_resource") == 1
    assert value("dsched_tasks_pending", reason="no_workers") == 0
    assert value("dsched_task_failures_total", error="exception") == 1
    assert value("dsched_task_run_seconds_count") == 5
    assert value("dsched_task_run_seconds_bucket", le="+Inf") == 5
    assert value("dsched_task_queue_wait_seconds_count") == 7
    assert value("dsched_workers", state="connected") == 1
    assert value("dsched_workers", state="draining") == 0
    assert value("dsched_resource_capacity", resource="GPU") == 2
    assert value("dsched_resource_allocated", resource="GPU") == 1
    assert value("dsched_worker_resource_allocated", worker="gpu-a", resource="GPU") == 1
    assert value("dsched_worker_threads", worker="gpu-a") == 2
    assert value("dsched_worker_threads_busy", worker="gpu-a") == 1
    assert value("dsched_gpu_memory_used_bytes", worker="gpu-a", gpu="0") == 6 * 2**30
    assert value("dsched_gpu_memory_total_bytes", worker="gpu-a", gpu="1") == 16 * 2**30
    assert value("dsched_gpu_utilization_ratio", worker="gpu-a", gpu="0") == 0.37
    assert value("dsched_event_loop_lag_seconds_count") > 0
    for name in ("dsched_task_worker_deaths_total", "dsched_task_refusals_total",
                 "dsched_recomputations_total", "dsched_result_copies_total",
                 "dsched_input_fetches_total"):
        assert value(name) == 0
    assert ("process_resident_memory_bytes", ()) in samples
    labels = {v for _, pairs in samples for _, v in pairs}
    assert not keys & labels  # bounded labels: never a task key
    (tmp_path / "release").touch()
    running.result(timeout=30)


def test_it_prints_the_port_it_got_and_a_taken_port_is_a_clear_error(daemons):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "dsched.cli.scheduler", "--host", "127.0.0.1", "--port", "0",
             "--dashboard-port", str(port)],
            env=daemons.env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 78
    (line,) = [line for line in result.stderr.splitlines() if "dashboard" in line]
    assert f"Cannot serve the dashboard on 127.0.0.1:{port}" in line and "in use" in line
    assert "Traceback" not in result.stderr


def test_no_dashboard_serves_nothing(daemons):
    daemons.scheduler("--no-dashboard")
    assert daemons.dashboard is None
    assert "Dashboard at" not in daemons.scheduler_log()

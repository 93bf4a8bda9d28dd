"""What the dashboard's tests share: plain HTTP to a scheduler's dashboard (loopback only),
a worker with two fake GPUs, and tasks that hold a GPU until a file appears."""

from __future__ import annotations

import http.client
import json
import os
import sys
from urllib.parse import urlsplit

import cloudpickle

from deadline import wait_until

cloudpickle.register_pickle_by_value(sys.modules[__name__])

GIB = 1024**3
#: Two fake devices, the first busy: what the worker's heartbeats report.
TWO_GPUS = {"SCHED_FAKE_NVML": json.dumps({"gpus": [
    {"name": "dsched Fake GPU", "memory_total": 16 * GIB, "memory_used": 6 * GIB,
     "utilization": 37},
    {"name": "dsched Fake GPU", "memory_total": 16 * GIB, "memory_used": 0, "utilization": 0},
]}), "SCHED_WORKER__HEARTBEAT_INTERVAL": "0.2"}


def request(url: str, path: str = "", method: str = "GET", body: str | None = None,
            headers: dict | None = None) -> tuple[int, dict, bytes]:
    """``method`` ``url + path``, redirects not followed: status, headers, body."""
    parts = urlsplit(url + path)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request(method, target, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, \
            response.read()
    finally:
        connection.close()


def get_json(url: str, path: str = "", headers: dict | None = None) -> dict:
    status, _, body = request(url, path, headers=headers)
    assert status == 200, (status, body)
    return json.loads(body)


def hold(path: str, value=None):
    """A task that runs until ``path`` exists."""
    wait_until(lambda: os.path.exists(path), timeout=120, interval=0.05)
    return value


def fail(message: str):
    raise ValueError(message)


def square(x):
    return x * x

"""A task's GPU environment, and get_gpu_ids() read back from it (inside a task process:
tests/integration/test_worker_gpu_detection.py)."""

import pytest

from dsched.environ import TASK_GPUS_ENV
from dsched.gpu_ids import get_gpu_ids, task_environment


def test_a_gpu_task_sees_exactly_its_devices_in_pci_order():
    base = {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    env = task_environment((0, 2), base)
    assert env["CUDA_VISIBLE_DEVICES"] == "0,2" and env[TASK_GPUS_ENV] == "0,2"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and env["PATH"] == "/bin"
    assert base["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"  # the worker's own is untouched


def test_a_task_without_gpus_sees_none():
    assert task_environment((), {})["CUDA_VISIBLE_DEVICES"] == ""


@pytest.mark.parametrize("bad", [(-1,), (True,), ("0",)])
def test_bad_device_ids_are_refused(bad):
    with pytest.raises(ValueError):
        task_environment(bad, {})


@pytest.mark.parametrize("env, ids", [
    ({TASK_GPUS_ENV: "1,3", "CUDA_VISIBLE_DEVICES": "0"}, [1, 3]),
    ({TASK_GPUS_ENV: ""}, []),
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, [0, 1]),
    ({"CUDA_VISIBLE_DEVICES": "GPU-abc"}, []),
    ({"CUDA_VISIBLE_DEVICES": "2,x,3"}, [2]),
    ({}, []),
])
def test_get_gpu_ids_reads_the_grant(monkeypatch, env, ids):
    monkeypatch.delenv(TASK_GPUS_ENV, raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert get_gpu_ids() == ids

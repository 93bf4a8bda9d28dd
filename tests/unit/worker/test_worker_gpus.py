"""GPU discovery through a fake NVML, the plans made from it, and one run on real NVML."""

import json
import os
import logging
import sys
from pathlib import Path

import pytest

from dsched.environ import FAKE_NVML_ENV
from dsched.errors import ConfigError, ResourceSpecError
from dsched.gpu_ids import task_environment
from dsched.resources import Resources
from dsched.worker.actions import StartTask
from dsched.protocol.ops import Execute
from dsched.worker.fake_nvml import GIB, FakeNvml
from dsched.worker.gpus import (
    GpuDevice, check_division, detect_gpus, gpu_usage, gpus_option,
    ledger_devices, resources_with_gpus, split_gpus,
)
from dsched.worker.state import WorkerState

R = Resources.parse


@pytest.fixture(autouse=True)
def _no_fake_from_the_environment(monkeypatch):
    monkeypatch.delenv(FAKE_NVML_ENV, raising=False)


def gpu_log_lines(caplog):
    return [r for r in caplog.records if r.name == "dsched.worker.gpus"]


@pytest.mark.parametrize("count", [0, 1, 4])
def test_detects_every_device_with_index_uuid_name_and_memory(count, caplog):
    caplog.set_level(logging.INFO, logger="dsched.worker.gpus")
    nvml = FakeNvml.with_count(count)
    inventory = detect_gpus(visible=None, backend=nvml)
    assert inventory.count == count and inventory.indices == tuple(range(count))
    for device in inventory.devices:
        assert device.uuid.startswith("GPU-") and device.name and device.memory_total == 16 * GIB
    assert nvml.initialized == 0  # every nvmlInit was matched by nvmlShutdown
    assert len(gpu_log_lines(caplog)) == 1
    if count == 0:
        assert inventory.reason == "NVML found no GPU"


@pytest.mark.parametrize("error, reason", [
    ("library_not_found", "NVML library was not found"),
    ("driver_not_loaded", "NVIDIA driver is not loaded"),
    ("no_permission", "NVML could not start (NVMLError_NoPermission"),
])
def test_no_library_or_driver_means_no_gpus_and_one_info_line(error, reason, caplog):
    caplog.set_level(logging.DEBUG, logger="dsched.worker.gpus")
    inventory = detect_gpus(visible=None, backend=FakeNvml([{}], init_error=error))
    assert inventory.devices == () and reason in inventory.reason
    [line] = gpu_log_lines(caplog)
    assert line.levelno == logging.INFO and reason in line.getMessage()


def test_without_nvidia_ml_py_installed_there_are_no_gpus(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    assert "not installed" in detect_gpus(visible=None).reason


def test_a_device_nvml_cannot_read_is_left_out_with_a_warning(caplog):
    nvml = FakeNvml([{}, {"error": "gpu_lost"}, {}])
    assert detect_gpus(visible=None, backend=nvml).indices == (0, 2)
    assert any("Leaving out GPU 1" in r.getMessage() for r in caplog.records)


def test_cuda_visible_devices_limits_a_four_gpu_host_to_2_and_3():
    inventory = detect_gpus(visible="2,3", backend=FakeNvml.with_count(4))
    assert inventory.indices == (2, 3)


def test_cuda_visible_devices_by_uuid_and_uuid_prefix():
    nvml = FakeNvml.with_count(4)
    uuids = [d.uuid for d in detect_gpus(visible=None, backend=nvml).devices]
    assert detect_gpus(visible=f"{uuids[3]},{uuids[1][:12]}", backend=nvml).indices == (3, 1)


def test_empty_cuda_visible_devices_means_none_without_asking_nvml():
    nvml = FakeNvml.with_count(4)
    inventory = detect_gpus(visible="", backend=nvml)
    assert inventory.devices == () and "empty" in inventory.reason and nvml.init_calls == 0


def test_a_bad_entry_hides_it_and_everything_after_it_as_cuda_does(caplog):
    assert detect_gpus(visible="1,7,2", backend=FakeNvml.with_count(4)).indices == (1,)
    assert any("'7' names no GPU" in r.getMessage() for r in caplog.records)
    assert detect_gpus(visible="MIG-xyz", backend=FakeNvml.with_count(2)).indices == ()


def test_visible_devices_default_to_the_environment(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert detect_gpus(backend=FakeNvml.with_count(2)).indices == (1,)


def test_gpus_option_selects_or_turns_off_devices():
    nvml = FakeNvml.with_count(4)
    assert detect_gpus(visible=None, select="0,2", backend=nvml).indices == (0, 2)
    assert detect_gpus(visible=None, select="auto", backend=nvml).count == 4
    assert detect_gpus(visible=None, select="none", backend=nvml).devices == ()
    with pytest.raises(ConfigError, match=r"GPU 0 is not available here \(found 2, 3\)"):
        detect_gpus(visible="2,3", select="0", backend=nvml)
    with pytest.raises(ConfigError, match="driver is not loaded"):
        detect_gpus(visible=None, select="0", backend=FakeNvml(init_error="driver_not_loaded"))
    with pytest.raises(ConfigError, match="expected auto, none"):
        detect_gpus(visible=None, select="first", backend=nvml)


def test_found_gpus_are_advertised_unless_gpu_is_given():
    four = detect_gpus(visible=None, backend=FakeNvml.with_count(4)).devices
    assert resources_with_gpus(R("MEMORY=1e9"), four) == R("GPU=4 MEMORY=1e9")
    assert resources_with_gpus(R("GPU=2"), four) == R("GPU=2")
    assert resources_with_gpus(R("GPU=0"), four) == R("GPU=0")
    assert resources_with_gpus(R("MEMORY=1"), ()) == R("MEMORY=1")


def test_devices_behind_the_gpu_resource():
    four = [GpuDevice(i) for i in (3, 2, 1, 0)]
    assert ledger_devices(R("GPU=4"), four) == (0, 1, 2, 3)
    assert ledger_devices(R("GPU=2"), four) == (0, 1)
    assert ledger_devices(R("GPU=3"), ()) == (0, 1, 2)  # abstract GPUs without NVML
    assert ledger_devices(R(""), four) == ()
    with pytest.raises(ResourceSpecError, match="only 4 GPU"):
        ledger_devices(R("GPU=5"), four)
    with pytest.raises(ResourceSpecError, match="whole GPUs"):
        ledger_devices(R("GPU=1.5"), ())


def refusal(resources: str, found: int, nworkers: int) -> str:
    """Why ``sched-worker --nworkers N --resources ...`` refuses to start, as its nanny
    checks before it starts any process."""
    gpus = [GpuDevice(i) for i in range(found)]
    shares = split_gpus(gpus, nworkers)
    with pytest.raises(ResourceSpecError) as refused:
        check_division(R(resources), gpus, shares)
        for share in shares:
            ledger_devices(R(resources), share)
    return str(refused.value)


def test_too_few_gpus_are_counted_in_good_english_and_as_docs_resources_md_quotes():
    assert refusal("GPU=2", found=1, nworkers=1).startswith(
        "the worker offers GPU=2 but only 1 GPU was found (0):")
    assert refusal("GPU=1", found=1, nworkers=2).startswith(
        "2 worker processes offering GPU=1 each need 2 GPUs, but 1 was found (process 1 would "
        "get 0):")
    docs = (Path(__file__).parents[3] / "docs" / "resources.md").read_text()
    for options in ((2, 2, "GPU=2"), (2, 3, "GPU=1")):  # (found, nworkers, resources)
        found, nworkers, resources = options
        row = next(line for line in docs.splitlines()
                   if line.startswith(f"| {found} | `--nworkers {nworkers} --resources "
                                      f'"{resources}"`'))
        said = refusal(resources, found, nworkers).split(":")[0]
        assert f'exit status 2: "{said}"' in row, (said, row)


def test_four_gpus_over_two_workers_give_each_two_distinct_devices():
    four = detect_gpus(visible=None, backend=FakeNvml.with_count(4)).devices
    shares = split_gpus(four, 2)
    assert [[d.index for d in share] for share in shares] == [[0, 1], [2, 3]]
    assert [gpus_option(share) for share in shares] == ["0,1", "2,3"]
    # Each worker process, given its share with --gpus, pins tasks only to its own devices.
    granted = []
    for share in shares:
        mine = detect_gpus(visible=None, select=gpus_option(share), backend=FakeNvml.with_count(4))
        resources = resources_with_gpus(R(""), mine.devices)
        state = WorkerState(2, resources, gpus=ledger_devices(resources, mine.devices))
        for key in ("a", "b"):
            [start] = state.handle(Execute(key, b"", R("GPU=1")), 0.0)
            granted.append(start.gpus)
    assert granted == [(0,), (1,), (2,), (3,)]


def test_uneven_and_scarce_splits():
    assert [len(s) for s in split_gpus(list(range(3)), 2)] == [2, 1]
    assert split_gpus([7], 3) == [[7], [], []]
    assert gpus_option([]) == "none"
    with pytest.raises(ValueError):
        split_gpus([1], 0)


def test_a_restricted_worker_pins_tasks_to_physical_devices():
    visible = detect_gpus(visible="2,3", backend=FakeNvml.with_count(4)).devices
    resources = resources_with_gpus(R(""), visible)
    state = WorkerState(2, resources, gpus=ledger_devices(resources, visible))
    [start] = state.handle(Execute("t", b"", R("GPU=1")), 0.0)
    assert start == StartTask("t", b"", (2,), "gpu-process", (), R("GPU=1"))
    env = task_environment(start.gpus, {"CUDA_VISIBLE_DEVICES": "2,3"})
    assert env["CUDA_VISIBLE_DEVICES"] == "2" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_gpu_usage_for_heartbeats():
    nvml = FakeNvml([{"utilization": 40, "memory_used": GIB}, {}])
    [first, second] = gpu_usage([0, 1], backend=nvml)
    assert (first.index, first.utilization, first.memory_used) == (0, 40, GIB)
    assert second.memory_total == 16 * GIB and nvml.initialized == 0
    assert gpu_usage([0], backend=FakeNvml(init_error="library_not_found")) == []
    assert gpu_usage([0, 5], backend=FakeNvml.with_count(1))[0].index == 0
    assert gpu_usage([], backend=nvml) == []


def test_sched_fake_nvml_inline_or_from_a_file(monkeypatch, tmp_path):
    monkeypatch.setenv(FAKE_NVML_ENV, json.dumps({"count": 2}))
    assert detect_gpus(visible=None).count == 2
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"gpus": [{"name": "Big", "memory_total": 80 * GIB}]}))
    monkeypatch.setenv(FAKE_NVML_ENV, str(path))
    [device] = detect_gpus(visible=None).devices
    assert device.name == "Big" and device.memory_total == 80 * GIB
    monkeypatch.setenv(FAKE_NVML_ENV, json.dumps({"init_error": "driver_not_loaded"}))
    assert "driver" in detect_gpus(visible=None).reason


@pytest.mark.gpu
def test_real_nvml_detection():
    inventory = detect_gpus(visible=None)
    if not inventory.devices:
        pytest.skip(f"no NVIDIA GPU and driver here: {inventory.reason}")
    import pynvml

    pynvml.nvmlInit()
    try:
        assert inventory.count == pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    for device in inventory.devices:
        assert device.uuid.startswith(("GPU-", "MIG-")) and device.memory_total > 0
    usage = gpu_usage(inventory.indices)
    assert [u.index for u in usage] == list(inventory.indices)
    assert all(0 <= u.utilization <= 100 and u.memory_used <= u.memory_total for u in usage)


def test_a_device_counted_as_gpu_and_named_gpu_n_too_is_refused():
    from dsched.errors import ResourceSpecError
    from dsched.resources import Resources
    from dsched.worker.gpus import GpuDevice, ledger_devices, resources_with_gpus

    two = [GpuDevice(0), GpuDevice(1)]
    # A worker that names its devices gets no GPU count of them as well: a GPU=1 task and a
    # gpu0=1 task would both be given device 0.
    assert resources_with_gpus(Resources.parse("gpu0=1 gpu1=1"), two) == Resources.parse(
        "gpu0=1 gpu1=1")
    assert resources_with_gpus(Resources.parse("foo=1"), two) == Resources.parse("foo=1 GPU=2")
    for devices in (two, []):
        with pytest.raises(ResourceSpecError, match="names device.s. 0 as gpu<N> too"):
            ledger_devices(Resources.parse("GPU=1 gpu0=1"), devices)
    assert ledger_devices(Resources.parse("GPU=1 gpu1=1"), two) == (0,)


def test_a_worker_offers_the_memory_of_its_devices_and_never_takes_it_as_given():
    from dsched.worker.gpus import with_gpu_memory

    found = [GpuDevice(0, "GPU-a", "A", 24 * 10**9), GpuDevice(1, "GPU-b", "B", 80 * 10**9)]
    assert with_gpu_memory(Resources.parse("GPU=2"), found) == Resources.parse(
        "GPU=2 GPU_MEMORY=104e9")
    assert with_gpu_memory(Resources.parse("GPU=2"), []) == Resources.parse("GPU=2")
    with pytest.raises(ResourceSpecError, match="GPU_MEMORY=1e9: a worker offers each GPU's"):
        with_gpu_memory(Resources.parse("GPU=1 GPU_MEMORY=1G"), found)


def test_memory_used_by_processes_the_worker_did_not_start_is_measured_apart():
    fake = FakeNvml([{"memory_total": 80 * 10**9, "processes": [
        {"pid": 11, "memory": 10 * 10**9}, {"pid": 22, "memory": 40 * 10**9},
        {"pid": 33, "memory": None}]}, {}])
    asked = []

    def ours() -> set[int]:
        asked.append(1)
        return {11}

    first, second = gpu_usage([0, 1], backend=fake, ours=ours)
    assert (first.memory_used, first.memory_outside) == (50 * 10**9, 40 * 10**9)
    assert second.memory_outside == 0
    assert asked == [1]  # the worker's processes are listed once, where a device has any


def test_the_workers_own_processes_are_itself_and_all_under_it():
    import subprocess

    from dsched.worker.gpusample import ProcessTree

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        tree = ProcessTree()
        assert tree.under(os.getpid()) == set()  # nothing before the table is read
        tree.scan()
        assert {os.getpid(), child.pid} <= tree.under(os.getpid())
        assert 1 not in tree.under(os.getpid())  # init is no process of the worker's
    finally:
        child.kill()
        child.wait()

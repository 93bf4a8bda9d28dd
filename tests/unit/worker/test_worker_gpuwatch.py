"""The worker's watch for GPU faults (``gpuwatch.py``) against the NVML stand-in: which events
fence a device (a listed Xid, a double-bit ECC error, a failed row remapping), which do not
(an application's Xid), once per device, and the setting that lists the Xids."""

from __future__ import annotations

import threading

import pytest

from dsched.config_kinds import Bad, xids
from dsched.worker.fake_nvml import FakeNvml
from dsched.worker.gpuwatch import GpuWatch

from deadline import wait_until


def watch(devices: list[dict], indices=(0, 1, 2)) -> tuple[GpuWatch, list]:
    seen: list[tuple[int, str]] = []
    lock = threading.Lock()

    def on_fault(index: int, reason: str) -> None:
        with lock:
            seen.append((index, reason))

    w = GpuWatch(indices, (48, 79), on_fault, backend=FakeNvml(devices))
    w.start()
    return w, seen


def test_listed_xids_ecc_and_failed_remapping_fence_once_and_application_xids_do_not():
    w, seen = watch([{"events": [{"xid": 43}, {"xid": 79}, {"xid": 48}]},
                     {"events": [{"ecc": "double_bit"}]},
                     {"remap_failed": True}])
    try:
        wait_until(lambda: len(seen) == 3, what="three devices fenced")
    finally:
        w.stop()
    devices = FakeNvml.with_count(3).gpus
    assert sorted(seen) == [
        (0, f"gpu fault: Xid 79 on gpu0 ({devices[0]['uuid']})"),
        (1, f"gpu fault: a double-bit ECC error on gpu1 ({devices[1]['uuid']})"),
        (2, f"gpu fault: a failed row remapping on gpu2 ({devices[2]['uuid']})"),
    ]


def test_devices_of_other_worker_processes_are_not_watched():
    w, seen = watch([{"events": [{"xid": 79}]}, {"events": [{"xid": 79}]}], indices=(1,))
    try:
        wait_until(lambda: seen, what="device 1 fenced")
    finally:
        w.stop()
    assert [index for index, _ in seen] == [1]


def test_the_xids_setting_takes_lists_text_and_none():
    assert xids("79, 48") == (48, 79) and xids([79]) == (79,) and xids("none") == ()
    with pytest.raises(Bad, match="Xid numbers"):
        xids("79,bus")


def test_a_device_without_ecc_still_has_its_xids_watched():
    w, seen = watch([{"ecc": False, "events": [{"xid": 79}]}], indices=(0,))
    try:
        wait_until(lambda: seen, what="device 0 fenced")
    finally:
        w.stop()


def test_a_released_device_that_faults_again_is_fenced_again():
    fake = FakeNvml([{"events": [{"xid": 79}, {"xid": 79}]}])
    seen: list = []
    w = GpuWatch((0,), (79,), lambda index, reason: seen.append(index), backend=fake)
    w.start()
    try:
        wait_until(lambda: seen == [0], what="the first fault")
        w.rearm(0)
        fake.gpus[0]["events"].append({"xid": 79})
        wait_until(lambda: seen == [0, 0], what="the fault after the release")
    finally:
        w.stop()

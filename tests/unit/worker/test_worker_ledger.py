"""The GPU ledger: fractions share a device, whole requests take free devices, nothing leaks."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsched.errors import ResourceSpecError
from dsched.resources import SCALE, parse_quantity
from dsched.worker.ledger import GpuLedger, check_gpu_request


def gpu(text: str) -> int:
    return parse_quantity(text, "GPU")


def test_abstract_gpus_map_to_indices_from_zero():
    assert GpuLedger.abstract(gpu("3")).devices == (0, 1, 2)
    assert GpuLedger.abstract(0).devices == ()
    with pytest.raises(ResourceSpecError, match="whole number of devices"):
        GpuLedger.abstract(gpu("1.5"))


def test_two_halves_share_one_device_and_leave_the_other_free():
    ledger = GpuLedger([0, 1])
    assert ledger.allocate("a", gpu("0.5")) == (0,)
    assert ledger.allocate("b", gpu("0.5")) == (0,)
    assert ledger.free_devices() == (1,)
    assert ledger.allocate("c", gpu("1")) == (1,)
    assert ledger.allocate("d", gpu("0.1")) is None
    ledger.validate()


def test_fractions_best_fit_onto_the_most_used_device():
    ledger = GpuLedger([0, 1, 2])
    ledger.allocate("big", gpu("0.7"))  # device 0: 0.3 left
    ledger.allocate("mid", gpu("0.5"))  # does not fit on 0: device 1, 0.5 left
    assert ledger.allocate("small", gpu("0.3")) == (0,)   # tightest fit
    assert ledger.allocate("small2", gpu("0.2")) == (1,)  # 0 is full; 1 is tighter than 2
    assert ledger.free_devices() == (2,)
    ledger.validate()


def test_ten_tenths_fill_one_device_exactly_and_free_it_again():
    ledger = GpuLedger([0])
    for i in range(10):
        assert ledger.allocate(f"t{i}", gpu("0.1")) == (0,)
    assert ledger.used(0) == SCALE
    assert ledger.allocate("more", gpu("0.1")) is None
    for i in range(10):
        assert ledger.release(f"t{i}") == (0,)
    assert ledger.in_use() == 0 and ledger.free_devices() == (0,)


def test_whole_requests_take_fully_free_devices_lowest_index_first():
    ledger = GpuLedger([3, 1, 2, 0])
    assert ledger.devices == (0, 1, 2, 3)
    ledger.allocate("frac", gpu("0.25"))  # device 0, no longer fully free
    assert ledger.allocate("two", gpu("2")) == (1, 2)
    assert ledger.allocate("two-more", gpu("2")) is None  # only device 3 is fully free
    assert ledger.units_held("two-more") == 0
    assert ledger.allocate("one", gpu("1")) == (3,)
    assert ledger.holders() == {"frac": (0,), "two": (1, 2), "one": (3,)}
    ledger.validate()


def test_a_fraction_above_one_gpu_is_refused_with_a_clear_error():
    ledger = GpuLedger([0, 1])
    with pytest.raises(ResourceSpecError, match=r"GPU=1\.5.*whole number of GPUs"):
        ledger.allocate("x", gpu("1.5"))
    assert isinstance(ResourceSpecError("x"), ValueError)
    check_gpu_request(gpu("0.9999"))
    check_gpu_request(gpu("4"))
    assert ledger.in_use() == 0


def test_no_gpu_request_holds_nothing_and_release_is_safe():
    ledger = GpuLedger([0])
    assert ledger.allocate("cpu", 0) == ()
    assert ledger.holders() == {}
    assert ledger.release("cpu") == ()
    assert ledger.release("never-seen") == ()


def test_a_second_grant_to_the_same_task_is_a_bug():
    ledger = GpuLedger([0, 1])
    ledger.allocate("a", gpu("1"))
    with pytest.raises(ValueError, match="already holds"):
        ledger.allocate("a", gpu("1"))


def test_bad_device_lists_are_refused():
    with pytest.raises(ValueError):
        GpuLedger([0, 0])
    with pytest.raises(ValueError):
        GpuLedger([-1])


requests = st.sampled_from(["0.1", "0.25", "0.3", "0.5", "0.75", "1", "2", "3"]).map(gpu)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), requests), max_size=60), st.integers(1, 4))
def test_any_sequence_keeps_the_books_and_ends_empty(steps, ndevices):
    ledger = GpuLedger(range(ndevices))
    held: dict[str, int] = {}
    for n, (release, units) in enumerate(steps):
        if release and held:
            key = sorted(held)[n % len(held)]
            ledger.release(key)
            del held[key]
        else:
            devices = ledger.allocate(f"t{n}", units)
            if devices is not None:
                held[f"t{n}"] = units
                assert len(devices) == max(1, units // SCALE)
        ledger.validate()
        assert ledger.in_use() == sum(held.values())
    for key in held:
        ledger.release(key)
    ledger.validate()
    assert ledger.in_use() == 0 and ledger.free_devices() == ledger.devices

"""The one rule of GPU devices as consumables (``dsched.devices``): what ``GPU`` and
``GPU_MEMORY`` take of each device, which devices a demand is granted (best fit), and that no
device is ever over-committed on either dimension."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from dsched.devices import DeviceBook, format_memory, shortfall
from dsched.resources import SCALE, Resources

GB = 10**9


def book(*sizes_gb: int) -> DeviceBook:
    return DeviceBook({i: size * GB * SCALE for i, size in enumerate(sizes_gb)})


def ask(spec: str) -> Resources:
    return Resources.parse(spec)


def test_a_whole_device_takes_all_its_memory_and_shares_it_with_nobody():
    b = book(80)
    assert b.take("whole", ask("GPU=1"), (0,))
    assert b.memory_used[0] == 80 * GB * SCALE
    assert b.choose(ask("GPU_MEMORY=1G")) is None  # memory alone does not fit beside it
    assert b.choose(ask("GPU=0.1")) is None
    b.give("whole")
    assert b.choose(ask("GPU_MEMORY=1G")) == (0,)


def test_memory_requests_share_one_device_while_their_memory_fits():
    b = book(80)
    for i in range(4):
        devices = b.choose(ask("GPU_MEMORY=18G"))
        assert devices == (0,)
        assert b.take(f"job-{i}", ask("GPU_MEMORY=18G"), devices)
    assert b.choose(ask("GPU_MEMORY=18G")) is None  # 72 of 80 GB held: 8 left
    assert b.choose(ask("GPU_MEMORY=8G")) == (0,)
    assert b.choose(ask("GPU=1")) is None  # held in part: no whole device
    assert b.share_used[0] == 0  # memory alone takes none of the device's share


def test_a_fraction_without_memory_takes_that_fraction_of_the_memory():
    b = book(80)
    assert b.take("half", ask("GPU=0.5"), (0,))
    assert b.memory_used[0] == 40 * GB * SCALE
    assert b.choose(ask("GPU_MEMORY=41G")) is None
    assert b.choose(ask("GPU=0.5 GPU_MEMORY=40G")) == (0,)
    assert b.choose(ask("GPU=0.6 GPU_MEMORY=1G")) is None  # the share is over


def test_the_best_fit_packs_by_memory_across_mixed_devices():
    b = book(80, 24, 48)
    assert b.choose(ask("GPU_MEMORY=20G")) == (1,)
    assert b.choose(ask("GPU_MEMORY=40G")) == (2,)
    assert b.choose(ask("GPU_MEMORY=70G")) == (0,)
    assert b.choose(ask("GPU=1 GPU_MEMORY=30G")) == (2,)  # the smallest whole that is enough
    assert b.choose(ask("GPU=2")) == (1, 2)  # big devices stay free for big requests
    assert b.choose(ask("GPU_MEMORY=81G")) is None


def test_devices_of_unknown_memory_take_fractions_and_whole_ones_but_no_memory_request():
    b = DeviceBook.abstract(2)
    assert b.take("a", ask("GPU=0.6"), (0,))
    assert b.choose(ask("GPU=0.3")) == (0,)  # the fullest device that still fits
    assert b.choose(ask("GPU=0.5")) == (1,)
    assert b.choose(ask("GPU_MEMORY=1G")) is None


def test_take_refuses_devices_that_are_not_free_or_not_as_many_as_asked():
    b = book(16, 16)
    assert b.take("a", ask("GPU=0.6"), (0,))
    assert not b.take("b", ask("GPU=0.6"), (0,))
    assert not b.take("c", ask("GPU=2"), (1,))
    assert not b.take("d", ask("GPU=1"), (7,))
    assert not b.take("a", ask("GPU=0.1"), (1,))  # a key holds one grant
    assert b.held == {"a": ((0, 6000, 16 * GB * SCALE * 6000 // SCALE),)}


def test_shortfall_names_what_is_short_now_and_ever():
    b = book(24, 80)
    b.take("x", ask("GPU_MEMORY=72G"), (1,))
    assert shortfall(ask("GPU_MEMORY=100G"), [b], free=False) == (
        "GPU_MEMORY: at most 80 GB on any device (100 GB asked)")
    b.take("y", ask("GPU_MEMORY=20G"), (0,))
    assert shortfall(ask("GPU_MEMORY=18GiB"), [b], free=True) == (
        "GPU_MEMORY: at most 8 GB free on any device (18 GiB asked)")
    assert format_memory(int(1.5 * 2**30) * SCALE) == "1.5 GiB"


DEMANDS = st.sampled_from(["GPU=1", "GPU=2", "GPU=0.25", "GPU=0.5", "GPU=0.75",
                           "GPU_MEMORY=4G", "GPU_MEMORY=18G", "GPU_MEMORY=40G", "GPU_MEMORY=70G",
                           "GPU=0.5 GPU_MEMORY=10G", "GPU=1 GPU_MEMORY=48G",
                           "GPU=0.25 GPU_MEMORY=30G"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), DEMANDS), max_size=40))
def test_no_device_is_ever_over_committed_and_a_refusal_means_no_device_fits(steps):
    b = book(24, 48, 80)
    held: list[str] = []
    for n, (give, spec) in enumerate(steps):
        if give and held:
            b.give(held.pop(0))
        demand = ask(spec)
        devices = b.choose(demand)
        if devices is None:
            wanted = demand.get("GPU") // SCALE if demand.get("GPU") >= SCALE else 1
            assert sum(b.fits_on(demand, d) for d in b.memory) < wanted, (spec, b.held)
        else:
            assert b.take(f"k{n}", demand, devices)
            held.append(f"k{n}")
        b.check()


def test_memory_others_use_is_not_granted_and_its_end_is_said():
    b = book(80)
    assert not b.measured({0: 40 * GB * SCALE})  # more used by others: nothing freed
    assert b.take("a", ask("GPU_MEMORY=18G"), b.choose(ask("GPU_MEMORY=18G")))
    assert b.take("b", ask("GPU_MEMORY=18G"), b.choose(ask("GPU_MEMORY=18G")))
    assert b.choose(ask("GPU_MEMORY=18G")) is None  # 40 + 36 of 80 GB
    assert b.choose(ask("GPU=1")) is None
    assert shortfall(ask("GPU_MEMORY=18G"), [b], free=True) == (
        "GPU_MEMORY: at most 4 GB free on any device (18 GB asked; processes dsched did not "
        "start use 40 GB)")
    assert b.could_fit(ask("GPU_MEMORY=18G"))  # others' use passes: not "never"
    assert b.measured({0: 0, 7: 5})  # a device it does not have is passed over
    assert b.choose(ask("GPU_MEMORY=18G")) == (0,)


def test_others_memory_counts_against_memory_asked_not_against_a_fractions_share():
    b = book(80)
    b.measured({0: 1 * GB * SCALE})
    assert b.take("a", ask("GPU=0.5"), (0,)) and b.take("b", ask("GPU=0.5"), (0,))
    assert shortfall(ask("GPU_MEMORY=1G"), [b], free=True).startswith(
        "GPU_MEMORY: at most 0 bytes free on any device")  # never less than none


def test_a_peers_device_list_that_makes_no_sense_books_devices_of_unknown_memory():
    resources = Resources.parse("GPU=2")
    weird = DeviceBook.offered(resources, (0, 1), ({"index": [0]}, {"index": 1,
                                                                   "memory_total": "80GB"}))
    assert weird.memory == {0: 0, 1: 0}
    assert DeviceBook.offered(resources, (0, 0)).memory == {0: 0, 1: 0}  # abstract

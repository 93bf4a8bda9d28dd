"""Resource specs parse exactly, reject bad input with a clear message, and add up exactly."""

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsched.errors import ResourceSpecError
from dsched.resources import EMPTY, MAX_QUANTITY, SCALE, Resources, format_units, parse_resources


def test_command_line_form_with_spaces_or_commas():
    spaced = parse_resources("GPU=2 MEMORY=100e9")
    assert spaced == parse_resources("GPU=2,MEMORY=100e9") == parse_resources(" GPU=2 , MEMORY=100e9 ")
    assert spaced["GPU"] == 2 * SCALE
    assert spaced.quantity("MEMORY") == 100_000_000_000
    assert str(spaced) == "GPU=2 MEMORY=1e11"


def test_dicts_and_toml_tables_give_the_same_value():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    table = tomllib.loads('[resources]\nGPU = 2\nMEMORY = 100e9\n')["resources"]
    assert parse_resources(table) == parse_resources({"GPU": 2, "MEMORY": "100e9"})
    assert parse_resources(table) == parse_resources("GPU=2 MEMORY=100e9")


def test_names_are_arbitrary_and_case_sensitive():
    res = parse_resources("gpu=1 GPU=2 process=1 foo.bar=0.5")
    assert res.names() == {"gpu", "GPU", "process", "foo.bar"}
    assert res.quantity("gpu") == 1 and res.quantity("GPU") == 2


def test_ten_tenths_fill_one_gpu_and_leave_exactly_zero():
    tenth = parse_resources({"GPU": 0.1})
    used = EMPTY
    for _ in range(10):
        used = used + tenth
    assert used == parse_resources("GPU=1")
    for _ in range(10):
        used = used - tenth
    assert used.is_empty() and used["GPU"] == 0


@pytest.mark.parametrize(
    "spec, bad_part, why",
    [
        ("foo", "'foo'", "NAME=VALUE"),
        ("GPU=", "'GPU='", "missing"),
        ("=2", "'=2'", "name is empty"),
        ("GPU=x", "'GPU=x'", "not a number"),
        ("GPU=-1", "'GPU=-1'", "negative"),
        ("GPU=nan", "'GPU=nan'", "finite"),
        ("GPU=inf", "'GPU=inf'", "finite"),
        ("GPU=1 GPU=2", "'GPU'", "twice"),
        ("GPU=1 bar", "'bar'", "NAME=VALUE"),
        ("GPU=1e99", "'GPU=1e99'", "maximum"),
        ("GPU=0.00001", "'GPU=0.00001'", "resolution"),
    ],
)
def test_invalid_specs_name_the_bad_part_and_the_form(spec, bad_part, why):
    with pytest.raises(ResourceSpecError) as info:
        parse_resources(spec)
    message = str(info.value)
    assert bad_part in message and why in message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "spec", [{"GPU": float("nan")}, {"GPU": True}, {"GPU": -1}, {"": 1}, {"a b": 1}, {"GPU": {"x": 1}}, 7]
)
def test_invalid_mappings_and_types_are_rejected(spec):
    with pytest.raises(ResourceSpecError):
        parse_resources(spec)


@pytest.mark.parametrize("spec, why", [
    ("GPU=1_000", "'_' separators"),
    ({"GPU": "1_000"}, "'_' separators"),
    ("GPU=\u0663", "ASCII digits 0-9"),  # ARABIC-INDIC DIGIT THREE
    ({"MEMORY": "\uff11e9"}, "ASCII digits 0-9"),  # FULLWIDTH DIGIT ONE
])
def test_quantities_are_written_in_ascii_digits_without_separators(spec, why):
    with pytest.raises(ResourceSpecError, match=why) as info:
        parse_resources(spec)
    assert "\n" not in str(info.value)


@given(st.text(st.characters(categories=["Nd"]).filter(lambda c: not "0" <= c <= "9"),
               min_size=1, max_size=4),
       st.integers(min_value=1_000, max_value=MAX_QUANTITY))
def test_no_other_script_nor_separated_digits_pass_for_a_quantity(digits, number):
    for text in (digits, f"{number:_}"):
        with pytest.raises(ResourceSpecError):
            parse_resources(f"X={text}")
        with pytest.raises(ResourceSpecError):
            parse_resources({"X": text})


def test_a_name_that_is_not_a_string_is_named_as_such():
    with pytest.raises(ResourceSpecError, match="the name must be a string, not int 1"):
        parse_resources({1: 2})


def test_fits_treats_missing_names_as_zero():
    worker = parse_resources("GPU=2 MEMORY=100e9")
    assert parse_resources({"GPU": 1}).fits(worker)
    assert not parse_resources({"GPU": 3}).fits(worker)
    assert not parse_resources({"foo": 1}).fits(worker)
    assert EMPTY.fits(EMPTY) and parse_resources({"foo": 0}).fits(EMPTY)
    assert parse_resources({"foo": 1, "GPU": 1}).missing_names(worker.names()) == ["foo"]


def test_subtracting_past_zero_is_an_accounting_error():
    with pytest.raises(ValueError, match="negative"):
        parse_resources("GPU=1") - parse_resources("GPU=2")


def test_wire_round_trip_and_pickle():
    res = parse_resources("GPU=0.5 MEMORY=70e9")
    assert Resources.from_wire(res.to_wire()) == res
    assert pickle.loads(pickle.dumps(res)) == res
    for bad in ({"GPU": 0.5}, {"GPU": -1}, {1: 2}, {"GPU": True}):
        with pytest.raises(ResourceSpecError):
            Resources.from_wire(bad)


def test_equal_values_hash_equal_so_they_index_queues():
    assert hash(parse_resources("GPU=1 foo=0")) == hash(parse_resources("GPU=1"))
    assert len({parse_resources("GPU=1"), parse_resources({"GPU": 1.0}), parse_resources("GPU=1.0")}) == 1


@pytest.mark.parametrize(
    "text, shown", [("2", "2"), ("0.5", "0.5"), ("100e9", "1e11"), ("70e9", "7e10"), ("1500000", "1500000")]
)
def test_quantities_print_short(text, shown):
    assert format_units(parse_resources({"X": text})["X"]) == shown


units = st.integers(min_value=0, max_value=MAX_QUANTITY * SCALE)
vectors = st.dictionaries(st.sampled_from(["GPU", "MEMORY", "gpu0", "foo"]), units, max_size=4).map(Resources)


@given(vectors, vectors)
def test_add_then_subtract_is_identity(a, b):
    assert (a + b) - b == a
    assert (a + b) - a == b


@given(vectors, vectors, vectors)
def test_addition_is_associative_and_commutative(a, b, c):
    assert a + b == b + a
    assert (a + b) + c == a + (b + c)


@given(vectors, vectors)
def test_a_demand_fits_exactly_what_it_sums_to(a, b):
    assert a.fits(a + b) and b.fits(a + b)
    assert a.fits(b) == (a <= b) == (b >= a)


@given(vectors)
def test_text_form_round_trips(a):
    assert parse_resources(str(a)) == a
    assert Resources.from_wire(a.to_wire()) == a


@given(st.decimals(min_value=0, max_value=10**6, places=4, allow_nan=False, allow_infinity=False))
def test_decimal_text_is_held_exactly(value):
    units = parse_resources({"X": str(value)})["X"]
    assert units == int(value * SCALE)


@pytest.mark.parametrize("text, value", [
    ("20G", 20e9), ("20GB", 20e9), ("20g", 20e9), ("1.5T", 1.5e12), ("512k", 512e3),
    ("20Gi", 20 * 2**30), ("20GiB", 20 * 2**30), ("512KiB", 512 * 2**10), ("2mi", 2 * 2**20),
])
def test_a_quantity_may_be_a_size_decimal_or_binary(text, value):
    assert parse_resources(f"MEMORY={text}")["MEMORY"] == int(value) * SCALE
    assert parse_resources({"MEMORY": text}) == parse_resources(f"MEMORY={int(value)}")


@pytest.mark.parametrize("text", ["20X", "G", "20GiBB", "-2G", "2e99G"])
def test_a_size_that_is_not_one_is_refused(text):
    with pytest.raises(ResourceSpecError, match="MEMORY"):
        parse_resources(f"MEMORY={text}")

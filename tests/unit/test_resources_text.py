"""Resource specs are read with str methods, not ``re``: each rule reads every text as the
patterns it replaced read it (kept here as the reference), value or error alike. The one
difference is meant: the patterns, matched ignoring case, also took the Turkish dotted and
dotless i for the i of a binary unit; such a text is now not a number."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

from hypothesis import example, given, settings
from hypothesis import strategies as st

from dsched.errors import ResourceSpecError
from dsched.resources import (
    _FORM,
    _PREFIXES,
    MAX_QUANTITY,
    SCALE,
    Resources,
    _check_name,
    _parts,
    device_index,
    parse_quantity,
)

_NUMBER = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_SIZE = r"(?i)(?P<number>.*?)\s*(?P<prefix>[kmgtp])(?P<binary>i?)b?"


def reference_quantity(text: object, shown: str) -> int:
    """``parse_quantity`` as it was written with ``re``, for a value that is not a float."""
    multiplier = 1
    size = re.fullmatch(_SIZE, text.strip()) if isinstance(text, str) else None
    if size is not None:
        power = _PREFIXES[size["prefix"].lower()]
        multiplier = 1024**power if size["binary"] else 1000**power
        text = size["number"]
    try:
        value = Decimal(str(text).strip()) * multiplier
    except InvalidOperation:
        raise ResourceSpecError(
            f"invalid resource {shown!r}: {str(text)!r} is not a number (or a size, as 20G "
            f"or 20GiB); {_FORM}") from None
    if not value.is_finite():
        raise ResourceSpecError(f"invalid resource {shown!r}: the value must be finite; {_FORM}")
    if not re.fullmatch(_NUMBER, str(text).strip()):
        why = ("the value may not hold '_' separators (write 1000 or 1e3)" if "_" in str(text)
               else "the value must be written with the ASCII digits 0-9")
        raise ResourceSpecError(f"invalid resource {shown!r}: {why}")
    if value < 0:
        raise ResourceSpecError(f"invalid resource {shown!r}: the value must not be negative; "
                                f"{_FORM}")
    if value > MAX_QUANTITY:
        raise ResourceSpecError(
            f"invalid resource {shown!r}: the value is above the maximum {MAX_QUANTITY:.0e}")
    units = int((value * SCALE).to_integral_value(rounding=ROUND_HALF_EVEN))
    if units == 0 and value != 0:
        raise ResourceSpecError(
            f"invalid resource {shown!r}: the value is below the resolution {1 / SCALE}")
    return units


def outcome(read, *args):
    try:
        return read(*args)
    except ResourceSpecError as error:
        return ("error", str(error))


#: Digits, number signs, units in both cases, spaces, separators and a few look-alikes.
QUANTITY_TEXT = st.text(st.sampled_from("0123456789.eE+-_ \t\nkKmMgGtTpPiIbBx٣"), max_size=12)


@settings(max_examples=1000, deadline=None)
@given(QUANTITY_TEXT)
@example("20GiB")
@example(" 1.5 tb ")
@example("5\nG")
@example("1\n5G")
@example("ib")
@example("1_000")
@example("٣")
@example("1e15")
@example("0.00001")
@example("007")
@example("1" * 4301)  # more digits than int() takes
@example("0" * 5000 + "1")
@example("")
def test_a_quantity_reads_as_the_patterns_read_it(text):
    assert outcome(parse_quantity, text, "X", "X=" + text) == outcome(
        reference_quantity, text, "X=" + text)


@given(st.integers(min_value=-10**16, max_value=10**16))
def test_a_whole_number_given_as_an_int_reads_as_before(number):
    assert outcome(parse_quantity, number, "X") == outcome(reference_quantity, number,
                                                           f"X={number}")


def test_a_binary_unit_is_written_with_an_ascii_i():
    for text in ("5G\u0131", "5G\u0130B"):  # dotless and dotted i
        assert reference_quantity(text, "X") == 5 * 2**30 * SCALE
        assert outcome(parse_quantity, text, "X", "X")[0] == "error"
    assert parse_quantity("5\u212a") == reference_quantity("5\u212a", "X")  # a Kelvin sign


@settings(max_examples=1000)
@given(st.text(st.sampled_from("gpuGPU0123456789٣² x"), max_size=8))
@example("gpu0")
@example("gpu12")
@example("gpu")
@example("gpu٣")
@example("gpu²")
def test_a_device_name_reads_as_the_pattern_read_it(name):
    match = re.fullmatch(r"gpu(\d+)", name)
    assert device_index(name) == (int(match.group(1)) if match else None)


@settings(max_examples=1000)
@given(st.text(st.sampled_from("AB =,\t\n\u00a0\u2003x"), max_size=8))
def test_a_name_is_refused_for_the_characters_the_pattern_refused(name):
    refused = bool(name) and re.search(r"[\s,=]", name) is not None
    assert (outcome(_check_name, name, "p") != name) == (refused or not name)


@settings(max_examples=2000)
@given(st.text(st.sampled_from("GPU=1.5 ,\tMEMORY2Gix=\n\u00a0"), max_size=24))
@example(",GPU=1,,MEMORY=2G ")
@example(" ")
@example("")
def test_a_spec_splits_into_the_parts_the_pattern_split_it_into(spec):
    assert _parts(spec) == [part for part in re.split(r"[\s,]+", spec.strip()) if part]


def test_a_quantity_may_be_a_numpy_number():
    np = __import__("pytest").importorskip("numpy")
    # numpy 2 writes a float64 as np.float64(0.5), which is no number to read.
    assert parse_quantity(np.float64(0.5), "GPU") == parse_quantity(0.5, "GPU") == SCALE // 2
    assert parse_quantity(np.int64(2), "GPU") == parse_quantity(np.float32(2.0), "GPU")
    assert Resources.parse({"GPU": np.float64(0.25)}) == Resources.parse("GPU=0.25")

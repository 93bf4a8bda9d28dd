"""Dask keys and dsched keys map one to one (no Dask needed)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsched.dask.keys import to_dask, to_dsched

parts = st.one_of(st.text(max_size=12), st.integers(), st.floats(allow_nan=False,
                                                                   allow_infinity=False))
dask_keys = st.one_of(
    st.text(max_size=20),
    st.integers(),
    st.tuples(st.text(max_size=20), st.lists(parts, max_size=3).map(tuple)).map(
        lambda t: (t[0], *t[1])),
    st.tuples(st.text(max_size=8), st.tuples(st.text(max_size=8), st.integers())),
)


@given(dask_keys)
def test_every_key_comes_back_as_it_went(key):
    name = to_dsched(key)
    assert isinstance(name, str)
    assert to_dask(name) == key
    assert type(to_dask(name)) is type(key)


@given(dask_keys, dask_keys)
def test_different_keys_get_different_names(a, b):
    if a != b:
        assert to_dsched(a) != to_dsched(b)


def test_names_read_as_in_dask():
    assert to_dsched("finalize-3f2a") == "finalize-3f2a"
    assert to_dsched(("x-3f2a", 0, 1)) == "('x-3f2a', 0, 1)"
    assert to_dsched(("x", np.int64(2))) == "('x', 2)"


def test_a_str_that_looks_like_a_tuple_is_escaped():
    tuple_name = to_dsched(("x", 0))
    assert to_dsched(tuple_name) != tuple_name
    assert to_dask(to_dsched(tuple_name)) == tuple_name
    assert to_dask(to_dsched("\\x")) == "\\x"
    assert to_dsched(1) != to_dsched("1")


@pytest.mark.parametrize("bad", [("x", object()), ("x", float("nan")), None, ("x", [1])])
def test_what_cannot_name_a_task_is_refused(bad):
    with pytest.raises(TypeError, match="Dask key"):
        to_dsched(bad)

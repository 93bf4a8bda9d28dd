"""A job's spec and an array's are values, as frozen dataclasses were: compared, hashed and
shown by their fields, never changed once made, copied with changes only through their checks."""

from __future__ import annotations

import pytest

from dsched.arrayspec import ArraySpec
from dsched.errors import JobSpecError
from dsched.frozen import FrozenError
from dsched.jobs import JobSpec


def test_a_spec_is_a_value_of_its_fields():
    a = JobSpec("s-1", ("true",), priority=3)
    assert a == JobSpec("s-1", ("true",), priority=3)
    assert a != JobSpec("s-1", ("true",), priority=4) and a != "s-1"
    assert repr(a).startswith("JobSpec(submission='s-1', command=('true',),")
    assert a.env == {} and a.env is not JobSpec("s-2", ("true",)).env  # a fresh map each
    with pytest.raises(TypeError):  # its env is a dict, as it always was
        hash(a)
    assert hash(ArraySpec(ranges=(range(3),))) == hash(ArraySpec(ranges=(range(3),)))


def test_a_spec_cannot_be_changed_and_a_copy_is_checked():
    a = JobSpec("s-1", ("true",))
    with pytest.raises(FrozenError, match="cannot assign to field 'priority'"):
        a.priority = 5
    with pytest.raises(AttributeError):
        del a.name
    assert a.replace(priority=5).priority == 5 and a.priority == 0
    with pytest.raises(JobSpecError, match="needs a command"):
        a.replace(command=())
    with pytest.raises(JobSpecError, match="limit"):
        ArraySpec(ranges=(range(3),)).replace(limit=0)

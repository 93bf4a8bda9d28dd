"""annotate() sets defaults for the submits inside it; nested blocks merge."""

import pytest

from dsched.client.annotations import annotate, current
from dsched.errors import ResourceSpecError
from dsched.resources import Resources


def test_annotations_apply_inside_the_block_only():
    assert current() == {}
    with annotate(resources={"GPU": 1}, priority=5):
        assert current() == {"resources": Resources.parse("GPU=1"), "priority": 5}
    assert current() == {}


def test_nested_blocks_merge_and_the_inner_wins():
    with annotate(resources={"GPU": 1, "MEMORY": 1e9}, retries=2):
        with annotate(resources={"GPU": 2}, priority=1):
            assert current() == {
                "resources": Resources.parse("GPU=2 MEMORY=1e9"),
                "retries": 2,
                "priority": 1,
            }
        assert current()["resources"] == Resources.parse("GPU=1 MEMORY=1e9")


def test_a_bad_spec_fails_at_the_with_line():
    with pytest.raises(ResourceSpecError, match="GPU=x"):
        with annotate(resources="GPU=x"):
            pass
    assert current() == {}


def test_unknown_annotations_are_reported():
    with pytest.raises(TypeError, match="colour"):
        with annotate(colour="red"):
            pass

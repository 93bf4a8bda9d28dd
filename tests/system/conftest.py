"""Fixtures of the system tests: real daemons started by ``cluster_helpers.Daemons`` (shared
with the integration tests), stopped at the end whatever happened."""

import pytest

from cluster_helpers import Daemons


@pytest.fixture
def daemons(tmp_path):
    d = Daemons(tmp_path)
    try:
        yield d
    finally:
        d.stop()

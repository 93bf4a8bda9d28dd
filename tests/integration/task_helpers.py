"""Functions that tests run as tasks; shipped by value, since workers cannot import tests."""

import os
import sys

import cloudpickle

from deadline import wait_until

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def wait_for(path, value=None, timeout=60.0):
    """Return ``value`` once ``path`` exists (the test creates it to let the task end)."""
    wait_until(lambda: os.path.exists(path), timeout, interval=0.01, what=f"{path} to appear")
    return value

"""Functions that tests run as tasks; shipped by value, since workers cannot import tests."""

import sys

import cloudpickle

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def wait_for(path, value=None, timeout=60.0):
    """Return ``value`` once ``path`` exists (the test creates it to let the task end)."""
    import os
    import time

    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)
    return value

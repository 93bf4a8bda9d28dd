"""The dask extra is optional: without Dask, dsched imports, starts clients and passes the
unit tests that touch Dask, and never tries to load Dask; with Dask installed, ``import dsched``
still does not load it.

"Without Dask" is this environment with Dask taken out: a directory of links to everything in
site-packages but Dask, used in place of site-packages by a Python started with ``-S``. That
costs no install and no network, and it is exact where it matters: ``find_spec("dask")``
finds nothing, as on a machine where Dask was never installed.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(importlib.util.find_spec("dask") is None,
                                reason="Dask is not installed: this environment is the test")


@pytest.fixture(scope="module")
def without_dask(tmp_path_factory) -> dict[str, str]:
    """The environment of a ``python -S`` that has everything installed here but Dask."""
    site = Path(importlib.util.find_spec("dask").origin).parents[1]
    hidden = tmp_path_factory.mktemp("site-without-dask")
    for entry in site.iterdir():
        if not entry.name.lower().startswith(("dask", "distributed", "__editable__")):
            (hidden / entry.name).symlink_to(entry)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(hidden), str(REPO / "src"),
                                                         str(REPO / "tests")])}


def run(env: dict, *args: str, timeout: float = 550) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-S", *args], env=env, cwd=REPO, text=True,
                          capture_output=True, timeout=timeout)


USE_WITHOUT_DASK = r"""
import importlib.util, sys
assert importlib.util.find_spec("dask") is None
import dsched

@dsched.requires(GPU=1)
def double(x):
    return 2 * x

with dsched.LocalCluster(n_workers=1, threads_per_worker=1, gpus="none",
                         resources="GPU=1") as cluster, dsched.Client(cluster) as client:
    assert client.submit(double, 21, resources={"GPU": 1}).result(timeout=60) == 42
    try:
        client.compute([])
    except ModuleNotFoundError as error:
        assert "pip install 'dsched[dask]'" in str(error), error
    else:
        raise AssertionError("compute() without Dask did not say what to install")
loaded = sorted(m for m in sys.modules if m == "dask" or m.startswith("dask."))
assert not loaded, loaded
print("ok")
"""


def test_dsched_runs_and_never_loads_dask_where_it_is_not_installed(without_dask):
    done = run(without_dask, "-c", USE_WITHOUT_DASK)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


#: The unit tests run again without Dask: the files whose code reaches for Dask or stands in for
#: it. ``dsched.dask.keys`` claims to need no Dask; ``test_dask_graphs`` needs it, and must be
#: skipped whole (not fail to import); the client (futures, submits, the blocking client that
#: makes itself Dask's default scheduler when Dask is there) is where ``dsched.dask`` is reached
#: from; the config mirrors ``dask.config.set``. The rest of the unit tests never touch Dask,
#: so running them all a second time would only cost a minute.
WITHOUT_DASK = ["tests/unit/test_dask_keys.py", "tests/unit/test_dask_graphs.py",
                "tests/unit/test_client_future.py", "tests/unit/test_client_submission.py",
                "tests/unit/test_config.py"]


def test_the_unit_tests_that_touch_dask_pass_without_it(without_dask):
    done = run(without_dask, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
               *WITHOUT_DASK, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
    assert "test_dask_graphs.py" in done.stdout and "could not import 'dask'" in done.stdout


def test_importing_dsched_does_not_load_an_installed_dask():
    done = subprocess.run(
        [sys.executable, "-c", "import sys, dsched; "
         "print(sorted(m for m in sys.modules if m.split('.')[0] == 'dask'))"],
        text=True, capture_output=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr

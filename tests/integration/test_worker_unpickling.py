"""A worker's task threads unpickle one at a time: a package another thread is still
importing is never seen half built, and a forked child does not inherit the lock held."""

import os
import threading

import pytest

from dsched.worker import unpickling


# A package whose __init__ imports a submodule and only then fills the submodule's registry,
# pausing in between while the test's second thread unpickles that submodule's function. It
# sits inside a top-level package: Python waits for a top-level package being imported, but
# not for a package below it.
HALF_READY_INIT = """
from . import core
from {signals} import inside, proceed
inside.set()
proceed.wait({pause})
core.REGISTRY.append("ready")
"""


def _unpickle_node(data):
    from dsched.dask.execute import RunNode
    return RunNode().load(data)


@pytest.mark.parametrize("load", [unpickling.loads, _unpickle_node],
                         ids=["task-function", "dask-node"])
def test_a_thread_never_unpickles_from_a_package_another_thread_is_still_importing(
        load, tmp_path, monkeypatch):
    import sys
    import threading
    import types

    top = f"halfready_{load.__name__.strip('_')}"
    signals = types.ModuleType(f"{top}_signals")
    signals.inside, signals.proceed = threading.Event(), threading.Event()
    monkeypatch.setitem(sys.modules, signals.__name__, signals)
    package = tmp_path / top / "package"
    package.mkdir(parents=True)
    (tmp_path / top / "__init__.py").write_text("")
    # Without the lock the second thread sees the registry empty at once; with it, it waits
    # until the package is whole, which takes the pause: its length does not decide the test.
    (package / "__init__.py").write_text(HALF_READY_INIT.format(signals=signals.__name__,
                                                                pause=0.5))
    (package / "core.py").write_text("REGISTRY = []\n\ndef registry():\n    return REGISTRY\n")
    (package / "other.py").write_text("def thing():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    first = f"\x80\x04c{top}.package.other\nthing\n.".encode("latin-1")
    second = f"\x80\x04c{top}.package.core\nregistry\n.".encode("latin-1")
    seen = []

    def second_thread():
        signals.inside.wait(10)
        seen.append(list(load(second)()))
        signals.proceed.set()

    other = threading.Thread(target=second_thread)
    other.start()
    try:
        assert load(first)() == 1
    finally:
        other.join(10)
        for module in [m for m in sys.modules if m.startswith(top)]:
            del sys.modules[module]
    assert seen == [["ready"]]


def test_a_forked_child_can_unpickle_while_a_parent_thread_held_the_lock():
    holding, release = threading.Event(), threading.Event()

    def hold():
        with unpickling.LOCK:
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(10)
        pid = os.fork()
        if pid == 0:  # the child: no thread of it holds the lock
            os._exit(0 if unpickling.LOCK.acquire(timeout=5) else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        release.set()
        holder.join(10)

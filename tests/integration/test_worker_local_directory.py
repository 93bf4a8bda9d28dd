"""--local-directory gives each worker process a private scratch directory, removed at exit."""

import os
import signal
import sys

import cloudpickle

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def scratch():
    import os

    path = os.environ["SCHED_LOCAL_DIRECTORY"]
    with open(os.path.join(path, "note.txt"), "w") as note:
        note.write("hello")
    return path


def test_tasks_get_a_scratch_directory_under_local_directory(daemons, tmp_path):
    base = tmp_path / "scratch"
    daemons.scheduler()
    worker = daemons.worker("--local-directory", str(base), "--nthreads", "1")
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    path = client.submit(scratch).result(timeout=30)
    assert os.path.dirname(path) == str(base)
    assert open(os.path.join(path, "note.txt")).read() == "hello"
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert not os.path.exists(path)

"""``sched-worker --nworkers N``: the nanny's worker processes run with the nanny's whole config,
drain when a terminal's Ctrl-C reaches the whole process group, stop at once on a second
signal to the nanny, and are restarted when they die.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import cloudpickle
import psutil

from deadline import wait_until

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def long_task(directory: str, seconds: float) -> int:
    import os
    import pathlib
    import time

    (pathlib.Path(directory) / "started").touch()
    time.sleep(seconds)
    return os.getpid()


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def addresses(client) -> set[str]:
    return set(client.scheduler_info()["workers"])


def test_worker_processes_get_the_settings_of_the_config_file(daemons, tmp_path):
    config = tmp_path / "worker.toml"
    config.write_text("[worker]\ndrain_timeout = 3\n")
    daemons.scheduler()
    nanny = daemons.worker("--nworkers", "2", "--config", str(config),
                           stderr=subprocess.PIPE, text=True)
    daemons.wait_for_workers(daemons.client(), 2)

    nanny.send_signal(signal.SIGTERM)
    _, log = nanny.communicate(timeout=30)

    assert nanny.returncode == 0
    # Each worker process says how long it lets running tasks finish: the file's 3 s.
    assert log.count("waiting up to 3s for running ones") == 2, log
    assert "waiting up to 60s" not in log


def test_ctrl_c_on_the_process_group_drains_the_workers(daemons, tmp_path):
    daemons.scheduler()
    # Its own process group, as a shell gives a foreground job: Ctrl-C signals all of it.
    nanny = daemons.worker("--nworkers", "2", "--nthreads", "1", start_new_session=True)
    client = daemons.client()
    daemons.wait_for_workers(client, 2)

    future = client.submit(long_task, str(tmp_path), 1.5)
    reported = []
    future.add_done_callback(lambda f: reported.append(f.status))
    wait_until(lambda: (tmp_path / "started").exists(), 30, what="the task to start")
    os.killpg(nanny.pid, signal.SIGINT)

    assert nanny.wait(timeout=30) == 0
    # The task ran to its end and was reported, rather than dying with its worker (its result
    # then left with every worker, so the future is pending again: computed anew if needed).
    wait_until(lambda: reported == ["finished"], 10, what="the task's completion report")


def test_nanny_restarts_a_worker_process_that_dies(daemons):
    daemons.scheduler()
    nanny = daemons.worker("--nworkers", "2")
    client = daemons.client()
    daemons.wait_for_workers(client, 2)
    before = addresses(client)

    victim = psutil.Process(nanny.pid).children()[0]
    victim.kill()
    victim.wait(10)

    wait_until(lambda: len(now := addresses(client)) == 2 and now != before, 30,
               what="a replacement worker")
    assert len(psutil.Process(nanny.pid).children()) == 2


def test_a_second_signal_to_the_nanny_stops_its_workers_at_once(daemons, tmp_path):
    daemons.scheduler()
    nanny = daemons.worker("--nworkers", "2", "--nthreads", "1")
    client = daemons.client()
    daemons.wait_for_workers(client, 2)
    client.submit(long_task, str(tmp_path), 600)
    wait_until(lambda: (tmp_path / "started").exists(), 30, what="the task to start")
    workers = psutil.Process(nanny.pid).children()

    nanny.send_signal(signal.SIGTERM)
    # The idle worker has drained and gone; the busy one waits for its task...
    wait_until(lambda: sum(map(alive, workers)) == 1, 30, what="the idle worker to exit")
    nanny.send_signal(signal.SIGTERM)

    # ...until the second signal: no ten-minute wait.
    assert nanny.wait(timeout=20) == 128 + signal.SIGTERM
    assert not any(map(alive, workers))

"""--local-directory gives each worker process a private scratch directory, removed at exit;
without one, jobs are kept in this user's own state directory."""

import os
import signal
import stat
import subprocess
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


def test_without_a_local_directory_jobs_are_kept_in_the_users_own_state_directory(daemons,
                                                                                tmp_path):
    # Not /tmp/sched-jobs, which every account shares: the first user's worker made it hers, and
    # the next user's worker failed with a bare "Permission denied".
    daemons.scheduler()
    worker = subprocess.Popen(  # not daemons.worker(), which gives every worker one
        [sys.executable, "-m", "dsched.cli.worker", daemons.address, "--host", "127.0.0.1",
         "--name", "w", "--nthreads", "1", "--log-level", "warning"], env=daemons.env)
    daemons.processes.append(worker)
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    result = client.submit_command(["echo", "hello"]).result(timeout=30).check()
    jobs = tmp_path / "state" / "sched" / "jobs" / "w"  # $XDG_STATE_HOME/sched/jobs/NAME
    assert result.log == str(jobs / "job-1.1.log")
    assert (jobs / "job-1.1.log").read_text() == "hello\n"
    assert stat.S_IMODE(jobs.stat().st_mode) == 0o700
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0

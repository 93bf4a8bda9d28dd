"""A job attempt's supervisor, a real process driven as the worker drives it (a record, a
locked log, orders on stdin, reports on stdout): exit codes, the log, the environment, time
limit, cancel, lease, the worker's end, its own death, and commands that cannot start."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from deadline import wait_until
from dsched.protocol import ops
from dsched.worker.jobrecords import (
    DIED_WHILE_RUNNING, log_path, new_record, open_locked_log, read_record, record_path, recover,
    supervisor_alive, write_record,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="process groups and the parent-death signal (Linux)")

KEY = "job-7.2"
#: A supervisor as a spawner's spare runs it: prepared (``Prepared``) before it reads its job.
PREPARED = ("import sys\nfrom dsched.worker.jobrecords import read_record\n"
            "from dsched.worker.jobguard import Prepared\n"
            "from dsched.worker.jobsupervisor import Supervision\n"
            "path, _, grace, lease, cgroup = sys.argv[1:]\n"
            "prepared = Prepared(cgroup)\n"
            "Supervision(path, read_record(path), float(grace), float(lease),\n"
            "            prepared=prepared).run()\n")


class Supervised:
    """One supervisor process and what it said."""

    def __init__(self, process: subprocess.Popen, record: str, log: str):
        self.process, self.record, self.log = process, record, log
        self.reports: list = []
        self._buffer = b""

    def report(self, timeout: float = 30.0):
        """The next op the supervisor says on stdout."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self.process.stdout], [], [],
                                        max(0.0, deadline - time.monotonic()))
            if not ready:
                raise AssertionError(f"the supervisor said nothing within {timeout:g}s")
            chunk = os.read(self.process.stdout.fileno(), 4096)
            if not chunk:
                raise AssertionError("the supervisor ended without saying more")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        op = ops.decode(json.loads(line))
        self.reports.append(op)
        return op

    def started(self) -> ops.AttemptStarted:
        op = self.report()
        assert type(op) is ops.AttemptStarted, op
        return op

    def ended(self, timeout: float = 30.0) -> ops.AttemptEnded:
        op = self.report(timeout)
        assert type(op) is ops.AttemptEnded, op
        assert self.process.wait(30) == 0
        return op

    def tell(self, line: str) -> None:
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()

    def output(self) -> str:
        with open(self.log) as file:
            return file.read()


@pytest.fixture
def supervise(tmp_path):
    """Start a supervisor for ``command``; every process it and its job started is killed at
    the end of the test."""
    started: list[Supervised] = []
    directory = tmp_path / "jobs"
    directory.mkdir()

    def start(command, *, time_limit=None, env=None, cwd=None, gpus=(), grace=0.2,
              lease=60.0, orders=(), cgroup="", prepared=False, code=None) -> Supervised:
        """``orders``: lines the worker said before the supervisor began to read; ``cgroup``:
        the job's own, in the worker's cgroup mode; ``prepared``: as a spare of a spawner;
        ``code``: run in its place (a spare's, changed by the test)."""
        record, log = record_path(str(directory), KEY), log_path(str(directory), KEY)
        job = {"command": command, "env": env or {}, "cwd": cwd, "time_limit": time_limit,
               "name": "test"}
        write_record(record, new_record(KEY, job, gpus, log, "w1"))
        lock = open_locked_log(log)
        read, write = os.pipe()
        os.write(write, b"".join(line.encode() + b"\n" for line in orders))
        arguments = [record, str(lock), str(grace), repr(time.monotonic() + lease)]
        process = subprocess.Popen(
            [sys.executable, "-c", code or PREPARED, *arguments, cgroup] if prepared or code else
            [sys.executable, "-m", "dsched.worker.jobsupervisor", *arguments,
             *((cgroup,) if cgroup else ())],
            stdin=read, stdout=subprocess.PIPE, pass_fds=(lock,), start_new_session=True)
        os.close(lock)
        os.close(read)
        process.stdin = os.fdopen(write, "wb")
        supervised = Supervised(process, record, log)
        started.append(supervised)
        return supervised

    yield start
    for supervised in started:
        for report in supervised.reports:
            if type(report) is ops.AttemptStarted:
                try:
                    os.killpg(report.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        supervised.process.kill()
        supervised.process.wait(30)
        try:
            supervised.process.stdin.close()
        except BrokenPipeError:  # an order it never read
            pass
        supervised.process.stdout.close()


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def read_pid(path) -> int:
    return int(wait_until(lambda: path.exists() and path.read_text().endswith("\n") and
                          path.read_text(), 30, what=f"{path.name} written"))


def in_background(tmp_path, then: str = "wait") -> list[str]:
    """A shell that starts ``sleep 600`` in the background, writes its pid, then ``then``."""
    return ["sh", "-c", f"sleep 600 & echo $! > {tmp_path / 'sleeper'}; {then}"]


def test_a_job_that_exits_0_completes_with_its_output_in_its_log(supervise):
    job = supervise(["sh", "-c", "echo to stdout; echo to stderr >&2"])
    started = job.started()
    assert started.key == KEY and started.log == job.log and started.pid > 0
    ended = job.ended()
    assert (ended.outcome, ended.exit_code, ended.error) == ("completed", 0, "")
    assert ended.started == started.started <= ended.ended
    assert job.output() == "to stdout\nto stderr\n"
    record = read_record(job.record)  # written before the supervisor exited
    assert record["pid"] == started.pid and record["ended"] == ended.to_wire()


def keeping_its_start(seconds: float) -> str:
    """The command line's supervisor, a command's start kept untold ``seconds`` in case it
    ends (``SAY_STARTED_AFTER``)."""
    return ("import sys\nfrom dsched.worker import jobsupervisor\n"
            f"jobsupervisor.SAY_STARTED_AFTER = {seconds!r}\n"
            "jobsupervisor.main(sys.argv[1:5])\n")


def test_a_job_that_ends_at_once_is_said_started_and_ended_in_one_write(supervise):
    """One wakeup of the worker for a short job's start and end (the scheduler then gets them
    in one message); the end is in the record before the worker hears it."""
    job = supervise(["true"], code=keeping_its_start(30.0))
    ready, _, _ = select.select([job.process.stdout], [], [], 30)
    assert ready, "the supervisor said nothing within 30 s"
    written = os.read(job.process.stdout.fileno(), 65536)  # all it has written so far
    recorded = read_record(job.record)["ended"]
    started, ended, rest = written.split(b"\n")
    assert rest == b""
    started, ended = (ops.decode(json.loads(line)) for line in (started, ended))
    assert type(started) is ops.AttemptStarted and type(ended) is ops.AttemptEnded
    assert ended.outcome == "completed" and recorded == ended.to_wire()
    assert job.process.wait(30) == 0


def test_a_job_that_runs_on_is_said_started_while_it_runs(supervise):
    job = supervise(["sleep", "600"], code=keeping_its_start(0.05))
    started = job.report(timeout=10)  # not held back until its end
    assert type(started) is ops.AttemptStarted and alive(started.pid)
    job.tell("kill")
    assert job.ended().outcome == "cancelled"


def test_a_non_zero_exit_fails_with_its_code_in_words(supervise):
    job = supervise(["sh", "-c", "exit 3"])
    job.started()
    ended = job.ended()
    assert (ended.outcome, ended.exit_code, ended.error) == ("failed", 3, "exited with code 3")


def test_the_job_sees_the_workers_environment_its_own_its_gpus_and_its_names(supervise, tmp_path,
                                                                               monkeypatch):
    monkeypatch.setenv("FROM_THE_WORKER", "w")
    names = ["FROM_THE_WORKER", "OWN", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
             "SCHED_JOB_ID", "SCHED_JOB_ATTEMPT", "SCHED_WORKER_NAME"]
    script = "import os, json; print(json.dumps([os.getcwd()] + [os.environ.get(n) for n in %r]))"
    job = supervise([sys.executable, "-c", script % names], env={"OWN": "mine"},
                    cwd=str(tmp_path), gpus=(0, 2))
    job.started()
    assert job.ended().outcome == "completed"
    assert json.loads(job.output()) == [str(tmp_path), "w", "mine", "0,2", "PCI_BUS_ID", "7", "2",
                                        "w1"]


def test_the_job_inherits_no_descriptor_but_its_standard_ones(supervise):
    # Not the log's lock (the supervisor holds it, not the job) nor any of the supervisor's.
    job = supervise([sys.executable, "-c", "import os; print(sorted(os.listdir('/proc/self/fd')))"])
    job.started()
    assert job.ended().outcome == "completed"
    assert job.output() == "['0', '1', '2', '3']\n"  # 3: the listing's own


def test_the_job_starts_with_the_signals_python_ignores_at_their_default(supervise):
    job = supervise(["grep", "SigIgn", "/proc/self/status"])
    job.started()
    assert job.ended().outcome == "completed"
    ignored = int(job.output().split()[1], 16)
    for signum in (signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & 1 << (signum - 1), signum


def test_a_command_is_looked_for_on_the_jobs_own_path(supervise, tmp_path):
    own = tmp_path / "bin"
    own.mkdir()
    (own / "only-here").write_text("#!/bin/sh\necho found\n")
    (own / "only-here").chmod(0o755)
    job = supervise(["only-here"], env={"PATH": f"{own}:/usr/bin:/bin"})
    job.started()
    assert job.ended().outcome == "completed" and job.output() == "found\n"
    missing = supervise(["true"], env={"PATH": str(own)})  # on the worker's PATH, not the job's
    assert missing.report().error == "cannot start: true: command not found"


def test_a_supervisor_that_cannot_go_back_to_its_directory_still_runs_the_job(supervise,
                                                                              tmp_path):
    # The job is spawned in its own directory by then: it runs, and its log says why the
    # supervisor is now in / (a worker whose directory it may no longer search).
    code = ("import os\n"
            "def refused(fd):\n"
            "    raise PermissionError(13, 'Permission denied')\n"
            "os.fchdir = refused\n") + PREPARED
    job = supervise([sys.executable, "-c", "import os; print(os.getcwd())"], cwd=str(tmp_path),
                    code=code)
    job.started()
    assert job.ended().outcome == "completed"
    note = (f"sched: {KEY}: its supervisor could not go back to its own directory (Permission "
            "denied); later jobs without one start in /")
    assert sorted(job.output().splitlines()) == sorted([note, str(tmp_path)])  # either first


def test_a_file_that_is_not_executable_is_refused_in_words(supervise, tmp_path):
    (tmp_path / "plain.sh").write_text("echo never\n")
    job = supervise(["./plain.sh"], cwd=str(tmp_path))
    ended = job.report()
    assert (type(ended), ended.error) == (ops.AttemptEnded, "cannot start: ./plain.sh: permission "
                                                            "denied")


def test_a_job_granted_no_gpu_sees_none(supervise, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    job = supervise(["sh", "-c", 'echo "[$CUDA_VISIBLE_DEVICES]"'])
    job.started()
    job.ended()
    assert job.output() == "[]\n"


def test_past_its_time_limit_a_job_gets_sigterm_then_sigkill(supervise):
    # It traps TERM and carries on: only the KILL after the grace period ends it.
    job = supervise(["sh", "-c", "trap 'echo got TERM' TERM; while :; do sleep 0.05; done"],
                    time_limit=0.5, grace=0.3)
    job.started()
    ended = job.ended()
    assert ended.outcome == "timeout" and ended.exit_code == -signal.SIGKILL
    assert ended.error == "killed after running past its time limit of 0.5 s"
    assert ended.ended - ended.started >= 0.8
    assert "got TERM" in job.output()
    assert "sched: job-7.2 killed after running past its time limit" in job.output()


def test_a_cancelled_job_ends_on_sigterm_within_its_grace(supervise):
    job = supervise(["sleep", "600"], grace=30)
    job.started()
    job.tell("kill")
    ended = job.ended(timeout=10)  # well within the grace: SIGTERM was enough
    assert (ended.outcome, ended.exit_code) == ("cancelled", -signal.SIGTERM)
    assert ended.error == "killed because it was cancelled"


def test_a_job_outliving_its_lease_is_killed_and_lost(supervise):
    job = supervise(["sleep", "600"], lease=2.5)  # long enough for it to start under load
    job.started()
    ended = job.ended()
    assert (ended.outcome, ended.exit_code) == ("lost", -signal.SIGTERM)
    assert "lost the scheduler for longer than its job lease" in ended.error


def test_a_job_whose_lease_is_over_before_it_is_spawned_is_not_started(supervise, tmp_path):
    marker = tmp_path / "ran"
    job = supervise(["touch", str(marker)], lease=-1.0)
    ended = job.ended()  # the first thing it says: no AttemptStarted
    assert (ended.outcome, ended.exit_code, ended.started) == ("lost", None, None)
    assert ended.error == ("not started: its worker had lost the scheduler for longer than its "
                           "job lease")
    assert not marker.exists()
    assert job.output() == f"sched: {KEY} {ended.error}\n"


def test_a_lease_renewed_while_the_supervisor_started_lets_the_job_run(supervise):
    job = supervise(["true"], lease=-1.0, orders=[repr(time.monotonic() + 60)])
    job.started()
    assert job.ended().outcome == "completed"


def test_renewed_leases_keep_a_job_running(supervise):
    job = supervise(["sleep", "1"], lease=0.4)
    done = threading.Event()

    def renew():  # as the worker does on each Lease: a short lease, renewed in time
        while not done.wait(0.1):
            try:
                job.tell(repr(time.monotonic() + 0.4))
            except (BrokenPipeError, ValueError):  # it has ended
                return

    renewing = threading.Thread(target=renew)
    renewing.start()
    try:
        job.started()
        assert job.ended().outcome == "completed"
    finally:
        done.set()
        renewing.join()


def test_end_of_file_from_the_worker_kills_the_group_at_once(supervise, tmp_path):
    job = supervise(in_background(tmp_path), grace=30)
    leader = job.started().pid
    sleeper = read_pid(tmp_path / "sleeper")

    job.process.stdin.close()

    ended = job.ended(timeout=10)  # at once: not after the 30 s grace
    assert (ended.outcome, ended.exit_code) == ("lost", -signal.SIGKILL)
    assert ended.error == "killed because its worker process ended while it ran"
    assert not alive(leader) and not alive(sleeper)


def test_what_a_job_leaves_in_its_group_dies_when_it_exits(supervise, tmp_path):
    job = supervise(in_background(tmp_path, then="exit 0"))
    job.started()
    assert job.ended().outcome == "completed"
    wait_until(lambda: not alive(read_pid(tmp_path / "sleeper")), 10,
               what="the background sleep to be killed")


def job_cgroup(tmp_path, mode: str) -> str:
    """The cgroup a worker in ``mode`` gives the job ("" in subreaper mode); skip where cgroup
    mode is not possible."""
    from dsched.worker import containment

    if mode == containment.SUBREAPER:
        return ""
    try:
        return containment.choose(mode, "test", str(tmp_path)).cgroup_for(KEY)
    except OSError as error:
        pytest.skip(f"cgroup mode is not possible on this machine: {error}")


@pytest.mark.parametrize("prepared", [False, True])
@pytest.mark.parametrize("mode", ["cgroup", "subreaper"])
def test_what_a_job_starts_in_another_session_is_killed_before_its_end_is_said(
        supervise, tmp_path, mode, prepared):
    cgroup = job_cgroup(tmp_path, mode)
    pidfile = tmp_path / "escapee"
    # Orphaned at once, in a session of its own: neither the job's group nor its child.
    escape = f"(setsid sh -c 'echo $$ > {pidfile}.tmp && mv {pidfile}.tmp {pidfile}; " \
             "exec sleep 600' &)"
    job = supervise(["sh", "-c", f"{escape}; while [ ! -e {pidfile} ]; do sleep 0.01; done"],
                    cgroup=cgroup, prepared=prepared)
    job.started()
    escapee = read_pid(pidfile)
    try:
        assert job.ended().outcome == "completed"
        assert not alive(escapee)  # already: the job's GPUs are free once it is said to end
        assert not cgroup or not os.path.exists(cgroup)
    finally:
        if alive(escapee):
            os.kill(escapee, signal.SIGKILL)


@pytest.mark.parametrize("mode", ["cgroup", "subreaper"])
@pytest.mark.parametrize("why", ["lease", "command"])
def test_a_prepared_supervisor_whose_job_does_not_start_leaves_no_guard_and_no_cgroup(
        supervise, tmp_path, mode, why):
    cgroup = job_cgroup(tmp_path, mode)
    job = supervise(["true"] if why == "lease" else ["no-such-command-here"], cgroup=cgroup,
                    lease=-1.0 if why == "lease" else 60.0, prepared=True)
    ended = job.ended()  # said, and written before the supervisor exited: it was not killed
    assert ended.started is None and ended.error.startswith(
        "not started" if why == "lease" else "cannot start")
    assert read_record(job.record)["ended"] == ended.to_wire()
    session = job.process.pid
    wait_until(lambda: not [p for p in psutil.pids() if _session(p) == session], 10,
               what="the supervisor's session (its guard) to be gone")
    assert not cgroup or not os.path.exists(cgroup)


def _session(pid: int) -> int:
    try:
        return os.getsid(pid)
    except OSError:
        return 0


def test_orphans_that_end_while_the_job_runs_are_reaped_at_once(supervise, tmp_path):
    pidfile = tmp_path / "orphan"
    # Orphaned at once, so handed to the supervisor; it ends soon, long before the job.
    job = supervise(["sh", "-c", f"(setsid sh -c 'echo $$ > {pidfile}; sleep 0.2' &); "
                                 "sleep 600"])
    job.started()
    orphan = read_pid(pidfile)
    # Not left a zombie until the job ends: a long job would pile them up.
    wait_until(lambda: not psutil.pid_exists(orphan), 10, what="the ended orphan to be reaped")
    job.tell("kill")
    assert job.ended().outcome == "cancelled"


def test_a_killed_supervisor_takes_the_job_with_it_and_leaves_no_outcome(supervise, tmp_path):
    job = supervise(in_background(tmp_path))
    leader = job.started().pid
    sleeper = read_pid(tmp_path / "sleeper")
    assert supervisor_alive(job.log)

    job.process.kill()

    wait_until(lambda: not alive(leader) and not alive(sleeper), 10, what="the job's group to die")
    job.process.wait(10)
    assert not supervisor_alive(job.log)
    # A worker process that starts now finds it lost, died under its worker.
    ended, = recover(os.path.dirname(job.record), wait=5)
    assert (ended.key, ended.outcome, ended.error) == (KEY, "lost", DIED_WHILE_RUNNING)


@pytest.mark.parametrize("command, cwd, error", [
    (["no-such-command-here"], None, "cannot start: no-such-command-here: command not found"),
    (["./not-here.sh"], None, "cannot start: ./not-here.sh: no such file"),
    ([""], None, "cannot start: its command's first word is empty"),  # an array's element
    (["true"], "/no/such/directory", "cannot start: its working directory /no/such/directory "
                                     "does not exist"),
])
def test_a_command_that_cannot_start_fails_without_an_exit_code(supervise, command, cwd, error):
    job = supervise(command, cwd=cwd)
    ended = job.report()  # no AttemptStarted: nothing was spawned
    assert type(ended) is ops.AttemptEnded and job.process.wait(30) == 0
    assert (ended.outcome, ended.exit_code, ended.error, ended.started) == ("failed", None, error,
                                                                            None)
    assert job.output() == f"sched: {error.replace('cannot start:', 'cannot start job-7.2:')}\n"

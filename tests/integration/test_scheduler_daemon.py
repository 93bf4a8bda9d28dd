"""sched-scheduler as a program: it starts, tells systemd, logs placements, drains, and fails
clearly when it cannot start. (tests/integration/test_systemd.py has the watchdog and the
units.)"""

import itertools
import os
import signal
import socket
import subprocess
import sys
import time

import cloudpickle
import pytest

from deadline import wait_until, wait_until_async

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def slow(seconds, value):
    import time

    time.sleep(seconds)
    return value


def fail(x):
    raise ValueError(f"bad {x}")


def scheduler_command(*args):
    return [sys.executable, "-m", "dsched.cli.scheduler", "--host", "127.0.0.1", *args]


def test_it_tells_systemd_it_is_ready_once_listening_and_stopping_on_sigterm(daemons, notify,
                                                                           tmp_path):
    with open(tmp_path / "scheduler.log", "wb") as log:
        # Not daemons.scheduler(), which waits for the line printed after READY.
        process = subprocess.Popen(
            scheduler_command("--port", "0", "--state-dir", str(tmp_path / "state")),
            env={**daemons.env, "NOTIFY_SOCKET": notify.name},
            stdout=subprocess.DEVNULL, stderr=log)
    daemons.processes.append(process)
    ready = notify.until(lambda fields: "READY" in fields, what="READY=1")
    # Right after READY, before anything else: the port is already bound.
    host, port = ready["STATUS"].removeprefix("Listening at ").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10):
        pass
    assert notify.received[:2] == [{"STATUS": "Starting: loading the job journal"},
                                   {"STATUS": "Starting: listening on 127.0.0.1:0"}]
    assert ready == {"READY": "1", "STATUS": f"Listening at {host}:{port}"}
    process.send_signal(signal.SIGTERM)
    stopping = notify.until(lambda fields: "STOPPING" in fields, what="STOPPING=1")
    assert stopping == {"STOPPING": "1", "STATUS": "Received SIGTERM: draining"}
    assert process.wait(30) == 0


def test_a_taken_port_is_a_clear_error_and_a_non_zero_exit(daemons):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(scheduler_command("--port", str(port)), env=daemons.env,
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 78  # EX_CONFIG: starting it again unchanged would fail again
    assert f"Cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "in use" in result.stderr


def test_an_invalid_config_file_is_a_clear_error(daemons, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[scheduler]\nprot = 8786\n")
    result = subprocess.run(scheduler_command("--config", str(bad)), env=daemons.env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "prot" in result.stderr and "port" in result.stderr and str(bad) in result.stderr


def test_a_placement_is_logged_with_its_demand_at_debug(daemons):
    daemons.scheduler("--log-level", "debug")
    daemons.worker("--resources", "GPU=1", "--name", "gpu-worker")
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    assert client.submit(slow, 0, 7, resources={"GPU": 1}).result(timeout=30) == 7
    daemons.scheduler_process.send_signal(signal.SIGTERM)
    daemons.scheduler_process.wait(30)
    log = daemons.scheduler_log()
    assert "(requires GPU=1) on worker gpu-worker" in log


def test_the_log_is_quiet_at_info_one_line_per_operator_event_not_per_task(daemons):
    daemons.scheduler()  # --log-level info
    daemons.worker("--name", "w", "--nthreads", "2")
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    assert client.gather(client.map(slow, [0] * 500, range(500))) == list(range(500))
    client.submit(slow, 0, 1, resources={"GPU": 1})  # cannot run: that is worth a line
    wait_until(lambda: "cannot run: no worker offers resource GPU" in daemons.scheduler_log(),
               what="the unrunnable line")
    lines = daemons.scheduler_log().splitlines()
    assert len(lines) < 10, "\n".join(lines)


def test_a_thousand_failures_cost_the_info_log_a_line_not_a_traceback_each(daemons):
    from dsched import wait

    daemons.scheduler()  # --log-level info
    daemons.worker("--name", "w", "--nthreads", "2")
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    failed = client.map(fail, range(1000))
    wait(failed, timeout=60)
    assert {future.status for future in failed} == {"error"}
    log = daemons.scheduler_log()
    assert "Traceback" not in log  # at DEBUG only
    erred = [line for line in log.splitlines() if "erred" in line]
    assert len(erred) == 1 and "erred (exception): ValueError: bad" in erred[0], erred
    assert len(log.splitlines()) < 10, log


def one_task_running(daemons, seconds: float, value: str):
    """A worker of one thread and a client whose task of ``seconds`` runs there: both."""
    daemons.worker("--nthreads", "1")
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    running = client.submit(slow, seconds, value)
    wait_until(lambda: client.scheduler_info()["tasks"].get("processing"), what="task running")
    return client, running


def test_sigterm_lets_running_tasks_finish_then_exits(daemons):
    daemons.scheduler()
    client, running = one_task_running(daemons, 1.0, "done")
    daemons.scheduler_process.send_signal(signal.SIGTERM)
    assert running.result(timeout=30) == "done"
    assert daemons.scheduler_process.wait(30) == 0


def test_a_drain_that_runs_out_of_time_says_how_many_tasks_were_still_running(daemons):
    from dsched import SchedulerLostError

    daemons.scheduler(env={"SCHED_SCHEDULER__DRAIN_TIMEOUT": "0.5"})
    client, never = one_task_running(daemons, 60, "never")
    daemons.scheduler_process.send_signal(signal.SIGTERM)
    assert daemons.scheduler_process.wait(30) == 0
    log = daemons.scheduler_log()
    assert ("Draining: new tasks and jobs are refused; waiting up to 0.5 s for the running "
            "tasks to end") in log
    assert "Stopping with 1 task(s) still running, after draining for 0.5 s" in log
    with pytest.raises(SchedulerLostError, match="the scheduler stopped with 1 task"):
        never.result(timeout=30)


def test_a_second_signal_exits_at_once(daemons):
    daemons.scheduler()
    # Held, so it is not released and cancelled.
    client, never = one_task_running(daemons, 60, "never")
    started = time.monotonic()
    daemons.scheduler_process.send_signal(signal.SIGTERM)
    wait_until(lambda: "draining" in daemons.scheduler_log(), what="drain")
    daemons.scheduler_process.send_signal(signal.SIGTERM)
    assert daemons.scheduler_process.wait(30) == 128 + signal.SIGTERM
    assert time.monotonic() - started < 20
    assert not never.done() or never.status == "lost"


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux only")
def test_the_help_names_every_option():
    result = subprocess.run([sys.executable, "-m", "dsched.cli.scheduler", "--help"],
                            capture_output=True, text=True, timeout=60)
    for option in ("--host", "--port", "--token-file", "--tls-cert", "--state-dir", "--config",
                   "--log-level"):
        assert option in result.stdout


def test_an_unusable_state_directory_is_one_line_and_a_non_zero_exit(daemons, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = subprocess.run(scheduler_command("--state-dir", str(blocker / "state")),
                            env=daemons.env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    (line,) = [line for line in result.stderr.splitlines() if "error" in line]
    assert line.startswith("sched-scheduler: error: cannot create the state directory")
    assert "Traceback" not in result.stderr


def test_the_address_it_gives_clients_is_one_they_can_connect_to():
    from types import SimpleNamespace

    from dsched.scheduler.server import Scheduler
    from dsched.settings import CommConfig, SchedulerConfig

    scheduler = Scheduler(SchedulerConfig(host="0.0.0.0", port=0), CommConfig(), token="t")
    scheduler.listener = SimpleNamespace(host="0.0.0.0", port=8786)  # as if listening
    host, port = scheduler.address.rsplit(":", 1)
    assert port == "8786" and host not in ("0.0.0.0", "")


async def test_a_committed_batch_that_cannot_be_carried_out_stops_the_scheduler(tmp_path,
                                                                                monkeypatch):
    """Actions wait behind their journal commit: a failure while carrying them out must stop
    the scheduler with the reason (``fatal``: the program then exits 1), not leave every later
    action waiting behind it, unseen."""
    import asyncio

    from dsched.scheduler import actions as act
    from dsched.scheduler import events as ev
    from dsched.scheduler.journal import Journal
    from dsched.scheduler.server import Scheduler
    from dsched.settings import CommConfig, SchedulerConfig

    journal = Journal(str(tmp_path / "jobs.db"))
    scheduler = Scheduler(SchedulerConfig(host="127.0.0.1", port=0, tick_interval=0.01),
                          CommConfig(), token="t", journal=journal)
    handle = scheduler.state.handle
    # A planted bug: the first tick's batch holds an action the shell does not know.
    batches = [[act.JournalWrite(rows=({"id": 1},), causes=frozenset({"submit"})), object()]]
    monkeypatch.setattr(scheduler.state, "handle", lambda event: batches.pop()
                        if batches and type(event) is ev.Tick else handle(event))
    await scheduler.start()
    try:
        reason = await asyncio.wait_for(scheduler.fatal, 30)
    finally:
        await scheduler.close()
        journal.close()

    assert reason.startswith("carrying out a journal commit failed: TypeError: unknown "
                             "scheduler action")


async def test_a_bug_in_the_core_stops_the_scheduler_and_nothing_of_that_event_is_carried_out(
        tmp_path, monkeypatch):
    """Crash-only, as the worker: a handler that raises stops the scheduler (``fatal``: the
    program exits 1, and the journal makes its restart safe), and the half-made decision, its
    journal rows included, is never carried out, by that event or a later one."""
    import asyncio

    from dsched import Client
    from dsched.scheduler.journal import Journal
    from dsched.scheduler.server import Scheduler
    from dsched.settings import CommConfig, SchedulerConfig

    journal = Journal(str(tmp_path / "jobs.db"))
    scheduler = Scheduler(SchedulerConfig(host="127.0.0.1", port=0, tick_interval=0.01),
                          CommConfig(), token="t", journal=journal)
    schedule = scheduler.state.placer.schedule

    def planted() -> None:  # a bug after the submit was journaled, before it was answered
        if scheduler.state.jobs.jobs:
            raise RuntimeError("planted")
        schedule()

    monkeypatch.setattr(scheduler.state.placer, "schedule", planted)
    await scheduler.start()
    client = await Client(scheduler.address, token="t", asynchronous=True, timeout=5)
    try:
        client.submit_command(["true"])
        reason = await asyncio.wait_for(scheduler.fatal, 30)
        assert reason.startswith("a bug in the scheduler's core, handling JobsSubmitted: "
                                 "RuntimeError: planted")
        assert scheduler.state.out.actions == [] and not scheduler.state.out.rows
        assert journal.load() == []
    finally:
        await client.close()
        await scheduler.close()
        journal.close()


# -- the shell's task group: the ticker, the commits and the connections' handlers ------------


def scheduler_tasks() -> list:
    """The asyncio tasks running code of the scheduler's shell (its activities: named after
    it) or its listener."""
    import asyncio

    def ours(task) -> bool:
        code = getattr(task.get_coro(), "cr_code", None)
        return task.get_name().startswith("scheduler: ") or code is not None and (
            "dsched/scheduler/" in code.co_filename
            or code.co_filename.endswith("dsched/comm/listener.py"))

    return [task for task in asyncio.all_tasks() if not task.done() and ours(task)]


_FAKE_PORTS = itertools.count(20000)  # where the workers that join_as_worker makes say they are


async def join_as_worker(address: str, name: str, token: str = "t"):
    """A connection that registers as a worker (one that never runs anything)."""
    from dsched.comm import connect
    from dsched.protocol import ops

    comm = await connect(address, role="worker", name=name, token=token)
    await comm.send(ops.Register(name=name, address=f"127.0.0.1:{next(_FAKE_PORTS)}",
                                 nthreads=1, job_lease=60.0).to_wire())
    assert type(ops.decode((await comm.recv())[0])) is ops.Registered
    return comm


async def test_close_ends_every_task_of_the_scheduler_while_peers_are_connected(tmp_path):
    """Close with a worker and a client connected, a job journaled and dispatched: it tells
    them, and when it returns (soon) no task of the scheduler is left running."""
    import asyncio

    from dsched import Client
    from dsched.errors import CommClosedError
    from dsched.scheduler.journal import Journal
    from dsched.scheduler.server import Scheduler
    from dsched.settings import CommConfig, SchedulerConfig

    journal = Journal(str(tmp_path / "jobs.db"))
    scheduler = Scheduler(SchedulerConfig(host="127.0.0.1", port=0, tick_interval=0.01),
                          CommConfig(), token="t", journal=journal)
    await scheduler.start()
    worker = await join_as_worker(scheduler.address, "w")
    client = await Client(scheduler.address, token="t", asynchronous=True, timeout=5)
    try:
        client.submit_command(["true"])
        while "execute" not in ops_of(await asyncio.wait_for(worker.recv(), 30)):
            pass  # committed, then dispatched
        assert scheduler_tasks()
        started = asyncio.get_running_loop().time()
        await scheduler.close("closing for the test")
        assert asyncio.get_running_loop().time() - started < 5
        assert scheduler_tasks() == []
        with pytest.raises(CommClosedError, match="closing for the test"):
            while True:
                await worker.recv()
    finally:
        await client.close()
        await worker.close("done")
        journal.close()


def ops_of(batch) -> list[str]:
    return [op["op"] for op in batch]


async def test_a_journal_commit_that_hangs_holds_close_up_for_the_close_timeout_at_most(
        tmp_path, monkeypatch, caplog):
    import asyncio
    import threading

    from dsched import Client
    from dsched.scheduler.journal import Journal
    from dsched.scheduler.server import Scheduler
    from dsched.settings import CommConfig, SchedulerConfig

    journal = Journal(str(tmp_path / "jobs.db"))
    scheduler = Scheduler(SchedulerConfig(host="127.0.0.1", port=0), CommConfig(close_timeout=0.5),
                          token="t", journal=journal)
    disk = threading.Event()  # a disk that does not answer until the end of the test
    writing = threading.Event()

    def stuck(rows):
        writing.set()
        disk.wait(30)

    monkeypatch.setattr(journal, "write", stuck)
    await scheduler.start()
    client = await Client(scheduler.address, token="t", asynchronous=True, timeout=5)
    try:
        client.submit_command(["true"])
        await wait_until_async(writing.is_set, what="the commit reached the disk")
        started = asyncio.get_running_loop().time()
        await scheduler.close()
        assert asyncio.get_running_loop().time() - started < 3
        assert scheduler_tasks() == []
        assert "A journal commit had not ended 0.5 s after closing; cancelled" in caplog.text
    finally:
        disk.set()
        await client.close()
        journal.close()


async def test_a_tick_that_raises_stops_the_scheduler_and_its_group_ends_every_connection(
        monkeypatch):
    """Crash-only, as the worker: the ticker raised, so the scheduler stops with the reason
    (``fatal``: the program exits 1) and the group cancels the connections' handlers."""
    import asyncio

    from dsched.errors import CommClosedError
    from dsched.scheduler.server import Scheduler
    from dsched.settings import CommConfig, SchedulerConfig

    scheduler = Scheduler(SchedulerConfig(host="127.0.0.1", port=0, tick_interval=0.01),
                          CommConfig(), token="t")
    await scheduler.start()
    worker = await join_as_worker(scheduler.address, "w")
    try:
        def planted(now, stopping=False):
            raise RuntimeError("planted")

        monkeypatch.setattr(scheduler._log, "tick", planted)
        reason = await asyncio.wait_for(scheduler.fatal, 30)
        assert reason == "the scheduler's tick failed: RuntimeError: planted"
        with pytest.raises(CommClosedError):
            while True:
                await asyncio.wait_for(worker.recv(), 30)
        await wait_until_async(lambda: not scheduler_tasks(), what="the group ended")
        assert not scheduler.workers
    finally:
        monkeypatch.undo()
        await scheduler.close()
        await worker.close("done")


async def test_a_connection_handler_that_raises_stops_the_scheduler(monkeypatch):
    import asyncio

    from dsched import Client
    from dsched.errors import SchedulerLostError
    from dsched.scheduler.server import Scheduler
    from dsched.settings import CommConfig, SchedulerConfig

    scheduler = Scheduler(SchedulerConfig(host="127.0.0.1", port=0), CommConfig(), token="t")
    await scheduler.start()
    client = await Client(scheduler.address, token="t", asynchronous=True, timeout=5)
    try:
        def planted():
            raise RuntimeError("planted")

        monkeypatch.setattr(scheduler, "info", planted)
        with pytest.raises(SchedulerLostError):
            await client.scheduler_info()
        reason = await asyncio.wait_for(scheduler.fatal, 30)
        assert reason == "serving a connection failed: RuntimeError: planted"
        await wait_until_async(lambda: not scheduler_tasks(), what="the group ended")
    finally:
        await client.close()
        await scheduler.close()


async def test_peers_that_vanish_or_send_a_bad_op_end_only_their_own_connection():
    import asyncio

    from dsched import Client
    from dsched.errors import CommClosedError
    from dsched.scheduler.server import Scheduler
    from dsched.settings import CommConfig, SchedulerConfig

    scheduler = Scheduler(SchedulerConfig(host="127.0.0.1", port=0, tick_interval=0.01),
                          CommConfig(), token="t")
    await scheduler.start()
    client = await Client(scheduler.address, token="t", asynchronous=True, timeout=5)
    try:
        rude = await join_as_worker(scheduler.address, "rude")
        await rude.send({"op": "submit", "tasks": []})  # not a worker's op
        with pytest.raises(CommClosedError, match="submit is not an op a registered worker"):
            await asyncio.wait_for(rude.recv(), 30)
        gone = await join_as_worker(scheduler.address, "gone")
        gone.abort("vanishing")  # no goodbye
        await wait_until_async(lambda: not scheduler.workers, what="both workers removed")
        assert not scheduler.fatal.done() and not scheduler._ticker.done()
        assert (await client.scheduler_info())["workers"] == {}
    finally:
        await client.close()
        await scheduler.close()


# -- the state directory and the journal: one scheduler each, refused at start, errors said --


def test_a_second_scheduler_on_a_state_directory_in_use_exits_78_naming_the_holder(daemons):
    address = daemons.scheduler()  # the default state directory, as the second one's
    state = daemons.tmp_path / "state" / "sched"
    pid = daemons.scheduler_process.pid
    second = subprocess.run(scheduler_command("--port", "0"), env=daemons.env,
                            capture_output=True, text=True, timeout=60)
    assert second.returncode == 78  # EX_CONFIG: it would fail the same way until the first goes
    assert second.stderr.splitlines() == [
        f"sched-scheduler: error: the state directory {state} is in use by another scheduler "
        f"(pid {pid}, listening at {address}): give each scheduler its own --state-dir "
        "(scheduler.state_dir)"]
    assert daemons.client().submit_command("true", hold=True).job_id(timeout=30) == 1
    daemons.scheduler_process.kill()  # the lock goes with its holder, however it ends
    daemons.scheduler_process.wait()
    daemons.scheduler()
    assert daemons.client().jobs()["total"] == 1


def test_a_journal_that_cannot_be_written_is_refused_at_start_with_78(daemons, tmp_path):
    from storage_helpers import read_only_file

    state = tmp_path / "state-dir"
    daemons.scheduler("--state-dir", str(state))
    daemons.scheduler_process.send_signal(signal.SIGTERM)
    assert daemons.scheduler_process.wait(30) == 0
    journal = state / "jobs.sqlite"
    with read_only_file(journal):
        result = subprocess.run(scheduler_command("--port", "0", "--state-dir", str(state)),
                                env=daemons.env, capture_output=True, text=True, timeout=60)
    # Said at start, not by the first submission that cannot be kept.
    assert result.returncode == 78
    assert result.stderr.splitlines() == [
        f"sched-scheduler: error: the journal {journal} cannot be written: attempt to write a "
        "readonly database; make it (and its directory) writable by this user, or choose "
        "another --state-dir (scheduler.state_dir)"]


def test_a_full_disk_stops_the_scheduler_saying_the_disk_is_full(daemons, tmp_path):
    from storage_helpers import tiny_filesystem

    with tiny_filesystem(tmp_path / "small", "256k") as state:
        try:
            daemons.scheduler("--state-dir", str(state))
            client = daemons.client()
            client.submit_command(["echo", "x" * 1_000_000])  # more than the disk holds
            assert daemons.scheduler_process.wait(30) == 1
        finally:
            daemons.stop()  # nothing may hold the filesystem when it is unmounted
    log = daemons.scheduler_log()
    assert (f"CRITICAL dsched.scheduler: Stopping: cannot write the journal "
            f"{state / 'jobs.sqlite'}: database or disk is full") in log, log
    assert "cannot rollback" not in log


# -- SIGHUP: the end of the session that started it drains it, as SIGTERM does ----------------


def test_sighup_drains_as_sigterm_does_and_a_second_one_does_not_cut_the_drain_short(daemons):
    daemons.scheduler()
    client, running = one_task_running(daemons, 1.0, "done")
    # Closing an SSH session sends it twice: from the shell, then from the kernel.
    daemons.scheduler_process.send_signal(signal.SIGHUP)
    wait_until(lambda: "Received SIGHUP: draining" in daemons.scheduler_log(), what="drain")
    daemons.scheduler_process.send_signal(signal.SIGHUP)
    assert running.result(timeout=30) == "done"
    assert daemons.scheduler_process.wait(30) == 0
    log = daemons.scheduler_log()
    assert "INFO dsched: Received SIGHUP: draining (SIGTERM to exit at once)" in log
    assert "Received SIGHUP: already draining" in log


def test_a_scheduler_started_with_sighup_ignored_keeps_ignoring_it(daemons):
    daemons.scheduler(prefix=("nohup",))  # what nohup asks: outlive the session
    daemons.scheduler_process.send_signal(signal.SIGHUP)  # ignored: dropped on sending
    daemons.scheduler_process.send_signal(signal.SIGTERM)
    assert daemons.scheduler_process.wait(30) == 0
    log = daemons.scheduler_log()
    assert "Received SIGTERM: draining" in log and "SIGHUP" not in log

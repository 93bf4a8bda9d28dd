"""A worker running shell-command jobs for a stand-in scheduler on loopback: a job runs and
reports, its log is served on the data port, its record goes once acknowledged; a cancel; the
lease kept alive by heartbeats and running out without them; a restarted worker (same name,
same job directory) reports what the earlier one left, the attempt it was running as lost."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time

import psutil
import pytest

from deadline import wait_until_async
from dsched.comm import connect, listen
from dsched.protocol import ops
from dsched.resources import Resources
from dsched.settings import CommConfig, WorkerConfig
from dsched.worker.jobrecords import log_path, supervisor_alive
from dsched.worker.server import Worker, WorkerSetup
from dsched.worker.task import WorkerTaskState

TOKEN = "jobs-test-token"


class StandInScheduler:
    """Welcomes each worker, answers its heartbeats with leases while ``leasing``, and keeps
    every other op it sends."""

    def __init__(self) -> None:
        self.registers: list[ops.Register] = []
        self.received: list = []
        self.comm = None
        self.leasing = True

    async def serve(self, comm) -> None:
        batch = await comm.recv()
        self.registers.append(ops.decode(batch[0]))
        await comm.send({"op": "registered", "address": "127.0.0.1:1"})
        self.comm = comm
        async for d in comm:
            op = ops.decode(d)
            if type(op) is ops.Heartbeat:
                if self.leasing:
                    comm.write_nowait(ops.Lease(op.sent).to_wire())
            else:
                self.received.append(op)

    def send(self, *sent) -> None:
        for op in sent:
            self.comm.write_nowait(op.to_wire())

    async def told(self, kind, key, timeout=30.0):
        """The first ``kind`` op the worker sent about ``key``, once it has."""
        def find():
            return next((op for op in self.received if type(op) is kind and op.key == key), None)
        return await wait_until_async(find, timeout, what=f"{kind.__name__} of {key}")


@pytest.fixture
async def cluster(tmp_path):
    """Start workers (named w1, one thread, jobs in tmp_path/jobs) for one stand-in scheduler;
    all closed at the end."""
    scheduler = StandInScheduler()
    listener = await listen("127.0.0.1", 0, scheduler.serve, token=TOKEN, accept_roles={"worker"})
    workers: list[Worker] = []

    async def start(nthreads: int = 1, **settings) -> Worker:
        config = WorkerConfig(**{
            "scheduler_address": listener.address, "host": "127.0.0.1", "name": "w1",
            "local_directory": str(tmp_path), "job_directory": str(tmp_path / "jobs"),
            "reconnect_backoff_min": 0.05, "reconnect_backoff_max": 0.1, "job_kill_grace": 0.5,
            **settings})
        worker = Worker(config, CommConfig(), WorkerSetup(token=TOKEN, nthreads=nthreads,
                                                          resources=Resources.parse({})))
        workers.append(worker)
        await worker.start()
        await worker.wait_registered(30)
        await wait_until_async(lambda: scheduler.comm is not None, 30, what="a session")
        return worker

    scheduler.start = start
    yield scheduler
    for worker in workers:
        await worker.close()
    await listener.close()


def job(key: str, *command: str, time_limit=None, hold=False) -> ops.Execute:
    return ops.Execute(key, (b"", b""), job={"command": list(command), "env": {}, "cwd": None,
                                             "time_limit": time_limit, "name": "test"},
                       hold=hold)


async def get_log(worker: Worker, key: str, offset: int = 0) -> ops.Log:
    comm = await connect(worker.address, role="client", name="test", token=TOKEN)
    try:
        await comm.send(ops.GetLog(7, key, offset).to_wire())
        reply = ops.decode((await comm.recv())[0])
    finally:
        await comm.close()
    assert type(reply) is ops.Log and reply.id == 7
    return reply


async def test_a_job_is_told_its_worker_and_scratch_directory_and_os_environ_stays_as_it_was(
        cluster):
    before = dict(os.environ)
    worker = await cluster.start()
    cluster.send(job("job-2.1", "sh", "-c",
                     'echo "$SCHED_WORKER_NAME|$SCHED_LOCAL_DIRECTORY|$CUDA_VISIBLE_DEVICES|"'))

    ended = await cluster.told(ops.AttemptEnded, "job-2.1")

    assert ended.outcome == "completed"
    told = f"w1|{worker.local_directory}||\n".encode()
    assert (await get_log(worker, "job-2.1")).data == told
    # The worker shares this process: what it tells its tasks went to its children only.
    assert dict(os.environ) == before


async def test_a_job_runs_reports_serves_its_log_and_is_forgotten_once_acknowledged(cluster,
                                                                                   tmp_path):
    worker = await cluster.start()
    register = cluster.registers[0]
    assert register.attempts == () and register.job_lease == WorkerConfig().job_lease
    cluster.send(job("job-1.1", "sh", "-c", "echo hello; exit 3"))

    started = await cluster.told(ops.AttemptStarted, "job-1.1")
    ended = await cluster.told(ops.AttemptEnded, "job-1.1")

    log = str(tmp_path / "jobs" / "job-1.1.log")
    assert started.log == ended.log == log and started.pid > 0
    assert (ended.outcome, ended.exit_code, ended.error) == ("failed", 3, "exited with code 3")
    assert await get_log(worker, "job-1.1") == ops.Log(7, b"hello\n", 6, ended=True)
    assert await get_log(worker, "job-1.1", offset=2) == ops.Log(7, b"llo\n", 6, ended=True)
    assert (await get_log(worker, "job-9.1")).error == "no log of job-9.1 on this worker"
    assert "not the key of a job attempt" in (await get_log(worker, "../../etc/passwd")).error

    record = tmp_path / "jobs" / "job-1.1.json"
    assert record.exists()
    assert not worker.jobs.machine_restarted  # said once a session opened: not said again
    cluster.send(ops.AttemptAck(("job-1.1",)))
    await wait_until_async(lambda: not record.exists(), 30, what="the record to be deleted")
    assert (await get_log(worker, "job-1.1")).data == b"hello\n"  # the log stays


async def test_a_running_job_is_cancelled_and_its_log_says_it_is_running_until_then(cluster):
    worker = await cluster.start()
    cluster.send(job("job-2.1", "sh", "-c", "echo working; exec sleep 600"))
    await cluster.told(ops.AttemptStarted, "job-2.1")
    assert (await get_log(worker, "job-2.1")).ended is False

    cluster.send(ops.StopTask("job-2.1"))

    ended = await cluster.told(ops.AttemptEnded, "job-2.1")
    assert (ended.outcome, ended.error) == ("cancelled", "killed because it was cancelled")
    assert (await get_log(worker, "job-2.1")).ended is True
    assert worker.state.is_idle()


async def test_a_job_cancelled_while_it_waits_for_a_thread_ends_cancelled(cluster):
    await cluster.start()  # one thread
    cluster.send(job("job-3.1", "sleep", "600"), job("job-4.1", "true"))
    await cluster.told(ops.AttemptStarted, "job-3.1")

    cluster.send(ops.StopTask("job-4.1"))

    ended = await cluster.told(ops.AttemptEnded, "job-4.1")
    assert (ended.outcome, ended.error) == ("cancelled", "cancelled before it started")
    assert not [op for op in cluster.received
                if type(op) is ops.AttemptStarted and op.key == "job-4.1"]


async def test_heartbeats_renew_the_lease_and_without_them_the_job_is_lost(cluster):
    await cluster.start(job_lease=0.6, heartbeat_interval=0.1)
    cluster.send(job("job-3.1", "sleep", "600"))
    await cluster.told(ops.AttemptStarted, "job-3.1")
    # Leases keep it running past twice their length.
    since = time.monotonic()
    await wait_until_async(lambda: time.monotonic() - since > 1.5 or cluster.received[1:], 10)
    assert [type(op) for op in cluster.received] == [ops.AttemptStarted]

    cluster.leasing = False  # the scheduler goes quiet (the connection stays up)

    ended = await cluster.told(ops.AttemptEnded, "job-3.1", timeout=10)
    assert ended.outcome == "lost" and "longer than its job lease" in ended.error


async def test_a_job_sent_after_the_lease_ran_out_waits_for_a_new_lease(cluster):
    worker = await cluster.start(job_lease=0.6, heartbeat_interval=0.1)
    cluster.leasing = False  # the scheduler is slow to answer (the connection stays up)
    until = worker.state.attempts.lease_until
    await wait_until_async(lambda: time.monotonic() > until, 10, what="the lease to run out")
    cluster.send(job("job-4.1", "true"))
    await wait_until_async(lambda: worker.state.state_of("job-4.1"), 10, what="the Execute")
    assert worker.state.state_of("job-4.1") is WorkerTaskState.READY

    renewed = time.time()
    cluster.leasing = True
    started = await cluster.told(ops.AttemptStarted, "job-4.1")
    assert started.started >= renewed
    assert (await cluster.told(ops.AttemptEnded, "job-4.1")).outcome == "completed"


async def test_a_held_attempt_waits_for_its_proceed_and_runs_only_then(cluster, tmp_path):
    await cluster.start()
    marker = tmp_path / "ran"
    cluster.send(job("job-5.1", "touch", str(marker), hold=True))
    await wait_until_async(lambda: (tmp_path / "jobs" / "job-5.1.json").exists(), 30,
                           what="its record")
    proceeded = time.time()
    cluster.send(ops.Proceed(("job-5.1",)))

    started = await cluster.told(ops.AttemptStarted, "job-5.1")
    assert started.started >= proceeded
    assert (await cluster.told(ops.AttemptEnded, "job-5.1")).outcome == "completed"
    assert marker.exists()


async def test_a_held_attempt_never_told_to_proceed_does_not_start_within_its_lease(cluster,
                                                                                      tmp_path):
    await cluster.start(job_lease=1.0, heartbeat_interval=0.1)
    cluster.leasing = False  # the scheduler goes quiet: the lease runs out, no Proceed comes
    marker = tmp_path / "ran"
    cluster.send(job("job-6.1", "touch", str(marker), hold=True))

    ended = await cluster.told(ops.AttemptEnded, "job-6.1", timeout=10)
    assert ended.started is None and ended.error.startswith("not started: ")
    assert not marker.exists()
    assert [type(op) for op in cluster.received] == [ops.AttemptEnded]


async def test_a_held_attempt_whose_session_ends_is_dropped_unseen_and_runs_if_sent_again(
        cluster, tmp_path):
    worker = await cluster.start()
    marker = tmp_path / "ran"
    cluster.send(job("job-7.1", "touch", str(marker), hold=True))
    await wait_until_async(lambda: worker.jobs.pid_of("job-7.1"), 30, what="its supervisor")

    cluster.comm.abort("the scheduler crashed before its commit")

    await wait_until_async(lambda: len(cluster.registers) == 2, 30, what="a new session")
    assert cluster.registers[1].attempts == ()  # never started: the scheduler puts it back
    record = tmp_path / "jobs" / "job-7.1.json"
    await wait_until_async(lambda: worker.jobs.pid_of("job-7.1") is None, 30,
                           what="its supervisor to be done")
    assert not record.exists() and not marker.exists() and cluster.received == []
    with open(log_path(str(tmp_path / "jobs"), "job-7.1"), "rb") as log:
        assert log.read() == b""  # not even a line of ours

    cluster.send(job("job-7.1", "touch", str(marker)))  # the same attempt, sent again
    assert (await cluster.told(ops.AttemptEnded, "job-7.1")).outcome == "completed"
    assert marker.exists()


async def test_a_draining_worker_lets_a_job_run_to_the_deadline_then_stops_it(cluster):
    worker = await cluster.start(drain_timeout=0.5)
    cluster.send(job("job-7.1", "sleep", "600"))
    await cluster.told(ops.AttemptStarted, "job-7.1")

    await worker.drain()  # SIGTERM's work

    ended = await cluster.told(ops.AttemptEnded, "job-7.1")
    assert (ended.outcome, ended.error) == ("lost", "killed because its worker shut down")
    assert ended.ended - ended.started >= 0.5
    kinds = await wait_until_async(
        lambda: ops.Unregister in (kinds := [type(op) for op in cluster.received]) and kinds, 30)
    assert kinds.index(ops.AttemptEnded) < kinds.index(ops.Unregister)  # told before it left


async def test_a_restarted_worker_reports_what_the_earlier_one_left(cluster, tmp_path):
    first = await cluster.start()
    cluster.send(job("job-4.1", "true"))
    await cluster.told(ops.AttemptEnded, "job-4.1")  # not acknowledged
    cluster.send(job("job-5.1", "sleep", "600"))
    running = await cluster.told(ops.AttemptStarted, "job-5.1")

    # The scheduler heard its first register: the directory is marked for this start of the
    # machine, so the next process does not say it restarted.
    await wait_until_async(lambda: (tmp_path / "jobs" / "machine.boot").exists(), 30,
                           what="the job directory marked for this start of the machine")
    await first.close()  # its supervisors see the end: each kills its job and records it lost
    cluster.received.clear()
    second = await cluster.start()

    attempts = [ops.decode(wire) for wire in cluster.registers[-1].attempts]
    assert [(a.key, a.outcome) for a in attempts] == [("job-4.1", "completed"),
                                                        ("job-5.1", "lost")]
    assert attempts[1].error == "killed because its worker process ended while it ran"
    assert not alive(running.pid)
    # Sent again, an attempt it knows is answered, not run again.
    cluster.send(job("job-5.1", "sleep", "600"))
    assert (await cluster.told(ops.AttemptEnded, "job-5.1")).outcome == "lost"
    assert second.state.is_idle()
    assert sorted(os.listdir(tmp_path / "jobs")) == [
        "job-4.1.json", "job-4.1.log", "job-5.1.json", "job-5.1.log", "machine.boot",
        "worker.lock"]
    # The first worker process found the directory new (it cannot tell what a restart of the
    # machine took); the second, the same start of the machine: its records are all there.
    assert cluster.registers[0].machine_restarted
    assert not cluster.registers[-1].machine_restarted


@contextlib.asynccontextmanager
async def worker_processes(tmp_path):
    """A stand-in scheduler, and ``start()``, which starts a worker process for it (``w1``,
    one thread, jobs in tmp_path/j) and waits for its session; every one killed at the end."""
    scheduler = StandInScheduler()
    listener = await listen("127.0.0.1", 0, scheduler.serve, token=TOKEN, accept_roles={"worker"})
    env = {**os.environ, "SCHED_TOKEN": TOKEN, "SCHED_WORKER__JOB_DIRECTORY": str(tmp_path / "j")}
    command = [sys.executable, "-m", "dsched.cli.worker", listener.address, "--no-nanny",
               "--name", "w1", "--nthreads", "1", "--gpus", "none", "--host", "127.0.0.1",
               "--local-directory", str(tmp_path)]
    processes = []

    async def start():
        scheduler.comm = None
        processes.append(await asyncio.create_subprocess_exec(*command, env=env))
        await wait_until_async(lambda: scheduler.comm is not None, 30, what="a worker process")
        return processes[-1]

    try:
        yield scheduler, start
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
            await process.wait()
        await listener.close()


async def test_a_worker_killed_with_signal_9_takes_its_job_and_its_next_process_says_so(tmp_path):
    async with worker_processes(tmp_path) as (scheduler, start):
        first = await start()
        scheduler.send(job("job-6.1", "sleep", "600"))
        running = await scheduler.told(ops.AttemptStarted, "job-6.1")

        first.kill()

        await wait_until_async(lambda: not alive(running.pid), 10, what="the job to die")
        await start()
        attempt, = [ops.decode(wire) for wire in scheduler.registers[-1].attempts]
        assert (attempt.key, attempt.outcome, attempt.exit_code) == ("job-6.1", "lost", -9)
        assert attempt.error == "killed because its worker process ended while it ran"


async def test_a_worker_killed_with_signal_9_while_an_attempt_is_held_lists_it_nowhere(tmp_path):
    marker, record = tmp_path / "ran", tmp_path / "j" / "job-8.1.json"
    async with worker_processes(tmp_path) as (scheduler, start):
        first = await start()
        scheduler.send(job("job-8.1", "touch", str(marker), hold=True))
        await wait_until_async(record.exists, 30, what="its record")

        first.kill()  # before the scheduler's go: it never ran, whatever its supervisor had
        await first.wait()  # done by then (it drops it on its own)

        await start()
        assert scheduler.registers[-1].attempts == ()  # the scheduler puts it back
        assert not record.exists() and not marker.exists()


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_attempts_are_forked_by_the_workers_spawner_each_in_a_session_of_its_own(cluster):
    worker = await cluster.start()
    spawner = worker.jobs._spawner._process.pid
    cluster.send(job("job-8.1", "sleep", "600"))
    started = await cluster.told(ops.AttemptStarted, "job-8.1")

    supervisor = psutil.Process(started.pid).parent()
    assert supervisor.ppid() == spawner  # forked there, not a fresh interpreter per attempt
    assert os.getsid(supervisor.pid) == supervisor.pid != os.getsid(spawner)
    assert os.getpgid(started.pid) == started.pid  # the job leads a group of its own
    cluster.send(ops.StopTask("job-8.1"))
    assert (await cluster.told(ops.AttemptEnded, "job-8.1")).outcome == "cancelled"


def spares_of(spawner: int) -> dict[int, int]:
    """The supervisors the spawner keeps forked ahead, each with its guard forked: the guard's
    pid by the spare's."""
    found = {}
    for child in psutil.Process(spawner).children():
        its = child.children()  # a spare's only child is its guard: no job yet
        if len(its) == 1 and its[0].name() == "sched-guard" and child.pid == os.getsid(
                child.pid) and child.status() != psutil.STATUS_ZOMBIE:
            found[child.pid] = its[0].pid
    return found


async def test_an_attempt_goes_to_a_supervisor_prepared_ahead_which_leaves_nothing_behind(
        cluster):
    worker = await cluster.start()
    spawner = worker.jobs._spawner._process.pid
    spares = await wait_until_async(lambda: len(spares_of(spawner)) == 2 and spares_of(spawner),
                                    30, what="two spare supervisors")
    cgroup = worker.jobs.containment.cgroup_for("attempt-")
    def cgroup_of(pid: int) -> str:
        return os.path.basename(open(f"/proc/{pid}/cgroup").read().split("::")[-1].strip())

    for spare, guard in spares.items():
        if cgroup:  # cgroup mode: each goes into an attempt's cgroup ahead; its guard, which
            # outlives the attempt, does not
            await wait_until_async(lambda: cgroup_of(spare).startswith(os.path.basename(cgroup)),
                                   30, what="the spare in an attempt's cgroup")
            assert cgroup_of(guard) != cgroup_of(spare)

    cluster.send(job("job-8.1", "sleep", "600"))
    started = await cluster.told(ops.AttemptStarted, "job-8.1")
    supervisor = psutil.Process(started.pid).ppid()
    assert supervisor in spares  # a spare ran it
    assert os.getpgid(spares[supervisor]) == started.pid  # its guard guards the job's group
    if cgroup:
        job_cgroup = open(f"/proc/{started.pid}/cgroup").read().split("::")[-1].strip()
        assert os.path.basename(job_cgroup).startswith(os.path.basename(cgroup))
    now = await wait_until_async(lambda: len(spares_of(spawner)) == 2 and spares_of(spawner),
                                 30, what="two spares again")
    assert supervisor not in now
    cluster.send(ops.StopTask("job-8.1"))
    assert (await cluster.told(ops.AttemptEnded, "job-8.1")).outcome == "cancelled"

    await worker.close()  # the spares no attempt came to end, and their guards and cgroups
    await wait_until_async(lambda: not any(alive(pid) for pair in now.items() for pid in pair),
                           30, what="the spares and their guards to end")
    if cgroup:
        left = [name for name in os.listdir(os.path.dirname(cgroup))
                if name.startswith(os.path.basename(cgroup))]
        assert left == []


async def test_a_supervisor_stays_in_its_jobs_cgroup_and_leaves_only_to_kill_what_it_left(
        cluster, tmp_path):
    worker = await cluster.start()
    if not worker.jobs.containment.cgroup_for("attempt-"):
        pytest.skip("cgroups of jobs: cgroup mode only")
    spawner = worker.jobs._spawner._process.pid

    def cgroup_of(pid: int) -> str:
        with open(f"/proc/{pid}/cgroup") as file:
            return file.read().split("::")[-1].strip()

    def watching(pid: int) -> bool:
        """In its poll for the job's end: past all it does once its job runs."""
        with open(f"/proc/{pid}/wchan") as file:
            return "poll" in file.read()

    # A job that leaves nothing: its supervisor never moves (no move between cgroups holds up
    # the machine's forks), and is a spare again in the same cgroup.
    cluster.send(job("job-9.1", "sleep", "600"))
    started = await cluster.told(ops.AttemptStarted, "job-9.1")
    supervisor = psutil.Process(started.pid).ppid()
    await wait_until_async(lambda: watching(supervisor), 30, what="the supervisor watching")
    its_cgroup = cgroup_of(started.pid)
    assert cgroup_of(supervisor) == its_cgroup
    cluster.send(ops.StopTask("job-9.1"))
    assert (await cluster.told(ops.AttemptEnded, "job-9.1")).outcome == "cancelled"
    await wait_until_async(lambda: supervisor in spares_of(spawner), 30, what="a spare again")
    assert cgroup_of(supervisor) == its_cgroup

    # A job that kills its own group, its guard with it: its supervisor, still in the job's
    # cgroup, forks a new guard outside it (where a guard outlives the cgroup it removes).
    go = tmp_path / "go"
    os.mkfifo(go)
    cluster.send(job("job-9.3", "sh", "-c", f"read x < {go}; kill -KILL 0"))
    started = await cluster.told(ops.AttemptStarted, "job-9.3")
    killer = psutil.Process(started.pid).ppid()
    old_guard = next(child.pid for child in psutil.Process(killer).children()
                     if child.name() == "sched-guard")
    with open(go, "w") as fifo:
        fifo.write("now\n")
    assert (await cluster.told(ops.AttemptEnded, "job-9.3")).outcome == "failed"
    guard = (await wait_until_async(
        lambda: spares_of(spawner).get(killer) not in (None, old_guard) and spares_of(spawner),
        30, what="the supervisor a spare again, with a new guard"))[killer]
    attempts = os.path.basename(worker.jobs.containment.cgroup_for("attempt-"))
    assert os.path.basename(cgroup_of(killer)).startswith(attempts)  # in its cgroup, ahead
    assert cgroup_of(guard) != cgroup_of(killer)

    # A job that leaves a process in its cgroup, in a session of its own: the supervisor leaves
    # the cgroup to kill all of it at once, outlives that, says the outcome and serves again.
    left = tmp_path / "left.pid"
    cluster.send(job("job-9.2", "sh", "-c", f"setsid sleep 600 & echo $! > {left}"))
    assert (await cluster.told(ops.AttemptEnded, "job-9.2")).outcome == "completed"
    leftover = int(left.read_text())
    await wait_until_async(lambda: not alive(leftover), 30, what="the leftover to die")
    await wait_until_async(lambda: len(spares_of(spawner)) >= 2, 30, what="the spares back")
    for spare in spares_of(spawner):  # each in an attempt's cgroup, ahead of its next job
        assert os.path.basename(cgroup_of(spare)).startswith(attempts)


async def test_a_supervisor_back_from_an_attempt_runs_the_next_and_keeps_nothing_of_it(
        cluster):
    worker = await cluster.start()
    spawner = worker.jobs._spawner._process.pid
    await wait_until_async(lambda: len(spares_of(spawner)) == 2, 30, what="two spares")
    supervisors, held = [], {}
    for n in range(8):  # one after another: each supervisor is back before the next comes
        key = f"job-{40 + n}.1"
        cluster.send(job(key, "sh", "-c", "echo $PPID"))  # the job's parent: its supervisor
        assert (await cluster.told(ops.AttemptEnded, key)).outcome == "completed"
        supervisors.append(int((await get_log(worker, key)).data))
        assert not supervisor_alive(log_path(worker.jobs.directory, key))  # its lock is free
        # what it holds between attempts: its socket and its next guard's lifeline
        await wait_until_async(lambda: alive(supervisors[-1]) and len(spares_of(spawner)) >= 2,
                               30, what="the supervisor back among the spares")
        held[n] = sorted(os.readlink(f"/proc/{supervisors[-1]}/fd/{fd}")
                         for fd in os.listdir(f"/proc/{supervisors[-1]}/fd") if int(fd) > 2)
        assert len(held[n]) == 3 and not any(".log" in path for path in held[n]), held[n]
    assert len(set(supervisors)) < len(supervisors) / 2, supervisors  # most ran several


async def test_a_supervisor_keeps_its_guard_which_still_kills_a_later_job_when_it_dies(
        cluster):
    worker = await cluster.start(nthreads=3)
    spawner = worker.jobs._spawner._process.pid
    spares = await wait_until_async(lambda: len(spares_of(spawner)) == 2 and spares_of(spawner),
                                    30, what="two spare supervisors")
    cluster.send(job("job-90.1", "sh", "-c", "echo $PPID"))
    assert (await cluster.told(ops.AttemptEnded, "job-90.1")).outcome == "completed"
    supervisor = int((await get_log(worker, "job-90.1")).data)
    guard = spares[supervisor]
    await wait_until_async(lambda: spares_of(spawner).get(supervisor) == guard, 30,
                           what="the supervisor back among the spares, with the same guard")

    # Its next job: three at once take every spare, this one among them.
    keys = [f"job-{91 + n}.1" for n in range(3)]
    for key in keys:
        cluster.send(job(key, "sh", "-c", "sleep 600 & sleep 600"))
    started = {key: (await cluster.told(ops.AttemptStarted, key)).pid for key in keys}
    (key,) = [k for k, pid in started.items() if psutil.Process(pid).ppid() == supervisor]
    leader = psutil.Process(started[key])
    group = [leader, *await wait_until_async(lambda: leader.children(), 30, what="its child")]
    assert os.getpgid(guard) == leader.pid  # the same guard guards this job's group
    attempts = worker.jobs.containment.cgroup_for("attempt-")
    if attempts:  # cgroup mode: the job runs in a cgroup of this attempt's
        mine = open(f"/proc/{leader.pid}/cgroup").read().split("::")[-1].strip()
        path = os.path.join(os.path.dirname(attempts), os.path.basename(mine))
        assert os.path.basename(mine).startswith(os.path.basename(attempts))
        assert os.path.isdir(path)

    os.kill(supervisor, signal.SIGKILL)  # the guard alone is left to end the job
    await wait_until_async(lambda: not any(alive(p.pid) for p in group) and not alive(guard),
                           30, what="the job and its guard to die with the supervisor")
    if attempts:  # and its cgroup goes with them
        await wait_until_async(lambda: not os.path.exists(path), 30,
                               what="the job's cgroup to be removed")
    assert (await cluster.told(ops.AttemptEnded, key)).outcome == "lost"
    for other in keys:
        if other != key:
            cluster.send(ops.StopTask(other))


async def test_a_worker_busy_on_all_its_threads_forks_no_supervisor_an_attempt(cluster):
    # Its spawner keeps as many supervisors as it runs attempts at once, and two spares.
    worker = await cluster.start(nthreads=4)
    spawner = worker.jobs._spawner._process.pid

    def settled():
        """The spares, once every supervisor is back from its attempt and prepared again (a
        supervisor forked for one attempt only has ended); None before."""
        spares = spares_of(spawner)
        alive = [child for child in psutil.Process(spawner).children()
                 if child.status() != psutil.STATUS_ZOMBIE]
        return spares if spares and len(spares) == len(alive) else None

    async def four_at_once(r):  # its four threads busy; the parents of the four commands
        keys = [f"job-{80 + 4 * r + n}.1" for n in range(4)]
        for key in keys:
            cluster.send(job(key, "sh", "-c", "echo $PPID"))
        for key in keys:
            assert (await cluster.told(ops.AttemptEnded, key)).outcome == "completed"
        return {int((await get_log(worker, key)).data) for key in keys}

    # A round that finds fewer ready than it asks for forks the rest (each for one attempt),
    # and more spares are forked while fewer than two are ready or on their way back: the
    # spares grow each such round, by how many depends on how soon each is back from its
    # attempt (at once where it stays in its cgroup, or has none), up to six.
    kept = await wait_until_async(settled, 30, what="the first spares")
    for r in range(8):
        if len(kept) >= 4:
            break
        await four_at_once(r)
        kept = await wait_until_async(settled, 30, what="the supervisors back, prepared")
    assert 4 <= len(kept) <= 6, kept
    for r in range(8, 11):  # from now on, every attempt goes to a spare ready before it,
        used = await four_at_once(r)  # which comes back to serve again
        assert used <= set(kept)
        kept = await wait_until_async(settled, 30, what="the spares back, prepared")
        assert used <= set(kept) and 4 <= len(kept) <= 6, kept


async def test_supervisors_back_from_attempts_past_those_kept_end_and_leave_no_cgroup(
        cluster, tmp_path):
    from dsched.worker.jobspawner import SPARES

    worker = await cluster.start(nthreads=SPARES + 3)
    spawner = worker.jobs._spawner._process.pid
    cgroup = worker.jobs.containment.cgroup_for("attempt-")
    worker.jobs._spawner.prepare(cgroup, 0)  # none kept but the spares, as if of fewer threads
    flag = tmp_path / "go"
    keys = [f"job-{60 + n}.1" for n in range(SPARES + 3)]
    for key in keys:
        cluster.send(job(key, "sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.05; done"))
    for key in keys:
        await cluster.told(ops.AttemptStarted, key)
    flag.touch()
    for key in keys:
        assert (await cluster.told(ops.AttemptEnded, key)).outcome == "completed"
    # all back, and those past the kept gone with their guards: nothing else is left
    await wait_until_async(lambda: len(psutil.Process(spawner).children()) == SPARES
                           and len(spares_of(spawner)) == SPARES, 30, what="the spares alone")
    if cgroup:
        await wait_until_async(lambda: len([
            name for name in os.listdir(os.path.dirname(cgroup))
            if name.startswith(os.path.basename(cgroup))]) == SPARES, 30,
            what="the cgroups of the spares alone")


async def test_spares_that_die_leave_no_cgroup_and_hold_no_other_attempts_pipes(cluster):
    worker = await cluster.start()
    spawner = worker.jobs._spawner._process.pid
    spares = await wait_until_async(lambda: len(spares_of(spawner)) == 2 and spares_of(spawner),
                                    30, what="two spare supervisors")
    cgroup = worker.jobs.containment.cgroup_for("attempt-")
    for spare in spares:  # each with its guard, as when an OOM kill takes a whole group
        os.killpg(spare, signal.SIGKILL)
    if cgroup:  # removed by the spawner, which alone knew their names
        await wait_until_async(lambda: not [
            name for name in os.listdir(os.path.dirname(cgroup))
            if name.startswith(os.path.basename(cgroup))
            and int(name.rsplit("-", 1)[1]) <= 2], 30, what="the dead spares' cgroups to go")

    # The next request finds its spare gone and is forked at once; the spares forked after it
    # hold only their own socket (and their lifeline), not that attempt's pipes: its end is
    # said when its supervisor dies, not when the spare that held them does.
    cluster.send(job("job-8.1", "sleep", "600"))
    started = await cluster.told(ops.AttemptStarted, "job-8.1")
    now = await wait_until_async(lambda: len(spares_of(spawner)) == 2 and spares_of(spawner),
                                 30, what="two new spares")
    for spare in now:
        held = [os.readlink(f"/proc/{spare}/fd/{fd}") for fd in os.listdir(f"/proc/{spare}/fd")
                if int(fd) > 2]
        assert len(held) == 3 and not any(".log" in path for path in held), held
    os.kill(psutil.Process(started.pid).ppid(), signal.SIGKILL)
    ended = await cluster.told(ops.AttemptEnded, "job-8.1", timeout=10)
    assert ended.outcome == "lost"


async def test_when_the_spawner_dies_its_attempts_end_as_they_would_and_new_ones_still_start(
        cluster, tmp_path):
    worker = await cluster.start()
    spawner = worker.jobs._spawner._process
    flag = tmp_path / "go"
    cluster.send(job("job-9.1", "sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.05; done"))
    await cluster.told(ops.AttemptStarted, "job-9.1")

    spawner.kill()
    await spawner.wait()
    flag.touch()  # the attempt forked before goes on, and its end is said as usual
    assert (await cluster.told(ops.AttemptEnded, "job-9.1")).outcome == "completed"

    cluster.send(job("job-10.1", "true"))  # a supervisor started as a program instead
    assert (await cluster.told(ops.AttemptEnded, "job-10.1")).outcome == "completed"
    starts = [op.key for op in cluster.received if type(op) is ops.AttemptStarted]
    assert starts == ["job-9.1", "job-10.1"]  # each started once


async def test_a_stop_given_while_its_supervisor_is_being_forked_keeps_the_job_from_starting(
        cluster):
    await cluster.start()
    for n in range(5):  # the stop arrives while the attempt is recorded and its supervisor forked
        key = f"job-{20 + n}.1"
        cluster.send(job(key, "true"), ops.StopTask(key))
        ended = await cluster.told(ops.AttemptEnded, key)
        assert (ended.outcome, ended.error) == ("cancelled", "cancelled before it started")
    assert not [op for op in cluster.received if type(op) is ops.AttemptStarted]

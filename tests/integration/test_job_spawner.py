"""The worker's job spawner on its own: a request it cannot carry out is answered with the
reason and starts nothing (the worker then starts a supervisor as a program), and the end of
a supervisor it forked is known even when the spawner is gone by then."""

from __future__ import annotations

import os
import socket

import pytest

from dsched.worker.jobspawner import Spawner


@pytest.fixture
async def spawner():
    s = Spawner()
    assert await s.start() and await s.ready()
    yield s
    await s.close()


async def test_a_request_it_cannot_carry_out_is_refused_with_the_reason(spawner, monkeypatch,
                                                                        tmp_path):
    real = socket.send_fds

    def short(sock, buffers, fds, *rest):  # one descriptor missing
        return real(sock, buffers, fds[:2], *rest)

    monkeypatch.setattr(socket, "send_fds", short)
    opened: list = []
    lock = os.open(tmp_path / "log", os.O_CREAT | os.O_WRONLY)
    try:
        with pytest.raises(OSError, match="2 descriptors came with the request"):
            await spawner.spawn([str(tmp_path / "record"), str(lock), "1.0", "0.0", ""], lock,
                                opened.append)
    finally:
        os.close(lock)
    assert spawner._sock is not None  # and it goes on serving


async def test_the_end_of_a_supervisor_is_known_after_the_spawner_is_gone(spawner, tmp_path):
    lock = os.open(tmp_path / "log", os.O_CREAT | os.O_WRONLY)
    try:  # no record there: the supervisor fails at once, after the spawner said its pid
        spawned = await spawner.spawn([str(tmp_path / "missing"), str(lock), "1.0", "0.0", ""],
                                      lock, lambda handle: None)
    finally:
        os.close(lock)
    spawner._process.kill()
    await spawner._process.wait()
    assert await spawned.stdout.read() == b""
    assert await spawned.wait() in (1, None)  # said by the spawner, or unknown: never hangs


async def test_a_supervisor_done_with_an_attempt_is_not_killed_for_it(tmp_path):
    # A spare back from attempt A may be running attempt B by the time A's handle is killed
    # (a worker closing): killing A's handle must not take B down with it.
    import asyncio
    import subprocess
    import sys

    from dsched.worker.spawnerclient import Spawned

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        handle = Spawned(stdin=None, stdout=None)
        handle.pid = other.pid
        handle._ended = asyncio.get_running_loop().create_future()
        handle._ended.set_result(0)  # its supervisor said it was done with this attempt
        handle.kill()
        assert other.poll() is None
        handle._ended = asyncio.get_running_loop().create_future()  # not done: killed
        handle.kill()
        assert other.wait(10) == -9
    finally:
        other.kill()
        other.wait()


def test_a_spare_with_nothing_to_say_does_not_stall_the_spawner():
    # Within one poll a spare's socket number may be closed and given to a new spare, which
    # has nothing to say yet: reading it must not wait (the spawner would serve no one).
    import select
    import threading

    from dsched.worker.jobspawner import _Spares

    spares = _Spares(select.poll())
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        spares.add(12345, ours, "")
        heard = threading.Thread(target=spares.heard, args=(ours.fileno(),), daemon=True)
        heard.start()
        heard.join(5)
        assert not heard.is_alive()
        assert [pid for pid, _, _ in spares.ready] == [12345]  # still ready, nothing changed
    finally:
        theirs.close()  # a read still waiting (without the fix) ends here
        ours.close()


def test_a_spare_is_asked_to_say_it_spawned_only_where_the_spawner_would_fork_then():
    # The spawner forks more spares once the one it handed a request has spawned its job (a
    # fork meanwhile slows that spawn); while enough are ready it needs no word of it.
    import json
    import select

    from dsched.worker.jobspawner import SPARES, _Spares

    spares = _Spares(select.poll())
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) for _ in range(SPARES + 1)]
    read, write = os.pipe()
    try:
        for n, (ours, _) in enumerate(pairs):
            spares.add(1000 + n, ours, "")
        request = json.dumps(["record", "7", "1.0", "0.0", ""]).encode()
        asked = []
        for n, (ours, theirs) in enumerate(pairs):
            pid, _ = spares.hand(request, [read, write], f"key-{n}")
            assert pid == 1000 + n
            data, fds, _, _ = socket.recv_fds(theirs, 4096, 3)
            for fd in fds:
                os.close(fd)
            asked.append(json.loads(data)[5:] == [True])
            assert (ours.fileno() in spares.spawning) == asked[-1]
        # enough ready after the first; fewer than SPARES after the others
        assert asked == [False] + [True] * SPARES
    finally:
        for ours, theirs in pairs:
            ours.close()
            theirs.close()
        os.close(read)
        os.close(write)


RETIRED = r"""
import json, os, socket, sys, time
from dsched.worker import containment, sparesupervisor
from dsched.worker.jobrecords import new_record, open_locked_log, write_record

directory, mode, ask = sys.argv[1], sys.argv[2], sys.argv[3] == "ask"
if mode == "stuck":  # as if a process of the attempt would not die
    containment.sweep = lambda *args, **kwargs: [999999]
ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
writes = []  # the spare's writes to the attempt's stdout, in its memory
pid = os.fork()
if pid == 0:
    real_write = os.write

    def write(fd, data):
        if fd == 1:
            writes.append(bytes(data))
            if data.endswith(sparesupervisor.DONE):  # its last: said to the test
                with open(os.path.join(directory, "writes"), "w") as out:
                    json.dump([w.decode() for w in writes], out)
        return real_write(fd, data)

    os.write = write
    sparesupervisor.supervise("", channel=theirs)
theirs.close()
record, log = os.path.join(directory, "job-1.1.json"), os.path.join(directory, "job-1.1.log")
command = ["sleep", "30"] if mode == "gone" else ["true"]
write_record(record, new_record("job-1.1", {"command": command}, (), log, "w"))
lock = open_locked_log(log)
orders_r, orders_w = os.pipe()
reports_r, reports_w = os.pipe()
request = [record, str(lock), "1.0", repr(time.monotonic() + 60), ""] + ([True] if ask else [])
socket.send_fds(ours, [json.dumps(request).encode()], [orders_r, reports_w, lock])
for fd in (orders_r, reports_w, lock):
    os.close(fd)
said = []
if mode == "gone":  # the worker dies while the job runs: its pipes close
    said.append(ours.recv(4096).decode())
    os.close(orders_w)
    os.close(reports_r)
else:
    reports = b""
    while chunk := os.read(reports_r, 65536):
        reports += chunk
    said.append("done" if reports.endswith(b"\ndone\n") else "not done")
    if reports.endswith(b"\ndone\n"):  # in the same write as the end: one wakeup for both
        with open(os.path.join(directory, "writes")) as written:
            last = json.load(written)[-1].split("\n")
        assert '"attempt-ended"' in last[-3] and last[-2:] == ["done", ""], last
while True:  # each message: its lines' first words, joined by "+"
    word = ours.recv(4096).decode()
    said.append("+".join(line.split(" ")[0] for line in word.split("\n") if line))
    if not word or said[-1].endswith("ready"):
        break
if not word:
    said.append("exit %d" % os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
else:
    ours.close()
    os.waitpid(pid, 0)
print(json.dumps(said))
"""


@pytest.mark.parametrize("mode, ask, said", [
    ("clear", "", ["done", "ended+ready"]),
    ("clear", "ask", ["done", "spawned", "ended+ready"]),
    ("stuck", "ask", ["not done", "spawned", "", "exit 0"]),
    ("gone", "ask", ["spawned", "ended+ready"])])
def test_a_spare_runs_a_later_attempt_unless_it_could_not_clear_its_last(tmp_path, mode, ask,
                                                                       said):
    # "gone": a worker that dies while its job runs is no reason to fail, nor to print a
    # traceback (the outcome it could not be told is in the record). Without cgroups a spare
    # is prepared again at once: its end and its "ready" come in one message. A spare says
    # "spawned" only when its request asks (the spawner waits for it to fork more), and
    # "done" on the attempt's stdout only once nothing of the attempt is left, in the same
    # write as the attempt's end.
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", RETIRED, str(tmp_path), mode, ask],
                         capture_output=True, text=True, timeout=60, start_new_session=True)
    assert json.loads(out.stdout.splitlines()[-1]) == said, out.stderr
    assert "Traceback" not in out.stderr


SEQUENCE = r"""
import json, os, signal, socket, sys, time
import psutil
from dsched.worker import jobsupervisor, sparesupervisor
from dsched.worker.jobrecords import new_record, open_locked_log, write_record

directory, first = sys.argv[1], sys.argv[2]
if first == "crash":  # the supervisor fails while its job runs (once it has written its pid)
    def crash(self, spawned):
        written = os.path.join(directory, "pid")
        deadline = time.monotonic() + 10
        while not os.path.exists(written) and time.monotonic() < deadline:
            time.sleep(0.01)
        raise RuntimeError("a supervisor's error, made by the test")
    jobsupervisor.Supervision._watch = crash
ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
supervisor = os.fork()
if supervisor == 0:
    sparesupervisor.supervise("", channel=theirs)
theirs.close()


def request(n, command):
    key = f"job-{n}.1"
    record = os.path.join(directory, key + ".json")
    log = os.path.join(directory, key + ".log")
    write_record(record, new_record(key, {"command": command}, (), log, "w"))
    lock = open_locked_log(log)
    orders_r, orders_w = os.pipe()
    reports_r, reports_w = os.pipe()
    socket.send_fds(ours, [json.dumps([record, str(lock), "1.0", repr(time.monotonic() + 60),
                                       "", True]).encode()], [orders_r, reports_w, lock])
    for fd in (orders_r, reports_w, lock):
        os.close(fd)
    return orders_w, reports_r


heard = []


def said():  # the first word of the spare's next line (a message may carry two)
    while not heard:
        message = ours.recv(4096).decode()
        heard.extend([line.split(" ")[0] for line in message.split("\n") if line] or [""])
    return heard.pop(0)


def until(predicate):
    deadline = time.monotonic() + 10
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


def dead(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


if first != "crash":  # a first attempt, which does this to its group (and so its guard)
    does = {"plain": "true", "stopped": "true", "usr1": "trap '' USR1; kill -USR1 0",
            "tstp": "trap '' TSTP; kill -TSTP 0", "kill": "kill -KILL 0"}[first]
    orders, reports = request(1, ["sh", "-c", does])
    while os.read(reports, 65536):
        pass
    words = [said(), said(), said()]
    assert words == ["spawned", "ended", "ready"], words
pid_file = os.path.join(directory, "pid")
# stopped: deaf to the SIGHUP that comes with the kernel's SIGCONT, so only its guard ends it
then = "trap '' HUP; kill -STOP 0; sleep 30" if first == "stopped" else "exec sleep 30"
orders, reports = request(2, ["sh", "-c", f"echo $$ > {pid_file}.new && mv {pid_file}.new "
                                          f"{pid_file} && {then}"])
assert said() == "spawned"
assert until(lambda: os.path.exists(pid_file))
job = int(open(pid_file).read())
if first == "stopped":  # the job, and its guard with it, stopped by the job itself
    assert until(lambda: psutil.Process(job).status() == psutil.STATUS_STOPPED)
if first != "crash":
    os.kill(supervisor, signal.SIGKILL)  # its guard alone is left to end its job
os.waitpid(supervisor, 0)
print(json.dumps({"dead": until(lambda: dead(job)), "pid": job}))
"""


@pytest.mark.parametrize("first", ["plain", "usr1", "tstp", "kill", "crash", "stopped"])
def test_a_supervisors_job_dies_with_it_whatever_the_guard_went_through_before(tmp_path,
                                                                               first):
    # plain: its guard kept from a first attempt; usr1, tstp: signalled by the first attempt's
    # job with its group (it ignores them); kill: killed with it (another is forked, even where
    # the dying guard has not yet run when the next attempt starts); crash: the supervisor
    # fails while its job runs (its guard must not be killed on its way out); stopped: the
    # job stopped its group, its guard with it, when its supervisor is killed (the kernel
    # continues a group orphaned with a stopped member: the guard then kills it).
    import json
    import signal
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", SEQUENCE, str(tmp_path), first],
                         capture_output=True, text=True, timeout=60, start_new_session=True)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    if not result["dead"]:
        os.kill(result["pid"], signal.SIGKILL)
    assert result["dead"], out.stderr


async def test_spares_start_each_job_where_it_asks_with_only_its_standard_descriptors(tmp_path):
    # A spare runs one attempt after another: the directory one job asked for is not the next
    # one's, and nothing of an earlier attempt, nor the log's lock, is passed on to a job.
    import json
    import sys
    import time

    from dsched.worker.jobrecords import new_record, open_locked_log, write_record

    script = "import os, json; print(json.dumps([os.getcwd(), os.listdir('/proc/self/fd')]))"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    spawner = Spawner()
    assert await spawner.start() and await spawner.ready()
    spawner.prepare("", 1)  # three kept

    async def run(n: int, cwd: str | None) -> tuple[int, list]:
        key = f"job-{n}.1"
        record, log = str(tmp_path / f"{key}.json"), str(tmp_path / f"{key}.log")
        job = {"command": [sys.executable, "-c", script], "cwd": cwd}
        write_record(record, new_record(key, job, (), log, "w"))
        lock = open_locked_log(log)
        try:
            spawned = await spawner.spawn(
                [record, str(lock), "1.0", repr(time.monotonic() + 60), ""], lock,
                lambda _: None)
        finally:
            os.close(lock)
        async for _ in spawned.stdout:  # AttemptStarted, AttemptEnded
            pass
        await spawned.wait()
        assert spawned.stdin.is_closing()  # its orders' pipe goes with the attempt
        spawner.forget(record)
        with open(log) as file:
            return spawned.pid, json.loads(file.read())

    try:
        first = [await run(n, str(elsewhere)) for n in range(1, 4)]
        # Then jobs of no directory, until three have run in spares that ran one of the first
        # (a spare not yet back from its last attempt when a request comes is passed over).
        reused, later = {pid for pid, _ in first}, []
        while sum(pid in reused for pid, _ in later) < 3 and len(later) < 30:
            later.append(await run(4 + len(later), None))
    finally:
        await spawner.close()
    assert sum(pid in reused for pid, _ in later) >= 3  # the same spares, reused
    assert [where for _, (where, _) in first] == [str(elsewhere)] * 3
    assert [where for _, (where, _) in later] == [os.getcwd()] * len(later)
    assert all(sorted(fds) == ["0", "1", "2", "3"] for _, (_, fds) in first + later)  # 3: its own

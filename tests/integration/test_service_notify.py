"""What a daemon tells its service manager: the variables it takes from its environment, the
datagrams it sends, and how a nanny speaks for its processes."""

import asyncio
import logging
import os
import socket
import tempfile

import pytest

from dsched.daemon import ServiceNotifier
from dsched.worker.nanny import NotifyRelay


@pytest.fixture
def listener(tmp_path):
    """A datagram socket where a service manager would listen, and its path."""
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(5)
        yield sock, path


def test_the_variables_are_taken_out_of_the_environment_so_children_do_not_inherit_them():
    environ = {"NOTIFY_SOCKET": "/run/systemd/notify", "WATCHDOG_USEC": "30000000",
               "WATCHDOG_PID": str(os.getpid()), "PATH": "/usr/bin"}
    service = ServiceNotifier.from_environment(environ)
    assert environ == {"PATH": "/usr/bin"}
    assert service.socket_path == "/run/systemd/notify"
    assert service.watchdog_interval == 15.0  # half of what the service manager allows


@pytest.mark.parametrize("environ", [
    {"NOTIFY_SOCKET": "/run/n"},                                          # no watchdog asked
    {"NOTIFY_SOCKET": "/run/n", "WATCHDOG_USEC": "0"},
    {"NOTIFY_SOCKET": "/run/n", "WATCHDOG_USEC": "soon"},
    {"NOTIFY_SOCKET": "/run/n", "WATCHDOG_USEC": "1000", "WATCHDOG_PID": "1"},  # not ours
])
def test_no_watchdog_unless_asked_for_this_process(environ):
    assert ServiceNotifier.from_environment(environ).watchdog_interval is None


def test_without_a_socket_nothing_is_sent_and_nothing_fails():
    service = ServiceNotifier.from_environment({})
    assert service.ready("Listening") is False
    assert service.stopping("Draining") is False


def test_each_notification_is_one_datagram_of_fields(listener):
    sock, path = listener
    service = ServiceNotifier(path)
    service.ready("Listening at h:1")
    service.status("two\nlines")
    service.stopping("Received SIGTERM: draining")
    assert sock.recv(4096) == b"READY=1\nSTATUS=Listening at h:1"
    assert sock.recv(4096) == b"STATUS=two lines"  # a newline would start a field of its own
    assert sock.recv(4096) == b"STOPPING=1\nSTATUS=Received SIGTERM: draining"


def test_an_abstract_socket_is_reached_by_its_at_name():
    name = f"dsched-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        assert ServiceNotifier("@" + name).status("up")
        assert sock.recv(4096) == b"STATUS=up"


def test_a_socket_that_is_gone_is_logged_once_and_never_raises(tmp_path, caplog):
    service = ServiceNotifier(str(tmp_path / "gone"))
    with caplog.at_level(logging.WARNING, logger="dsched"):
        assert service.ready("Listening") is False
        assert service.status("still here") is False
    assert [r.getMessage() for r in caplog.records] == [
        f"Cannot notify the service manager at {tmp_path / 'gone'}: No such file or directory"]


async def test_the_watchdog_pings_from_the_loop_until_cancelled(listener):
    sock, path = listener
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    watchdog = ServiceNotifier(path, watchdog_interval=0.01).start_watchdog()
    try:
        pings = [await asyncio.wait_for(loop.sock_recv(sock, 64), 5) for _ in range(3)]
    finally:
        watchdog.cancel()
    assert pings == [b"WATCHDOG=1"] * 3


async def test_no_watchdog_task_lingers_when_none_was_asked_for(listener):
    _, path = listener
    watchdog = ServiceNotifier(path).start_watchdog()
    await watchdog
    assert watchdog.done() and watchdog.exception() is None


class Recorder:
    """Stands in for the nanny's own ServiceNotifier."""

    def __init__(self):
        self.sent = []

    def ready(self, status):
        self.sent.append(("READY", status))

    def status(self, text):
        self.sent.append(("STATUS", text))


def test_the_nanny_is_ready_once_every_process_is_and_only_once():
    service = Recorder()
    relay = NotifyRelay(service, ["worker-0", "worker-1"])
    relay.take("worker-0", b"READY=1\nSTATUS=Started")
    assert service.sent == [("STATUS", "worker-0: Started; worker-1: starting")]
    relay.take("worker-1", b"READY=1\nSTATUS=Started")
    assert service.sent[-1] == ("READY", "worker-0: Started; worker-1: Started")
    relay.note("worker-1", "killed by signal 9 (SIGKILL); restarting")
    relay.take("worker-1", b"READY=1\nSTATUS=Started")  # the restarted process
    assert [kind for kind, _ in service.sent] == ["STATUS", "READY", "STATUS", "STATUS"]


def test_a_lone_process_status_is_the_nanny_status_and_other_fields_stay_with_the_nanny():
    service = Recorder()
    relay = NotifyRelay(service, ["worker-0"])
    relay.take("worker-0", b"READY=1\nSTATUS=Started; connecting to the scheduler at h:8786")
    relay.take("worker-0", b"WATCHDOG=1")
    relay.take("worker-0", b"STATUS=Registered with the scheduler at h:8786 as gpu-a")
    assert service.sent == [
        ("READY", "Started; connecting to the scheduler at h:8786"),
        ("STATUS", "Registered with the scheduler at h:8786 as gpu-a")]


async def test_a_relay_that_cannot_be_made_leaves_the_nanny_ready_at_once(monkeypatch):
    def no_directory(**_):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkdtemp", no_directory)
    service = Recorder()
    assert NotifyRelay(service, ["worker-0"]).open() is False
    assert service.sent == [("READY", "Started; the worker processes' status is not relayed")]

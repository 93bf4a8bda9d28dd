"""Real daemons on 127.0.0.1 with OS-chosen ports, always cleaned up: the helpers the
integration and system tests import (``from cluster_helpers import ...``; a unique name,
because ``conftest`` is not one)."""

from __future__ import annotations

import os
import random
import re
import secrets
import select
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

from deadline import wait_until
from dsched.auth import generate_token

def free_ports(count: int = 1) -> int:
    """The first of ``count`` consecutive ports free on 127.0.0.1, for a test that must name a
    port. They are taken below the range the OS hands out to outgoing connections, so no
    connection made meanwhile (a worker's, a client's) can take one before the daemon binds."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(100):
        first = random.randrange(max(1024, low - 8192), low - count)
        probes = []
        try:
            for port in range(first, first + count):
                probe = socket.socket()
                probes.append(probe)
                probe.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
    raise AssertionError(f"no {count} consecutive free ports below {low}")


LISTENING = re.compile(r"listening at (\S+)")
DASHBOARD = re.compile(r"dashboard at (\S+)")


class Daemons:
    """Starts sched-scheduler and sched-worker processes and stops them all at the end."""

    def __init__(self, tmp_path):
        self.token = generate_token()
        self.tmp_path = tmp_path
        self.env = {
            **os.environ,
            "SCHED_TOKEN": self.token,
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "PYTHONUNBUFFERED": "1",
            # Any free port: tests run side by side, and 8787 may be taken.
            "SCHED_SCHEDULER__DASHBOARD_PORT": "0",
        }
        self.env.pop("SCHED_CONFIG", None)
        self.processes: list[subprocess.Popen] = []
        self.workers: list[subprocess.Popen] = []
        self._clients: list = []

    def scheduler(self, *args: str, env: dict | None = None, timeout: float = 30.0,
                  port: int = 0, host: str = "127.0.0.1", prefix: tuple[str, ...] = ()) -> str:
        """Start a scheduler; its log goes to a file, read by :meth:`scheduler_log`, and the
        URL of its dashboard is ``self.dashboard`` (None when it serves none).

        ``prefix`` goes before the command (``("ip", "netns", "exec", NAME)`` runs the
        scheduler in a network namespace, where it listens on ``host``)."""
        self.log_path = self.tmp_path / f"scheduler-{len(self.processes)}.log"
        with open(self.log_path, "wb") as log:
            process = subprocess.Popen(
                [*prefix, sys.executable, "-m", "dsched.cli.scheduler", "--host", host,
                 "--port", str(port), "--log-level", "info", *args],
                env={**self.env, **(env or {})}, stdout=subprocess.PIPE, stderr=log, text=True,
            )
        self.processes.append(process)
        deadline = time.monotonic() + timeout
        self.dashboard = None
        while time.monotonic() < deadline and process.poll() is None:
            ready, _, _ = select.select([process.stdout], [], [], 0.5)
            if ready:
                line = process.stdout.readline()
                dashboard = DASHBOARD.search(line)
                if dashboard:  # on the listening line, when it serves one
                    self.dashboard = dashboard.group(1)
                match = LISTENING.search(line)
                if match:
                    self.scheduler_process = process
                    self.address = match.group(1)
                    return self.address
        raise AssertionError(f"the scheduler did not start:\n{self.scheduler_log()}")

    def scheduler_log(self) -> str:
        """What the last scheduler started has logged so far."""
        return self.log_path.read_text(errors="replace")

    def worker(self, *args: str, env: dict | None = None, address: str | None = None,
               host: str = "127.0.0.1", prefix: tuple[str, ...] = (),
               **popen) -> subprocess.Popen:
        """Start a worker (``host`` and ``prefix`` as for :meth:`scheduler`)."""
        process = subprocess.Popen(
            [*prefix, sys.executable, "-m", "dsched.cli.worker", address or self.address,
             "--host", host, "--log-level", "info",
             # scratch space under the test's tmp_path, even for workers killed with -9
             *(() if "--local-directory" in args else
               ("--local-directory", str(self.tmp_path / "scratch"))),
             *args],
            env={**self.env, **(env or {})}, **popen,
        )
        self.processes.append(process)
        self.workers.append(process)
        return process

    def client(self, **kwargs):
        from dsched import Client

        client = Client(self.address, token=self.token, **kwargs)
        self._clients.append(client)
        return client

    def wait_for_workers(self, client, n: int, timeout: float = 30.0) -> dict:
        return wait_until(lambda: (info := client.scheduler_info())["workers"] and
                          len(info["workers"]) >= n and info, timeout, what=f"{n} workers")

    def stop(self) -> None:
        for client in self._clients:
            try:
                client.close()
            except Exception:
                pass
        self._clients.clear()
        # The daemons' own shutdown: a first SIGTERM drains; a daemon still draining after a
        # moment (a task that runs on) gets the second signal, which means "exit at once".
        # SIGKILL only for a daemon that ignores both.
        for patience, signum in ((2.0, signal.SIGTERM), (10.0, signal.SIGTERM),
                                 (10.0, signal.SIGKILL)):
            alive = [p for p in reversed(self.processes) if p.poll() is None]
            for process in alive:
                process.send_signal(signum)
            deadline = time.monotonic() + patience
            for process in alive:
                try:
                    process.wait(max(0.01, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        for process in self.processes:
            process.wait()
            if process.stdout:
                process.stdout.close()


#: The cluster a test module gets from the ``cluster`` fixture, unless it sets CLUSTER_WORKERS.
TWO_WORKERS = (("--name", "a", "--nthreads", "2", "--resources", "GPU=2"),
               ("--name", "b", "--nthreads", "2", "--gpus", "none"))


@contextmanager
def running_cluster(tmp_path, workers):
    """A scheduler and one worker per argument list, stopped at the end."""
    daemons = Daemons(tmp_path)
    try:
        daemons.scheduler()
        for args in workers:
            daemons.worker(*args)
        yield daemons
    finally:
        daemons.stop()


class NotifySocket:
    """Where a test listens as systemd would for a daemon's notifications (``NOTIFY_SOCKET``):
    an abstract datagram socket, so no path length limit, and nothing left behind."""

    def __init__(self):
        self.name = f"@dsched-test-{os.getpid()}-{secrets.token_hex(4)}"
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind("\0" + self.name[1:])
        self.received: list[dict[str, str]] = []

    def until(self, predicate, timeout: float = 30.0, what: str = "notification") -> dict:
        """Receive notifications (each a dict of its fields, kept in ``received``) until one
        satisfies ``predicate``; return it. AssertionError at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{what} not received within {timeout:g}s; "
                                     f"received {self.received}")
            self.socket.settimeout(left)
            try:
                datagram = self.socket.recv(4096)
            except TimeoutError:
                continue
            fields = dict(line.split("=", 1) for line in datagram.decode().splitlines())
            self.received.append(fields)
            if predicate(fields):
                return fields

    def close(self) -> None:
        self.socket.close()


def write_atomically(path, text: str) -> None:
    """A file a daemon reads while it runs (the NVML stand-in's), replaced whole: the daemon
    never reads half of it."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)

"""What both daemons share when they run as programs: logging, credentials, signals, and
what they tell the service manager.

The first SIGTERM, SIGINT or SIGHUP starts a drain (the daemon's own ``drain`` coroutine); a
second SIGTERM or SIGINT exits at once. SIGHUP, which the end of the terminal or SSH session
that started the daemon sends (often twice: from the shell, and from the kernel when the shell
has gone), only ever drains; a daemon started with SIGHUP ignored (``nohup``) keeps ignoring
it. Drains have a deadline, so a daemon never hangs on shutdown. The exit statuses that mean
something to a service manager are defined here, once, and so is systemd's notify protocol
(``ServiceNotifier``: ready, status, stopping, the watchdog). This module decides nothing about
scheduling or tasks; it only carries a daemon's own lifetime.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from typing import Any, Awaitable, Callable, MutableMapping

from .auth import client_ssl_context, server_ssl_context
from .environ import NOTIFY_SOCKET_ENV, WATCHDOG_PID_ENV, WATCHDOG_USEC_ENV
from .settings import TlsConfig

EXIT_AT_ONCE = 128 + signal.SIGTERM
#: Refused by the scheduler, or given a configuration that cannot work (sysexits' EX_CONFIG:
#: a port or a directory another daemon holds, a journal it cannot write): starting it again
#: unchanged would fail again, so a nanny does not, and a unit should not.
EXIT_CONFIG = 78


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, str(level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def ssl_contexts(tls: TlsConfig, *, server: bool) -> Any:
    """An SSLContext from a config's ``tls`` table, or None when TLS is not configured."""
    if server:
        if not tls.cert:
            return None
        return server_ssl_context(tls.cert, tls.key, ca=tls.ca,
                                  require_client_cert=getattr(tls, "require_client_cert", False))
    if not tls.ca:
        return None
    return client_ssl_context(ca=tls.ca, cert=tls.cert, key=tls.key)


def install_signal_handlers(drain: Callable[[], Awaitable[None]], *,
                            at_once: Callable[[], None] | None = None,
                            supervised: bool = False,
                            service: ServiceNotifier | None = None) -> None:
    """First SIGTERM/SIGINT/SIGHUP: log it (one INFO line naming it), tell the ``service``
    manager the daemon is stopping and run ``drain()``; a second SIGTERM/SIGINT: run
    ``at_once()`` (to kill what must not outlive us) and exit at once. A SIGHUP while draining
    is only logged: a hang-up comes twice, and must not turn a drain into an exit at once.

    A ``supervised`` process (a worker under its nanny) leaves "at once" to its supervisor and
    ignores later signals: a terminal's Ctrl-C reaches the supervisor and its processes
    together, and the SIGTERM the supervisor then forwards must not count as a second signal.
    """
    loop = asyncio.get_running_loop()
    state = {"signalled": False}

    def on_signal(signum: int) -> None:
        name = signal.Signals(signum).name
        if state["signalled"]:
            if supervised or signum == signal.SIGHUP:
                logging.getLogger("dsched").info("Received %s: already draining", name)
                return
            logging.getLogger("dsched").warning("Second signal: exiting at once")
            if at_once is not None:
                at_once()
            os._exit(EXIT_AT_ONCE)
        state["signalled"] = True
        again = ("" if supervised else " (SIGTERM to exit at once)" if signum == signal.SIGHUP
                 else " (send again to exit at once)")
        logging.getLogger("dsched").info("Received %s: draining%s", name, again)
        if service is not None:
            service.stopping(f"Received {name}: draining")
        task = loop.create_task(drain())
        task.add_done_callback(_log_failure("Drain failed"))

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        if signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN:
            continue  # started under nohup: whoever started us wants it to outlive the session
        loop.add_signal_handler(signum, on_signal, signum)


def _log_failure(what: str) -> Callable[[asyncio.Task], None]:
    """A done-callback that logs a task's exception as ``what``."""
    def log(task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            logging.getLogger("dsched").error(what, exc_info=task.exception())
    return log


# -- the service manager: systemd's notify protocol (Type=notify) ----------------------------


class ServiceNotifier:
    """Tells the service manager how the daemon stands: a datagram of ``KEY=VALUE`` lines to
    ``$NOTIFY_SOCKET`` (no libsystemd needed). Without a socket every call does nothing, so a
    daemon calls it the same way under systemd, under a nanny's relay, or in a terminal.

    Notifications are best effort: one that cannot be sent is logged once and dropped, and a
    send never blocks the event loop.
    """

    def __init__(self, socket_path: str | None = None, watchdog_interval: float | None = None):
        self.socket_path = socket_path or None
        #: Seconds between watchdog pings (half of what the service manager allows), or None.
        self.watchdog_interval = watchdog_interval
        self._warned = False

    @classmethod
    def from_environment(cls, environ: MutableMapping[str, str] | None = None
                         ) -> "ServiceNotifier":
        """The notifier the service manager asked for, its variables taken out of ``environ``
        (this process's environment by default).

        The watchdog is on when ``WATCHDOG_USEC`` is set and ``WATCHDOG_PID``, when set, names
        this process (a variable inherited by some other process is not for it).
        """
        environ = os.environ if environ is None else environ
        # Taken out, so that what the daemon starts (tasks, a nanny's processes) cannot speak
        # for it.
        path = environ.pop(NOTIFY_SOCKET_ENV, None)
        usec = environ.pop(WATCHDOG_USEC_ENV, "")
        pid = environ.pop(WATCHDOG_PID_ENV, "")
        interval = None
        if usec.isdigit() and int(usec) > 0 and pid in ("", str(os.getpid())):
            interval = int(usec) / 2e6
        return cls(path, interval)

    def send(self, *fields: str) -> bool:
        """Send ``fields`` (``"READY=1"``, ``"STATUS=..."``) in one datagram; whether it went."""
        if self.socket_path is None:
            return False
        address = self.socket_path
        if address.startswith("@"):  # an abstract socket
            address = "\0" + address[1:]
        message = "\n".join(fields).encode("utf-8", "replace")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(message, socket.MSG_DONTWAIT, address)
        except OSError as error:
            if not self._warned:
                self._warned = True
                logging.getLogger("dsched").warning(
                    "Cannot notify the service manager at %s: %s", self.socket_path,
                    error.strerror or error)
            return False
        return True

    def ready(self, status: str) -> bool:
        """``READY=1``: the daemon has done everything it must before it serves."""
        return self.send("READY=1", _status(status))

    def status(self, text: str) -> bool:
        """One line that ``systemctl status`` shows beside the unit."""
        return self.send(_status(text))

    def stopping(self, status: str) -> bool:
        """``STOPPING=1``: the daemon has begun to stop (a drain)."""
        return self.send("STOPPING=1", _status(status))

    async def watchdog(self) -> None:
        """Ping the watchdog every ``watchdog_interval`` seconds, from the event loop, for as
        long as the loop runs; return at once when no watchdog was asked for.

        The pings come from the loop itself, so a loop that stops turning stops them, and the
        service manager restarts the daemon (a thread would keep pinging for a stuck loop).
        """
        if self.watchdog_interval is None or self.socket_path is None:
            return
        while True:
            self.send("WATCHDOG=1")
            await asyncio.sleep(self.watchdog_interval)

    def start_watchdog(self) -> asyncio.Task:
        """:meth:`watchdog` as a task of the running loop whose failure is logged; cancel it
        when the daemon stops."""
        task = asyncio.get_running_loop().create_task(self.watchdog())
        task.add_done_callback(_log_failure("The watchdog stopped"))
        return task


def _status(text: str) -> str:
    # One field per line: a newline inside the text would start a field of its own.
    return "STATUS=" + str(text).replace("\n", " ")

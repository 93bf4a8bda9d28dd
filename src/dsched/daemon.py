"""What both daemons share when they run as programs: logging, credentials, signals.

The first SIGTERM or SIGINT starts a drain (the daemon's own ``drain`` coroutine); a second one
exits at once. Drains have a deadline, so a daemon never hangs on shutdown. The exit statuses
that mean something to a service manager are defined here, once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from typing import Any, Awaitable, Callable

from .auth import client_ssl_context, server_ssl_context
from .settings import TlsConfig

EXIT_AT_ONCE = 128 + signal.SIGTERM
#: Refused by the scheduler, or given a configuration that cannot work (sysexits' EX_CONFIG):
#: starting it again unchanged would fail again, so a nanny does not, and a unit should not.
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
                            supervised: bool = False) -> None:
    """First SIGTERM/SIGINT: run ``drain()``; a second: run ``at_once()`` (to kill what must
    not outlive us) and exit at once.

    A ``supervised`` process (a worker under its nanny) leaves "at once" to its supervisor and
    ignores later signals: a terminal's Ctrl-C reaches the supervisor and its processes
    together, and the SIGTERM the supervisor then forwards must not count as a second signal.
    """
    loop = asyncio.get_running_loop()
    state = {"signalled": False}

    def on_signal(signum: int) -> None:
        name = signal.Signals(signum).name
        if state["signalled"]:
            if supervised:
                logging.getLogger("dsched").info("Received %s: already draining", name)
                return
            logging.getLogger("dsched").warning("Second signal: exiting at once")
            if at_once is not None:
                at_once()
            os._exit(EXIT_AT_ONCE)
        state["signalled"] = True
        logging.getLogger("dsched").info(
            "Received %s: draining%s", name, "" if supervised else " (send again to exit at once)")
        task = loop.create_task(drain())
        task.add_done_callback(_log_failure)

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        logging.getLogger("dsched").error("Drain failed", exc_info=task.exception())


def notify_systemd(message: bytes = b"READY=1") -> bool:
    """Tell systemd (``Type=notify``) how the daemon stands, when ``NOTIFY_SOCKET`` is set: a
    datagram to that socket, no libsystemd needed."""
    import socket

    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    if path.startswith("@"):  # an abstract socket
        path = "\0" + path[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(path)
        sock.sendall(message)
    return True

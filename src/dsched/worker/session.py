"""A worker's connection to its scheduler: connect, register, pass ops both ways, reconnect.

The session keeps one connection, reconnecting with back-off when it breaks; while it is
down, the ops the worker sends wait and go first once it registers again (so no report is
lost), and running tasks and held results carry on. It sends heartbeats while connected. A
refusal (wrong token, another protocol version, a name already taken, a scheduler that uses
TLS when this worker does not) is final: the session stops and says why, and the worker exits
with a status that tells a service manager so.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from ..comm import Comm, connect
from ..errors import (
    AuthenticationError, CommClosedError, RemoteProtocolError, SchedError, TlsMismatchError,
    VersionMismatchError,
)
from ..protocol import ops

logger = logging.getLogger("dsched.worker")


class SchedulerSession:
    """``register()`` builds the register op each time (what the worker holds changes);
    ``on_op(op)`` takes each op the scheduler sends; ``heartbeat()`` builds a heartbeat, run
    in a thread (it may read NVML); ``opened()`` and ``lost()`` are called when a registered
    session begins (before the first op the scheduler sends in it) and ends. ``stopped`` is set
    when the session gives up for good. ``on_status`` (settable) is told in a few words how the
    connection stands, each time that changes: for the service manager's status line."""

    def __init__(self, address: str, *, token: str, ssl: Any, limits: dict, name: Callable[[], str],
                 register: Callable[[], ops.Register], on_op: Callable[[Any], None],
                 heartbeat: Callable[[], ops.Heartbeat], heartbeat_interval: float,
                 reconnect_min: float, reconnect_max: float, connect_timeout: float,
                 death_timeout: float | None, stopped: asyncio.Event,
                 opened: Callable[[], None] = lambda: None,
                 lost: Callable[[], None] = lambda: None):
        self.address = address
        self._token, self._ssl, self._limits, self._name = token, ssl, limits, name
        self._register, self._on_op, self._heartbeat = register, on_op, heartbeat
        self._opened, self._lost = opened, lost
        self._heartbeat_interval = heartbeat_interval
        self._reconnect = (reconnect_min, reconnect_max)
        self._connect_timeout, self._death_timeout = connect_timeout, death_timeout
        self.stopped = stopped
        self.comm: Comm | None = None  # set while registered
        self.registered = asyncio.Event()
        self.refusal: str | None = None  # why the scheduler refused this worker, if it did
        self.on_status: Callable[[str], None] = lambda text: None
        self._unsent: list[dict] = []
        self._last: Comm | None = None  # the connection a stop cut the session short on

    @property
    def connected(self) -> bool:
        return self.comm is not None and not self.comm.closed

    def send(self, op: Any) -> None:
        """Send ``op`` now, or once registered again."""
        comm = self.comm
        if comm is None or comm.closed:
            self._unsent.append(op.to_wire())
        else:
            comm.write_nowait(op.to_wire())

    async def close(self, reason: str, last: Any = None) -> None:
        """Say ``last`` (an Unregister, say) if connected, then close."""
        comm = self.comm or self._last
        if comm is not None and not comm.closed:
            if last is not None:
                comm.write_nowait(last.to_wire())
            await comm.close(reason)

    # -- the connection, kept up -------------------------------------------------------------

    async def run(self) -> None:
        """Connect, register and serve until stopped, reconnecting with back-off."""
        low, high = self._reconnect
        backoff = low
        lost_at: float | None = None
        tls_mismatch = False  # the last try met a server that uses TLS, by every sign
        loop = asyncio.get_running_loop()
        while not self.stopped.is_set():
            try:
                comm = await connect(self.address, role="worker", name=self._name(),
                                     token=self._token, ssl=self._ssl,
                                     timeout=self._connect_timeout, **self._limits)
            except (OSError, TimeoutError, SchedError) as error:
                if isinstance(error, (AuthenticationError, VersionMismatchError)):
                    return self._refused(str(error))
                # As final as a wrong token once seen twice in a row: a plain scheduler that
                # closes while our handshake is in flight also closes without a word, once.
                if isinstance(error, TlsMismatchError) and tls_mismatch:
                    return self._refused(str(error))
                tls_mismatch = isinstance(error, TlsMismatchError)
                if lost_at is None:
                    lost_at = loop.time()
                if self._death_timeout is not None and loop.time() - lost_at > self._death_timeout:
                    logger.error("No scheduler for %.0fs (death timeout); stopping",
                                 self._death_timeout)
                    self.stopped.set()
                    return
                logger.info("Cannot reach the scheduler at %s (%s); retrying in %.1fs",
                            self.address, error, backoff)
                self.on_status(f"Cannot reach the scheduler at {self.address}; retrying")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, high)
                continue
            tls_mismatch = False
            try:
                await self._serve(comm)
            except CommClosedError as error:
                if self.stopped.is_set():
                    return
                if (error.reason or "").startswith("refused"):
                    return self._refused(error.reason.removeprefix("refused").lstrip(": "))
                logger.warning("Lost the scheduler (%s); reconnecting", error.reason)
                self.on_status(f"Lost the scheduler at {self.address}; reconnecting")
            except RemoteProtocolError as error:  # the scheduler sent something malformed
                logger.error("The scheduler sent a malformed op (%s); reconnecting", error)
                comm.protocol_error(error)
            finally:
                was_registered = self.registered.is_set()
                if self.stopped.is_set():  # the worker is stopping: close() says goodbye on it
                    self._last = self.comm
                self.comm = None
                self.registered.clear()
                if was_registered:
                    self._lost()
            if was_registered:  # back-off starts again only after a session that got going
                backoff, lost_at = low, None
            else:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, high)

    def _refused(self, reason: str) -> None:
        # Trying again would be refused again: stop, and exit with a status that says so.
        self.refusal = reason
        logger.error("The scheduler at %s refused this worker: %s", self.address, reason)
        self.on_status(f"Refused by the scheduler at {self.address}: {reason}")
        self.stopped.set()

    async def _serve(self, comm: Comm) -> None:
        register = self._register()
        await comm.send(register.to_wire())
        reply = await comm.recv()
        if not reply or reply[0].get("op") != ops.Registered.OP:
            raise CommClosedError(f"refused: unexpected reply {reply!r:.200}")
        self.comm = comm
        self.registered.set()
        logger.info("Registered with the scheduler at %s as %s (resources: %s, threads: %d)",
                    self.address, register.name, register.resources or "none",
                    register.nthreads)
        self.on_status(f"Registered with the scheduler at {self.address} as {register.name}")
        unsent, self._unsent = self._unsent, []
        for wire in unsent:
            comm.write_nowait(wire)
        self._opened()
        for d in reply[1:]:
            self._on_op(ops.decode(d))
        async for d in comm:
            self._on_op(ops.decode(d))
        raise CommClosedError(comm.close_reason or "scheduler closed the connection")

    async def heartbeats(self) -> None:
        """Every ``heartbeat_interval`` while connected: load, memory and GPU use."""
        loop = asyncio.get_running_loop()
        while not self.stopped.is_set():
            await asyncio.sleep(self._heartbeat_interval)
            if not self.connected:
                continue
            beat = await loop.run_in_executor(None, self._heartbeat)
            if self.connected:  # read again: the connection may have changed meanwhile
                self.comm.write_nowait(beat.to_wire())

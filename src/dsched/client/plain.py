"""The ``sched`` command's connection for submitting a job or asking about jobs: one blocking
socket, no event loop, no thread.

A ``sched submit`` from a shell loop pays for each process it starts: the full Client
(``blocking.py``: asyncio, a loop thread, the reports and futures machinery) costs more to
load than the whole round trip to the scheduler. This speaks the same protocol with the same
parts: the sans-IO handshake, frames and messages of ``dsched.protocol``, the real op classes,
and the job spec and questions of ``dsched.jobspec`` that the library's client sends too.

It does the plain case only. Anything it does not expect raises :class:`Unusual` before a job
was sent, and the command then does all again with the full Client, which says what went
wrong in its own words (``cli/quick.py``). Once a submission has left, it is never handed on:
a connection lost before its reply is made again and the submission sent again with the same
submission id, which the scheduler answers with the job it already made, as the full Client
does after a reconnect; else the command fails, saying the job may have been queued.
"""

from __future__ import annotations

import _socket
import collections
import time

from ..comm.addresses import parse_address
from ..errors import ProtocolError, SchedError, SchedulerLostError
from ..jobspec import arrays_to_ask, job_numbers, job_spec, query_jobs, refusal
from ..protocol import clientops as ops
from ..protocol.handshake import INITIATOR, Handshake
from ..protocol.messages import MessageDecoder, close_op, encode_ops

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable

_RECEIVE = 1 << 18


class Unusual(Exception):
    """Not the plain case: the full Client is to do it (nothing that changes a thing was sent)."""


class PlainClient:
    """What ``sched submit`` and ``sched status`` ask of a client (``submit_command``, ``jobs``,
    ``resolve_jobs``), over one blocking socket to the scheduler at ``address``. Connects
    when made; ``timeout`` bounds connecting and each request, as the full Client's does."""

    def __init__(self, address: str, token: str, timeout: float, name: str = "sched",
                 max_frame_size: int | None = None, max_message_size: int | None = None):
        self.address, self._token, self._timeout, self._name = address, token, timeout, name
        self._limits = {"max_frame_size": max_frame_size, "max_message_size": max_message_size}
        self._socket: _socket.socket | None = None
        self._request_id = 0
        #: Whether a submission has left: from then on a failure is the command's to say.
        self.submitted = False
        self._connect()

    @property
    def timeout(self) -> float:
        return self._timeout

    # -- what the command calls ---------------------------------------------------------------

    def submit_command(self, command: Any, **options: Any) -> "_Acknowledged":
        spec = job_spec(command, **options)
        wire = spec.to_wire()

        def make(request: int) -> ops.SubmitJobs:
            return ops.SubmitJobs(id=request, jobs=(wire,))

        try:  # a spec the wire cannot carry is said here: nothing was sent
            self._encode(make(0).to_wire())
        except ProtocolError as error:
            raise refusal(f"cannot send submit-jobs: {error}") from None
        self.submitted = True
        try:  # as long as the scheduler takes to commit it, as the full Client waits
            reply = self._request(make, timeout=None)
        except (OSError, ProtocolError) as error:
            reply = self._submit_again(make, error)
        except Unusual as refused:  # an error reply: the scheduler queued nothing, and says why
            raise refusal(str(refused)) from None
        return _Acknowledged(reply[0])

    def jobs(self, jobs: Iterable[int] = (), states: Iterable[str] = (), offset: int = 0,
             limit: int = 1000, expand: bool = False) -> dict:
        return self._request(query_jobs(self.resolve_jobs(jobs), states, offset, limit, expand))

    def resolve_jobs(self, jobs: Iterable[int | str]) -> list[int]:
        refs, arrays = arrays_to_ask(jobs)
        if not arrays:
            return refs
        return job_numbers(refs, self._request(
            lambda request: ops.QueryJobs(id=request, jobs=arrays))["jobs"])

    def close(self) -> None:
        if self._socket is not None:
            try:
                self._socket.sendall(self._encode(close_op("client closing")))
            except OSError:
                pass
            self._socket.close()
            self._socket = None

    # -- the connection -----------------------------------------------------------------------

    def _connect(self) -> None:
        host, port = parse_address(self.address)
        sock = _open(_ascii(host), port, self._timeout)
        try:
            sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            handshake = Handshake(INITIATOR, role="client", name=self._name, token=self._token)
            while not handshake.done:  # a refusal raises, saying why
                sock.sendall(handshake.data_to_send())
                data = sock.recv(_RECEIVE)
                if not data:
                    handshake.receive_eof()
                handshake.receive_data(data)
            sock.sendall(handshake.data_to_send())
        except BaseException:
            sock.close()
            raise
        self._socket = sock
        limits = {key: value for key, value in self._limits.items() if value is not None}
        self._decoder = MessageDecoder(**limits)
        self._received: collections.deque = collections.deque()
        if handshake.leftover:
            self._feed(handshake.leftover)
        if self._next_op()["op"] != "welcome":
            raise Unusual("the scheduler's first op was not welcome")

    def _encode(self, wire: dict) -> bytes:
        """One op as the bytes of a message, within the configured frame and message sizes;
        LocalProtocolError for one that cannot be sent."""
        limits = {key: value for key, value in self._limits.items() if value is not None}
        return b"".join(encode_ops([wire], **limits))

    def _request(self, make: Callable[[int], Any], timeout: float | None | bool = False) -> Any:
        """The value of the reply to ``make(id)``, waited for ``timeout`` seconds (None: for
        as long as it takes; by default the connect timeout); Unusual for a refusal (the full
        Client says it)."""
        if self._socket is None:
            raise OSError("not connected")
        self._request_id += 1
        request = self._request_id
        self._socket.settimeout(self._timeout if timeout is False else timeout)
        self._socket.sendall(self._encode(make(request).to_wire()))
        while True:
            wire = self._next_op()
            if wire["op"] in ("reply", "error") and wire.get("id") == request:
                break
        answer = ops.decode(wire)
        if type(answer) is ops.Error:
            raise Unusual(answer.reason)
        return answer.value

    def _next_op(self) -> dict:
        while not self._received:
            data = self._socket.recv(_RECEIVE)
            if not data:
                self._decoder.eof()
                raise ConnectionResetError("the scheduler closed the connection")
            self._feed(data)
        wire = self._received.popleft()
        if wire.get("op") == "close":
            raise ConnectionResetError(f"the scheduler closed the connection: "
                                       f"{wire.get('reason')}")
        return wire

    def _feed(self, data: bytes) -> None:
        for batch in self._decoder.feed(data):
            self._received.extend(batch)

    def _submit_again(self, make: Callable[[int], Any], error: BaseException) -> Any:
        """The submission's reply was lost with the connection: connect again and send it
        again, for up to the timeout (the same submission id: never a second job)."""
        deadline = time.monotonic() + self._timeout
        delay = 0.1
        reason = str(error) or type(error).__name__
        self.close()
        while time.monotonic() < deadline:
            time.sleep(delay)
            delay = min(2 * delay, 1.0)
            try:
                self._connect()
                return self._request(make, timeout=None)
            except (OSError, ProtocolError) as again:
                self.close()
                reason = str(again) or type(again).__name__
            except (Unusual, SchedError) as refused:
                self.close()
                raise SchedError(f"the scheduler at {self.address} did not take the job "
                                 f"again after losing its reply ({refused}); it may have been "
                                 "queued: see sched status") from None
        raise SchedulerLostError(f"lost the scheduler at {self.address}: {reason}; not back "
                                 f"within {self._timeout:g} s; the job may have been queued: "
                                 "see sched status")


def _open(host: str | bytes, port: int, timeout: float) -> _socket.socket:
    """A TCP connection to ``host`` and ``port``, as ``socket.create_connection`` makes it:
    each address the resolver gives is tried in turn, and the last one's error raised when
    none connects. Made from ``_socket``: the ``socket`` module, with the ``enum`` and
    ``selectors`` it loads, cost a ``sched`` call about 6 ms, for classes this never uses."""
    last: OSError | None = None
    for family, kind, proto, _, address in _socket.getaddrinfo(host, port, 0,
                                                               _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
            return sock
        except OSError as error:
            sock.close()
            last = error
    raise last if last is not None else OSError(f"no address found for {host!r}")


def _ascii(host: str) -> str | bytes:
    """``host`` as bytes when it is ASCII: a str host is encoded by the "idna" codec, whose
    module (and ``stringprep``, ``unicodedata``) costs a ``sched`` call more than its connect.
    For an ASCII name that codec gives the same bytes, or refuses an empty or overlong label,
    which the resolver then refuses instead: either way nothing is sent, and the command
    hands over (``cli/quick.py``)."""
    return host.encode("ascii") if host.isascii() else host


class _Acknowledged:
    """A submitted job whose number is known: what ``submit_command`` returns."""

    __slots__ = ("_job",)

    def __init__(self, job: int):
        self._job = job

    def job_id(self, timeout: float | None = None) -> int:
        return self._job

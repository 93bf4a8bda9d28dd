"""The exception types users of dsched see.

Every error a user can cause or meet has one type here, so that callers can catch it by name
and so that one message style holds across the command line, the daemons and the client.
"""

from __future__ import annotations


class SchedError(Exception):
    """Base class of every error dsched raises on purpose."""


class ResourceSpecError(SchedError, ValueError):
    """A resource spec (``"GPU=2 MEMORY=100e9"``, a dict, a TOML table) is invalid.

    The message names the bad part and the expected ``NAME=VALUE`` form.
    """


class JobSpecError(SchedError, ValueError):
    """A job cannot be submitted as given (an empty command, a bad duration, ...)."""


class ConfigError(SchedError, ValueError):
    """A configuration file, environment variable or override is invalid."""


class ProtocolError(SchedError):
    """Something went wrong in the wire protocol."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something we cannot accept: close that connection, keep serving others."""


class LocalProtocolError(ProtocolError):
    """We tried to send something invalid: a bug on our side, raised to the caller."""


class AuthenticationError(RemoteProtocolError):
    """The peer failed the token challenge, or we failed the peer's."""


class VersionMismatchError(RemoteProtocolError):
    """The peer speaks another protocol version; the message names both."""


class TlsMismatchError(RemoteProtocolError):
    """A connection without TLS met a server that, by every sign, uses it: the server closed
    it without a word in answer to our handshake, as a TLS server does. The message says how
    each program is given TLS."""


class CommClosedError(SchedError, ConnectionError):
    """The connection is closed; ``reason`` says why when the peer or we gave one."""

    def __init__(self, reason: str = "connection closed"):
        super().__init__(reason)
        self.reason = reason


class SchedulerLostError(SchedError):
    """The connection to the scheduler ended while tasks were pending."""


class TaskFailedError(SchedError):
    """A task ended without an exception of its own: the workers running it kept dying
    (``error == "killed_worker"``), no worker could run it (``"no_worker"``), or its
    dependencies were unknown or formed a cycle."""

    def __init__(self, message: str, error: str = ""):
        super().__init__(message)
        self.error = error

    def __reduce__(self):
        return (TaskFailedError, (str(self), self.error))


class TaskExit(SchedError):
    """A task raised an exception that is not an ``Exception`` (``SystemExit``,
    ``KeyboardInterrupt``). Raised as it is, it would end the calling program (``sys.exit(3)``
    in a task would exit the client with status 3 and print nothing), so it arrives as this
    ordinary error that names it; ``original`` holds it, and the remote traceback is chained
    as the cause."""

    def __init__(self, original: BaseException):
        super().__init__(f"the task raised {type(original).__name__}"
                         f"({', '.join(map(repr, original.args))})")
        self.original = original

    def __reduce__(self):
        return (TaskExit, (self.original,))


def cannot_send_result(key: str, why: BaseException | str) -> str:
    """What a client is told, as a SchedError, of a result that cannot travel: one message
    whether the result waits in a worker's memory (a thread's task; a fetch finds out) or
    must leave a GPU task's process at once (that task fails with it)."""
    if isinstance(why, BaseException):
        why = f"{type(why).__name__}: {why}"
    return f"cannot send the result of {key}: {why}"

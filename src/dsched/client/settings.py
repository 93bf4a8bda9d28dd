"""What a client takes from the configuration: its token and its connection settings, and
the client the ``sched`` command makes from a config.

Read once per client, when it is made; never in a hot path (``config.get`` may read the
config file).
"""

from __future__ import annotations

from .. import config, config_kinds, settings
from ..auth import load_token

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:  # the dataclass is made where a connection's settings are built
    from typing import Any, Mapping

    from ..settings import CommConfig


def resolve_token(token: str | None, token_file: str | None) -> str:
    """The token a client uses: given, ``SCHED_TOKEN``, ``token_file``, or the config's file.

    ``token_file`` is read as the config file's value is (``~`` expanded), so that the one
    path means the same file in either place."""
    given = config_kinds.path(token_file) if token_file else None
    return load_token(token, token_file=given or config.get("client.token_file"))


def comm_config() -> CommConfig:
    """The [comm] settings in force, for this process's connections."""
    return settings.build(settings.CommConfig, config.get("comm"))


#: Where ``sched`` looks for a scheduler when none is configured: this machine's, on the
#: scheduler's default port.
DEFAULT_SCHEDULER = f"127.0.0.1:{settings.default_of('scheduler.port')}"


def client_from_config(cfg: Mapping[str, Any], name: str = "sched") -> Any:
    """A blocking Client of the scheduler that ``cfg`` (from ``config.load``) names, with its
    token file, timeout, TLS and comm settings: the connection of the ``sched`` command.
    With no address, DEFAULT_SCHEDULER: a command never starts a cluster of its own."""
    from .blocking import Client

    section = cfg["client"]
    with config.set({"client": section, "comm": cfg["comm"]}):
        return Client(section["scheduler_address"] or DEFAULT_SCHEDULER,
                      token_file=section["token_file"], timeout=section["connect_timeout"],
                      name=name, set_as_default=False)


def plain_client_from_config(cfg: Mapping[str, Any], name: str = "sched") -> Any:
    """What ``client_from_config`` connects to, with the same token, timeout and frame
    limits, over the plain connection of ``plain.py`` (no event loop); ``plain.Unusual``
    where only the full Client will do (TLS)."""
    from .plain import PlainClient, Unusual

    section = cfg["client"]
    if any(section["tls"].values()):
        raise Unusual("TLS is configured")
    with config.set({"client": section, "comm": cfg["comm"]}):
        token = resolve_token(None, section["token_file"])
        comm = config.get("comm")  # as comm_config() reads it, without making its dataclass
    return PlainClient(section["scheduler_address"] or DEFAULT_SCHEDULER, token,
                       section["connect_timeout"], name, comm["max_frame_size"],
                       comm["max_message_size"])

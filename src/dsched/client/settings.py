"""What a client takes from the configuration: its token and its connection settings.

Read once per client, when it is made; never in a hot path (``config.get`` may read the
config file).
"""

from __future__ import annotations

from .. import config
from ..auth import load_token
from ..settings import CommConfig, build


def resolve_token(token: str | None, token_file: str | None) -> str:
    """The token a client uses: given, ``SCHED_TOKEN``, ``token_file``, or the config's file."""
    return load_token(token, token_file=token_file or config.get("client.token_file"))


def comm_config() -> CommConfig:
    """The [comm] settings in force, for this process's connections."""
    return build(CommConfig, config.get("comm"))

"""The policies the pure cores decide by: the settings each core reads, frozen in one object.

``SchedulerState`` takes a ``SchedulerPolicy``, ``WorkerState`` a ``WorkerPolicy``. Each field
is a setting of the daemon's section (``_setting("scheduler.prefetch")``), and its default is
that setting's default in ``settings.py``, where it is written once: a core built without a
policy decides as a daemon with no configuration does, so the core tests run what production
runs. A daemon builds its policy from its config (``from_config``); a test that needs another
says so (``SchedulerPolicy(prefetch=0)``, ``dataclasses.replace``). Values are checked by the
settings' own kinds.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Self

from .config_kinds import Bad
from .settings import default_of, kind_of


def _setting(key: str) -> Any:
    """A field that is the setting ``key``, with its default."""
    return field(default=default_of(key), metadata={"setting": key})


class _Policy:
    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            try:
                kind_of(f.metadata["setting"])(value)
            except Bad as e:
                raise ValueError(f"{type(self).__name__}.{f.name} must be {e}, "
                                 f"got {value!r}") from None

    @classmethod
    def from_config(cls, config: Any) -> Self:
        """The policy of a daemon built with ``config`` (its section's frozen config:
        ``SchedulerConfig``, ``WorkerConfig``)."""
        return cls(**{f.name: getattr(config, f.metadata["setting"].rsplit(".", 1)[1])
                      for f in fields(cls)})  # type: ignore[arg-type]


@dataclass(frozen=True)
class SchedulerPolicy(_Policy):
    """What ``SchedulerState`` decides by (each setting's help says what it means)."""

    allowed_failures: int = _setting("scheduler.allowed_failures")
    max_rejections: int = _setting("scheduler.max_rejections")
    no_worker_timeout: float | None = _setting("scheduler.no_worker_timeout")
    heartbeat_timeout: float = _setting("scheduler.heartbeat_timeout")
    prefetch: int = _setting("scheduler.prefetch")
    lease_margin: float = _setting("scheduler.lease_margin")
    recovery_timeout: float = _setting("scheduler.recovery_timeout")


@dataclass(frozen=True)
class WorkerPolicy(_Policy):
    """What ``WorkerState`` decides by."""

    job_lease: float = _setting("worker.job_lease")

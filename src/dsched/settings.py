"""Every setting, declared once: its section and name, kind, default and help.

A section is a frozen dataclass whose fields are the settings (``setting(default, kind,
help)``); a nested table (``tls``) is a section of its own. From these declarations come the
defaults and the checks that ``config.py`` merges the file, the environment and the command
line with; the frozen config objects each daemon is built from (``SchedulerConfig``,
``WorkerConfig``, ``CommConfig``, ``ClientConfig``); the defaults of the policies the pure
cores are built with (``policy.py``, through ``default_of``); the command line's help texts
(``help_of``); and the configuration reference, ``docs/configuration.md`` (``reference``,
checked by a test).

A section's class is made a dataclass when one of the sections is first asked of this module
(:func:`__getattr__`), not when it is imported: making them, and loading ``dataclasses`` at
all, costs more than all the rest of what ``sched submit`` does with its config, which needs
only the defaults and the kinds, and those are read from the declarations (``Declared``).

Pure: no I/O.
"""

from __future__ import annotations

import _thread

from . import config_kinds as k
from .environ import setting_variable
from .protocol.framing import MAX_FRAME_SIZE, MAX_MESSAGE_SIZE

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:
    from typing import Any, Callable, Iterator, TypeVar

    _Section = TypeVar("_Section", bound=type)

MiB = 2**20
MISSING = object()  # a setting's default value where ``default_factory`` makes it


class Declared:
    """A field of a section as declared: its ``default`` or ``default_factory`` (MISSING where
    none) and ``metadata`` (its ``kind`` and ``help``), as ``dataclasses.field`` takes them
    once the section is made a dataclass."""

    __slots__ = ("default", "default_factory", "metadata")

    def __init__(self, metadata: dict, default: Any = MISSING, default_factory: Any = MISSING):
        self.default, self.default_factory, self.metadata = default, default_factory, metadata

    def field(self) -> Any:
        """The ``dataclasses.field`` it stands for."""
        import dataclasses

        given = ({"default": self.default} if self.default_factory is MISSING
                 else {"default_factory": self.default_factory})
        return dataclasses.field(**given, metadata=self.metadata)


def setting(default: Any, kind: Callable[[Any], Any], help: str) -> Any:
    """A field of a section: its default, the kind that checks a value, and its help."""
    if isinstance(default, (dict, list)):
        return Declared({"kind": kind, "help": help},
                        default_factory=lambda: type(default)(default))
    return Declared({"kind": kind, "help": help}, default=default)


def table(section: type, help: str) -> Any:
    """A field that is a nested section (a TOML table)."""
    return Declared({"help": help}, default_factory=section)


#: The fields of each section declared, by class, in order (those of its base first).
_FIELDS: dict[type, dict[str, Declared]] = {}


def section(cls: _Section) -> _Section:
    """Declare a section: its fields are noted, and the class is made a frozen dataclass when
    the sections are first asked for (``__getattr__``), its base before it."""
    _FIELDS[cls] = {**_FIELDS.get(cls.__base__, {}),
                    **{name: cls.__dict__[name] for name in cls.__dict__["__annotations__"]}}
    return cls


@section
class TlsConfig:
    cert: str | None = setting(None, k.nullable(k.path), "TLS certificate (PEM)")
    key: str | None = setting(None, k.nullable(k.path), "Its private key (PEM)")
    ca: str | None = setting(None, k.nullable(k.path),
                             "CA certificate that the peer's certificate must be signed by")


@section
class ServerTlsConfig(TlsConfig):
    require_client_cert: bool = setting(
        False, k.flag, "Clients and workers must present a certificate signed by the CA")


@section
class SchedulerConfig:
    host: str = setting("0.0.0.0", k.text,
                        "Interface to listen on; all of them by default, since remote workers "
                        "must reach it (the token guards it)")
    port: int = setting(8786, k.port, "Port for workers and clients; 0 for any free one")
    dashboard_port: int | None = setting(8787, k.nullable(k.port),
                                         "Port of the dashboard, JSON API and Prometheus "
                                         "metrics (HTTP); 0 for any free one, none to turn "
                                         "them off")
    dashboard_host: str = setting("127.0.0.1", k.text,
                                  "Interface the dashboard listens on; any other than "
                                  "127.0.0.1, ::1 or localhost requires the dashboard token "
                                  "(sched-scheduler --print-dashboard-token)")
    dashboard_prefix: str | None = setting(None, k.nullable(k.url_prefix),
                                           "Path the dashboard is served under, for a reverse "
                                           "proxy (/sched); none: the root")
    state_dir: str | None = setting(None, k.nullable(k.path),
                                    "Directory of the token file and the job journal, locked "
                                    "by the scheduler using it (one scheduler each); none: "
                                    "$XDG_STATE_HOME/sched (~/.local/state/sched)")
    token_file: str | None = setting(None, k.nullable(k.path),
                                     "Shared token file, created (mode 0600) when missing; "
                                     "none: STATE_DIR/token")
    tls: ServerTlsConfig = table(ServerTlsConfig, "TLS for workers and clients")
    allowed_failures: int = setting(3, k.integer(0),
                                    "Worker deaths a task may be executing on, and losses of its "
                                    "result no worker could send, before it fails (it fails on "
                                    "one more)")
    max_rejections: int = setting(5, k.integer(0),
                                  "Times workers may refuse a task or a job (each refusal waits "
                                  "longer before the next try) before it fails with the reason")
    no_worker_timeout: float | None = setting(
        None, k.nullable(k.seconds), "Seconds a task that no connected worker can run waits before "
        "it fails with the reason; none: for ever (a worker may join)")
    heartbeat_timeout: float = setting(60.0, k.seconds,
                                       "Seconds without a heartbeat before a worker is removed "
                                       "and its tasks run elsewhere")
    drain_timeout: float = setting(60.0, k.seconds,
                                   "Seconds SIGTERM lets running tasks finish before the "
                                   "scheduler stops")
    prefetch: int = setting(2, k.integer(0),
                            "Resource-free tasks a worker may hold beyond its free threads "
                            "(raise it for many tiny tasks)")
    tick_interval: float = setting(0.5, k.seconds,
                                   "Seconds between clock ticks: heartbeat timeouts, refusal "
                                   "back-offs and duration estimates are looked at this often")
    register_timeout: float = setting(30.0, k.seconds,
                                      "Seconds a connected worker has to register")
    recovery_timeout: float = setting(60.0, k.seconds,
                                      "After a restart, seconds to wait for the workers that held "
                                      "assigned or running jobs before jobs are dispatched again")
    lease_margin: float = setting(60.0, k.seconds,
                                  "Seconds past a vanished worker's job lease before its running "
                                  "jobs are declared lost (covers delays and clock drift)")
    log_level: str = setting("info", k.log_level, "Logging level")


@section
class WorkerConfig:
    scheduler_address: str | None = setting(None, k.nullable(k.text),
                                            "Scheduler to connect to (host:k.port), when "
                                            "sched-worker is given none")
    host: str = setting("0.0.0.0", k.text,
                        "Interface of the port that serves results to peers and clients")
    port: int = setting(0, k.port, "That port; 0 for any free one (with --nworkers, the first "
                        "of a range)")
    resources: dict = setting({}, k.resource_table,
                              'Abstract resources this worker offers, e.g. "GPU=2 '
                              'MEMORY=100e9"; plus GPU=<count> of the GPUs found')
    nthreads: int | None = setting(None, k.nullable(k.integer(1)),
                                   "Tasks run at once; none: the CPUs this process may use")
    nanny: bool = setting(True, k.flag, "Run the worker processes under a nanny that restarts "
                          "one that dies")
    nworkers: int = setting(1, k.integer(1), "Worker processes under one nanny, each with all "
                            "the resources given")
    name: str | None = setting(None, k.nullable(k.text), "Worker name; none: from host and port")
    gpus: Any = setting("auto", k.gpus, "GPUs to use: auto (found by NVML), none, or device "
                        "indices or UUIDs")
    memory_limit: Any = setting("auto", k.nullable(k.memory_limit),
                                "Memory limit reported to the scheduler (not enforced): auto "
                                "(the machine's divided by nworkers), none, bytes ('4GiB') or a "
                                "fraction of the machine's")
    local_directory: str | None = setting(None, k.nullable(k.path),
                                          "Scratch directory; none: under the temp dir")
    heartbeat_interval: float = setting(2.0, k.seconds, "Seconds between heartbeats")
    gpu_fault_xids: Any = setting((48, 64, 74, 79, 94, 95, 119, 120), k.xids,
                                  "NVML Xid errors that fence a GPU (no new work on it; its "
                                  "work ends lost): hardware faults, not application errors "
                                  "(13, 31, 43, 45); none: Xids fence nothing")
    gpu_idle_timeout: float | None = setting(None, k.nullable(k.seconds),
                                             "Seconds a job may hold its GPUs at 0% "
                                             "utilisation before the worker says it is idle "
                                             "(see gpu_idle_action); none: never")
    gpu_idle_action: str = setting("warn", k.idle_action,
                                   "What an idle job gets: warn (a WARNING in the worker's log) "
                                   "or cancel (it ends cancelled, with reason idle)")
    reconnect_backoff_min: float = setting(0.5, k.seconds, "Seconds before the first reconnect; "
                                           "doubles with each try")
    reconnect_backoff_max: float = setting(30.0, k.seconds, "The longest wait between reconnects")
    drain_timeout: float = setting(60.0, k.seconds, "Seconds SIGTERM lets running tasks finish "
                                   "before they are stopped")
    job_kill_grace: float = setting(10.0, k.seconds,
                                    "Seconds between SIGTERM and SIGKILL when a job is cancelled, "
                                    "runs past its time limit or outlives its lease")
    job_lease: float = setting(1800.0, k.seconds,
                               "Seconds a worker cut off from the scheduler lets its jobs run "
                               "before it kills them (the scheduler waits this long, plus a "
                               "margin, before it declares them lost)")
    containment: str = setting("auto", k.containment,
                               "How every process a job or GPU task starts is found and killed "
                               "with it: cgroup (a cgroup v2 each: needs root or a delegated "
                               "cgroup), subreaper (the descendants of its supervisor), or auto "
                               "(cgroup where one can be made)")
    job_directory: str | None = setting(None, k.nullable(k.path),
                                        "Where job attempt records and logs are kept, private "
                                        "to the worker's user (made 0700; refused if another "
                                        "user owns it or may write to it); none: "
                                        "sched-jobs/NAME under local_directory, else "
                                        "$XDG_STATE_HOME/sched/jobs/NAME "
                                        "(~/.local/state/sched/jobs/NAME); give workers a "
                                        "stable --name")
    death_timeout: float | None = setting(None, k.nullable(k.seconds),
                                          "Seconds without a scheduler before exiting; none: "
                                          "never")
    token_file: str | None = setting(None, k.nullable(k.path),
                                     "Shared token file; none: the scheduler's on this machine")
    tls: TlsConfig = table(TlsConfig, "TLS towards the scheduler and peers")
    log_level: str = setting("info", k.log_level, "Logging level")


@section
class CommConfig:
    max_frame_size: int = setting(MAX_FRAME_SIZE, k.size,
                                  "Largest frame; checked before any allocation")
    max_message_size: int = setting(
        MAX_MESSAGE_SIZE, k.size,
        "Largest message (a result, a task's arguments), however many frames it takes: big "
        "enough for any result worth moving, small enough that a runaway fails with this key's "
        "name rather than exhausting a peer's memory")
    outbox_limit: int = setting(512 * MiB, k.size,
                                "Bytes of small messages that may wait for a slow peer before "
                                "it is disconnected")
    inbox_limit: int = setting(64 * MiB, k.size,
                               "Bytes received and not yet handled before reading pauses")
    connect_timeout: float = setting(10.0, k.seconds, "Seconds to connect and authenticate")
    handshake_timeout: float = setting(10.0, k.seconds,
                                       "Seconds a connecting peer has to authenticate")
    answer_timeout: float = setting(5.0, k.seconds,
                                    "Seconds a peer has to send the first bytes of the "
                                    "handshake; every dsched daemon does so at once, so one "
                                    "that stays silent (another program's port) is refused")
    close_timeout: float = setting(5.0, k.seconds,
                                   "Seconds a closing connection waits for the peer to take "
                                   "its last bytes")
    transfer_timeout: float = setting(60.0, k.seconds,
                                      "Seconds a fetch of a result may take, plus one per "
                                      "transfer_rate bytes of it")
    transfer_rate: int = setting(10_000_000, k.size,
                                 "Bytes per second a fetch is assumed to make at the least")

    def limits(self) -> dict[str, Any]:
        """The keyword arguments of ``comm.connect`` and ``comm.listen`` (the timeout of
        ``connect`` aside, which is the caller's)."""
        return {"max_frame_size": self.max_frame_size,
                "max_message_size": self.max_message_size,
                "outbox_limit": self.outbox_limit, "inbox_limit": self.inbox_limit,
                "close_timeout": self.close_timeout, "answer_timeout": self.answer_timeout}

    def transfer_timeout_for(self, nbytes: int) -> float:
        """How long fetching a result of ``nbytes`` may take."""
        return self.transfer_timeout + nbytes / self.transfer_rate


@section
class ClientConfig:
    scheduler_address: str | None = setting(None, k.nullable(k.text),
                                            "Scheduler to connect to; none: Client() starts a "
                                            "LocalCluster, sched uses 127.0.0.1:8786")
    connect_timeout: float = setting(30.0, k.seconds, "Seconds to connect, to wait for an "
                                     "answer, and, following jobs or a log (sched wait, logs "
                                     "-f), for a lost scheduler or the log's worker to come "
                                     "back")
    token_file: str | None = setting(None, k.nullable(k.path),
                                     "Shared token file; none: the scheduler's on this machine")
    tls: TlsConfig = table(TlsConfig, "TLS towards the scheduler and workers")


#: The sections, by name, as they appear in the file and in SCHED_<SECTION>__<KEY>.
SECTIONS: dict[str, type] = {"scheduler": SchedulerConfig, "worker": WorkerConfig,
                             "comm": CommConfig, "client": ClientConfig}

# The sections' names are given by __getattr__ from here on, which makes them dataclasses first.
for _name in [cls.__name__ for cls in _FIELDS]:
    del globals()[_name]
_made = _thread.allocate_lock()


def __getattr__(name: str) -> Any:
    """A section by its class's name (``SchedulerConfig``), made a dataclass first."""
    sections = {cls.__name__: cls for cls in _FIELDS}
    if name not in sections:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _make_dataclasses()
    return sections[name]


def _make_dataclasses() -> None:
    """Make every section a frozen dataclass, once, in the order declared (a base before its
    subclass), and give each its name in this module again."""
    from dataclasses import dataclass

    with _made:
        for cls in _FIELDS:
            if "__dataclass_fields__" not in cls.__dict__:  # its declarations become fields
                for name in cls.__dict__["__annotations__"]:
                    setattr(cls, name, _FIELDS[cls][name].field())
                dataclass(frozen=True)(cls)  # the class itself becomes one (no slots)
            globals()[cls.__name__] = cls


def defaults(section: type = None) -> dict[str, Any]:  # type: ignore[assignment]
    """The defaults as a nested dict (of one section, or of all)."""
    if section is None:
        return {name: defaults(cls) for name, cls in SECTIONS.items()}
    return {name: defaults(f.default_factory) if _is_table(f) else _default(f)
            for name, f in _FIELDS[section].items()}


def kinds(section: type = None) -> dict[str, Any]:  # type: ignore[assignment]
    """The kind of every setting, as a nested dict shaped like ``defaults()``."""
    if section is None:
        return {name: kinds(cls) for name, cls in SECTIONS.items()}
    return {name: kinds(f.default_factory) if _is_table(f) else f.metadata["kind"]
            for name, f in _FIELDS[section].items()}


def build(section: type, values: dict[str, Any]) -> Any:
    """The frozen config object of ``section`` from merged, checked values."""
    _make_dataclasses()  # where the class came from SECTIONS
    return section(**{name: build(f.default_factory, values[name]) if _is_table(f)
                      else values[name] for name, f in _FIELDS[section].items()})


def default_of(key: str) -> Any:
    """The default of the setting ``key`` (``"worker.job_lease"``): where a policy, or an event
    that carries a setting, takes its default from, so that each is written here alone."""
    return _default(_field(key))


def kind_of(key: str) -> Callable[[Any], Any]:
    """A setting's kind: the function that checks (and normalizes) a value of it."""
    return _field(key).metadata["kind"]


def help_of(key: str, more: str = "") -> str:
    """A setting's help (and ``more``) and default, as the command line's help shows them."""
    f = _field(key)
    return f"{f.metadata['help']}{more} [{key}; default {shown(_default(f))}]"


def shown(value: Any) -> str:
    """A default as a user would write it in the file (TOML) or on the command line."""
    if value is None or value == {}:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def reference() -> Iterator[tuple[str, str, Any, str]]:
    """(key, environment variable, default, help) of every setting, section by section."""
    def walk(section: type, prefix: str) -> Iterator[tuple[str, str, Any, str]]:
        for name, f in _FIELDS[section].items():
            key = f"{prefix}.{name}"
            if _is_table(f):
                yield from walk(f.default_factory, key)
            else:
                yield key, setting_variable(key), _default(f), f.metadata["help"]

    for name, section in SECTIONS.items():
        yield from walk(section, name)


def _is_table(f: Any) -> bool:
    return f.default_factory in _FIELDS


def _default(f: Any) -> Any:
    if _is_table(f):  # a section's default is an instance of it
        _make_dataclasses()
    return f.default_factory() if f.default_factory is not MISSING else f.default


def _field(key: str) -> Any:
    section_name, *path = key.split(".")
    section: Any = SECTIONS[section_name]
    for i, name in enumerate(path):
        f = _FIELDS[section][name]
        if i == len(path) - 1:
            return f
        section = f.default_factory
    raise KeyError(key)

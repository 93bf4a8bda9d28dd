"""What each attempt does with its GPU devices, from the worker's samples, and the jobs that
hold a device idle.

At each heartbeat the worker samples the devices of every attempt that holds some (a job's, or
a GPU task's): the devices' utilisation (NVML's, of the whole device: work sharing a device
shares its figure) and the device memory the attempt's own processes use. ``GpuUse`` folds the
samples into a summary per attempt, which goes with its end to the scheduler (``AttemptEnded.gpu``):
its devices' UUIDs, its average and peak utilisation and memory.

``worker.gpu_idle_timeout``: a job whose devices all stay at 0% utilisation for that long is
said to be idle, once per idle stretch (``Idle``): the worker warns, and with
``worker.gpu_idle_action = "cancel"`` cancels it, with reason ``idle``. A stretch is only as
long as its samples say: a gap without samples (``max_gap``: the worker was cut off from its
scheduler, and took no heartbeat) starts it again.

For out of memory (``dsched.oom``) what counts is the attempt's peak while its device was full
(``full_peak``): memory a process holds on a device with room to spare did not run out.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

#: What ``worker.gpu_idle_action`` may say.
WARN, CANCEL = "warn", "cancel"


@dataclass(frozen=True)
class Sample:
    """One look at an attempt's devices: their UUIDs, their utilisation (percent, the highest
    of its devices), the device memory its processes use (bytes, over its devices), and
    whether one of its devices was full then."""

    uuids: tuple[str, ...]
    utilisation: float
    memory: int
    full: bool = False


@dataclass(frozen=True)
class Idle:
    """The job attempt ``key`` has held its devices at 0% for ``seconds``: warn, and stop it
    when ``cancel``."""

    key: str
    seconds: float
    uuids: tuple[str, ...]
    cancel: bool

    @property
    def reason(self) -> str:
        return (f"idle: held {', '.join(self.uuids) or 'its GPU'} at 0% utilisation for "
                f"{self.seconds:.0f} s")


class _Use:
    __slots__ = ("uuids", "samples", "util_sum", "util_peak", "mem_sum", "mem_peak",
                 "full_peak", "last", "idle_since", "said")

    def __init__(self, uuids: tuple[str, ...]):
        self.uuids = uuids
        self.samples = 0
        self.util_sum = self.util_peak = 0.0
        self.mem_sum = self.mem_peak = self.full_peak = 0
        self.last: float | None = None  # when it was last sampled
        self.idle_since: float | None = None  # the first sample of a stretch at 0%
        self.said = False  # this stretch was said to be idle


class GpuUse:
    """The samples of the attempts running now, by key; ``idle_timeout``: seconds at 0% that
    make a job idle (None: never); ``idle_action``: ``WARN`` or ``CANCEL``; ``max_gap``: the
    longest time between two samples of one idle stretch (None: any)."""

    def __init__(self, idle_timeout: float | None = None, idle_action: str = WARN,
                 max_gap: float | None = None):
        self.idle_timeout = idle_timeout
        self.idle_action = idle_action
        self.max_gap = max_gap
        self.uses: dict[str, _Use] = {}

    def sampled(self, at: float, samples: Mapping[str, Sample],
                jobs: frozenset[str] | set[str] = frozenset()) -> list[Idle]:
        """Take the samples made at ``at``; the job attempts among them (``jobs``) that have
        just been idle for ``idle_timeout``."""
        idle = []
        for key, sample in samples.items():
            use = self.uses.get(key)
            if use is None:
                use = self.uses[key] = _Use(sample.uuids)
            use.samples += 1
            use.util_sum += sample.utilisation
            use.util_peak = max(use.util_peak, sample.utilisation)
            use.mem_sum += sample.memory
            use.mem_peak = max(use.mem_peak, sample.memory)
            if sample.full:
                use.full_peak = max(use.full_peak, sample.memory)
            gap = (self.max_gap is not None and use.last is not None
                   and at - use.last > self.max_gap)
            use.last = at
            if sample.utilisation > 0 or gap:  # busy, or not seen for a while: a new stretch
                use.idle_since, use.said = None, False
            if sample.utilisation > 0:
                continue
            if use.idle_since is None:
                use.idle_since = at
            timeout = self.idle_timeout
            if (timeout is not None and key in jobs and not use.said
                    and at - use.idle_since >= timeout):
                use.said = True
                idle.append(Idle(key, at - use.idle_since, use.uuids,
                                 self.idle_action == CANCEL))
        return idle

    def retain(self, keys: "set[str] | Mapping[str, object]") -> None:
        """Forget the samples of attempts no longer among ``keys`` (they ended unreported:
        a task stopped, a job handed back)."""
        for key in [key for key in self.uses if key not in keys]:
            del self.uses[key]

    def full_peak(self, key: str) -> int:
        """The most device memory ``key``'s processes were seen to use while one of its
        devices was full (bytes; 0: never so)."""
        use = self.uses.get(key)
        return use.full_peak if use is not None else 0

    def ended(self, key: str) -> dict | None:
        """The summary of ``key``'s samples, for its AttemptEnded (None: it was never
        sampled); its samples are forgotten."""
        use = self.uses.pop(key, None)
        if use is None or not use.samples:
            return None
        n = use.samples
        return {"uuids": list(use.uuids), "samples": n, "util_avg": round(use.util_sum / n, 1),
                "util_peak": use.util_peak, "mem_avg": use.mem_sum // n,
                "mem_peak": use.mem_peak}

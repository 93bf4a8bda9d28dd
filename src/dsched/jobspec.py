"""What a client sends about shell-command jobs, made the one way for every client: the JobSpec
of a submission (``job_spec``, ``array_spec``), the QueryJobs of a question about jobs
(``query_jobs``), and job numbers from jobs as users name them (``arrays_to_ask``,
``job_numbers``).

Both the library's client (``client/jobclient.py``, on asyncio) and the ``sched`` command's
plain connection (``client/plain.py``, one blocking socket) build on these, so that a job
submitted either way is the same job. No I/O and no asyncio (importing this loads neither);
not pure only in that each spec takes a random submission id, from ``os.urandom`` as
``uuid.uuid4`` takes it (``submission_id``).
"""

from __future__ import annotations

import os

from .errors import SchedError
from .jobs import ArraySpec, JobSpec, parse_duration, parse_job_ref
from .protocol import clientops as ops
from .protocol.fields import checked_ids, checked_int
from .resources import Resources, check_demand

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable, Mapping


def job_spec(command: Any, *, resources: Any = None, name: str = "", priority: int = 0,
             retries: int = 0, after_ok: Iterable[Any] = (), after_any: Iterable[Any] = (),
             time_limit: float | str | None = None, hold: bool = False,
             env: Mapping[str, str] | None = None, cwd: str | None = None,
             requeue: bool = False, array: Any = None,
             array_limit: int | None = None, gpu_memory_retry: bool | None = None) -> JobSpec:
    """A JobSpec from ``submit_command``'s arguments, checked here (raises ValueError or
    ResourceSpecError, and nothing is sent). ``command``: a list of arguments, or a string
    split as a shell would (no shell runs it: use ``["sh", "-c", "..."]`` for that).
    ``array``: see ``array_spec``. Each new spec has a submission id of its own: sent again
    (its reply lost), it names the job it was already given, not a second one."""
    if isinstance(command, str):
        import shlex

        command = shlex.split(command)
    demand = Resources.parse(resources)
    check_demand(demand)
    if isinstance(time_limit, str):
        time_limit = parse_duration(time_limit)
    return JobSpec(submission=submission_id(), command=tuple(command), resources=demand,
                   name=name, priority=priority, retries=retries,
                   after_ok=tuple(_job_ids(after_ok)), after_any=tuple(_job_ids(after_any)),
                   time_limit=time_limit, hold=hold, env=dict(env or {}), cwd=cwd,
                   requeue=requeue, array=array_spec(array, array_limit),
                   gpu_memory_retry=gpu_memory_retry)


def submission_id() -> str:
    """A fresh submission id: what ``uuid.uuid4().hex`` gives (random, version 4), made here
    without loading ``uuid``, which loads ``platform`` and costs a ``sched submit`` more than
    the rest of its job spec."""
    number = int.from_bytes(os.urandom(16), "big")
    number = number & ~(0xC000 << 48) | 0x8000 << 48  # the variant: RFC 4122
    number = number & ~(0xF000 << 64) | 4 << 76  # the version: 4, random
    return f"{number:032x}"


def array_spec(array: Any, limit: int | None = None) -> ArraySpec | None:
    """The elements of an array job: indices as ``--array`` takes them (``"0-999%8"``), a
    ``range``, or a list of strings (one element each, the string in place of ``{}``, as
    ``--array-file``'s lines); ``limit``: at most this many at once (or ``%N``)."""
    if array is None:
        return None
    if isinstance(array, str):
        spec = ArraySpec.parse(array)
    elif isinstance(array, range):
        spec = ArraySpec(ranges=(array,))
    elif isinstance(array, ArraySpec):
        spec = array
    else:
        lines = tuple(array)
        if not all(isinstance(line, str) for line in lines):
            raise TypeError("an array is index text (\"0-99%8\"), a range, or a list of strings")
        spec = ArraySpec(lines=lines)
    if limit is not None:
        spec = ArraySpec(ranges=spec.ranges, lines=spec.lines, limit=limit)
    return spec


def _job_ids(jobs: Iterable[Any]) -> list[int]:
    ids = []
    for job in jobs:
        # A JobFuture (client/jobs.py, which needs asyncio) says its own number: asked by
        # name here, so that this module need not import it.
        dependency_id = getattr(type(job), "_dependency_id", None)
        if dependency_id is not None:
            job = dependency_id(job)
        try:  # an int, or one that stands for it (numpy's), as a plain int
            ids.append(checked_int("a job dependency", job))
        except TypeError:
            raise TypeError(f"a job dependency is a job number or a JobFuture, "
                            f"not {job!r:.40}") from None
    return ids


def query_jobs(jobs: Iterable[int], states: Iterable[str] = (), offset: int = 0,
               limit: int = 1000, expand: bool = False) -> Callable[[int], ops.QueryJobs]:
    """The question about jobs by number (none: all) and state (none: any), checked now (a
    bad one raises here, before anything is sent), as a maker of its op from a request id."""
    jobs = checked_ids("a job number", jobs)
    offset, limit = checked_int("offset", offset, 0), checked_int("limit", limit, 0)
    states, expand = tuple(states), bool(expand)
    return lambda request: ops.QueryJobs(id=request, jobs=jobs, states=states, offset=offset,
                                         limit=limit, expand=expand)


def arrays_to_ask(jobs: Iterable[int | str]) -> tuple[list, tuple[int, ...]]:
    """Jobs as users name them (``12`` or 12, ``"12_3"``) parsed, and the arrays whose views
    ``job_numbers`` needs for the elements among them (none: it needs no view)."""
    refs = [parse_job_ref(job) if isinstance(job, str) else job for job in jobs]
    arrays = sorted({ref[0] for ref in refs if isinstance(ref, tuple)})
    return refs, checked_ids("a job number", arrays)


def job_numbers(refs: list, views: Iterable[Mapping[str, Any]]) -> list[int]:
    """The numbers of ``refs`` (from ``arrays_to_ask``), given the views of their arrays:
    ``12_3`` is the element of array 12 with index 3."""
    found = {view["id"]: view for view in views}
    numbers = []
    for ref in refs:
        if isinstance(ref, tuple):
            array_id, index = ref
            view = found.get(array_id)
            if view is None or not view.get("array"):
                raise SchedError(f"no array {array_id}" if view is None else
                                 f"job {array_id} is not an array: name it as {array_id}")
            indices = view["array"]["indices"]
            position = (ArraySpec.parse(indices).position(index) if indices else
                        index if index < view["array"]["size"] else None)
            if position is None:
                raise SchedError(f"array {array_id} has no element {array_id}_{index}")
            ref = array_id + 1 + position
        numbers.append(ref)
    return numbers


def refusal(reason: str) -> SchedError:
    """The error of a submission the scheduler refused (it queued nothing), as every client
    says it."""
    return SchedError(f"the scheduler refused the job: {reason}")

"""Array jobs: one submission, many elements, and no cost for those still waiting.

An array is a job (``Job.array`` holds a ``JobArray``) whose id is followed by a block of ids,
one per element: element ``position`` is job ``array id + 1 + position`` and ``12_3`` names
the element of array 12 whose index is 3. An element becomes a Job of the book only when it
is needed: when the array feeds it to the queue, or when a user names it (to cancel it, wait
for it, or run after it). Until then it is a position past the array's ``cursor``, and costs
nothing: a million queued elements are one row of the journal and one object here.

The array feeds one element at a time: its ``head`` is the one element waiting in the queue.
When the placer takes the head, the next element is queued, so an array keeps every free
slot busy without filling the queue; the array's limit (``%N``) caps how many elements are
queued, starting or running at once. An element is an ordinary job from then on (attempts,
retries, the journal, recovery); when it ends, the array counts it, and once every element
has ended the array ends too: completed if all completed, else failed, timeout, lost or
cancelled, the first of these that one of its elements ended in. ``--after-ok`` on an array
waits for all of it.

Elements are journaled when their first attempt is dispatched (or when they end without
one); an element with no row is waiting, so a restart rebuilds the cursor from the rows.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from typing import TYPE_CHECKING, Any

from ..jobstates import ENDED, JobState, Reason
from .job import HELD, QUEUED, Job

if TYPE_CHECKING:
    from .jobbook import JobBook

#: The state an array that did not complete ends in: the first of these its elements did.
_UNCOMPLETED = (JobState.failed, JobState.timeout, JobState.lost, JobState.cancelled)


class JobArray:
    """The elements of one array job. ``elements``: position -> the element's Job, for those
    made so far; ``live``: the positions of those queued, starting or running (the limit
    counts them); ``waiting``: positions made before the cursor reached them (a user named
    them), queued but not yet fed; ``ended``: how many ended in each state; ``base``: the
    queue order of position 0 (element p takes ``base + p``: its place among other jobs)."""

    __slots__ = ("job", "spec", "size", "limit", "cursor", "elements", "live", "waiting",
                 "ended", "head", "base")

    def __init__(self, job: Job, base: int):
        self.job = job
        self.spec = job.spec.array
        self.size = self.spec.size
        self.limit = self.spec.limit or self.size
        self.cursor = 0
        self.elements: dict[int, Job] = {}
        self.live: dict[int, None] = {}
        self.waiting: dict[int, None] = {}
        self.ended: Counter = Counter()
        self.head: Job | None = None
        self.base = base

    @property
    def unmade(self) -> int:
        """Elements not yet made: they wait for the cursor."""
        return self.size - len(self.elements)

    @property
    def done(self) -> bool:
        return sum(self.ended.values()) == self.size

    def counts(self) -> dict[str, int]:
        """How many elements are in each state."""
        counts: Counter = Counter({s.value: n for s, n in self.ended.items()})
        for position in self.live:
            counts[self.elements[position].state.value] += 1
        if self.waiting:  # named before their turn: they wait as the array does
            counts[(HELD if self.job.state is HELD else QUEUED).value] += len(self.waiting)
        counts.update(self.unmade_counts())
        return dict(counts)

    def unmade_counts(self) -> dict[str, int]:
        """The elements not yet made: queued, held, or cancelled, as the array is."""
        if not self.unmade:
            return {}
        job = self.job
        shown = (JobState.cancelled if job.cancelling or job.ended else
                 HELD if job.state is HELD else QUEUED)
        return {shown.value: self.unmade}

    def summary(self) -> str:
        """The counts in words, most advanced states first: ``3 running, 5 queued``."""
        counts = self.counts()
        return ", ".join(f"{counts[s.value]} {s.value}" for s in _ORDER if counts.get(s.value))


_ORDER = (JobState.running, JobState.assigned, JobState.queued, JobState.held,
          JobState.completed, JobState.failed, JobState.timeout, JobState.lost,
          JobState.cancelled)


class Arrays:
    """The arrays of a job book, and the rules of their elements."""

    def __init__(self, book: "JobBook"):
        self.book = book
        self.by_id: dict[int, JobArray] = {}
        #: How many elements have been made, in all arrays (they are jobs of the book).
        self.made = 0
        self._ids: list[int] = []  # sorted: to find the array an element's id falls in

    def add(self, job: Job, base: int) -> JobArray:
        array = job.array = JobArray(job, base)
        self.by_id[job.id] = array
        if self._ids and job.id < self._ids[-1]:  # loaded out of order
            self._ids.insert(bisect_right(self._ids, job.id), job.id)
        else:
            self._ids.append(job.id)
        return array

    def containing(self, job_id: int) -> tuple[JobArray, int] | None:
        """The array whose block holds ``job_id``, and the element's position there."""
        i = bisect_right(self._ids, job_id) - 1
        if i < 0:
            return None
        array = self.by_id[self._ids[i]]
        position = job_id - array.job.id - 1
        return (array, position) if 0 <= position < array.size else None

    # -- elements ------------------------------------------------------------------------------

    def make(self, array: JobArray, position: int) -> Job:
        """The Job of element ``position``, made now (not yet in the book's queue)."""
        element = _element(array, position)
        element.order = array.base + position
        book = self.book
        book.jobs[element.id] = element
        book.by_submission[element.spec.submission] = element.id
        array.elements[position] = element
        self.made += 1
        return element

    def adopt(self, element: Job, parent: Job) -> None:
        """An element loaded from the journal joins its array."""
        array = parent.array
        element.parent = parent
        element.order = array.base + element.position
        array.elements[element.position] = element
        self.made += 1
        if element.attempt:  # fed, in order: those before it were fed too (and have rows)
            array.cursor = max(array.cursor, element.position + 1)
        if element.ended:
            array.ended[element.state] += 1
        else:
            array.live[element.position] = None

    def view_of_unmade(self, array: JobArray, position: int) -> Job:
        """A Job to show an element not yet made (not kept)."""
        job, parent = _element(array, position), array.job
        if parent.cancelling or parent.ended:
            job.state = JobState.cancelled
            job.detail = f"array {parent.id} was cancelled before it started"
        elif parent.state is HELD:
            job.state, job.wait = HELD, parent.wait
        return job

    def named(self, job_id: int) -> Job | None:
        """The job ``job_id`` when a user names it: an element not yet made is made (it waits
        for the cursor as it would have; one of a cancelled array ends cancelled)."""
        found = self.containing(job_id)
        if found is None:
            return None
        array, position = found
        element = self.make(array, position)
        job = array.job
        if job.cancelling or job.ended:
            self.book.end(element, JobState.cancelled,
                          detail=f"array {job.id} was cancelled before it started")
        else:
            element.wait = Reason.priority
            array.waiting[position] = None
        return element

    def feed(self, array: JobArray) -> None:
        """Queue the array's next element, if it may have one queued now."""
        job = array.job
        if job.state is not QUEUED or job.wait is not None or job.cancelling:
            return
        head = array.head
        if head is not None and head.state is QUEUED:
            return
        array.head = None
        while array.cursor < array.size and len(array.live) < array.limit:
            position = array.cursor
            array.cursor += 1
            element = array.elements.get(position)
            if element is None:
                element = self.make(array, position)
            elif position in array.waiting:
                del array.waiting[position]
            else:  # ended already (cancelled by name)
                continue
            array.live[position] = None
            array.head = element
            self.book.admit(element)
            return
        if array.cursor >= array.size and not array.live:
            self.finish(array)

    def placed(self, element: Job) -> None:
        array = element.parent.array
        if array.head is element:
            array.head = None
            self.feed(array)

    def ended(self, element: Job) -> None:
        """``element`` ended: count it, and feed the array or end it."""
        array = element.parent.array
        array.live.pop(element.position, None)
        array.waiting.pop(element.position, None)
        array.ended[element.state] += 1
        if array.head is element:
            array.head = None
        if not array.job.ended:
            self.feed(array)
            self.finish(array)

    def finish(self, array: JobArray) -> None:
        """End the array once no element of it may run any more."""
        job = array.job
        if job.ended or array.live or array.waiting:
            return
        if not array.done and not job.cancelling:
            return
        if array.ended[JobState.completed] == array.size:
            state = JobState.completed
        elif job.cancelling:
            state = JobState.cancelled
        else:
            state = next(s for s in _UNCOMPLETED if array.ended[s])
        self.book.end(job, state, detail=array.summary())

    def cancel(self, array: JobArray, client: str) -> str:
        """Cancel every element that has not ended: those not made never run."""
        job = array.job
        job.cancelling = True
        job.detail = f"cancelled by {client}"
        self.book.out.journal(job, "cancel")
        array.cursor = array.size
        array.head = None
        for position in list(array.waiting):
            self.book.end(array.elements[position], JobState.cancelled,
                          detail=f"cancelled with array {job.id} by {client}")
        for position in list(array.live):
            self.book.cancel_one(array.elements[position], client)
        self.finish(array)
        return "cancelled" if job.ended else "cancelling"


def _element(array: JobArray, position: int) -> Job:
    """Element ``position`` of ``array`` as a Job: its number, its command and its array."""
    parent = array.job
    job = Job(parent.id + 1 + position, parent.spec.element(parent.id, position),
              parent.submitted)
    job.parent, job.position = parent, position
    return job


def array_view(job: Job) -> dict[str, Any]:
    """What the view of an array job adds: its size, limit, indices and counts by state."""
    array = job.array
    spec = array.spec
    return {"size": array.size, "limit": spec.limit,
            "indices": spec.text() if spec.ranges else None,
            "counts": array.counts(), "summary": array.summary()}


def shown_state(job: Job) -> JobState:
    """The state a job is shown in: an array that is not held or ended is running while any
    element is on a worker, else queued."""
    array = job.array
    if array is None or job.state in ENDED or job.state is HELD:
        return job.state
    if any(array.elements[p].state in (JobState.running, JobState.assigned)
           for p in array.live):
        return JobState.running
    return job.state

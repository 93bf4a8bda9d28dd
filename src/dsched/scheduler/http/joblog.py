"""A job's log, read for the dashboard from the worker that ran it.

A log is not state: it lives in the job directory of the worker that ran the attempt, and the
scheduler keeps only where (the worker's name and address, and the attempt). A worker its
nanny started again keeps its name and files but listens on a new port, so ``LogReader`` asks
the connected worker of that name (the recorded address only when none is), on its data port,
for a piece of it (GetLog), as a client would, through one ``PeerPool``
(one authenticated connection per worker asked, opened on first use). A read is bounded in
size (``MAX_BYTES``), in time (``TIMEOUT``) and in number (``AT_ONCE`` in flight; more are
refused at once, not queued), and it only awaits, so a slow or vanished worker never holds the
scheduler's event loop. What goes wrong becomes ``LogUnavailable``, with an HTTP status and
one line that says why.

What it gives is the log as a person reads it: terminal escape sequences (colours, cursor
moves, titles: CSI and OSC) are taken out of the text, since a page shows them as stray
characters. The byte offsets stay those of the file, and ``sched logs`` gives the bytes as
written.
"""

from __future__ import annotations

import asyncio
import codecs
import re
from typing import Any, Callable

from ...errors import SchedError
from ...jobs import job_key
from ...peers import PeerPool

#: The most bytes of a log one read returns, and how many it returns unless asked.
MAX_BYTES = 1 << 20
DEFAULT_BYTES = 64 << 10
#: The end of a log a job's page opens with.
TAIL_BYTES = 64 << 10
#: Seconds a worker has to answer (connecting included).
TIMEOUT = 10.0
#: Reads in flight at once; one more is refused with 503 (a person retries, the page polls).
AT_ONCE = 8
#: Terminal escape sequences: CSI (colours, cursor moves, erasing), OSC (a window's title, a
#: hyperlink; ended by BEL or ST) and the two-character ones (ESC ( B of ``tput sgr0``, ...).
ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"
                    r"|\x1b[ -/]*[0-Z\\^-~]")
#: The start of an escape sequence a read cut short, at the end of the bytes read.
ESCAPE_CUT = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?|[ -/]*)\Z")
#: The longest cut sequence held back for the next read; a longer one is not a sequence.
ESCAPE_KEPT = 4096


class LogUnavailable(Exception):
    """No log can be given now: ``status`` is the HTTP status, the message says why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class LogReader:
    """Reads the logs of the jobs of a scheduler from its workers. ``pool`` makes the
    ``PeerPool`` on first use (so a dashboard nobody asks for a log opens no connection);
    ``locate(name)`` is the address of the connected worker of that name, None if none is."""

    def __init__(self, pool: Callable[[], PeerPool], timeout: float = TIMEOUT,
                 at_once: int = AT_ONCE, locate: Callable[[str], str | None] = lambda _: None):
        self._make_pool = pool
        self.locate = locate
        self._pool: PeerPool | None = None
        self.timeout = timeout
        self.at_once = at_once
        self.in_flight = 0

    async def read(self, job: dict[str, Any], offset: int, limit: int) -> dict[str, Any]:
        """Up to ``limit`` bytes of the log of ``job``'s latest attempt (``job`` as
        ``jobviews.job_view`` shows it) from ``offset``, as ``chunk`` gives them."""
        address = (job["worker"] and self.locate(job["worker"])) or job["address"]
        where = f"worker {job['worker']} ({address})"
        if not job["address"] or not job["log"]:
            raise LogUnavailable(404, f"job {job['id']} has no log yet: it is {job['state']}"
                                      " and no attempt of it has started")
        if self.in_flight >= self.at_once:
            raise LogUnavailable(503, f"{self.in_flight} logs are being read already; try "
                                      "again in a moment")
        if self._pool is None:
            self._pool = self._make_pool()
        self.in_flight += 1
        try:
            async with asyncio.timeout(self.timeout):
                log = await self._pool.get_log(address, job_key(job["id"], job["attempt"]),
                                               offset, min(limit, MAX_BYTES))
        except TimeoutError:
            raise LogUnavailable(504, f"the log is on {where}, which did not answer within "
                                      f"{self.timeout:g} s") from None
        except (OSError, SchedError) as error:  # refused, unreachable, closed, TLS
            raise LogUnavailable(502, f"the log is on {where}, which cannot be reached: "
                                      f"{error}") from None
        finally:
            self.in_flight -= 1
        if log.error:
            raise LogUnavailable(404, f"{where} says: {log.error}")
        return {"job": job["id"], "attempt": job["attempt"], "worker": job["worker"],
                **chunk(log.data, offset, log.size, log.ended)}

    async def tail(self, job: dict[str, Any], nbytes: int = TAIL_BYTES) -> dict[str, Any]:
        """About the last ``nbytes`` of the log, from the start of a line where it is cut."""
        first = await self.read(job, 0, nbytes)
        if first["size"] <= nbytes:
            return first
        start = first["size"] - nbytes
        last = await self.read(job, start, nbytes)
        cut = last["text"].find("\n")
        if cut >= 0:
            last["text"] = last["text"][cut + 1:]
        last["skipped"] = start
        return last

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


def chunk(data: bytes, offset: int, size: int, ended: bool) -> dict[str, Any]:
    """The bytes of a log read from ``offset`` as text: ``text`` (UTF-8; what is not is
    replaced; escape sequences taken out), ``next_offset`` where to read on (before a character
    or an escape sequence the read cut in two, so that it is read whole next time), the log's
    ``size`` then, and ``ended``: nothing more will be written to it."""
    final = ended and offset + len(data) >= size
    keep = len(data)
    cut = None if final else ESCAPE_CUT.search(data)
    # Held back only where the next read can get it whole: after something else, or at the
    # log's end as it is now (the next read starts there once more is written).
    if cut and len(data) - cut.start() <= ESCAPE_KEPT and (cut.start() or
                                                           offset + len(data) >= size):
        keep = cut.start()
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(data[:keep], final=final)
    pending = len(decoder.getstate()[0])
    if pending and pending == len(data):  # too little to hold one character: take it as is
        text, pending = decoder.decode(b"", final=True), 0
    return {"offset": offset, "next_offset": offset + keep - pending, "size": size,
            "ended": ended, "text": plain(text)}


def plain(text: str) -> str:
    """``text`` without terminal escape sequences, nor the ESC of one cut short."""
    return ESCAPE.sub("", text).replace("\x1b", "")

"""A file of jobs, as ``sched run-local`` reads it: one command line per line.

Each line is split as a shell would (``shlex``: quotes, no variables or globbing), after an
optional ``[resources]`` prefix naming what the job needs (``[gpu0=1 gpu1=1] python
train.py``). Blank lines and lines that start with ``#`` are skipped; a ``#`` outside quotes
ends a line. A bad line is an error naming the file and the line, so that nothing runs from a
file that is half wrong.

Pure: no I/O (the caller reads the file).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from .errors import ResourceSpecError
from .jobs import JobSpecError
from .resources import EMPTY, Resources, check_demand


@dataclass(frozen=True)
class JobLine:
    """One job of a file: where it was (``line``, from 1), its command and its demand."""

    line: int
    command: tuple[str, ...]
    resources: Resources = EMPTY


def parse_jobfile(text: str, name: str = "JOBFILE") -> list[JobLine]:
    """The jobs of ``text``, in order; JobSpecError naming ``name`` and the line if one is
    bad (an unclosed bracket or quote, an invalid resource spec, no command)."""
    jobs = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{name}:{number}"
        resources = EMPTY
        if line.startswith("["):
            spec, closed, line = line[1:].partition("]")
            if not closed:
                raise JobSpecError(f"{where}: the resources in [...] have no closing ']'")
            try:
                resources = check_demand(Resources.parse(spec))
            except ResourceSpecError as error:
                raise JobSpecError(f"{where}: {error}") from None
        try:
            command = shlex.split(line, comments=True)
        except ValueError as error:  # an unclosed quote
            raise JobSpecError(f"{where}: cannot split the command line: {error}") from None
        if not command:
            raise JobSpecError(f"{where}: no command after the resources")
        jobs.append(JobLine(number, tuple(command), resources))
    return jobs

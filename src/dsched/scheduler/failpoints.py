"""Failpoints: named moments at which a test may have the scheduler killed (SIGKILL).

``SCHED_FAILPOINTS`` lists them, comma-separated, each ``NAME`` (the first time it is
reached) or ``NAME:N`` (the N-th time). The crash tests use them to stop the scheduler
around its journal commits; without the variable every check is one dict lookup. The names:

- ``after-submit-commit``: a submission is committed, its reply not yet sent;
- ``before-dispatch-commit`` / ``after-dispatch-commit``: around the commit of an attempt
  assigned to a worker (before: sent to it held, the commit under way on the journal's
  thread; after: committed, the worker not yet told to proceed);
- ``after-result-commit``: an attempt's end is committed, the worker not yet acknowledged;
- ``in-reconciliation``: what a registering worker reported is committed, the decisions
  about it not yet carried out.

Testing only; never set it on a cluster. This is I/O: it holds no decisions.
"""

from __future__ import annotations

import os
import signal
import sys

from ..environ import FAILPOINTS_ENV

NAMES = ("after-submit-commit", "before-dispatch-commit", "after-dispatch-commit",
         "after-result-commit", "in-reconciliation")


class Failpoints:
    def __init__(self, spec: str | None = None):
        spec = os.environ.get(FAILPOINTS_ENV, "") if spec is None else spec
        self.armed: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            name, _, count = part.partition(":")
            if name not in NAMES or (count and not count.isdigit()):
                raise ValueError(f"{FAILPOINTS_ENV}: unknown failpoint {part!r}; the names are "
                                 f"{', '.join(NAMES)}, each optionally :N")
            self.armed[name] = int(count or 1)

    def reached(self, name: str) -> None:
        """Kill this process if ``name`` is armed and this is the time."""
        left = self.armed.get(name)
        if left is None:
            return
        if left > 1:
            self.armed[name] = left - 1
            return
        print(f"sched-scheduler: failpoint {name}: killed", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

"""``sched run-local``: a file of jobs run on a scheduler and a worker of its own.

A :class:`LocalCluster` is started for the run and stopped after it: a scheduler whose job
journal lives in a temporary directory, and one worker that offers ``resources`` and has
``slots`` job slots. So at most ``slots`` jobs run at once, and fewer while the resources they
need are taken; the resources are shared by the slots, not multiplied by them. Every line of
the file is checked before anything starts: a bad line, or a job that needs more than the
worker offers (it would wait for ever), is an error naming its line. The jobs are then
submitted in the file's order and waited for. Interrupted (Ctrl-C), it cancels them first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..jobfile import JobLine, parse_jobfile
from ..jobs import JobSpecError
from ..resources import Resources

Views = list[dict[str, Any]]


def read_jobfile(path: str, offer: Resources) -> list[JobLine]:
    """The jobs of the file at ``path``; JobSpecError naming the line of one that is bad or
    needs more than ``offer``, or when there are none. OSError if it cannot be read."""
    jobs = parse_jobfile(Path(path).read_text(), name=path)
    for job in jobs:
        if not job.resources.fits(offer):
            raise JobSpecError(f"{path}:{job.line}: the job needs {job.resources}, more than "
                               f"the worker offers ({offer or 'no resources'}): give "
                               "--resources")
    if not jobs:
        raise JobSpecError(f"{path}: no jobs (one command line per line)")
    return jobs


def run_jobfile(path: str, resources: Resources, slots: int,
                on_update: Callable[[Views], None] | None = None,
                on_cluster: Callable[[Any], None] | None = None,
                interval: float = 1.0) -> Views:
    """Run the jobs of the file at ``path`` on a LocalCluster of one worker offering
    ``resources`` with ``slots`` slots; the jobs' last views, in the file's order.
    ``on_update`` and ``interval`` as for ``Client.wait_for_jobs`` (the jobs' logs, at each
    view's ``log``, are there until this returns); ``on_cluster(cluster)`` once it runs."""
    from .blocking import Client
    from .cluster import LocalCluster

    jobs = read_jobfile(path, resources)
    name = Path(path).name
    with LocalCluster(n_workers=1, threads_per_worker=slots, resources=resources) as cluster, \
            Client(cluster, set_as_default=False) as client:
        if on_cluster is not None:
            on_cluster(cluster)
        futures = [client.submit_command(list(job.command), resources=job.resources,
                                         name=f"{name}:{job.line}") for job in jobs]
        ids = [future.job_id() for future in futures]
        try:
            return client.wait_for_jobs(ids, on_update=on_update, interval=interval)
        except KeyboardInterrupt:
            client.cancel_jobs(ids)  # before the cluster stops: nothing is left running
            raise

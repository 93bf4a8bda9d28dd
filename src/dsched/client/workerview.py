"""The connected workers as ``sched workers`` shows them: each with its resources (total, in
use, free), its GPUs and who uses them, and the jobs it runs.

It joins two answers of the scheduler, ``scheduler_info`` (workers, their resources and GPUs)
and the jobs on workers (which GPUs each holds). A worker's GPUs are the devices it found,
and those its ``gpu<N>`` resources name (device N), and any a job of it holds or, not yet
started, will hold (the devices its own ``gpu<N>`` resources name).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..resources import Resources, named_devices

if TYPE_CHECKING:
    from .client import AsyncClient

#: The states of a job whose attempt is on a worker.
ON_WORKER = ("assigned", "running")


def _no_device(index: int) -> dict[str, Any]:
    """A GPU known only by its index (named by a resource, or held by a job)."""
    return {"index": index, "name": "", "uuid": "", "memory_total": None, "memory_used": None,
            "utilization": None}


async def workers_view(client: AsyncClient) -> list[dict[str, Any]]:
    """Each connected worker, by name: ``name``, ``address``, ``nthreads``, ``busy`` (slots
    running a task or job), ``draining``, ``resources`` (``{name: {"total", "used",
    "free"}}``), ``gpus`` (index, name, memory, utilization as a fraction when a heartbeat
    has said, and ``jobs``: the jobs holding it), ``containment`` (how it kills what its jobs
    start: ``cgroup`` or ``subreaper``) and ``jobs`` (those assigned or running there)."""
    info = await client.scheduler_info()
    on_workers = (await client.jobs(states=ON_WORKER, limit=1 << 31))["jobs"]
    by_worker: dict[str, list[dict]] = {}
    for view in on_workers:
        by_worker.setdefault(view["worker"], []).append(view)
    out = []
    for address, w in sorted(info["workers"].items(), key=lambda item: item[1]["name"]):
        jobs = sorted(by_worker.get(w["name"], ()), key=lambda view: view["id"])
        gpus = {gpu["index"]: {**gpu, "jobs": []} for gpu in w["gpus"]}
        for index in named_devices(Resources.parse(w["resources"])):
            gpus.setdefault(index, {**_no_device(index), "jobs": []})
        for view in jobs:
            # A job not yet started holds the devices its gpu<N> resources name already.
            held = {*view["gpus"], *named_devices(Resources.parse(view["resources"]))}
            for index in sorted(held):
                gpus.setdefault(index, {**_no_device(index), "jobs": []})["jobs"].append(
                    view["id"])
        out.append({
            "name": w["name"], "address": address, "nthreads": w["nthreads"],
            "busy": w["executing"], "draining": w["draining"],
            "containment": w.get("containment", ""),  # "" from an older scheduler
            "resources": {name: {"total": total, "used": w["used"].get(name, 0),
                                 "free": w["free"].get(name, 0)}
                          for name, total in w["resources"].items()},
            "gpus": [gpus[index] for index in sorted(gpus)],
            "jobs": [view["id"] for view in jobs],
        })
    return out

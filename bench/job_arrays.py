"""Job arrays at scale: prints one JSON line.

Against a scheduler daemon of its own (a fresh state directory, the journal on disk):

1. ``sched submit --array 0-9999 --hold -- true``, from the shell as a user types it: seconds
   until it prints the array's number (the row committed). Target: at most 0.5 s.
2. 1,000,000 queued elements (``--array 0-999999``, held, from a Python client): seconds to
   submit and acknowledge, the scheduler's resident memory grown per queued element (target: at
   most 1 KB), ``sched status`` from the shell with them queued (target: under 150 ms), and the
   restart of the scheduler on that journal until it listens again (target: under 10 s).

``array_figures()`` measures them (bench/jobs.py calls it); run alone:

    python bench/job_arrays.py [--elements 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cli_timing import sched_command  # noqa: E402
from daemon import start_scheduler, stop  # noqa: E402


def _shell_seconds(args: list[str], token: str) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(args, env={**os.environ, "SCHED_TOKEN": token}, check=True,
                          capture_output=True, text=True)
    return time.perf_counter() - started, done.stdout


def array_figures(elements: int = 1_000_000) -> dict:
    """The figures of the module docstring, each beside its target."""
    from dsched import Client
    from dsched.auth import generate_token

    token = generate_token()
    sched = sched_command()
    result: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-arrays-") as state_dir:
        process, address, _ = start_scheduler(state_dir, token)
        try:
            took, _ = _shell_seconds([*sched, "-s", address, "submit", "--array", "0-9999",
                                      "--hold", "--", "true"], token)
            result["sched_submit_array_10000_s"] = {"value": round(took, 3), "target": "<= 0.5"}
            rss = psutil.Process(process.pid).memory_info().rss
            with Client(address, token=token, set_as_default=False) as client:
                started = time.perf_counter()
                future = client.submit_command(["python", "train.py", "--seed", "{}"],
                                               array=f"0-{elements - 1}", hold=True)
                future.job_id()
                submit_s = time.perf_counter() - started
            grown = psutil.Process(process.pid).memory_info().rss - rss
            status_s = statistics.median(
                _shell_seconds([*sched, "-s", address, "status"], token)[0] for _ in range(5))
        finally:
            stop(process)
        process, _, reload_s = start_scheduler(state_dir, token)
        stop(process)
    result.update({
        "queued_elements": elements,
        "submit_queued_s": {"value": round(submit_s, 3), "target": "<= 5"},
        "scheduler_bytes_per_queued_element": {"value": round(max(grown, 0) / elements, 2),
                                               "target": "<= 1024"},
        "sched_status_with_queued_ms": {"value": round(status_s * 1000, 1), "target": "<= 150"},
        "restart_with_queued_s": {"value": round(reload_s, 3), "target": "<= 10"},
    })
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--elements", type=int, default=1_000_000)
    args = parser.parse_args()
    result = {"bench": "job_arrays", "python": platform.python_version(),
              "cpus": os.cpu_count(), **array_figures(args.elements)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()

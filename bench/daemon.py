"""A scheduler daemon for a benchmark: started on 127.0.0.1 and an OS-chosen port, on a state
directory of the benchmark's, with a token of its own; shared by the benchmarks in bench/."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time


def start_scheduler(state_dir: str, token: str) -> tuple[subprocess.Popen, str, float]:
    """A scheduler daemon on ``state_dir``: its process, its address, and the seconds it took
    to listen (its start, the reload of a journal there included)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "dsched.cli.scheduler", "--host", "127.0.0.1", "--port", "0",
         "--state-dir", state_dir, "--log-level", "warning", "--no-dashboard"],
        env={**os.environ, "SCHED_TOKEN": token}, stdout=subprocess.PIPE, text=True)
    for line in process.stdout:
        match = re.search(r"listening at (\S+)", line)
        if match:
            return process, match.group(1), time.perf_counter() - started
    process.wait()
    raise SystemExit("the scheduler did not start")


def stop(process: subprocess.Popen) -> None:
    process.kill()
    process.wait()

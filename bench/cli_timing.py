"""How long the ``sched`` command takes from a shell: prints one JSON line.

1. ``sched submit --hold -- true``, N times from one bash loop (what a script that queues a
   parameter sweep does): milliseconds a call, the whole process each time (interpreter start,
   imports, config, connect, submit, close). Target: at most 50 ms. The same again with the
   config file we ship (``deploy/config.toml``) naming the scheduler, as on a cluster.
2. ``sched status`` with 2,000 jobs in the queue (held, topped up from a Python client),
   its output to /dev/null: the median of a few runs, in milliseconds. Target: at most 150 ms.

Both are measured as a person sees them, from bash, so the figures include bash's fork and
exec of each process. ``cli_timings(address, token, n)`` measures a scheduler that is already
running (bench/jobs.py calls it); run alone, it starts one of its own:

    python bench/cli_timing.py [--calls 50] [--status-runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from daemon import start_scheduler  # noqa: E402

#: The number of jobs in the queue while ``sched status`` is timed.
STATUS_JOBS = 2000
#: The config file we ship for a cluster's machines (``deploy/``).
SHIPPED_CONFIG = Path(__file__).resolve().parents[1] / "deploy" / "config.toml"


def sched_command() -> list[str]:
    """The ``sched`` of this interpreter's environment: its console script when installed
    (as a user runs it), else the module."""
    script = Path(sys.executable).parent / "sched"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "dsched.cli.sched"]


def _bash_seconds(script: str, env: dict) -> float:
    """Seconds that ``bash -c script`` takes; it must succeed."""
    started = time.perf_counter()
    subprocess.run(["bash", "-c", script], env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def _queue_up_to(address: str, token: str, total: int) -> None:
    """Held jobs from a Python client until the scheduler holds ``total`` jobs (none if it
    holds more already)."""
    from dsched import Client

    with Client(address, token=token, set_as_default=False) as client:
        missing = total - client.jobs(limit=1)["total"]
        futures = [client.submit_command(["true"], hold=True, name=f"cli-timing-{i}")
                   for i in range(missing)]
        for future in futures:  # each acknowledged: its row is committed, status shows it
            future.job_id()


def cli_timings(address: str, token: str, n: int = 50, status_runs: int = 5) -> dict:
    """``sched submit --hold`` milliseconds a call over an ``n``-call bash loop, then ``sched
    status`` milliseconds (median of ``status_runs``) with 2,000 jobs queued, against the
    scheduler at ``address``. Leaves the jobs it made held in that scheduler's queue."""
    sched = " ".join(map(_quote, sched_command()))
    # As a user's installation runs: with its compiled modules cached (the first call writes
    # them), whatever this shell says.
    env = {**os.environ, "SCHED_TOKEN": token}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    loop = (f"for i in $(seq {n}); do {sched} -s {_quote(address)} submit --hold "
            "--name cli-timing -- true || exit 1; done")
    submit_ms = _bash_seconds(loop, env) * 1000 / n
    with tempfile.TemporaryDirectory(prefix="sched-cli-timing-config-") as config_home:
        # As on a cluster's machines: the config file we ship, naming the scheduler.
        os.makedirs(os.path.join(config_home, "sched"))
        with open(os.path.join(config_home, "sched", "config.toml"), "w") as file:
            file.write(f"{SHIPPED_CONFIG.read_text()}\n[client]\n"
                       f"scheduler_address = {json.dumps(address)}\n")
        configured = (f"for i in $(seq {n}); do {sched} submit --hold --name cli-timing -- true "
                      "|| exit 1; done")
        config_ms = _bash_seconds(configured, {**env, "XDG_CONFIG_HOME": config_home}) * 1000 / n
    _queue_up_to(address, token, STATUS_JOBS)
    status = f"{sched} -s {_quote(address)} status"
    status_ms = statistics.median(_bash_seconds(status, env) * 1000 for _ in range(status_runs))
    return {"sched_submit_ms_per_call": round(submit_ms, 1),
            "sched_submit_config_file_ms_per_call": round(config_ms, 1),
            "sched_status_2000_ms": round(status_ms, 1)}


def _quote(word: str) -> str:
    import shlex

    return shlex.quote(word)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50, help="sched submit calls in the loop")
    parser.add_argument("--status-runs", type=int, default=5, help="sched status runs timed")
    args = parser.parse_args()
    from dsched.auth import generate_token

    token = generate_token()
    state_dir = tempfile.mkdtemp(prefix="sched-cli-timing-")
    process = None
    try:
        process, address, _ = start_scheduler(state_dir, token)
        result = cli_timings(address, token, args.calls, args.status_runs)
    finally:
        if process is not None:
            process.kill()
            process.wait()
        shutil.rmtree(state_dir, ignore_errors=True)
    print(json.dumps({"bench": "cli_timing", "calls": args.calls, "python": platform.python_version(),
                      "cpus": os.cpu_count(), **result}))


if __name__ == "__main__":
    main()

"""Every scenario of the Guild seed (seeds/guild-dask-resources.md) with ``sched`` commands
against real daemons: jobs are staged on a scheduler with no worker that fits, then a worker
with the seed's resources joins, as the seed's scheduler processes its staged runs. One
scheduler serves the module; each test brings its own workers and sees them gone at its end.
Also ``sched run-local`` over a JOBFILE of the seed's GPU runs."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from sched_helpers import sched, submit, views, worker

CLUSTER_WORKERS = ()  # each test starts the workers of its scenario


def timed(path, seconds: float = 2.0) -> list[str]:
    """A job that writes when it starts and ends (wall clock) to PATH.start and PATH.end."""
    return ["--", "sh", "-c", f"date +%s.%N > {path}.start; sleep {seconds}; "
                              f"date +%s.%N > {path}.end"]


def span(path) -> tuple[float, float]:
    return (float(path.with_suffix(".start").read_text()),
            float(path.with_suffix(".end").read_text()))


@pytest.mark.parametrize("foo, together", [(7, False), (12, True)])
def test_two_jobs_needing_foo_5_run_in_series_on_foo_7_and_together_on_foo_12(
        cluster, client, tmp_path, foo, together):
    first, second = tmp_path / "first", tmp_path / "second"
    jobs = [submit(cluster, "--resources", "foo=5", *timed(first)),
            submit(cluster, "--resources", "foo=5", *timed(second))]
    with worker(cluster, client, "--name", f"foo{foo}", "--nthreads", "4",
                "--resources", f"foo={foo}"):
        done = sched(cluster, "wait", *map(str, jobs))
    assert done.returncode == 0, done.stdout + done.stderr
    (start1, end1), (start2, end2) = sorted([span(first), span(second)])
    if together:
        assert start2 < end1  # the second started while the first ran
    else:
        assert start2 >= end1


def test_a_job_needing_resources_no_worker_has_waits_saying_which_then_runs_on_one_that_has(
        cluster, client):
    with worker(cluster, client, "--name", "only-foo", "--resources", "foo=1"):
        job = submit(cluster, "--resources", "foo=1 bar=1 baz=1", "--", "true")
        view = views(cluster, job)[job]
        assert (view["state"], view["reason"]) == ("queued", "missing_resources")
        table = sched(cluster, "status", str(job)).stdout
        assert "requires resources no worker has: bar, baz" in table
    # Several resources per job: it runs once a worker offers all three.
    with worker(cluster, client, "--name", "foo-bar-baz", "--resources", "foo=1 bar=1 baz=2"):
        done = sched(cluster, "wait", str(job))
    assert done.returncode == 0, done.stdout + done.stderr
    assert views(cluster, job)[job]["worker"] == "foo-bar-baz"


@pytest.mark.parametrize("spec, words", [
    ("foo=bar", "invalid resource 'foo=bar': 'bar' is not a number"),
    ("foo", "invalid resource 'foo': expected NAME=VALUE")])
def test_a_misspecified_resource_spec_is_refused_and_nothing_is_queued(cluster, spec, words):
    before = sched(cluster, "status", "--json")
    done = sched(cluster, "submit", "--resources", spec, "--", "true")
    assert done.returncode == 2 and words in done.stderr, done.stderr
    assert sched(cluster, "status", "--json").stdout == before.stdout


GPU_RUNS = [("aaa", "gpu0=1"), ("bbb", "gpu0=1"), ("ccc", "gpu0=1 gpu1=1"), ("ddd", "gpu1=1")]
SHOW_DEVICES = 'echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; sleep 2'


def test_gpu_jobs_in_the_seeds_order_start_the_gpu1_job_beside_the_first(cluster, client):
    jobs = {name: submit(cluster, "--name", name, "--resources", spec, "--",
                         "sh", "-c", SHOW_DEVICES) for name, spec in GPU_RUNS}
    with worker(cluster, client, "--name", "two-gpus", "--nthreads", "4",
                "--resources", "gpu0=1 gpu1=1"):
        done = sched(cluster, "wait", *map(str, jobs.values()))
        assert done.returncode == 0, done.stdout + done.stderr
        # The logs are served by the worker that ran the jobs.
        logs = {name: sched(cluster, "logs", str(job)) for name, job in jobs.items()}
    assert {name: log.stdout for name, log in logs.items()} == {
        "aaa": "CUDA_VISIBLE_DEVICES=0\n", "bbb": "CUDA_VISIBLE_DEVICES=0\n",
        "ccc": "CUDA_VISIBLE_DEVICES=0,1\n", "ddd": "CUDA_VISIBLE_DEVICES=1\n"}
    found = views(cluster, *jobs.values())
    run = {name: (found[job]["started"], found[job]["ended"]) for name, job in jobs.items()}
    assert run["ddd"][0] < run["aaa"][1]  # gpu1 is free: ddd need not wait behind bbb, ccc
    assert run["bbb"][0] >= run["aaa"][1]
    assert run["ccc"][0] >= max(run["bbb"][1], run["ddd"][1])


def test_the_seeds_gpu_runs_finish_within_a_tenth_of_a_second_of_the_optimum_ten_times(
        cluster, client):
    # Four 1 s runs on gpu0/gpu1 in the seed's order: aaa and ddd at once, then bbb on gpu0,
    # then ccc on both: 3.0 s at best, along gpu0's chain aaa, bbb, ccc. Each freed device must
    # be busy again at once, so the whole takes at most a tenth of a second more than that
    # chain's own run times (what `sleep 1` overran on a busy machine is not the queue's).
    with worker(cluster, client, "--name", "two-gpus", "--nthreads", "4",
                "--resources", "gpu0=1 gpu1=1"):
        for _ in range(10):
            jobs = [client.submit_command(["sleep", "1"], name=name, resources=spec,
                                          hold=True).job_id() for name, spec in GPU_RUNS]
            assert set(client.release_jobs(jobs).values()) == {"released"}
            ended = {view["name"]: view for view in client.wait_for_jobs(jobs, timeout=60)}
            assert {view["state"] for view in ended.values()} == {"completed"}
            makespan = (max(view["ended"] for view in ended.values())
                        - min(view["started"] for view in ended.values()))
            chain = sum(ended[name]["ended"] - ended[name]["started"]
                        for name in ("aaa", "bbb", "ccc"))
            assert makespan - chain <= 0.1, (makespan, chain)


def run_local(tmp_path, jobfile: str, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "jobs.txt"
    path.write_text(jobfile)
    return subprocess.run([sys.executable, "-m", "dsched.cli.sched", "run-local", *args,
                           str(path)], capture_output=True, text=True, timeout=110,
                          cwd=tmp_path)


def test_run_local_runs_the_seeds_gpu_jobs_in_order_with_their_devices(tmp_path):
    jobfile = "# the seed's GPU runs, in its order\n" + "".join(
        f"[{spec}] sh -c 'echo $CUDA_VISIBLE_DEVICES > {name}.out; sleep 1'\n"
        for name, spec in GPU_RUNS)
    done = run_local(tmp_path, jobfile, "--resources", "gpu0=1 gpu1=1", "--nworkers", "4")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if not line.startswith("[")]
    assert lines[-1] == "4 jobs: 4 completed"  # and the jobs' output lines, "[N] ..."
    assert sorted(re.sub(r" after \S+$", "", line) for line in lines[:-1]) == [
        f"job {i} (jobs.txt:{i + 1}) completed" for i in range(1, 5)]
    assert {name: (tmp_path / f"{name}.out").read_text() for name, _ in GPU_RUNS} == {
        "aaa": "0\n", "bbb": "0\n", "ccc": "0,1\n", "ddd": "1\n"}


def test_run_local_fails_when_a_job_fails(tmp_path):
    done = run_local(tmp_path, "true\nsh -c 'exit 3'\n")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "job 2 (jobs.txt:2) failed after" in done.stdout
    # The summary, then the failed job again, with the end of its output.
    assert "\n2 jobs: 1 completed, 1 failed\njob 2 (jobs.txt:2) failed after" in done.stdout


def test_run_local_shows_the_jobs_output_keeps_their_logs_and_the_end_of_a_failed_one(
        tmp_path):
    steps = "".join(f"step {i}\n" for i in range(1, 26))
    done = run_local(tmp_path, "sh -c 'for i in $(seq 1 25); do echo \"step $i\"; done; "
                               "echo oops >&2; exit 3'\necho fine\n", "--log-dir", "logs")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    # Each line as it came, after its job's number; a job's lines before the line of its end.
    assert [line for line in lines if line.startswith("[1] ")][:26] == [
        *(f"[1] step {i}" for i in range(1, 26)), "[1] oops"]
    assert "[2] fine" in lines
    assert lines.index("[1] oops") < next(i for i, line in enumerate(lines)
                                          if line.startswith("job 1 (jobs.txt:1) failed"))
    # At the end, under the failed job's line: its last 20 lines.
    end = lines[lines.index("2 jobs: 1 completed, 1 failed") + 1:]
    assert end[0].startswith("job 1 (jobs.txt:1) failed after") and end[0].endswith(
        ": exited with code 3; the last 20 lines of its output (all of it in logs/job-1.log):")
    assert len(end) == 21 and all(line.startswith("    ") for line in end[1:])
    assert {"    step 25", "    oops"} <= set(end[1:])
    # The logs are kept whole, as the jobs wrote them.
    assert (tmp_path / "logs" / "job-1.log").read_text().startswith(steps + "oops\n")
    assert (tmp_path / "logs" / "job-2.log").read_text().startswith("fine\n")

"""Job arrays as a user runs them (``docs/jobs.md``, "Arrays"): ``sched submit --array`` and
``--array-file`` against a real scheduler and worker, each element's index in its command and
environment, at most N at once, ``status`` with one line per array (``--expand`` for its
elements), ``cancel``/``release``/``wait``/``logs`` on an array or one element (``12_3``),
``--after-ok`` on an array, and the same from Python (``submit_command(..., array=...)``)."""

from __future__ import annotations

import json

from deadline import wait_until
from sched_helpers import sched, submit, views

CLUSTER_WORKERS = (("--name", "w", "--nthreads", "4", "--no-nanny"),)


def test_an_array_runs_each_index_in_place_of_braces_with_its_index_id_and_size(cluster,
                                                                                 tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    array = submit(cluster, "--array", "3-5", "--", "sh", "-c",
                   f'echo "$SCHED_ARRAY_ID $SCHED_ARRAY_INDEX $SCHED_ARRAY_SIZE" > {out}/{{}}')
    done = sched(cluster, "wait", str(array))
    assert done.returncode == 0, done.stderr + done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["3", "4", "5"]
    assert (out / "4").read_text() == f"{array} 4 3\n"
    view = views(cluster, array)[array]
    assert view["state"] == "completed" and view["array"]["counts"] == {"completed": 3}
    assert view["detail"] == "3 completed"


def test_an_array_file_makes_one_element_per_line_and_logs_name_an_element(cluster, tmp_path):
    params = tmp_path / "params.txt"
    params.write_text("# learning rates\n--lr 0.1\n\n--lr 0.01\n")
    array = submit(cluster, "--array-file", str(params), "--", "sh", "-c", "echo {}")
    assert sched(cluster, "wait", str(array)).returncode == 0
    assert sched(cluster, "logs", f"{array}_1").stdout == "--lr 0.01\n"
    whole = sched(cluster, "logs", str(array))
    assert whole.returncode == 1
    assert f"job {array} is an array of 2: name one of its elements, as {array}_0" in whole.stderr
    missing = sched(cluster, "logs", f"{array}_7")
    assert missing.returncode == 1 and f"array {array} has no element {array}_7" in missing.stderr


def test_at_most_n_elements_run_at_once(cluster, client, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    # Each element leaves a mark while it runs and waits for a go file: three of four slots.
    script = f"touch {marks}/$SCHED_ARRAY_INDEX; while [ ! -e {tmp_path}/go ]; do sleep 0.05; done"
    array = submit(cluster, "--array", "0-5%3", "--", "sh", "-c", script)
    wait_until(lambda: len(list(marks.iterdir())) == 3, what="three elements to run")
    view = views(cluster, array)[array]
    assert view["state"] == "running"
    assert view["array"]["counts"]["running"] + view["array"]["counts"].get("assigned", 0) == 3
    assert view["array"]["counts"]["queued"] == 3
    listed = sched(cluster, "status", str(array))
    assert listed.returncode == 0
    [row] = [line for line in listed.stdout.splitlines() if line.startswith(f"{array}_[")]
    assert f"{array}_[0-5%3]" in row and "3 running, 3 queued" in row
    expanded = json.loads(sched(cluster, "status", "--json", "--expand", str(array)).stdout)
    labels = [(v.get("array_id"), v.get("array_index")) for v in expanded["jobs"]]
    assert labels == [(None, None)] + [(array, i) for i in range(6)]
    (tmp_path / "go").touch()
    assert sched(cluster, "wait", str(array)).returncode == 0
    assert len(list(marks.iterdir())) == 6


def test_cancel_an_element_or_the_array_and_after_ok_waits_for_all_of_it(cluster, client,
                                                                          tmp_path):
    array = submit(cluster, "--array", "0-3", "--hold", "--", "true")
    after = submit(cluster, "--after-ok", str(array), "--", "true")
    assert sched(cluster, "cancel", f"{array}_2").stdout == f"job {array}_2: cancelled\n"
    released = sched(cluster, "release", str(array))
    assert released.stdout == f"job {array}: released\n", released.stderr
    assert sched(cluster, "wait", str(array)).returncode == 1  # one element was cancelled
    ended = views(cluster, array, after)
    assert ended[array]["state"] == "cancelled"
    assert ended[array]["array"]["counts"] == {"completed": 3, "cancelled": 1}
    assert ended[after]["reason"] == "dependency_never_satisfied"
    sched(cluster, "cancel", str(after))
    big = submit(cluster, "--array", "0-99999", "--hold", "--", "true")
    done = sched(cluster, "cancel", str(big))
    assert done.stdout == f"job {big}: cancelled\n"
    assert views(cluster, big)[big]["array"]["counts"] == {"cancelled": 100_000}


def test_python_submits_an_array_and_waits_for_it(client, tmp_path):
    future = client.submit_command(["sh", "-c", f"echo {{}} > {tmp_path}/$SCHED_ARRAY_INDEX"],
                                   array=["a", "b", "c"], array_limit=2)
    result = future.result(60)
    assert result.ok and result.state == "completed"
    assert [(tmp_path / str(i)).read_text() for i in range(3)] == ["a\n", "b\n", "c\n"]
    [element] = client.jobs([f"{future.job_id()}_2"])["jobs"]
    assert element["command"] == ["sh", "-c", f"echo c > {tmp_path}/$SCHED_ARRAY_INDEX"]
    assert client.resolve_jobs([f"{future.job_id()}_1", 5]) == [future.job_id() + 2, 5]

"""Jobs on the dashboard of a real scheduler (127.0.0.1, OS-chosen ports) after a known job
workload: the JSON API's lists, filters and paging, one job, its log read from its worker from
an offset (shown without its colours), a job's page, the Prometheus families of jobs and of the
journal, and a log whose worker is gone."""

from __future__ import annotations

import json
import signal

from prometheus_client.parser import text_string_to_metric_families

from dashboard_helpers import get_json, request
from deadline import wait_until

#: A job that says hello (two bytes for the é), then runs until the file $1 appears.
WAITS = ["sh", "-c", 'printf "héllo\\nstep 1\\n"; while [ ! -e "$1" ]; do sleep 0.05; done; '
         'echo done', "sh"]


def workload(daemons, tmp_path, *worker_args):
    """A worker "w1" with one GPU, and five jobs: "train" holds the GPU until ``release``
    appears; "train-2" waits for it; "tpu" asks for what no worker has; "later" is held;
    "bad" exits 3. Returns the client, the dashboard's URL and the jobs' ids by name."""
    daemons.scheduler()
    daemons.worker("--name", "w1", "--nthreads", "2", "--resources", "GPU=1", "--gpus",
                   "none", *worker_args)
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    release = str(tmp_path / "release")
    ids = {}
    ids["train"] = client.submit_command([*WAITS, release], resources="GPU=1",
                                         name="train").job_id(timeout=30)
    ids["train-2"] = client.submit_command(["true"], resources="GPU=1",
                                           name="train-2").job_id(timeout=30)
    ids["tpu"] = client.submit_command(["true"], resources="TPU=1", name="tpu").job_id(timeout=30)
    ids["later"] = client.submit_command(["true"], hold=True, name="later").job_id(timeout=30)
    ids["bad"] = client.submit_command(["sh", "-c", "exit 3"], name="bad").job_id(timeout=30)
    url = daemons.dashboard

    def settled():
        jobs = get_json(url, "api/v1/jobs")
        return (jobs["counts"]["running"] == 1 and jobs["counts"]["failed"] == 1
                and all(item["reason"] for item in jobs["items"]
                        if item["state"] == "queued") and jobs)
    return client, url, ids, wait_until(settled, what="one job running, one failed")


def test_the_api_lists_jobs_with_filters_and_pages_one_job_and_its_log(daemons, tmp_path):
    client, url, ids, jobs = workload(daemons, tmp_path)
    assert jobs["total"] == 5 and [j["id"] for j in jobs["items"]] == sorted(ids.values(),
                                                                            reverse=True)
    assert jobs["counts"] == {"queued": 2, "held": 1, "assigned": 0, "running": 1,
                              "completed": 0, "failed": 1, "cancelled": 0, "timeout": 0,
                              "lost": 0}
    assert jobs["waiting"]["resources"] == 1 and jobs["waiting"]["missing_resources"] == 1
    by_name = {j["name"]: j for j in jobs["items"]}
    assert by_name["train-2"]["reason"] == "resources"
    assert by_name["train-2"]["detail"] == f"waiting for GPU on w1 (in use by job {ids['train']})"
    assert (by_name["bad"]["state"], by_name["bad"]["exit_code"]) == ("failed", 3)

    def names(query):
        answer = get_json(url, "api/v1/jobs?" + query)
        return [j["name"] for j in answer["items"]], answer["total"]
    assert names("state=queued") == (["tpu", "train-2"], 2)
    assert names("state=queued&state=held") == (["later", "tpu", "train-2"], 3)
    assert names("name=train-2") == (["train-2"], 1)
    assert names("state=running&name=train") == (["train"], 1)
    assert names("reason=missing_resources") == (["tpu"], 1)
    assert names("limit=2") == (["bad", "later"], 5)
    assert names("limit=2&offset=2") == (["tpu", "train-2"], 5)
    assert names("offset=5") == ([], 5)

    job = get_json(url, f"api/v1/jobs/{ids['train']}")
    assert job["command"][:2] == ["sh", "-c"] and job["worker"] == "w1"
    assert job["state"] == "running" and job["log"].endswith(".log")
    for path, status, words in (
            ("api/v1/jobs/99999", 404, "no job '99999'"),
            ("api/v1/jobs/nothing", 404, "no job 'nothing'"),
            ("api/v1/jobs?limit=0", 400, "limit must be a whole number from 1 to 1000"),
            ("api/v1/jobs?user=me", 400, "unknown argument 'user'"),
            (f"api/v1/jobs/{ids['train']}/log?offset=-1", 400, "offset must be"),
            (f"api/v1/jobs/{ids['tpu']}/log", 404, "has no log yet: it is queued"),
            ("jobs/99999", 404, "no job '99999'")):
        got, _, body = request(url, path)
        assert got == status, (path, got, body)
        assert words in (json.loads(body)["error"] if path.startswith("api") else body.decode())

    log = f"api/v1/jobs/{ids['train']}/log"
    wait_until(lambda: get_json(url, log)["size"] == 14, what="the job's first lines")
    assert get_json(url, log) == {"job": ids["train"], "attempt": 1, "worker": "w1",
                                  "offset": 0, "next_offset": 14, "size": 14, "ended": False,
                                  "text": "héllo\nstep 1\n"}
    assert get_json(url, log + "?offset=7")["text"] == "step 1\n"
    cut = get_json(url, log + "?offset=0&limit=2")  # "h" and half of the é
    assert (cut["text"], cut["next_offset"]) == ("h", 1)

    status, headers, page = request(url, f"jobs/{ids['train']}")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b'<base href="../">' in page and b'data-job-state="running"' in page
    assert "héllo\nstep 1\n".encode() in page

    (tmp_path / "release").touch()
    ended = wait_until(lambda: (piece := get_json(url, log + "?offset=14"))["ended"] and piece,
                       what="the end of the job's log")
    assert ended["text"] == "done\n" and ended["next_offset"] == ended["size"] == 19
    assert client.watch_jobs([ids["train"]])[0].result(timeout=30).state == "completed"


def test_an_unknown_state_or_reason_is_a_400_naming_the_valid_ones(daemons):
    daemons.scheduler()
    url = daemons.dashboard
    for path, words in (
            ("api/v1/jobs?state=bogus", "unknown state 'bogus' (expected: queued, held, "
                                        "assigned, running, completed, failed, cancelled, "
                                        "timeout, lost)"),
            ("api/v1/jobs?state=running&state=Running", "unknown state 'Running'"),
            ("api/v1/jobs?reason=disk", "unknown reason 'disk' (expected: resources, "),
            ("api/v1/workers?state=gone", "unknown state 'gone' (expected: connected, "
                                          "draining)")):
        status, _, body = request(url, path)
        assert status == 400, (path, status, body)
        assert words in json.loads(body)["error"], path
    assert get_json(url, "api/v1/jobs?state=lost&reason=worker_lost")["total"] == 0


def test_a_log_is_shown_without_its_colours(daemons, tmp_path):
    daemons.scheduler()
    daemons.worker("--name", "w1", "--nthreads", "1", "--gpus", "none")
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    job = client.submit_command(["printf", "\\033[1;31mERROR\\033[0m disk full\\n"],
                                name="coloured")
    assert job.result(timeout=30).exit_code == 0
    url, job_id = daemons.dashboard, job.job_id(timeout=30)
    log = wait_until(lambda: (piece := get_json(url, f"api/v1/jobs/{job_id}/log"))["ended"]
                     and piece, what="the whole log")
    assert (log["text"], log["size"]) == ("ERROR disk full\n", 27)  # the file keeps them
    status, _, page = request(url, f"jobs/{job_id}")
    assert status == 200 and b">ERROR disk full\n</pre>" in page and b"\x1b" not in page


def test_job_metrics_after_a_known_workload(daemons, tmp_path):
    client, url, ids, _ = workload(daemons, tmp_path)

    def scrape():
        status, _, body = request(url, "metrics")
        assert status == 200
        return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
                for family in text_string_to_metric_families(body.decode())
                for sample in family.samples}
    samples = scrape()

    def value(name, **labels):
        return samples[(name, tuple(sorted(labels.items())))]
    assert value("dsched_jobs", state="running") == 1
    assert value("dsched_jobs", state="queued") == 2
    assert value("dsched_jobs", state="held") == 1
    assert value("dsched_jobs", state="failed") == 1
    assert value("dsched_jobs", state="completed") == 0
    assert value("dsched_jobs_waiting", reason="resources") == 1
    assert value("dsched_jobs_waiting", reason="missing_resources") == 1
    assert value("dsched_jobs_waiting", reason="held") == 1
    assert value("dsched_jobs_waiting", reason="no_workers") == 0
    assert value("dsched_jobs_ended_total", state="failed") == 1
    assert value("dsched_job_queue_wait_seconds_count") == 2  # train and bad were dispatched
    assert value("dsched_task_queue_wait_seconds_count") == 0  # no task: jobs kept apart
    assert value("dsched_job_run_seconds_count") == 1  # bad ran to its end
    assert value("dsched_jobs_unreachable") == 0 and value("dsched_jobs_recovering") == 0
    # Five submits, two dispatches, two starts, an end: at least one commit, each row once.
    assert value("dsched_journal_commit_seconds_count") >= 1
    assert value("dsched_journal_rows_written_total") >= 5
    labels = {v for name, pairs in samples if name.startswith("dsched_")
              for label, v in pairs if label != "le"}
    assert not labels & {*map(str, ids.values()), *ids, "sh", "true"}

    (tmp_path / "release").touch()
    client.watch_jobs([ids["train"]])[0].result(timeout=30)
    wait_until(lambda: scrape()[("dsched_jobs_ended_total", (("state", "completed"),))] == 2,
               what="train and train-2 completed")
    samples = scrape()
    assert value("dsched_jobs", state="completed") == 2
    assert value("dsched_job_run_seconds_count") == 3
    assert value("dsched_jobs_waiting", reason="resources") == 0


def test_a_log_whose_worker_is_gone_is_a_clear_error_and_the_dashboard_goes_on(daemons,
                                                                               tmp_path):
    _, url, ids, _ = workload(daemons, tmp_path, "--no-nanny")
    (worker,) = daemons.workers
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    status, _, body = request(url, f"api/v1/jobs/{ids['bad']}/log")
    assert status == 502, body
    error = json.loads(body)["error"]
    assert error.startswith("the log is on worker w1 (") and "cannot be reached" in error
    assert "\n" not in error
    assert get_json(url, "healthz") == {"status": "ok"}
    assert get_json(url, f"api/v1/jobs/{ids['bad']}")["state"] == "failed"
    status, _, page = request(url, f"jobs/{ids['bad']}")  # the page says why, in place of it
    assert status == 200 and b"cannot be reached" in page


def test_readyz_says_503_while_a_restarted_scheduler_recovers_its_jobs(daemons, tmp_path):
    _, url, ids, _ = workload(daemons, tmp_path, "--no-nanny")
    (worker,) = daemons.workers
    port = daemons.address.rsplit(":", 1)[1]
    worker.send_signal(signal.SIGSTOP)  # it cannot come back before we have looked
    try:
        daemons.scheduler_process.send_signal(signal.SIGKILL)
        daemons.scheduler_process.wait()
        daemons.scheduler(port=int(port))
        url = daemons.dashboard
        status, _, body = request(url, "readyz")
        assert status == 503 and "recovering" in json.loads(body)["reasons"]
        assert get_json(url, "api/v1/jobs")["recovering"] is True
        status, _, page = request(url, "")
        assert b'data-status="recovering"' in page
        status, _, text = request(url, "metrics")
        assert b"dsched_jobs_recovering 1.0" in text and b"dsched_ready 0.0" in text
    finally:
        worker.send_signal(signal.SIGCONT)
    wait_until(lambda: request(url, "readyz")[0] == 200, what="the worker back, recovery over")
    assert get_json(url, f"api/v1/jobs/{ids['train']}")["state"] == "running"

"""The dashboard in headless Chromium, as a person sees it: a GPU=2 worker's GPU bar and a
waiting task's reason appear, and change without a reload when work and workers change; a
job's state and reason likewise, and a job's own page follows its state and its log; the page
says when the scheduler no longer answers, and fits a window 800 pixels wide.

``DASHBOARD_SCREENSHOT=docs/img/dashboard.png`` saves the page for the docs; otherwise the
screenshot goes to the test's tmp_path.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from browser import CHROMIUM, Chromium
from dashboard_helpers import TWO_GPUS, fail, hold, square
from deadline import wait_until

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package "
                                "(.ci/run installs it)")

#: The text of the GPU row of worker gpu-a, and the reasons of waiting work, on the page.
GPU_BAR = """(() => {
  const bar = document.querySelector('tr[data-worker="gpu-a"] [data-resource="GPU"]');
  return bar && bar.querySelector('meter').value + '/' + bar.querySelector('meter').max + ' '
    + bar.querySelector('.value').textContent;
})()"""
REASONS = "[...document.querySelectorAll('table.pending .reason')].map(e => e.textContent)"
WORKERS = "[...document.querySelectorAll('tr[data-worker]')].map(e => e.dataset.worker)"
JOB_STATES = "[...document.querySelectorAll('table.jobs tr[data-job]')].map(e => e.dataset.state)"


def job_row(job: int) -> str:
    """The state and reason of a job in the jobs table."""
    return f"""(() => {{
  const row = document.querySelector('table.jobs tr[data-job="{job}"]');
  const reason = row && row.querySelector('.reason');
  return row && [row.dataset.state, reason ? reason.textContent : null];
}})()"""


#: On a job's page: its state, and its log as shown.
JOB_STATE = "document.querySelector('[data-job-state]').dataset.jobState"
LOG = "document.getElementById('log').textContent"


@pytest.fixture
def browser(tmp_path):
    chromium = Chromium(tmp_path)
    try:
        yield chromium
    finally:
        chromium.close()


def test_the_page_shows_gpu_bars_and_reasons_and_follows_changes(daemons, browser, tmp_path):
    daemons.scheduler()
    daemons.worker("--name", "gpu-a", "--nthreads", "4", "--resources", "GPU=2",
                   env=TWO_GPUS)
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    release = str(tmp_path / "release")
    first = client.submit(hold, release, 1, resources={"GPU": 1})
    waiting = client.submit(square, 7, resources={"TPU": 1})
    failed = client.submit(fail, "CUDA out of memory: tried to allocate 20.00 GiB")
    failed.exception(timeout=30)
    wait_until(lambda: client.scheduler_info()["tasks"].get("processing"), what="a GPU task")
    client.submit_command(["true"], resources="TPU=1", name="train-tpu")
    client.submit_command(["python", "evaluate.py"], hold=True, name="evaluate")
    oom = client.submit_command(["sh", "-c", "echo 'CUDA error: out of memory' >&2; exit 1"],
                                name="train-large")
    assert oom.result(timeout=30).state == "failed"

    browser.open(daemons.dashboard)
    wait_until(lambda: browser.evaluate(GPU_BAR) == "1/2 1 / 2", what="GPU bar at 1 of 2")
    assert browser.evaluate(REASONS) == ["no worker offers resource TPU"]
    assert browser.evaluate("document.querySelector('tr[data-error] .message').textContent") \
        .startswith("ValueError: CUDA out of memory")
    wait_until(lambda: browser.evaluate("document.querySelectorAll('.gpu meter').length") == 4,
               what="both GPUs with their memory and utilization")
    browser.evaluate("window.loadedOnce = true")  # gone if the page reloads

    second = client.submit(hold, release, 2, resources={"GPU": 1})
    wait_until(lambda: browser.evaluate(GPU_BAR) == "2/2 2 / 2", what="GPU bar at 2 of 2")
    assert sorted(browser.evaluate(JOB_STATES)) == ["failed", "held", "queued"]
    screenshot = Path(os.environ.get("DASHBOARD_SCREENSHOT") or tmp_path / "dashboard.png")
    assert browser.screenshot(screenshot).startswith(b"\x89PNG")
    daemons.worker("--name", "tpu-b", "--nthreads", "1", "--resources", "TPU=1",
                   "--gpus", "none")
    assert waiting.result(timeout=30) == 49
    wait_until(lambda: browser.evaluate(WORKERS) == ["gpu-a", "tpu-b"], what="the new worker")
    wait_until(lambda: browser.evaluate(REASONS) == [], what="no reason left")
    assert browser.evaluate("window.loadedOnce") is True
    (tmp_path / "release").touch()
    assert client.gather([first, second]) == [1, 2]


def test_a_jobs_state_and_reason_follow_changes_and_its_page_follows_its_log(daemons, browser,
                                                                           tmp_path):
    daemons.scheduler()
    daemons.worker("--name", "w1", "--nthreads", "2", "--resources", "GPU=1", "--gpus", "none")
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    wait_for = 'printf "%s\\n" "$2"; while [ ! -e "$1" ]; do sleep 0.05; done; echo "$2 done"'
    first = client.submit_command(["sh", "-c", wait_for, "sh", str(tmp_path / "first"),
                                   "training"], resources="GPU=1", name="train")
    second = client.submit_command(["sh", "-c", wait_for, "sh", str(tmp_path / "second"),
                                    "évaluation"], resources="GPU=1", name="evaluate")
    job = second.job_id(timeout=30)

    browser.open(daemons.dashboard)
    wait_until(lambda: browser.evaluate(job_row(first.job_id(timeout=30))) == ["running", None],
               what="the first job running")
    assert browser.evaluate(job_row(job)) == ["queued", "resources"]
    browser.evaluate("window.loadedOnce = true")
    (tmp_path / "first").touch()
    wait_until(lambda: browser.evaluate(job_row(job)) == ["running", None],
               what="the second job running, with no reason left")
    assert browser.evaluate("window.loadedOnce") is True

    browser.open(daemons.dashboard + f"jobs/{job}")
    assert browser.evaluate(JOB_STATE) == "running"
    wait_until(lambda: browser.evaluate(LOG) == "évaluation\n", what="the log so far")
    browser.evaluate("window.loadedOnce = true")
    (tmp_path / "second").touch()
    wait_until(lambda: browser.evaluate(JOB_STATE) == "completed", what="the job completed")
    wait_until(lambda: browser.evaluate(LOG) == "évaluation\névaluation done\n",
               what="the rest of the log")
    assert browser.evaluate("window.loadedOnce") is True
    assert second.result(timeout=30).exit_code == 0


#: The scheduler's status on the page: its words, and the colour they are shown in.
STATUS = """(() => {
  const status = document.getElementById('scheduler-status');
  return [status.textContent, getComputedStyle(status).color];
})()"""
OK, WARN = "rgb(26, 127, 55)", "rgb(181, 71, 8)"  # --ok and --warn in dashboard.css


def test_the_status_says_unreachable_once_the_scheduler_is_gone(daemons, browser):
    daemons.scheduler()
    browser.open(daemons.dashboard)
    assert browser.evaluate(STATUS) == ["ready", OK]
    daemons.scheduler_process.kill()
    daemons.scheduler_process.wait()
    wait_until(lambda: browser.evaluate(STATUS) == ["unreachable", WARN],
               what="the status saying the scheduler is unreachable")
    assert "the scheduler is unreachable" in browser.evaluate(
        "document.getElementById('poll-status').textContent")


def test_at_800_pixels_wide_the_workers_table_scrolls_in_its_panel(daemons, tmp_path):
    daemons.scheduler()
    daemons.worker("--name", "gpu-worker-with-a-long-name", "--nthreads", "16",
                   "--resources", "GPU=2,MEM=64e9,SSD=2,licence=4", env=TWO_GPUS)
    client = daemons.client()
    daemons.wait_for_workers(client, 1)
    chromium = Chromium(tmp_path, width=800)
    try:
        chromium.open(daemons.dashboard)
        assert chromium.evaluate("window.innerWidth") == 800
        wait_until(lambda: chromium.evaluate("document.querySelectorAll('.gpu meter').length")
                   == 4, what="both GPUs with their memory and utilization")
        assert chromium.evaluate(
            "document.querySelector('#panel-workers').scrollWidth") > 800  # it is that wide
        assert chromium.evaluate("document.documentElement.scrollWidth") <= 800
    finally:
        chromium.close()

"""The dashboard in headless Chromium, as a person sees it: a GPU=2 worker's GPU bar and a
waiting task's reason appear, and change without a reload when work and workers change.

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

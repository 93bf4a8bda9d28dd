"""Headless Chromium for tests that look at the dashboard as a person does: open a page, run
JavaScript in it, take a screenshot. Driven over the DevTools protocol through tornado's
websocket client (already a dependency), so no test dependency is added; Debian's
``chromium`` package is the browser (``.ci/run`` installs it where missing).

The browser gets a closed loopback port as its proxy: Chromium never proxies loopback
addresses, so the pages under test load while anything else it might try to reach fails on
this machine. Its profile and log live under the test's tmp_path.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from tornado.websocket import websocket_connect

from deadline import wait_until

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DEVTOOLS = re.compile(r"DevTools listening on (ws://\S+)")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
    "--no-first-run", "--no-default-browser-check", "--disable-extensions",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-domain-reliability", "--no-pings",
    "--disable-client-side-phishing-detection", "--hide-scrollbars", "--mute-audio",
    "--proxy-server=127.0.0.1:9", "--force-device-scale-factor=1",
)


class Chromium:
    """One headless browser with one tab; ``close()`` ends it (and the test's fixture does)."""

    def __init__(self, tmp_path: Path, width: int = 1280, height: int = 900):
        assert CHROMIUM is not None, "chromium is not installed"
        self.log = tmp_path / "chromium.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}",
                 f"--window-size={width},{height}", "about:blank"],
                stdout=subprocess.DEVNULL, stderr=log)
        self._ids = itertools.count(1)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        try:
            url = wait_until(self._devtools_url, what="Chromium's DevTools address")
            self._socket = self._run(self._connect(url))
            target = self.send("Target.createTarget", url="about:blank")["targetId"]
            self._session = self.send("Target.attachToTarget", targetId=target,
                                      flatten=True)["sessionId"]
            self.send("Page.enable", session=True)
        except BaseException:
            self.close()
            raise

    def _devtools_url(self) -> str | None:
        if self.process.poll() is not None:
            raise AssertionError(f"Chromium exited: {self.log.read_text(errors='replace')}")
        match = DEVTOOLS.search(self.log.read_text(errors="replace"))
        return match.group(1) if match else None

    async def _connect(self, url: str) -> Any:
        return await websocket_connect(url, max_message_size=256 * 2**20)

    def _run(self, coroutine: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def send(self, method: str, session: bool = False, **params: Any) -> dict:
        """One DevTools command (to the tab when ``session``); its result."""
        return self._run(self._send(method, params, session))

    async def _send(self, method: str, params: dict, session: bool) -> dict:
        message_id = next(self._ids)
        message: dict[str, Any] = {"id": message_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        await self._socket.write_message(json.dumps(message))
        while True:  # events come in between; only our answer ends the wait
            text = await self._socket.read_message()
            if text is None:
                raise ConnectionError("Chromium closed the DevTools connection")
            answer = json.loads(text)
            if answer.get("id") == message_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})

    def open(self, url: str) -> None:
        """Load ``url`` in the tab and wait until it has loaded."""
        self.send("Page.navigate", session=True, url=url)
        wait_until(lambda: self.evaluate("document.readyState") == "complete"
                   and self.evaluate("location.href") == url, what=f"{url} loaded")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the tab."""
        result = self.send("Runtime.evaluate", session=True, expression=expression,
                           returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> bytes:
        """A PNG of the whole page (not only the window), written to ``path``."""
        width, height = self.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        data = self.send("Page.captureScreenshot", session=True, format="png",
                         captureBeyondViewport=True,
                         clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})
        png = base64.b64decode(data["data"])
        path.write_bytes(png)
        return png

    def close(self) -> None:
        socket = getattr(self, "_socket", None)
        if socket is not None:  # on its loop: tornado's objects are not thread-safe
            self._loop.call_soon_threadsafe(socket.close)
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

"""Headless Chromium driven over the DevTools protocol (a websocket), for the dashboard's browser test.

Starts Debian's ``chromium`` with a throw-away profile and ``--remote-debugging-port=0``, reads the port it
chose from ``DevToolsActivePort``, and talks to the first page: navigate, evaluate JavaScript, wait for a
condition in the DOM (polling with a deadline), capture a screenshot.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import pytest

from stream_dp.processes import die_with_parent

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", "--window-size=1280,1700")


def chromium_binary() -> str | None:
    """Debian's chromium (or a Chrome on PATH), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator["HeadlessChromium"]:
    """A headless Chromium for one test (import this fixture into the test module); skips the test when no
    Chromium is installed."""
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium); .ci/run installs it when it can")
    browser = HeadlessChromium(binary, tmp_path)
    try:
        yield browser
    finally:
        browser.close()


class HeadlessChromium:
    def __init__(self, binary: str, workdir: Path, timeout: float = 30.0) -> None:
        import websocket  # websocket-client (test extra)

        profile = workdir / "chromium-profile"
        profile.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "chromium.log"
        env = {**os.environ, "HOME": str(workdir)}  # keep chromium's caches out of the real home
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([binary, *FLAGS, "--remote-debugging-port=0", f"--user-data-dir={profile}",
                                          "about:blank"], stdout=log, stderr=subprocess.STDOUT, env=env,
                                         preexec_fn=die_with_parent, start_new_session=True)
        self._ids = itertools.count(1)
        try:
            port_file = profile / "DevToolsActivePort"
            deadline = time.monotonic() + timeout
            while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"chromium did not start; its log:\n{self.log_tail()}")
                time.sleep(0.05)
            port = int(port_file.read_text().splitlines()[0])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as resp:
                pages = [t for t in json.loads(resp.read()) if t.get("type") == "page"]
            self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=timeout,
                                                  suppress_origin=True)
        except BaseException:
            self.close()
            raise

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; events received meanwhile are dropped."""
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def navigate(self, url: str) -> None:
        self.call("Page.enable")
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float, what: str) -> Any:
        """Poll ``expression`` in the page until it is truthy (its value), failing after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; the page shows:\n"
                                     f"{self.evaluate('document.body.innerText')}")
            time.sleep(0.1)

    def set_viewport(self, width: int, height: int) -> None:
        """Make the page's viewport ``width`` × ``height`` CSS pixels (device scale 1), as a screen of that size."""
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)

    def screenshot_viewport(self, path: Path) -> Path:
        """What the viewport shows (a wall screen does not scroll), as a PNG."""
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def screenshot(self, path: Path) -> Path:
        """The whole page as a PNG."""
        height = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)") or 1200)
        self.call("Emulation.setDeviceMetricsOverride", width=1280, height=height, deviceScaleFactor=1, mobile=False)
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        # chromium's helpers (zygote, renderer) share the session it was started in: stop them all
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue

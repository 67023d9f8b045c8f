"""Headless Chromium driven over the Chrome DevTools protocol, for end-to-end page tests.

Just what the tests need: open a page, evaluate JavaScript, take a screenshot. The browser runs
in its own profile directory and talks to loopback only.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
]  # fmt: skip


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    def __init__(
        self, executable: str, profile: Path, width: int = 1400, height: int = 900
    ) -> None:
        self.profile = profile
        self.log = (profile.parent / f"{profile.name}-chromium.log").open("wb")
        self.proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
             f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self._ids = itertools.count(1)
        self.ws: ClientConnection | None = None
        self._stack = ExitStack()
        try:
            port = self._devtools_port(timeout=30)
            url = self._page_url(port, timeout=10)
            self.ws = self._stack.enter_context(connect(url, max_size=64 * 2**20, open_timeout=10))
            self.call("Emulation.setDeviceMetricsOverride",
                      width=width, height=height, deviceScaleFactor=1, mobile=False)  # fmt: skip
        except BaseException:
            self.close()
            raise

    def _devtools_port(self, timeout: float) -> int:
        # Chromium writes the port it picked (for --remote-debugging-port=0) into the profile.
        marker = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            if marker.is_file():
                lines = marker.read_text().split()
                if lines:
                    return int(lines[0])
            time.sleep(0.05)
        raise RuntimeError("chromium did not open its DevTools port")

    @staticmethod
    def _page_url(port: int, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=5).json()
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return str(pages[0]["webSocketDebuggerUrl"])
            if time.monotonic() > deadline:
                raise RuntimeError("chromium has no page target")
            time.sleep(0.05)

    def call(self, method: str, timeout: float = 15.0, **params: Any) -> dict[str, Any]:
        assert self.ws is not None
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self.ws.recv(timeout=max(0.01, deadline - time.monotonic())))
            if reply.get("id") == msg_id:  # anything else is an event
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 15.0) -> Any:
        """Evaluates ``expression`` until it is truthy; returns that value. While the page is
        still loading, an expression that throws counts as not yet."""
        guarded = f"(() => {{ try {{ return ({expression}); }} catch (e) {{ return null; }} }})()"
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(guarded)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"page never satisfied: {expression}")
            time.sleep(0.1)

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(data["data"]))
        return path

    def close(self) -> None:
        try:
            self._stack.close()
        finally:
            self.ws = None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

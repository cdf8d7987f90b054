"""Headless Chromium driven over the Chrome DevTools Protocol, for the viewer's browser test and bench/viewer.py.

The protocol runs over a pipe (`--remote-debugging-pipe`: Chromium reads commands on fd 3 and writes replies and
events on fd 4, each a JSON message ended by a NUL byte), so no port, websocket library or browser download is
needed: only Debian's `chromium` package. `find_chromium()` returns None where it is not installed.
"""

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class CDPError(RuntimeError):
    """Chromium answered a command with an error, or died, or did not answer in time."""


class Chromium:
    """One headless browser process; `open(url)` gives a `Page`. Use as a context manager."""

    def __init__(self, executable: str | None = None, width: int = 1400, height: int = 1000):
        executable = executable or find_chromium()
        if executable is None:
            raise FileNotFoundError(f"no Chromium found (looked for {', '.join(CHROMIUM_NAMES)})")
        self._profile = tempfile.mkdtemp(prefix="hfpolicy-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_fds() -> None:  # in the child: fd 3 = commands in, fd 4 = replies out
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        self.process = subprocess.Popen(
            [executable, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--mute-audio",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-dev-shm-usage",
             "--autoplay-policy=no-user-gesture-required", f"--window-size={width},{height}",
             f"--user-data-dir={self._profile}", "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4), preexec_fn=wire_fds,  # kept open: the child closes other fds after wire_fds
        )  # fmt: skip
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.width, self.height = width, height

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30.0) -> dict:
        """Sends one command and returns its result (events that arrive meanwhile are dropped)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise CDPError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _read_message(self, deadline: float) -> dict:
        import select

        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CDPError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise CDPError(f"Chromium exited (code {self.process.poll()})")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def open(self, url: str) -> "Page":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        page.send("Page.enable")
        page.send("Runtime.enable")
        page.send("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False})  # fmt: skip
        page.navigate(url)
        return page

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(CDPError, OSError):
                self.send("Browser.close", timeout=5)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for fd in (self._to_browser, self._from_browser):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Page:
    """One tab: navigate, evaluate JavaScript (its value returned as JSON), wait for a condition, screenshot."""

    def __init__(self, browser: Chromium, session: str):
        self.browser, self.session = browser, session

    def send(self, method: str, params: dict | None = None, timeout: float = 30.0) -> dict:
        return self.browser.send(method, params, session=self.session, timeout=timeout)

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete'")

    def evaluate(self, expression: str, timeout: float = 30.0) -> Any:
        result = self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, timeout
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise CDPError(f"{expression[:80]!r} raised: {details.get('exception', {}).get('description', details)}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 20.0, poll_s: float = 0.05) -> Any:
        """Polls `expression` until it is truthy; returns its value (CDPError after `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise CDPError(f"timed out after {timeout} s waiting for {expression!r} (last value {value!r})")
            time.sleep(poll_s)

    def screenshot(self, path: str | Path, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params.update(
                captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
            )
        data = self.send("Page.captureScreenshot", params)["data"]
        path = Path(path)
        path.write_bytes(base64.b64decode(data))
        return path

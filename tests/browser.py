"""Headless Chromium driven over the DevTools protocol: open a page, wait until its scripts have drawn what
a test looks for, read the DOM, take a screenshot. Debian's ``chromium`` package; CI installs it."""

from __future__ import annotations

import base64
import itertools
import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1600",
)


class Browser:
    """One headless Chromium with a fresh profile in ``profile``; a context manager that ends it."""

    def __init__(self, profile: Path) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        port_file = profile / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)  # a profile used before: wait for this browser's port, not the last one's
        self.process = subprocess.Popen(
            [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"chromium did not start (exit {self.process.returncode})")
            time.sleep(0.1)
        self.port = int(port_file.read_text().split()[0])

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the browser process."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def open(self, url: str) -> Page:
        """A new tab showing ``url``."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/json/new?{url}", method="PUT")
        with urllib.request.urlopen(request, timeout=30) as response:
            target = json.load(response)
        return Page(target["webSocketDebuggerUrl"])


class Page:
    """A tab, spoken to over its DevTools websocket."""

    def __init__(self, ws_url: str) -> None:
        from websockets.sync.client import connect

        self._ws = connect(ws_url, max_size=None, open_timeout=30)
        self._ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (events in between are skipped)."""
        call_id = next(self._ids)
        self._ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv(timeout=60))
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 60) -> Any:
        """Poll ``expression`` until it is truthy (scripts have drawn it); its value, or AssertionError."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                text = self.evaluate("document.body ? document.body.innerText.slice(0, 2000) : ''")
                raise AssertionError(f"the page never showed {expression!r}; it shows:\n{text}")
            time.sleep(0.25)

    def screenshot(self, path: Path, whole_page: bool = False) -> Path:
        """A PNG of the window (``whole_page``: of the whole page; virtualized lists draw only the window)."""
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=whole_page)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        """Close the websocket (the browser closes the tab with the process)."""
        self._ws.close()

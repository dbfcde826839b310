"""Headless Chromium driven over the DevTools protocol: open a page, wait for text, click what a user
clicks (a real mouse press and release at the element's centre), read the page, take screenshots.

Debian's chromium and the ``websockets`` client Dagster's webserver already installs; no other browser
tooling. Elements are found by their visible text, as a user finds them.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

FIND_BY_TEXT = """
(([pattern, selector]) => {
  const wanted = new RegExp(pattern);
  const visible = (e) => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const label = (e) => (e.innerText || e.getAttribute('aria-label') || '').trim();
  const found = [...document.querySelectorAll(selector)].filter(
    (e) => visible(e) && !e.disabled && wanted.test(label(e)));
  if (!found.length) return null;
  const element = found[found.length - 1];
  element.scrollIntoView({block: 'center'});
  const r = element.getBoundingClientRect();
  return {x: r.left + r.width / 2, y: r.top + r.height / 2, text: (element.innerText || '').trim()};
})
"""


class Browser:
    """One headless Chromium with one page; closed (whole process) by ``close``."""

    def __init__(self, profile: Path, width: int = 1600, height: int = 1000) -> None:
        executable = shutil.which("chromium")
        assert executable, (
            "Debian's chromium is missing: make test installs it (scripts/provision_chromium.sh)"
        )
        shutil.rmtree(profile, ignore_errors=True)
        self.process = subprocess.Popen(  # noqa: S603  # fixed argv
            [
                executable,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "--remote-debugging-port=0",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        endpoint = self._devtools_endpoint()
        port = endpoint.split(":")[2].split("/")[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:  # noqa: S310
            pages = [t for t in json.load(answer) if t["type"] == "page"]
        self._socket = connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=20)
        self._ids = itertools.count(1)
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def _devtools_endpoint(self, timeout: float = 30) -> str:
        assert self.process.stderr is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            match = re.search(r"DevTools listening on (ws://\S+)", line)
            if match:
                return match.group(1)
        raise TimeoutError("chromium did not open its DevTools endpoint")

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; waits for its answer (events in between are dropped)."""
        message_id = next(self._ids)
        self._socket.send(json.dumps({"id": message_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv(timeout=60))
            if message.get("id") == message_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        self.send("Page.navigate", url=url)
        self.wait_for(lambda: self.evaluate("document.readyState") == "complete", f"{url} to load")

    def text(self) -> str:
        return str(self.evaluate("document.body ? document.body.innerText : ''"))

    def html(self) -> str:
        return str(self.evaluate("document.documentElement.outerHTML"))

    def wait_for(self, condition: Any, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.5)
        raise TimeoutError(f"waited {timeout} s for {what}")

    def wait_for_text(self, pattern: str, timeout: float = 60) -> None:
        self.wait_for(lambda: re.search(pattern, self.text()) is not None, f"text /{pattern}/", timeout)

    def click(self, pattern: str, selector: str = "button, a, [role=button], [role=menuitem]") -> str:
        """Click the (last) visible element matching ``selector`` whose text matches ``pattern``."""
        found: dict[str, Any] = {}

        def located() -> bool:
            where = self.evaluate(f"{FIND_BY_TEXT}({json.dumps([pattern, selector])})")
            if where:
                found.update(where)
            return bool(where)

        self.wait_for(located, f"something to click matching /{pattern}/")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send(
                "Input.dispatchMouseEvent", type=kind, x=found["x"], y=found["y"], button="left", clickCount=1
            )
        return str(found["text"])

    def click_until(self, pattern: str, expected: str, attempts: int = 3, timeout: float = 20) -> None:
        """Click ``pattern`` until the page shows ``expected`` (a click on a page still wiring up its
        handlers can be lost, as a person would click again)."""
        for attempt in range(attempts):
            self.click(pattern)
            try:
                self.wait_for_text(expected, timeout)
                return
            except TimeoutError:
                if attempt == attempts - 1:
                    raise

    def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        shot = self.send("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        try:
            self._socket.close()
        finally:
            self.process.kill()
            self.process.wait(timeout=30)

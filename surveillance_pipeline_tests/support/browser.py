"""Headless Chromium driven over the DevTools protocol: open a page, wait for text, click what a user
clicks (a real mouse press and release at the element's centre), read the page, take screenshots.

Debian's chromium and the ``websockets`` client Dagster's webserver already installs; no other browser
tooling. Elements are found by their visible text, as a user finds them.
"""

from __future__ import annotations

import base64
import collections
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

# An open dialog's text (it comes last in the body, past what a message quotes), else the page's.
SHOWN_TEXT = """
(() => { const d = [...document.querySelectorAll('[role=dialog]')].pop();
         return (d || document.body || {innerText: ''}).innerText; })()
"""
CLICKABLE = "button, a, [role=button], [role=menuitem]"
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
        # The page's own errors (uncaught exceptions, console.error), kept so a timeout can say whether the
        # page failed, not only what it shows.
        self.page_errors: collections.deque[str] = collections.deque(maxlen=12)
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
        """One DevTools command; waits for its answer (events in between are dropped, but for the page's
        errors, kept in ``page_errors``)."""
        message_id = next(self._ids)
        self._socket.send(json.dumps({"id": message_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv(timeout=60))
            self._keep_page_error(message)
            if message.get("id") == message_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def _keep_page_error(self, message: dict[str, Any]) -> None:
        params = message.get("params", {})
        if message.get("method") == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            thrown = details.get("exception", {}).get("description") or details.get("text", "")
            self.page_errors.append(f"uncaught: {thrown[:500]}")
        elif message.get("method") == "Runtime.consoleAPICalled" and params.get("type") == "error":
            said = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.page_errors.append(f"console.error: {said[:500]}")

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
        raise TimeoutError(f"waited {timeout} s for {what}; {self.describe()}")

    def describe(self) -> str:
        """What the page shows (its open dialog's text, if one is open) and said, for a failure's message."""
        try:
            shown = re.sub(r"\s+", " ", str(self.evaluate(SHOWN_TEXT)))[:1500]
        except (RuntimeError, TimeoutError) as error:
            shown = f"(unreadable: {error})"
        said = "; ".join(self.page_errors) or "none"
        return f"the page shows: {shown!r}; its errors: {said}"

    def wait_for_text(self, pattern: str, timeout: float = 60) -> None:
        self.wait_for(lambda: re.search(pattern, self.text()) is not None, f"text /{pattern}/", timeout)

    def find(self, pattern: str, selector: str = CLICKABLE) -> dict[str, Any] | None:
        """The (last) visible, enabled element matching ``selector`` whose text matches ``pattern``:
        its centre and text, scrolled into view; None when there is none."""
        found = self.evaluate(f"{FIND_BY_TEXT}({json.dumps([pattern, selector])})")
        return dict(found) if found else None

    def wait_for_element(
        self, pattern: str, selector: str = CLICKABLE, timeout: float = 60
    ) -> dict[str, Any]:
        found: dict[str, Any] = {}

        def located() -> bool:
            found.update(self.find(pattern, selector) or {})
            return bool(found)

        self.wait_for(located, f"something to click matching /{pattern}/", timeout)
        return found

    def click(self, pattern: str, selector: str = CLICKABLE) -> str:
        """Click the (last) visible element matching ``selector`` whose text matches ``pattern``."""
        found = self.wait_for_element(pattern, selector)
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

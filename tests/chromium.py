"""Headless Chromium driven over the Chrome DevTools Protocol (CDP), with the ``websockets`` package.

``with Chromium(tmp_path, fake_audio=wav) as browser: browser.navigate(url); browser.evaluate(js)``.
The browser listens on a free port (``--remote-debugging-port=0``), which it writes to
``DevToolsActivePort`` in its profile directory; the first page target is driven through its
WebSocket. With ``fake_audio``, getUserMedia gets a fake microphone that plays (and loops) the WAV.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_chromium() -> str | None:
    """$CHROMIUM, or the first Chromium/Chrome on PATH."""
    override = os.environ.get("CHROMIUM")
    if override:
        return override
    for name in NAMES:
        if path := shutil.which(name):
            return path
    return None


class CdpError(RuntimeError):
    """The browser answered a command with an error, or a page script threw."""


class Chromium:
    """One headless browser process with one page, closed (and waited for) on exit."""

    def __init__(self, profile: Path, *, fake_audio: Path | None = None, binary: str | None = None) -> None:
        self.profile = profile
        self.binary = binary or find_chromium()
        if self.binary is None:
            raise FileNotFoundError("no Chromium binary found")
        self.args = [
            self.binary,
            "--headless=new",
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "--remote-allow-origins=*",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-gpu",
            "--disable-extensions",
            "--autoplay-policy=no-user-gesture-required",
            "--window-size=1000,700",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            self.args.append("--no-sandbox")  # Chromium refuses to run its sandbox as root
        if fake_audio is not None:
            self.args += [
                "--use-fake-ui-for-media-stream",
                "--use-fake-device-for-media-stream",
                f"--use-file-for-fake-audio-capture={fake_audio}",
            ]
        self.args.append("about:blank")
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self._ws: ClientConnection | None = None
        self._stack = contextlib.ExitStack()
        self._next_id = 0
        self.console: list[str] = []  # console messages and uncaught exceptions of the page

    def __enter__(self) -> Chromium:
        self.profile.mkdir(parents=True, exist_ok=True)
        self._log = open(self.profile / "chromium.log", "wb")  # noqa: SIM115 (closed in __exit__)
        self._proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            port = self._devtools_port(timeout=60)
            self._ws = self._stack.enter_context(connect(self._page_ws_url(port), max_size=None, open_timeout=30))
            self.send("Page.enable")
            self.send("Runtime.enable")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._ws = None
        self._stack.close()
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def _devtools_port(self, timeout: float) -> int:
        """The port from ``DevToolsActivePort`` (the browser writes it once it listens)."""
        assert self._proc is not None
        path = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"Chromium exited with {self._proc.returncode}: {self.log()[-2000:]}")
            lines = path.read_text().split("\n") if path.is_file() else []
            if len(lines) >= 2 and lines[0].strip().isdigit():
                return int(lines[0])
            time.sleep(0.05)
        raise TimeoutError(f"Chromium wrote no {path} within {timeout} s: {self.log()[-2000:]}")

    @staticmethod
    def _page_ws_url(port: int) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            targets = json.load(r)
        pages = [t for t in targets if t.get("type") == "page"]
        assert pages, targets
        return str(pages[0]["webSocketDebuggerUrl"])

    def log(self) -> str:
        path = self.profile / "chromium.log"
        return path.read_text(errors="replace") if path.is_file() else ""

    # -- CDP ---------------------------------------------------------------------------------------

    def send(self, method: str, timeout: float = 30, **params: Any) -> dict[str, Any]:
        """Run a CDP command and return its result (events that arrive meanwhile are noted)."""
        assert self._ws is not None
        self._next_id += 1
        self._ws.send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self._ws.recv(timeout=max(deadline - time.monotonic(), 0.01)))
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise CdpError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))
            self._note(message)

    def _note(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.console.append(f"console.{params.get('type')}: {text}")
        elif method == "Runtime.exceptionThrown":
            self.console.append(
                f"exception: {params.get('exceptionDetails', {}).get('exception', {}).get('description')}"
            )

    def evaluate(self, expression: str, *, user_gesture: bool = False) -> Any:
        """The value of a JavaScript expression in the page (promises are awaited)."""
        result = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True, userGesture=user_gesture
        )
        if "exceptionDetails" in result:
            raise CdpError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def navigate(self, url: str, timeout: float = 30) -> None:
        self.send("Page.navigate", url=url)
        self.wait_for(f"document.readyState === 'complete' && location.href === {json.dumps(url)}", timeout)

    def click(self, selector: str) -> None:
        self.evaluate(f"document.querySelector({json.dumps(selector)}).click()", user_gesture=True)

    def wait_for(self, expression: str, timeout: float, interval: float = 0.25) -> Any:
        """Evaluate ``expression`` until it is truthy; its value. TimeoutError with the page state."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expression!r} still false after {timeout} s; page: {self.page_text()!r}")
            time.sleep(interval)

    def page_text(self) -> str:
        return str(self.evaluate("document.body ? document.body.innerText : ''"))

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

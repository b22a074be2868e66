"""Headless Chromium (Debian's package) driven over the DevTools protocol: load a page, collect its console
errors, evaluate script, take a screenshot. Raw CDP over one websocket: no browser download, no driver."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
TIMEOUT_S = 60.0
"""Longest wait for the browser or one answer (generous: the machine is shared)."""


class Browser:
    """One headless Chromium with one page; `errors` gathers console errors, uncaught exceptions and CSP
    violations (the browser's log at level error)."""

    def __init__(self, width: int = 1280, height: int = 900) -> None:
        self._profile = tempfile.mkdtemp(prefix="agentbake-chromium-")
        self._process = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",  # runs as root here
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--remote-debugging-port=0",
                f"--user-data-dir={self._profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, "HOME": self._profile},
        )
        self._ids = itertools.count(1)
        self.errors: list[str] = []
        self._loaded = False
        self._stack = contextlib.ExitStack()
        self._socket = self._stack.enter_context(connect(self._endpoint(), max_size=None, open_timeout=TIMEOUT_S))
        target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def _endpoint(self) -> str:
        assert self._process.stderr is not None
        deadline = time.monotonic() + TIMEOUT_S
        seen = []
        while time.monotonic() < deadline:
            line = self._process.stderr.readline().decode(errors="replace")
            if not line and self._process.poll() is not None:
                break
            seen.append(line)
            found = re.search(r"DevTools listening on (ws://\S+)", line)
            if found:
                return found.group(1)
        self.close()
        raise RuntimeError(f"{CHROMIUM} did not start: {''.join(seen)[-2000:]}")

    def _call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        ident = next(self._ids)
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self._socket.send(json.dumps(message))
        while True:
            answer = self._receive()
            if answer.get("id") == ident:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})

    def _receive(self) -> dict[str, Any]:
        answer = json.loads(self._socket.recv(timeout=TIMEOUT_S))
        method = answer.get("method")
        params = answer.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append(details.get("exception", {}).get("description") or details.get("text", "exception"))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            self.errors.append(params["entry"].get("text", ""))
        elif method == "Page.loadEventFired":
            self._loaded = True
        return answer

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._call(method, params, self._session)

    def open(self, path: Path) -> float:
        """Load the file and wait for its load event; returns the seconds it took."""
        self._loaded = False
        started = time.monotonic()
        self.call("Page.navigate", {"url": path.absolute().as_uri()})
        while not self._loaded:
            self._receive()
        return time.monotonic() - started

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serializable values only)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def go(self, hash_route: str) -> None:
        """Follow an in-page route (`#rollout/0/3`); the page redraws synchronously on hashchange."""
        self.evaluate(f"location.hash = {json.dumps(hash_route)}")
        self.evaluate("new Promise(r => setTimeout(r, 0))")

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"})["data"])

    def close(self) -> None:
        try:
            if getattr(self, "_stack", None) is not None:
                self._stack.close()
        finally:
            self._process.kill()
            self._process.wait()
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

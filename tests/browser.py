"""Open a page in headless Chromium and watch it through the DevTools protocol (over a
pipe: no port, no extra package): every network request the page makes, every console
message and uncaught exception, a JavaScript expression's value, and a screenshot."""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:")


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@dataclass
class PageVisit:
    value: object = None  # the expression's value
    requests: list = field(default_factory=list)  # URLs the page asked for
    remote: list = field(default_factory=list)  # of those, the ones that would leave the machine
    console: list = field(default_factory=list)  # (level, text)
    exceptions: list = field(default_factory=list)

    @property
    def errors(self) -> list:
        return self.exceptions + [t for level, t in self.console if level in ("error", "assert")]


class _Pipe:
    def __init__(self, to_browser: int, from_browser: int):
        self.out, self.inp, self.buf, self.next_id = to_browser, from_browser, b"", 0
        self.events = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> int:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.out, json.dumps(msg).encode() + b"\0")
        return self.next_id

    def _read(self, deadline: float) -> dict | None:
        while b"\0" not in self.buf:
            import select

            ready, _, _ = select.select([self.inp], [], [], max(0.0, deadline - time.time()))
            if not ready:
                return None
            chunk = os.read(self.inp, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict:
        want = self.send(method, params, session)
        deadline = time.time() + timeout
        while True:
            msg = self._read(deadline)
            if msg is None:
                raise TimeoutError(f"no answer to {method} in {timeout} s")
            if msg.get("id") == want:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def drain(self, seconds: float) -> None:
        deadline = time.time() + seconds
        while (msg := self._read(deadline)) is not None:
            if "method" in msg:
                self.events.append(msg)


def _above_4(fd: int) -> int:
    import fcntl

    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


def visit(page: Path, expression: str, screenshot: Path | None = None, settle_s: float = 1.0,
          width: int = 1280) -> PageVisit:
    """Load ``page`` (a local file) in a window ``width`` px wide (a phone's 390, say:
    emulated as a mobile screen, so the page's viewport rule applies), evaluate
    ``expression`` once it has loaded, record what it did on the way, and save a full-page
    screenshot if asked."""
    exe = chromium()
    if exe is None:
        raise FileNotFoundError("chromium is not installed (apt-get install chromium)")
    # Above fd 4, so that moving them onto 3 and 4 in the child cannot overwrite each other.
    to_r, to_w, from_r, from_w = (_above_4(fd) for fd in (*os.pipe(), *os.pipe()))
    profile = tempfile.mkdtemp(prefix="autotune-chromium-")

    def fds():  # the DevTools pipe is fd 3 (commands in) and fd 4 (answers out)
        os.dup2(to_r, 3)
        os.dup2(from_w, 4)

    proc = subprocess.Popen([exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                             f"--user-data-dir={profile}", "--no-first-run", "--window-size=1280,1000",
                             "about:blank"], preexec_fn=fds, close_fds=False,  # fds 3 and 4 must stay open
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(to_r)
    os.close(from_w)
    pipe = _Pipe(to_w, from_r)
    result = PageVisit()
    try:
        target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Network", "Runtime", "Log", "Page"):
            pipe.call(f"{domain}.enable", session=session)
        pipe.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": 1000, "deviceScaleFactor": 1,
                                                         "mobile": width < 600}, session=session)
        pipe.call("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
        deadline = time.time() + 30
        while not any(e["method"] == "Page.loadEventFired" for e in pipe.events) and time.time() < deadline:
            pipe.drain(0.2)
        pipe.drain(settle_s)
        value = pipe.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
        result.value = value.get("result", {}).get("value")
        if screenshot is not None:
            shot = pipe.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                             session=session)
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
        pipe.drain(0.2)
        try:
            pipe.call("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError):
            pass
    finally:
        proc.kill()
        proc.wait()
        os.close(to_w)
        os.close(from_r)
        shutil.rmtree(profile, ignore_errors=True)
    for e in pipe.events:
        p = e.get("params", {})
        if e["method"] == "Network.requestWillBeSent":
            url = p["request"]["url"]
            result.requests.append(url)
            if not url.startswith(LOCAL_SCHEMES):
                result.remote.append(url)
        elif e["method"] == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            result.console.append((p.get("type"), text))
        elif e["method"] == "Log.entryAdded":
            entry = p.get("entry", {})
            result.console.append((entry.get("level"), entry.get("text", "")))
        elif e["method"] == "Runtime.exceptionThrown":
            details = p.get("exceptionDetails", {})
            result.exceptions.append(details.get("exception", {}).get("description") or details.get("text"))
    return result

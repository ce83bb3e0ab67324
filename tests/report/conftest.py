"""Report tests: campaigns recorded by a real `tunbench run` (tests/data/campaigns), rendered
into a temporary copy, and a headless Chromium driven over the DevTools protocol (a pipe, no
port) that records console errors, CSP violations and every network request while it loads
the page and takes a full-page screenshot.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import pickle
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CAMPAIGNS = Path(__file__).parent.parent / "data" / "campaigns"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--disable-default-apps", "--disable-extensions", "--mute-audio",
                  "--remote-debugging-pipe"]


@pytest.fixture
def campaign(tmp_path: Path) -> Callable[[str], Path]:
    """A writable copy of a recorded campaign folder."""
    def copy(name: str) -> Path:
        src = CAMPAIGNS / name
        if not (src / "index.json").exists():
            pytest.skip(f"recorded campaign {src} is missing")
        dst = tmp_path / name
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("report"))
        return dst
    return copy


@dataclass
class PageLoad:
    screenshot: bytes
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    title: str = ""
    text: str = ""
    scroll_width: int = 0     # document.documentElement.scrollWidth: the page's full width
    client_width: int = 0     # ... clientWidth: the viewport; larger scrollWidth = sideways scroll
    probe: Any = None         # what the `probe` expression returned (JSON), if one was given


class Cdp:
    """Minimal DevTools-protocol client over --remote-debugging-pipe (fd 3 in, fd 4 out)."""

    def __init__(self, chromium: str, profile: Path) -> None:
        a, self._w = os.pipe()
        self._r, b = os.pipe()
        # high numbers first, so moving them onto 3 and 4 in the child clobbers nothing
        to_chrome_r, from_chrome_w = (fcntl.fcntl(a, fcntl.F_DUPFD, 100),
                                      fcntl.fcntl(b, fcntl.F_DUPFD, 100))
        os.close(a)
        os.close(b)

        def fds() -> None:
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        # pass_fds keeps 3 and 4 open in the child (subprocess closes the others after fds())
        self.proc = subprocess.Popen([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                                      "about:blank"], preexec_fn=fds, pass_fds=(3, 4),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer over the DevTools pipe")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return dict(json.loads(msg))

    def call(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None, timeout: float = 30.0) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return dict(m.get("result", {}))
            self.events.append(m)

    def wait_event(self, method: str, session: str | None = None,
                   timeout: float = 30.0) -> dict[str, Any]:
        """The first event `method` (of the page attached as `session`, if given)."""
        def match(ev: dict[str, Any]) -> bool:
            return ev.get("method") == method and (session is None
                                                   or ev.get("sessionId") == session)
        for ev in self.events:
            if match(ev):
                return ev
        deadline = time.monotonic() + timeout
        while True:
            m = self._read_message(deadline)
            self.events.append(m)
            if match(m):
                return m

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()       # the chromium this fixture started, by its Popen
            self.proc.wait()
        os.close(self._w)
        os.close(self._r)


class _Chromium:
    """One headless Chromium per test process (xdist worker), started at its first page load
    and closed at the end of the session (`_chromium_closed`); each page is loaded in a fresh
    browser context (its own cache, cookies and storage, like a new profile) that is disposed
    of after the load. Starting Chromium costs ~0.4 CPU s, a page load ~0.3-0.9."""

    def __init__(self) -> None:
        self.cdp: Cdp | None = None
        self.profile: tempfile.TemporaryDirectory[str] | None = None

    def get(self) -> Cdp:
        if self.cdp is not None and self.cdp.proc.poll() is not None:
            self.close()   # it died: start another
        if self.cdp is None:
            chromium = shutil.which("chromium")
            if not chromium:
                pytest.skip("chromium is not installed (apt-get install chromium; "
                            "deps/apt-report.txt)")
            self.profile = tempfile.TemporaryDirectory(prefix="tb-chromium-")
            self.cdp = Cdp(chromium, Path(self.profile.name))
        return self.cdp

    def close(self) -> None:
        if self.cdp is not None:
            self.cdp.close()
            self.cdp = None
        if self.profile is not None:
            self.profile.cleanup()
            self.profile = None


_CHROMIUM = _Chromium()


@pytest.fixture(scope="session", autouse=True)
def _chromium_closed() -> Any:
    yield
    _CHROMIUM.close()


def load_page(path: Path, width: int = 1280, mobile: bool = False,
              probe: str | None = None) -> PageLoad:
    """`probe`: a JavaScript expression evaluated once the page has loaded, whose value
    (JSON-serializable) lands in PageLoad.probe (e.g. where an element sits on the page)."""
    cdp = _CHROMIUM.get()
    context = cdp.call("Target.createBrowserContext")["browserContextId"]
    try:
        target = cdp.call("Target.createTarget", {"url": "about:blank",
                                                  "browserContextId": context})["targetId"]
        sid = cdp.call("Target.attachToTarget", {"targetId": target,
                                                 "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            cdp.call(f"{domain}.enable", session=sid)
        cdp.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900,
                 "deviceScaleFactor": 1, "mobile": mobile}, session=sid)
        cdp.events.clear()
        cdp.call("Page.navigate", {"url": path.resolve().as_uri()}, session=sid)
        cdp.wait_event("Page.loadEventFired", session=sid)
        time.sleep(0.3)   # let late console/log events arrive
        cdp.call("Runtime.evaluate", {"expression": "1"}, session=sid)
        info = cdp.call("Runtime.evaluate", {"expression": "JSON.stringify([document.title,"
                        " document.body.innerText])", "returnByValue": True}, session=sid)
        title, text = json.loads(info["result"]["value"])
        dims = cdp.call("Runtime.evaluate", {"expression": "JSON.stringify(["
                        "document.documentElement.scrollWidth, "
                        "document.documentElement.clientWidth])", "returnByValue": True},
                        session=sid)
        scroll_width, client_width = json.loads(dims["result"]["value"])
        probed = None
        if probe is not None:
            res = cdp.call("Runtime.evaluate", {"expression": f"JSON.stringify({probe})",
                           "returnByValue": True}, session=sid)
            probed = json.loads(res["result"]["value"])
        shot = cdp.call("Page.captureScreenshot", {"format": "png",
                        "captureBeyondViewport": True}, session=sid, timeout=60)
        load = PageLoad(base64.b64decode(shot["data"]), title=title, text=text,
                        scroll_width=scroll_width, client_width=client_width,
                        probe=probed)
        page_url = path.resolve().as_uri()
        for ev in cdp.events:
            m, p = ev.get("method"), ev.get("params", {})
            if ev.get("sessionId") != sid:
                continue
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                load.console_errors.append(json.dumps(p.get("args")))
            elif m == "Runtime.exceptionThrown":
                load.console_errors.append(json.dumps(p.get("exceptionDetails")))
            elif m == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                load.console_errors.append(p["entry"].get("text", ""))
            elif m == "Network.requestWillBeSent":
                url = p["request"]["url"]
                if url != page_url and not url.startswith("data:"):
                    load.requests.append(url)
        return load
    finally:
        cdp.events.clear()
        cdp.call("Target.disposeBrowserContext", {"browserContextId": context})


# reports built once per test session (the `built` fixture): never rewritten, so a page of
# theirs loaded at a width is the same load for every test that asks for it
_SHARED: set[Path] = set()
_LOADS: dict[tuple[Path, int, bool, str | None], PageLoad] = {}


def _load_once(path: Path, width: int = 1280, mobile: bool = False,
               probe: str | None = None) -> PageLoad:
    path = path.resolve()
    if not any(path.is_relative_to(root) for root in _SHARED):
        return load_page(path, width, mobile, probe)
    key = (path, width, mobile, probe)
    if key not in _LOADS:
        _LOADS[key] = load_page(path, width, mobile, probe)
    return _LOADS[key]


@pytest.fixture
def browser() -> Callable[..., PageLoad]:
    """load_page; the page of a shared report (`built`) is loaded once per width."""
    return _load_once


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Any]:
    """report.build of a recorded campaign, built once per test session into its own copy and
    shared by the tests that only read the report, its files or the copied campaign. A test
    that changes the campaign or the report builds its own (`campaign`).

    Under pytest-xdist the workers of one run share it too: the first worker to ask builds it
    into the run's common temporary folder under a lock (the others wait) and pickles the
    Report beside it; the others load that."""
    from tunbench.report import build

    cache: dict[str, Any] = {}
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")   # the same in every worker of one run
    # xdist gives each worker basetemp/popen-gwN: the parent is the run's own folder
    common = tmp_path_factory.getbasetemp().parent / f"built-{run}" if run else None

    def make(name: str, dst: Path) -> Any:
        shutil.copytree(CAMPAIGNS / name, dst, ignore=shutil.ignore_patterns("report"))
        return build.build(dst)

    def shared(name: str) -> Any:
        assert common is not None
        common.mkdir(exist_ok=True)
        done = common / f"{name}.pickle"
        with open(common / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)   # released when the file closes
            if not done.exists():
                rep = make(name, common / name)
                tmp = done.with_suffix(".part")
                tmp.write_bytes(pickle.dumps(rep))
                tmp.rename(done)
                return rep
        return pickle.loads(done.read_bytes())

    def get(name: str) -> Any:
        if name not in cache:
            src = CAMPAIGNS / name
            if not (src / "index.json").exists():
                pytest.skip(f"recorded campaign {src} is missing")
            if common is not None:
                cache[name] = shared(name)
            else:
                cache[name] = make(name, tmp_path_factory.mktemp("built") / name)
            _SHARED.add(cache[name].html.parent.parent.resolve())
        return cache[name]
    return get

"""The fuzzing service's dashboard in a real headless browser: it loads, shows the finding a planted
defect gave with its reproduce line, and updates itself as the store changes; `--dashboard-only`
serves the same page from the shared database alone."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from difftest.base.exits import EXIT_TERMINATED
from difftest.fuzz.store import Store
from tests.test_fuzz import WAIT_S, Fuzz, database, planted, until  # noqa: F401 (fixtures)
from tests.test_reports import browser

pytestmark = [pytest.mark.servers, pytest.mark.browser, pytest.mark.subprocess]


class Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: it
    reads commands on fd 3 and answers on fd 4, each message JSON ended by a NUL)."""

    def __init__(self, url: str) -> None:
        to_browser = os.pipe()
        from_browser = os.pipe()
        # the child's fds 3 and 4, from numbers clear of them (dup2 onto 3 must not close the other)
        self._high = [os.dup(fd) for fd in (*to_browser, *from_browser)]
        for fd in (*to_browser, *from_browser):
            os.close(fd)
        child_in, self.write_fd, self.read_fd, child_out = self._high[0], self._high[1], self._high[2], self._high[3]
        for fd in (child_in, child_out):
            os.set_inheritable(fd, True)

        def plumb() -> None:
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        self.profile = tempfile.TemporaryDirectory(prefix="difftest-browser-")
        command = [*browser(), "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                   f"--user-data-dir={self.profile.name}", "--window-size=1200,900", url]  # fmt: skip
        env = {**os.environ, "HOME": self.profile.name}
        self.process = subprocess.Popen(command, pass_fds=(3, 4), preexec_fn=plumb, env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        os.close(child_in)
        os.close(child_out)
        self.buffer = b""
        self.next_id = 0
        page = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self.write_fd, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 60
        while True:
            while b"\0" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self.next_id:
                    assert "error" not in reply, reply
                    return dict(reply["result"])
            ready, _, _ = select.select([self.read_fd], [], [], 1.0)
            assert time.monotonic() < deadline, f"the browser did not answer {method}"
            if ready:
                chunk = os.read(self.read_fd, 1 << 20)
                assert chunk, "the browser closed its pipe"
                self.buffer += chunk

    def text(self) -> str:
        """The page's text as a person reads it (innerText, whitespace folded)."""
        result = self.call("Runtime.evaluate", self.session, expression="document.body.innerText", returnByValue=True)
        return re.sub(r"\s+", " ", str(result["result"].get("value", "")))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.call("Browser.close")
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=30)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for fd in (self.write_fd, self.read_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.profile.cleanup()


@contextlib.contextmanager
def opened(url: str) -> Iterator[Browser]:
    page = Browser(url)
    try:
        yield page
    finally:
        page.close()


def showing(page: Browser, needle: str) -> str:
    """The page's text once it shows `needle`, else ""."""
    text = page.text()
    return text if needle in text else ""


def _updates(text: str) -> int:
    found = re.search(r"updates: (\d+)", text)
    return int(found.group(1)) if found else 0


def test_the_dashboard_shows_a_planted_finding_and_updates_itself(
    database: str,  # noqa: F811 (the fixture)
    planted: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    fuzz = Fuzz(tmp_path, "watched", "--database", database, "--lua-scripts", str(planted), "--workers", "1")
    store = Store(database)
    try:
        url = until("the dashboard's address", lambda: re.search(r"dashboard on (http://\S+)", fuzz.text()), fuzz)[1]
        (finding,) = until("the finding recorded", lambda: [f for f in store.findings() if "reproduce" in f], fuzz)
        with opened(url) as page:
            text = until("the finding on the page", lambda: showing(page, finding["signature"]), fuzz)
            assert "difftest fuzz" in text and finding["reason"][:60] in text
            assert "reproduce: " in text and " replay " in text and "--lua-scripts" in text
            assert re.search(r"live workers", text) and "native counters" in text
            # it updates itself: a record written to the store now appears without a reload
            seen = _updates(text)
            store.beat(
                "planted-by-the-test:1:0",
                {"state": "a worker the test planted", "histories": 12345},
                "planted-by-the-test:1:0@1",
            )
            text = until("the page updated", lambda: showing(page, "a worker the test planted"), fuzz)
            assert _updates(text) > seen and "planted-by-the-test:1:0" in text
        fuzz.process.send_signal(signal.SIGTERM)
        assert fuzz.wait() == EXIT_TERMINATED, fuzz.text()
        # the dashboard alone, from the shared database: the same finding
        alone = subprocess.Popen([sys.executable, "-m", "difftest", "fuzz", "--dashboard-only", "--database", database,
                                  "--reports", str(tmp_path / "reports")], cwd=Path(__file__).resolve().parent.parent,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        try:
            assert alone.stdout is not None
            line = alone.stdout.readline()
            url = re.search(r"dashboard on (http://\S+)", line)
            assert url, line
            with opened(url[1]) as page:
                until("the finding on the page", lambda: finding["signature"] in page.text())
            alone.send_signal(signal.SIGTERM)
            assert alone.wait(timeout=WAIT_S) == EXIT_TERMINATED
        finally:
            if alone.poll() is None:
                alone.kill()
                alone.wait()
    finally:
        fuzz.kill()
        store.close()

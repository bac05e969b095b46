"""What the tests that run the real app share: a ``streamlit run app.py`` server, Debian's chromium, page reads.

Used by tests/test_browser.py and tests/test_deploy.py. Playwright is imported where it is used, so a module
can import this before it knows whether Playwright is installed (and skip with ``skip_reason()``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]
MODELS = Path(os.environ.get("ATTENTION_EXPLORER_MODELS", ROOT / "pretrained"))
# The model the browser tests open: the general one when it is there, else the toy one, with two inputs each.
MODEL = "en-de" if (MODELS / "en-de" / "config.json").exists() else "reverse"
SENTENCES = {
    "en-de": ("A man is riding a horse on the beach.", "Two children are playing in the snow."),
    "reverse": (" a b c d e", " q r s t u v w"),
}[MODEL]
START_TIMEOUT = 90  # seconds for a server to answer its health check (a busy 2-core machine)


def skip_reason() -> str | None:
    """Why the browser tests cannot run here (chromium, Playwright or a checkpoint missing), or None."""
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is missing: apt-get install -y chromium"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed: pip install -r requirements-test.txt"
    if not any((MODELS / m / "config.json").exists() for m in ("en-de", "reverse")):
        return f"no checkpoint in {MODELS} (en-de or reverse)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, what: str, timeout: float = START_TIMEOUT) -> None:
    """Until ``url``/_stcore/health answers ``ok``; fails the test when ``proc`` exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.read().decode().strip() == "ok":
                    return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{what} did not answer {url}/_stcore/health within {timeout} s")
        time.sleep(0.5)


def stop(proc: subprocess.Popen) -> None:
    """Terminate ``proc`` (kill it after 15 s)."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)


@dataclass(frozen=True)
class Server:
    url: str  # http://127.0.0.1:PORT
    port: int
    proc: subprocess.Popen


@contextlib.contextmanager
def streamlit_server(log_path: Path) -> Iterator[Server]:
    """``streamlit run app.py`` on a free loopback port, healthy; stopped on exit. Output goes to ``log_path``."""
    port = free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.address", "127.0.0.1"]
    cmd += ["--server.port", str(port), "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            server = Server(f"http://127.0.0.1:{port}", port, proc)
            wait_healthy(server.url, proc, f"streamlit (log: {log_path})")
            yield server
        finally:
            stop(proc)


@contextlib.contextmanager
def chromium_page(timeout_ms: int = 90_000) -> Iterator[Page]:
    """A page of headless Debian chromium (1500 × 1100), every wait bounded by ``timeout_ms``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.set_default_timeout(timeout_ms)
            yield page
        finally:
            browser.close()


def translation(page: Page) -> str:
    """The translation in large type (``ui.widgets.text_box``) on the page."""
    return page.locator(".translation").first.inner_text().strip()


def wait_idle(page: Page) -> None:
    """Until Streamlit has finished running the script (its status widget disappears)."""
    from playwright.sync_api import expect

    page.wait_for_timeout(300)
    expect(page.locator("[data-testid=stStatusWidget]")).to_have_count(0, timeout=90_000)

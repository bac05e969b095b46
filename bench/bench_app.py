"""Benchmark 5: the app in a real browser: cold start, slider redraw, memory, websocket payload.

    python bench/bench_app.py [--models DIR] [--model en-de] [--quick]

Drives ``streamlit run app.py`` in headless Debian Chromium (``/usr/bin/chromium``) with Playwright.

cold start: from launching ``streamlit run`` (a new server process: Python imports, model load)
    to the first translation rendered in the page (``.translation`` with text), the browser
    already open, as a user who runs the app and opens its URL. Median of ``--cold`` starts.
redraw: a slider moved by one notch with the keyboard (focus + ArrowLeft/ArrowRight) to the
    heatmaps redrawn: from the ``keydown`` event to the last DOM change inside any
    ``stPlotlyChart`` (a ``MutationObserver`` in the page, clock ``performance.now()``), once the
    page is quiet again (no chart change for ``QUIET_MS`` and no script running). For
    - attention grid: the "Layer" slider of the Attention view (zoom map + per-layer means, a fragment);
    - attention kind: the "Attention kind" radio (the layer x head mosaic and the zoom redrawn, a fragment rerun);
    - step view: the "Step" slider of "Step through generation" (step maps + mosaics so far, a fragment).
memory: peak resident set size (``VmHWM`` in ``/proc/PID/status``) of the server after the
    cold start and after 10 different sentences analysed and drawn in the Attention view.
view switch: a click on a page's link in the navigation (``/attention``, ``/steps``) to the last
    chart change (the first chart view of a session also loads and compiles plotly.js in the browser).
payload: bytes of websocket frames the browser receives per action (first page, view switch,
    slider move, new sentence). ``bench_payload.py`` gives the figure JSON alone per view.
Each redraw also reports when the browser sent the input (its websocket ``send``) and when the
last websocket message arrived: input → last reply is mostly the server (a rerun, or a fragment
rerun), the rest is drawing in the browser.

Sliders are found by role and label at run time (``get_by_role("slider", name=...)``); pages by their
navigation links (the link whose href holds the page's URL path). The first page is opened at
``/?model=...``, which the app moves to ``/translate``. Targets: cold start <= 5 s, redraw <= 0.3 s.
"""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import benchlib as bl

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]
COLD_TARGET_S = 5.0
REDRAW_TARGET_S = 0.3
QUIET_MS = 800  # no chart change for this long = redraw finished
NAV_LINK_IDS = ("stTopNavLink", "stTopNavDropdownLink", "stSidebarNavLink")  # top bar, its overflow menu, sidebar

# Installed in every page before its scripts run: remembers the last keydown and the last DOM
# change inside a plotly chart, on the page's own clock.
OBSERVER_JS = """
window.__bench = {key: 0, last: 0, n: 0, msg: 0, sent: 0};
document.addEventListener('keydown', () => { window.__bench.key = performance.now(); }, true);
document.addEventListener('click', () => { window.__bench.key = performance.now(); }, true);
const _WebSocket = window.WebSocket;
window.WebSocket = class extends _WebSocket {
  constructor(...args) {
    super(...args);
    this.addEventListener('message', () => { window.__bench.msg = performance.now(); });
  }
  send(data) {
    if (window.__bench.sent < window.__bench.key) window.__bench.sent = performance.now();  // first message after the input
    return super.send(data);
  }
};
new MutationObserver((muts) => {
  for (const m of muts) {
    const el = m.target.nodeType === 1 ? m.target : m.target.parentElement;
    if (el && el.closest && el.closest('[data-testid="stPlotlyChart"]')) {
      window.__bench.last = performance.now(); window.__bench.n += 1; return;
    }
  }
}).observe(document, {subtree: true, childList: true, attributes: true});
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    port: int,
    models: str | None,
    log_path: Path,
    flags: list[str] = (),
    *,
    root: Path = bl.ROOT,
    cpus: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen:
    """``streamlit run app.py`` of the checkout ``root`` (default: this one) on 127.0.0.1:``port``; ``cpus``: a
    ``taskset -c`` CPU list to pin it (and its model worker) to; ``env``: more environment variables."""
    env = dict(os.environ) | (env or {})
    if models:
        env["ATTENTION_EXPLORER_MODELS"] = str(models)
    cmd = [sys.executable, "-m", "streamlit", "run", str(Path(root) / "app.py"), "--server.headless", "true", "--server.address", "127.0.0.1",
           "--server.port", str(port), "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none", *flags]  # fmt: skip
    if cpus:
        cmd = ["taskset", "-c", cpus, *cmd]
    return subprocess.Popen(cmd, cwd=root, env=env, stdout=log_path.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_health(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1) as r:
                if r.read().decode().strip() == "ok":
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError("streamlit did not become healthy")


def memory_kib(pid: int) -> dict:
    """Current and peak resident set size of ``pid`` in KiB (``VmRSS``, ``VmHWM``)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            k, v = line.split(":")
            out[k] = int(v.split()[0])
    return {"rss_kib": out.get("VmRSS"), "peak_rss_kib": out.get("VmHWM")}


class Page:
    """A browser page on the app, counting websocket bytes received and finding quiet moments."""

    def __init__(self, browser, url: str):
        self.page = browser.new_page(viewport={"width": 1500, "height": 1000})
        self.page.add_init_script(OBSERVER_JS)
        self.received = 0
        self.page.on("websocket", self._ws)
        self.url = url

    def _ws(self, ws) -> None:
        ws.on("framereceived", lambda payload: self._count(payload))

    def _count(self, payload) -> None:
        self.received += len(payload) if isinstance(payload, bytes | bytearray) else len(payload.encode())

    def running(self) -> bool:
        return self.page.locator('[data-testid="stStatusWidget"]').count() > 0

    def state(self) -> dict:
        return self.page.evaluate("() => ({...window.__bench, now: performance.now()})")

    def wait_quiet(self, *, after_n: int | None = None, timeout: float = 60) -> dict:
        """Wait until charts changed (if ``after_n``), then no chart change for QUIET_MS and no script running."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            s = self.state()
            changed = after_n is None or s["n"] > after_n
            if changed and s["now"] - max(s["last"], s["key"]) > QUIET_MS and not self.running():
                if self.page.locator('[data-testid="stException"]').count():
                    raise RuntimeError("the app shows an exception")
                return s
            time.sleep(0.05)
        raise TimeoutError("the page did not settle")

    def wait_translation(self, timeout: float = 120) -> None:
        self.page.wait_for_function(
            "() => [...document.querySelectorAll('.translation')].some(e => e.textContent.trim().length > 0)",
            timeout=timeout * 1000,
        )

    def open_view(self, view: str) -> dict:
        """Click the navigation link of the page at ``/view``; returns {ms: click -> last chart change, bytes}."""
        self.wait_quiet()
        n0, b0 = self.state()["n"], self.received
        nav_link(self.page, view).click(force=True)
        s = self.wait_quiet(after_n=n0 if view != "translate" else None)
        return {"ms": s["last"] - s["key"], "bytes": self.received - b0}

    def move(self, locator, key: str) -> dict:
        """Press ``key`` on a focused widget; returns {redraw_ms (keydown -> last chart change), server_ms
        (keydown -> last websocket message: the server's part, rendering after it), bytes}."""
        self.wait_quiet()
        locator.focus()
        s0, b0 = self.state(), self.received
        locator.press(key)
        s = self.wait_quiet(after_n=s0["n"])
        return {
            "redraw_ms": s["last"] - s["key"],
            "sent_ms": s["sent"] - s["key"],
            "server_ms": s["msg"] - s["key"],
            "bytes": self.received - b0,
        }


def nav_link(page, path: str):
    """The navigation menu's link to the page at ``/path`` (e.g. "steps")."""
    return page.locator(", ".join(f'a[data-testid={t}][href*="/{path}"]' for t in NAV_LINK_IDS)).first


def slider(page, label: str):
    """The slider named ``label`` (exact, then as a prefix), with a clear error listing those present."""
    loc = page.get_by_role("slider", name=label, exact=True)
    if loc.count() == 0:
        loc = page.get_by_role("slider", name=label)
    if loc.count() == 0:
        names = [s.get_attribute("aria-label") or s.inner_text() for s in page.get_by_role("slider").all()]
        raise LookupError(f"no slider labelled {label!r}; sliders on the page: {names}")
    return loc.first


def cold_start(
    browser, port: int, models: str | None, logs: Path, i: int, model: str | None, flags: list[str] = ()
) -> tuple[dict, subprocess.Popen, Page]:
    """Start a server and open the page; returns (timings, server, page). Caller stops the server."""
    url = f"http://127.0.0.1:{port}/" + (f"?model={model}" if model else "")
    t0 = time.perf_counter()
    proc = start_server(port, models, logs / f"streamlit-{i}.log", flags)
    wait_health(port, proc)
    t_health = time.perf_counter() - t0
    pg = Page(browser, url)
    pg.page.goto(url)
    pg.wait_translation()
    t_first = time.perf_counter() - t0
    return {"server_healthy_s": t_health, "first_translation_s": t_first, "bytes_first_page": pg.received}, proc, pg


def start_py_spy(pid: int, out: Path, rate: int = 200, *, gil: bool = False) -> subprocess.Popen | None:
    """``py-spy record`` of the server into ``out`` (collapsed stacks, ``rate`` samples per second, without pausing
    the process; ``gil``: only the thread that holds the GIL, i.e. where a GIL-bound process spends its one core),
    or None if py-spy is not installed."""
    exe = Path(sys.executable).with_name("py-spy")
    if not exe.exists():
        print("py-spy not installed (pip install py-spy): no server profile", flush=True)
        return None
    cmd = [
        str(exe),
        "record",
        "-p",
        str(pid),
        "-o",
        str(out),
        "-f",
        "raw",
        "-r",
        str(rate),
        "--nonblocking",
        *(["--gil"] if gil else []),
    ]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


IDLE_FRAMES = ("select (selectors.py", "Condition.wait", "polling_path_watcher.py:90", "thread.py:81)", "thread.py:83)")
"""Leaf frames of threads that wait (event loop, thread pools, the path watcher's sleep): not work."""


def summarise_py_spy(path: Path, top: int = 25) -> list[tuple[str, float]]:
    """(function, share of the busy samples that include it) from py-spy's collapsed stacks, largest first."""
    total, incl = 0, {}
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        n = int(n)
        if any(idle in stack.rsplit(";", 1)[-1] for idle in IDLE_FRAMES):
            continue
        total += n
        for frame in set(stack.split(";")):
            incl[frame] = incl.get(frame, 0) + n
    return sorted(((f, c / total) for f, c in incl.items()), key=lambda x: -x[1])[:top] if total else []


def run(
    *,
    models: str | None = None,
    model: str | None = None,
    cold: int = 3,
    moves: int = 6,
    sentences: int = 10,
    py_spy: bool = False,
    flags: list[str] = (),
) -> dict:
    from playwright.sync_api import sync_playwright

    logs = bl.RESULTS / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    res: dict = {"streamlit_flags": list(flags), "cold_start": [], "redraw": {}, "view_switch": {}, "memory": {}, "sentences": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            for i in range(cold):  # every start but the last is closed right away
                port = free_port()
                timing, proc, pg = cold_start(browser, port, models, logs, i, model, flags)
                res["cold_start"].append(timing)
                print(
                    f"cold start {i + 1}: healthy {timing['server_healthy_s']:.2f} s, first translation {timing['first_translation_s']:.2f} s",
                    flush=True,
                )
                if i < cold - 1:
                    pg.page.close()
                    stop_server(proc)
            try:
                pg.wait_quiet()
                res["memory"]["after_cold_start"] = memory_kib(proc.pid)
                spy = start_py_spy(proc.pid, logs / "server-py-spy.txt") if py_spy else None
                res["view_switch"]["attention (first charts of the session: loads plotly.js)"] = pg.open_view("attention")
                grid = slider(pg.page, "Layer")
                res["redraw"]["attention grid: Layer slider"] = [
                    pg.move(grid, "ArrowLeft" if j % 2 == 0 else "ArrowRight") for j in range(moves)
                ]
                kind = ["Encoder self-attention", "Cross-attention"]
                kinds = []
                for j in range(moves):
                    n0, b0 = pg.state()["n"], pg.received
                    pg.page.get_by_role("radio", name=kind[j % 2], exact=True).click(force=True)
                    s = pg.wait_quiet(after_n=n0)
                    kinds.append(
                        {
                            "redraw_ms": s["last"] - s["key"],
                            "sent_ms": s["sent"] - s["key"],
                            "server_ms": s["msg"] - s["key"],
                            "bytes": pg.received - b0,
                        }
                    )
                res["redraw"]["attention grid: kind radio"] = kinds
                res["view_switch"]["steps"] = pg.open_view("steps")
                step = slider(pg.page, "Step")
                res["redraw"]["step view: Step slider"] = [
                    pg.move(step, "ArrowRight" if j % 2 == 0 else "ArrowLeft") for j in range(moves)
                ]
                res["view_switch"]["attention, again"] = pg.open_view("attention")
                box = pg.page.get_by_role("textbox", name="Source").first
                for text in (bl.MORE_SENTENCES + list(bl.SENTENCES.values()))[:sentences]:
                    n0, b0 = pg.state()["n"], pg.received
                    t0 = time.perf_counter()
                    box.fill(text)
                    box.press("Enter")
                    s = pg.wait_quiet(after_n=n0)
                    res["sentences"].append(
                        {
                            "words": bl.words(text),
                            "redraw_ms": s["last"] - s["key"],
                            "seconds_to_quiet": time.perf_counter() - t0,
                            "bytes": pg.received - b0,
                        }
                    )
                res["memory"]["after_sentences"] = memory_kib(proc.pid)
                if spy is not None:
                    spy.send_signal(signal.SIGINT)
                    spy.wait(30)
                    res["py_spy_top"] = summarise_py_spy(logs / "server-py-spy.txt")
                res["memory"]["sentences"] = len(res["sentences"])
            finally:
                pg.page.close()
                stop_server(proc)
        finally:
            browser.close()
    firsts = [c["first_translation_s"] for c in res["cold_start"]]
    res["cold_start_median_s"] = statistics.median(firsts)
    res["redraw_median_ms"] = {k: statistics.median(m["redraw_ms"] for m in v) for k, v in res["redraw"].items()}
    res["redraw_sent_median_ms"] = {k: statistics.median(m["sent_ms"] for m in v) for k, v in res["redraw"].items()}
    res["redraw_server_median_ms"] = {k: statistics.median(m["server_ms"] for m in v) for k, v in res["redraw"].items()}
    res["redraw_bytes_median"] = {k: statistics.median(m["bytes"] for m in v) for k, v in res["redraw"].items()}
    res["targets"] = {
        "cold_start": {"limit_s": COLD_TARGET_S, "met": res["cold_start_median_s"] <= COLD_TARGET_S},
        "redraw": {
            k: {"limit_s": REDRAW_TARGET_S, "met": v / 1000 <= REDRAW_TARGET_S} for k, v in res["redraw_median_ms"].items()
        },
    }
    return res


def table(res: dict) -> str:
    c = res["cold_start"]
    runs = ", ".join(f"{x['first_translation_s']:.2f}" for x in c)
    rows = [
        [
            "cold start: `streamlit run` → first translation in Chromium",
            f"{res['cold_start_median_s']:.2f} s (runs: {runs}; server healthy after {statistics.median(x['server_healthy_s'] for x in c):.2f} s)",
            f"≤ {COLD_TARGET_S:.0f} s: **{bl.verdict(res['targets']['cold_start']['met'])}**",
            f"{c[-1]['bytes_first_page'] / 1024:.0f} KiB first page",
        ]
    ]
    for k, ms in res["redraw_median_ms"].items():
        ok = res["targets"]["redraw"][k]["met"]
        rows.append(
            [
                f"redraw, {k}",
                f"{ms:.0f} ms (input sent at {res['redraw_sent_median_ms'][k]:.0f} ms, last reply read at {res['redraw_server_median_ms'][k]:.0f} ms)",
                f"≤ {REDRAW_TARGET_S * 1000:.0f} ms: **{bl.verdict(ok)}**",
                f"{res['redraw_bytes_median'][k] / 1024:.1f} KiB per move",
            ]
        )
    for k, v in res["view_switch"].items():
        rows.append([f"switch view → {k}", f"{v['ms']:.0f} ms (click → charts drawn)", "", f"{v['bytes'] / 1024:.0f} KiB"])
    if res["sentences"]:
        s = res["sentences"]
        rows.append(
            [
                f"new sentence in the Attention view ({len(s)} sentences)",
                f"{statistics.median(x['redraw_ms'] for x in s):.0f} ms median (Enter → maps drawn)",
                "",
                f"{statistics.median(x['bytes'] for x in s) / 1024:.0f} KiB median",
            ]
        )
    m = res["memory"]
    if m:
        rows.append(
            [
                "server memory (peak RSS)",
                f"{m['after_cold_start']['peak_rss_kib'] / 1024:.0f} MiB after start → {m['after_sentences']['peak_rss_kib'] / 1024:.0f} MiB after {m['sentences']} analyses",
                "",
                f"RSS now {m['after_sentences']['rss_kib'] / 1024:.0f} MiB",
            ]
        )
    out = bl.md_table(["what", "time / size", "target", "websocket payload"], rows)
    if res.get("streamlit_flags"):
        out += f"\n\nServer started with `{' '.join(res['streamlit_flags'])}`."
    if res.get("py_spy_top"):
        top = "\n".join(f"    {share:6.1%}  {f}" for f, share in res["py_spy_top"])
        out += f"\n\npy-spy, server, busy samples including each function (sliders, view switches, sentences):\n\n{top}"
    return out


def main() -> None:
    ap = bl.base_args(__doc__.splitlines()[0])
    ap.add_argument("--models", help="folder of checkpoint folders for the app (ATTENTION_EXPLORER_MODELS); default pretrained/")
    ap.add_argument("--model", help="checkpoint name inside it (default: the app's default)")
    ap.add_argument("--cold", type=int, default=3, help="cold starts to measure")
    ap.add_argument(
        "--flag", action="append", default=[], help="extra `streamlit run` option, e.g. --flag=--runner.postScriptGC=false"
    )
    ap.add_argument(
        "--py-spy", action="store_true", help="profile the server with py-spy while sliders move; prints the top functions"
    )
    args = ap.parse_args()
    quick = args.quick
    res = run(
        models=args.models,
        model=args.model,
        cold=1 if quick else args.cold,
        moves=2 if quick else (args.repeats or 6),
        sentences=3 if quick else 10,
        py_spy=args.py_spy,
        flags=args.flag,
    )
    print(table(res))
    for f, share in res.get("py_spy_top", []):
        print(f"{share:6.1%}  {f}")
    if not args.no_write:
        print(f"\nwrote {bl.write_result('app', res)}")


if __name__ == "__main__":
    main()

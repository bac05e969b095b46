"""Benchmark 13: the Streamlit frontend a class fetches when it opens the app, served by a replica or by nginx.

    python bench/bench_frontend.py [--n 20] [--rounds 3] [--no-write]

A browser's first visit fetches Streamlit's frontend: the hashed scripts, styles and fonts under ``/static/``.
Which files, is read once from Chromium (a fresh profile opens ``/attention`` with a sentence and waits for the
page). Then ``N`` clients at once each fetch every one of those files, as N first visits would, three ways,
interleaved per round on deploy/'s recipe run natively (2 replicas behind Debian's nginx with deploy/nginx.conf and
the frontend copy its proxy image holds, ``deploy.nginx_frontend.write_frontend``):

- *replica*: straight from one replica (what nginx did before it served the frontend itself);
- *nginx*: through nginx, no ``Accept-Encoding`` (the files as they are);
- *nginx, gzip*: through nginx with ``Accept-Encoding: gzip``, as browsers ask (the gzip twins).

Measured: wall time of the N visits, bytes received, CPU seconds (``/proc``: utime + stime) of the replicas and of
nginx (master and workers) over the N visits. The clients are threads of this process on the same machine: their
own CPU is not counted, but it competes with the server's, so the wall times are upper bounds.
"""

from __future__ import annotations

import concurrent.futures as cf
import statistics
import time
import urllib.parse
import urllib.request

import bench_class as bc
import benchlib as bl

SENTENCE = "A young man walked slowly near the old bridge."


def first_visit_files(base: str) -> list[str]:
    """The ``/static/`` paths a fresh Chromium fetches when it opens the Attention page at ``base``."""
    import bench_app as ba
    from playwright.sync_api import sync_playwright

    seen: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=ba.CHROMIUM, headless=True, args=ba.CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.on("response", lambda r: seen.append(urllib.parse.urlsplit(r.url).path))
            page.goto(f"{base}/attention?{urllib.parse.urlencode({'sentence': SENTENCE})}")
            page.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
            page.wait_for_timeout(2000)
        finally:
            browser.close()
    return sorted({p for p in seen if p.startswith("/static/")})


def visit(base: str, files: list[str], gzip: bool) -> int:
    """Fetch every file once; returns the bytes received (compressed ones as sent)."""
    n = 0
    headers = {"Accept-Encoding": "gzip"} if gzip else {}
    for f in files:
        with urllib.request.urlopen(urllib.request.Request(base + f, headers=headers), timeout=120) as r:
            n += len(r.read())
    return n


def crowd(base: str, files: list[str], n: int, gzip: bool, srv: bc.Server) -> dict:
    """``n`` visits at once; wall time, bytes, and the CPU seconds of the replicas and of nginx meanwhile."""
    rep0, ngx0, t0 = bc.cpu_seconds(srv.pids), bc.cpu_seconds(srv.proxy_pid), time.perf_counter()
    with cf.ThreadPoolExecutor(n) as ex:
        total = sum(ex.map(lambda _: visit(base, files, gzip), range(n)))
    wall = time.perf_counter() - t0
    return {
        "wall_s": wall,
        "mb": total / 1e6,
        "replica_cpu_s": bc.cpu_seconds(srv.pids) - rep0,
        "nginx_cpu_s": bc.cpu_seconds(srv.proxy_pid) - ngx0,
    }


WAYS = {"replica": (False, False), "nginx": (True, False), "nginx, gzip": (True, True)}  # (through nginx, gzip)


def run(n: int, rounds: int) -> dict:
    with bc.Server(bc.Setup(replicas=2), "frontend.log") as srv:
        proxy, replica = f"http://{bc.HOST}:{srv.port}", f"http://{bc.HOST}:{srv.ports[0]}"
        files = first_visit_files(proxy)
        visit(replica, files, False)  # the replica's first reads of the files from disk, before the timing
        results: dict[str, list[dict]] = {w: [] for w in WAYS}
        for _ in range(rounds):
            for way, (through, gz) in WAYS.items():
                bc.settle(srv.pids)
                results[way].append(crowd(proxy if through else replica, files, n, gz, srv))
    rows = []
    for way, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        rows.append({"way": way, **med, "rounds": rs})
    return {"n": n, "files": files, "rows": rows}


def table(res: dict) -> str:
    rows = [
        [r["way"], f"{r['mb']:.0f}", f"{r['wall_s']:.2f}", f"{r['replica_cpu_s']:.2f}", f"{r['nginx_cpu_s']:.2f}"]
        for r in res["rows"]
    ]
    head = ["served by", "MB received", "wall (s)", "replicas' CPU (s)", "nginx's CPU (s)"]
    return f"{res['n']} first visits at once, {len(res['files'])} files each (medians of the rounds):\n\n" + bl.md_table(
        head, rows
    )


def main() -> None:
    ap = bl.base_args(__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20, help="first visits at once")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each way once per round (interleaved)")
    a = ap.parse_args()
    res = run(3 if a.quick else a.n, 1 if a.quick else a.rounds)
    print(table(res))
    if not a.no_write:
        print(bl.write_result("frontend", res))


if __name__ == "__main__":
    main()

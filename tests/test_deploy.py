"""deploy/: K app replicas behind nginx with sticky sessions, for a classroom.

Docker's daemon does not run here, so deploy/Dockerfile and deploy/compose.yaml are checked as text: they
exist, parse, and agree with deploy/nginx.conf (one upstream server per app service, the same port, the same
health path). The shipped nginx.conf itself runs for real: `nginx -t` checks it, and the slow test puts Debian's
nginx (as this user, on loopback, in a temporary prefix) in front of two `streamlit run app.py` replicas, opens
a page through it in chromium, kills the replica that served it, reloads, and finds the same page, view and
translation served by the other replica. Skips with a reason when nginx, chromium or a checkpoint is missing.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from browser_support import (
    ARTIFACTS,
    MODEL,
    ROOT,
    SENTENCES,
    chromium_page,
    free_port,
    skip_reason,
    stop,
    streamlit_server,
    translation,
    wait_healthy,
    wait_idle,
)

from deploy import nginx_frontend as nginx
from deploy.nginx_frontend import NGINX_CONF, block
from model.facts import KIND_NAMES

DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = DEPLOY / "compose.yaml"
DOCKERIGNORE = ROOT / ".dockerignore"
APP_PORT = 8501  # Streamlit's port inside each replica's container
HEALTH_PATH = "/_stcore/health"
STREAM_PATH = "/_stcore/stream"
ROUTE_COOKIE = "ae_route"
WAIT = 30  # seconds for a log line to appear


# ----------------------------------------------------------------------------------------------
# Reading the three files
# ----------------------------------------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    joined, out = "", []
    for line in text.splitlines():
        if not joined and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            joined += line.rstrip()[:-1] + " "
            continue
        instruction, _, args = (joined + line).strip().partition(" ")
        out.append((instruction.upper(), args.strip()))
        joined = ""
    return out


def directives(body: str, name: str) -> list[str]:
    """The arguments of each ``name ...;`` directive in a block body (comments dropped)."""
    lines = (line.split("#", 1)[0] for line in body.splitlines())
    return [m.group(1).strip() for line in lines if (m := re.match(rf"\s*{name}\s+([^;]*);", line))]


def upstream_servers(conf: str) -> list[str]:
    """The addresses (host:port) of the ``upstream streamlit`` servers."""
    return [args.split()[0] for args in directives(block(conf, "upstream streamlit"), "server")]


def app_services(compose: dict) -> dict[str, dict]:
    """The compose services built from deploy/Dockerfile's app stage: the app replicas."""
    return {
        name: svc
        for name, svc in compose["services"].items()
        if isinstance(svc.get("build"), dict)
        and svc["build"].get("dockerfile") == "deploy/Dockerfile"
        and svc["build"].get("target") == "app"
    }


def stages(steps: list[tuple[str, str]]) -> dict[str, list[tuple[str, str]]]:
    """A Dockerfile's instructions by stage name (``FROM image AS name``), each stage's FROM first."""
    out: dict[str, list[tuple[str, str]]] = {}
    current = out.setdefault("", [])  # instructions before the first FROM (a global ARG)
    for instruction, args in steps:
        if instruction == "FROM":
            current = out.setdefault(args.split()[-1] if " AS " in args.upper() else args, [])
        current.append((instruction, args))
    if not out[""]:
        del out[""]
    return out


def seconds(value: str) -> int:
    """An nginx time (``86400s``, ``1d``, ``5m``, ``300``) in seconds."""
    number, unit = re.fullmatch(r"(\d+)([smhd]?)", value).groups()
    return int(number) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]


# ----------------------------------------------------------------------------------------------
# The files agree
# ----------------------------------------------------------------------------------------------


def test_deploy_files_exist():
    for path in (DOCKERFILE, COMPOSE, NGINX_CONF, DOCKERIGNORE):
        assert path.is_file(), f"{path.relative_to(ROOT)} is missing"


def test_compose_runs_one_app_service_per_nginx_upstream_server():
    compose = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    apps = app_services(compose)
    servers = upstream_servers(NGINX_CONF.read_text(encoding="utf-8"))
    assert len(apps) >= 2, f"compose.yaml should run at least two app replicas, got {sorted(apps)}"
    assert servers == [f"{name}:{APP_PORT}" for name in apps], f"nginx upstream {servers} != compose app services {list(apps)}"
    for name, svc in apps.items():
        assert (COMPOSE.parent / svc["build"]["context"]).resolve() == ROOT, f"{name}: build context must be the repository"
        assert [int(p) for p in svc["expose"]] == [APP_PORT], f"{name} must expose {APP_PORT}"
        env = svc.get("environment", {})
        # one core and one GIL per replica already: a model worker process beside each would double the memory
        assert env.get("OMP_NUM_THREADS") == "1", f"{name}: one torch thread per replica"
        assert env.get("ATTENTION_EXPLORER_MODEL_PROCESS") == "0", f"{name}: the model runs in the replica's process"
    proxy = compose["services"]["nginx"]
    assert "./nginx.conf:/etc/nginx/nginx.conf:ro" in proxy["volumes"], "nginx must run deploy/nginx.conf"
    build = proxy["build"]
    assert (build["dockerfile"], build["target"]) == ("deploy/Dockerfile", "proxy"), "nginx: the Dockerfile's proxy stage"
    assert (COMPOSE.parent / build["context"]).resolve() == ROOT, "nginx: built from the repository, as the replicas"
    assert [p.split(":")[-1] for p in proxy["ports"]] == ["80"], "nginx publishes the port it listens on (80)"
    depends = proxy["depends_on"]
    assert sorted(depends) == sorted(apps), "nginx must wait for every app replica"
    assert all(d["condition"] == "service_healthy" for d in depends.values()), "nginx waits until the replicas are healthy"


def test_dockerfile_serves_streamlit_on_the_port_and_health_path_nginx_uses():
    by_stage = stages(dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8")))
    assert list(by_stage) == ["base", "frontend", "proxy", "app"], "the app is the last stage: the default target"
    assert by_stage["base"][0] == ("FROM", "python:3.11-slim AS base") and by_stage["app"][0] == ("FROM", "base AS app")
    steps = by_stage["base"] + by_stage["app"]  # what the app image is made of
    args = {}
    for instruction, arg in steps:
        args.setdefault(instruction, []).append(arg)
    assert args["EXPOSE"] == [str(APP_PORT)]
    (health,) = args["HEALTHCHECK"]
    assert f"http://127.0.0.1:{APP_PORT}{HEALTH_PATH}" in health, "HEALTHCHECK must ask Streamlit's health endpoint"
    installs = [a for a in args["RUN"] if "pip install" in a]
    assert installs and "-r requirements.txt" in installs[0], "the image installs requirements.txt (torch==2.13.0)"
    assert "--extra-index-url" in installs[0], "torch's CPU build comes from PyTorch's CPU index"
    users = args.get("USER", [])
    assert users and users[-1] not in ("root", "0"), "the app must not run as root"
    names = [name for name, _ in steps]
    assert names.index("USER") > max(i for i, name in enumerate(names) if name == "RUN"), "USER after the last RUN"
    cmd = json.loads(args["CMD"][-1])
    assert cmd[:3] == ["streamlit", "run", "app.py"]
    flags = dict(zip(cmd[3::2], cmd[4::2], strict=True))
    assert flags == {
        "--server.headless": "true",
        "--server.address": "0.0.0.0",
        "--server.port": str(APP_PORT),
        "--browser.gatherUsageStats": "false",
        "--server.fileWatcherType": "none",
        "--client.showErrorDetails": "none",
        "--client.toolbarMode": "viewer",
    }


def test_the_proxy_image_serves_the_apps_own_streamlit_frontend():
    """nginx serves /static/ (the frontend's hashed scripts, styles, fonts) from a copy of the app image's own
    Streamlit with gzip twins, made by ``python -m deploy.nginx_frontend frontend`` in the Dockerfile; a file it lacks goes on
    to the replicas; module scripts come with their MIME type."""
    by_stage = stages(dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8")))
    assert by_stage["frontend"][0] == ("FROM", "base AS frontend"), "the frontend comes from the app's own packages"
    assert ("RUN", f"python -m deploy.nginx_frontend frontend {nginx.FRONTEND_ROOT}") in by_stage["frontend"]
    assert by_stage["proxy"][0][1].startswith("nginx:") and by_stage["proxy"][0][1].endswith(" AS proxy")
    assert ("COPY", f"--from=frontend {nginx.FRONTEND_ROOT} {nginx.FRONTEND_ROOT}") in by_stage["proxy"]
    conf = NGINX_CONF.read_text(encoding="utf-8")
    static = block(conf, "location /static/")
    assert directives(static, "root") == [nginx.FRONTEND_ROOT]
    assert directives(static, "gzip_static") == ["on"] and directives(static, "try_files") == ["$uri @replica"]
    replica = block(conf, "location @replica")
    assert directives(replica, "proxy_pass") == ["http://streamlit"]
    assert "Host $http_host" in directives(replica, "proxy_set_header")
    assert directives(block(conf, "http"), "include") == ["/etc/nginx/mime.types"]


def test_write_frontend_copies_every_file_with_a_gzip_twin_of_each_text_file(tmp_path):
    src = tmp_path / "src"
    (src / "js").mkdir(parents=True)
    (src / "media").mkdir()
    files = {"js/main.abc123.js": b"console.log('hi');\n" * 200, "media/font.def456.woff2": bytes(range(256)) * 8}
    for name, data in files.items():
        (src / name).write_bytes(data)
    dest = nginx.write_frontend(tmp_path / "out", src)
    for name, data in files.items():
        assert (dest / "static" / name).read_bytes() == data
    js = dest / "static" / "js" / "main.abc123.js"
    assert gzip.decompress(js.with_name(js.name + ".gz").read_bytes()) == files["js/main.abc123.js"]
    assert js.with_name(js.name + ".gz").stat().st_mtime == js.stat().st_mtime  # one Last-Modified for both
    assert not (dest / "static" / "media" / "font.def456.woff2.gz").exists(), "woff2 is compressed already"
    assert nginx.streamlit_static().joinpath("js").is_dir(), "the installed Streamlit's bundle has moved"


def test_nginx_conf_is_sticky_and_keeps_the_websocket_open():
    conf = NGINX_CONF.read_text(encoding="utf-8")
    upstream = block(conf, "upstream streamlit")
    assert directives(upstream, "hash") == ["$ae_route consistent"], "sticky: hash on the route cookie"
    assert f'"{ROUTE_COOKIE}=$request_id;' in conf, f"the first response sets the {ROUTE_COOKIE} cookie"
    assert directives(block(conf, "server"), "proxy_http_version") == ["1.1"]
    stream = block(conf, f"location {STREAM_PATH}")
    assert directives(stream, "proxy_pass") == ["http://streamlit"]
    assert "Upgrade $http_upgrade" in directives(stream, "proxy_set_header")
    assert 'Connection "upgrade"' in directives(stream, "proxy_set_header")
    assert seconds(directives(stream, "proxy_read_timeout")[0]) >= 3600, "a lesson's WebSocket stays open for hours"
    for location in (f"location {STREAM_PATH}", "location /"):
        assert "Host $http_host" in directives(block(conf, location), "proxy_set_header"), f"{location}: Host with its port"


def test_dockerignore_keeps_the_app_and_leaves_out_the_rest():
    patterns = {line.strip().rstrip("/") for line in DOCKERIGNORE.read_text().splitlines() if line.strip()[:1] not in ("", "#")}
    for needed in ("app.py", "model", "analysis", "serving", "viz", "ui", "pretrained", ".streamlit", "requirements.txt"):
        assert needed not in patterns, f".dockerignore must not leave out {needed}: the app needs it"
    for heavy in (".git", ".venv-ci", "runs", "tests", "training", "convert", "pretrained/*/state"):
        assert heavy in patterns, f".dockerignore should leave out {heavy}"


@pytest.mark.skipif(nginx.missing() is not None, reason=str(nginx.missing()))
def test_nginx_accepts_the_shipped_config(tmp_path):
    conf = nginx.write_conf(tmp_path, ["127.0.0.1:1", "127.0.0.1:2"], "127.0.0.1:1").read_text()
    check = subprocess.run(nginx.command(tmp_path, "-t"), capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, f"nginx -t rejects deploy/nginx.conf:\n{check.stderr}\n{conf}"


def test_nginx_conf_for_replaces_servers_listen_and_paths(tmp_path):
    conf = nginx.conf_for(
        NGINX_CONF.read_text(encoding="utf-8"), ["127.0.0.1:7001", "127.0.0.1:7002"], "127.0.0.1:7000", tmp_path
    )
    assert upstream_servers(conf) == ["127.0.0.1:7001", "127.0.0.1:7002"]
    assert directives(block(conf, "server"), "listen") == ["127.0.0.1:7000"]
    assert "/var/log/" not in conf and f"proxy_temp_path {tmp_path}/proxy;" in conf
    assert directives(block(conf, "location /static/"), "root") == [f"{tmp_path}/frontend"]
    other = nginx.conf_for(
        NGINX_CONF.read_text(encoding="utf-8"), ["127.0.0.1:7001"], "127.0.0.1:7000", tmp_path, tmp_path / "fe"
    )
    assert directives(block(other, "location /static/"), "root") == [f"{tmp_path}/fe"]


# ----------------------------------------------------------------------------------------------
# Fail-over through the shipped nginx.conf, in a browser
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Proxy:
    url: str
    access_log: Path


@contextlib.contextmanager
def nginx_proxy(workdir: Path, ports: list[int]) -> Iterator[Proxy]:
    """Debian's nginx with the shipped config in front of the replicas at ``ports``, on a free loopback port, serving
    the Streamlit frontend as the proxy image does (``write_frontend``)."""
    port = free_port()
    servers = [f"127.0.0.1:{p}" for p in ports]
    nginx.write_conf(workdir, servers, f"127.0.0.1:{port}", nginx.write_frontend(workdir / "frontend-copy"))
    proxy = Proxy(f"http://127.0.0.1:{port}", workdir / "access.log")
    ARTIFACTS.mkdir(exist_ok=True)
    with open(ARTIFACTS / "deploy-nginx.log", "w") as log:
        proc = subprocess.Popen(nginx.command(workdir), stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_healthy(proxy.url, proc, f"nginx (log: {ARTIFACTS / 'deploy-nginx.log'})")
            yield proxy
        finally:
            stop(proc)
            if proxy.access_log.exists():
                shutil.copy(proxy.access_log, ARTIFACTS / "deploy-nginx-access.log")


_LOG_LINE = re.compile(
    r'"(?P<method>\S+) (?P<uri>\S+) [^"]*" (?P<status>\d+) .* upstream="(?P<upstream>[^"]*)" route="(?P<route>[^"]*)"'
)


def requests_of(access_log: Path, route: str) -> list[dict[str, str]]:
    """The logged requests of one browser (its route cookie): uri, status and the upstream addresses tried."""
    found = (_LOG_LINE.search(line) for line in access_log.read_text().splitlines())
    return [m.groupdict() for m in found if m and m["route"] == route]


def replicas_tried(request: dict[str, str]) -> list[str]:
    """The upstream addresses nginx tried for one request, in order (the last one answered)."""
    return [a.strip() for a in request["upstream"].split(",") if a.strip()]


def attention_view(page) -> dict:
    """What the Attention page shows: its path and URL, the sentence, kind, layer and head, and the zoomed map
    (title, the tokens on both axes: for cross-attention the rows are the translation, and the weights)."""
    from playwright.sync_api import expect

    gd = page.locator(".st-key-zoom .js-plotly-plot")
    expect(gd).to_be_visible(timeout=90_000)
    zoom = page.evaluate(
        """() => {
            const gd = document.querySelector('.st-key-zoom .js-plotly-plot');
            const cells = gd.data.find(t => t.name === 'cells');
            return {title: gd.layout.title.text, x: gd.layout.xaxis.ticktext, y: gd.layout.yaxis.ticktext,
                    w: Array.from(cells.marker.color, v => Math.round(v * 1e4) / 1e4)};
        }"""
    )
    url = urllib.parse.urlparse(page.url)
    return {
        "path": url.path,
        "params": dict(urllib.parse.parse_qsl(url.query)),
        "sentence": page.locator(".st-key-sentence input").input_value(),
        "cross checked": page.get_by_role("radio", name=KIND_NAMES["cross"], exact=True).is_checked(),
        "layer": page.get_by_role("slider", name="Layer").get_attribute("aria-valuetext"),
        "head": page.get_by_role("slider", name="Head").get_attribute("aria-valuetext"),
        "zoom": zoom,
        "exceptions": page.locator("[data-testid=stException]").count(),
    }


def wait_for(what: str, found, timeout: float = WAIT):
    """Poll ``found()`` until it returns something true; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (result := found()):
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout} s")
        time.sleep(0.25)
    return result


@pytest.mark.slow
@pytest.mark.browser
def test_a_reload_after_its_replica_dies_shows_the_same_page_from_the_other_replica(tmp_path):
    if (reason := nginx.missing() or skip_reason()) is not None:
        pytest.skip(reason)
    sentence, _ = SENTENCES
    query = {"model": MODEL, "sentence": sentence}
    view = {**query, "kind": "cross", "layer": "1", "head": "2"}  # not the defaults: they must come from the URL
    with contextlib.ExitStack() as stack:
        replicas = [stack.enter_context(streamlit_server(ARTIFACTS / f"deploy-replica{i}.log")) for i in (1, 2)]
        proxy = stack.enter_context(nginx_proxy(tmp_path, [r.port for r in replicas]))
        page = stack.enter_context(chromium_page())

        page.goto(f"{proxy.url}/translate?{urllib.parse.urlencode(query)}")
        wait_idle(page)
        translated = translation(page)
        assert translated, "no translation through the proxy"
        page.goto(f"{proxy.url}/attention?{urllib.parse.urlencode(view)}")
        wait_idle(page)
        before = attention_view(page)
        assert before["path"] == "/attention" and before["sentence"] == sentence and before["cross checked"]
        assert (before["layer"], before["head"], before["exceptions"]) == ("1", "2", 0)
        assert "layer 1, head 2" in before["zoom"]["title"]

        # Which replica served this browser: every request of its route cookie, the WebSocket of the first page
        # (logged when it closed) included, went to one replica.
        route = next(c["value"] for c in page.context.cookies() if c["name"] == ROUTE_COOKIE)
        wait_for("logged WebSocket", lambda: any(r["uri"] == STREAM_PATH for r in requests_of(proxy.access_log, route)))
        # The frontend's files came from nginx itself (no upstream), everything else from one replica.
        logged = requests_of(proxy.access_log, route)
        static = [r for r in logged if r["uri"].startswith("/static/")]
        assert len(static) > 20 and all(r["upstream"] == "-" and r["status"] == "200" for r in static), static[:5]
        served = {replicas_tried(r)[-1] for r in logged if not r["uri"].startswith("/static/")}
        assert len(served) == 1, f"not sticky: one browser's requests went to {served}"
        (address,) = served
        dead = next(r for r in replicas if address == f"127.0.0.1:{r.port}")
        alive = next(r for r in replicas if r is not dead)

        # The largest of them, compressed by nginx's twin: the same bytes as the replica's own, a third of them.
        plotly = next(r["uri"] for r in static if "/PlotlyChart." in r["uri"])
        ask = {"Accept-Encoding": "gzip"}
        with urllib.request.urlopen(urllib.request.Request(proxy.url + plotly, headers=ask), timeout=30) as r:
            assert r.headers["Content-Encoding"] == "gzip" and r.headers["Content-Type"] == "application/javascript"
            sent = r.read()
        with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{dead.port}{plotly}"), timeout=30) as r:
            original = r.read()
        assert gzip.decompress(sent) == original and len(sent) < len(original) / 2

        seen = len(requests_of(proxy.access_log, route))
        dead.proc.kill()
        dead.proc.wait(timeout=15)
        page.reload()
        wait_idle(page)
        after = attention_view(page)
        assert after == before, "the reload on the other replica shows another page"
        page.goto(f"{proxy.url}/translate?{urllib.parse.urlencode(query)}")
        wait_idle(page)
        assert translation(page) == translated

        # logged since the kill: the WebSocket that was open on the dead replica (logged as it closed), then
        # requests that nginx first tried on the dead replica (while it is not yet marked down) or not at all
        since = [
            r
            for r in requests_of(proxy.access_log, route)[seen:]
            if not (r["uri"] == STREAM_PATH and replicas_tried(r) == [address]) and not r["uri"].startswith("/static/")
        ]
        assert since, "no request of this browser after the replica died"
        assert {replicas_tried(r)[-1] for r in since} == {f"127.0.0.1:{alive.port}"}, "answered by the dead replica?"
        assert any(replicas_tried(r)[0] == address for r in since), "nginx never tried the browser's own replica first"

"""deploy/nginx.conf run natively (Debian's nginx, as this user, on loopback): how the tests and bench/bench_class.py
put the shipped proxy in front of K local ``streamlit run`` replicas, since Docker's daemon does not run everywhere;
and the Streamlit frontend's files that nginx serves itself (``write_frontend``).

``conf_for`` rewrites the shipped config's upstream servers, listen address and file paths; ``command`` runs it in
the foreground. Nothing here changes the config's routing (the sticky ``ae_route`` cookie, the WebSocket upgrade).

    python -m deploy.nginx_frontend frontend DEST    # DEST/static/...: what deploy/nginx.conf's ``root`` serves as /static/
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import os
import pwd
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NGINX_CONF = ROOT / "deploy" / "nginx.conf"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
FRONTEND_ROOT = "/srv/streamlit"  # deploy/nginx.conf's ``root`` of /static/ (deploy/Dockerfile's proxy stage fills it)
# Served with a gzip twin (``gzip_static``): text. Fonts (woff2) and images are compressed formats already.
COMPRESSED_SUFFIXES = (".js", ".css", ".json", ".svg", ".html", ".txt", ".ttf", ".map")


def streamlit_static() -> Path:
    """The installed Streamlit's frontend bundle: the folder whose files the app serves under ``/static/``."""
    spec = importlib.util.find_spec("streamlit")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("streamlit is not installed")
    return Path(spec.origin).parent / "static" / "static"


def write_frontend(dest: str | Path, source: str | Path | None = None) -> Path:
    """Copy the Streamlit frontend bundle (``source``, default: the installed one) to ``dest/static``, each text file
    with a gzip twin (``name.js.gz``, level 9, made once here instead of per request), and return ``dest``.

    A browser's first visit fetches ~7.7 MB of these files (the Plotly chunk alone 4.7 MB, Streamlit 1.67); the app
    serves them uncompressed, from its Python process: 20 first visits cost a replica 6.9 CPU s (bench/README.md, benchmark 13).
    nginx serving them from here (``sendfile``, the twins through ``gzip_static``) costs the replicas nothing. Their
    names carry a content hash, so a copy made from the app's own Streamlit matches what its pages ask for.
    """
    source = Path(source) if source is not None else streamlit_static()
    dest = Path(dest)
    out = dest / "static"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(source, out)
    for f in out.rglob("*"):
        if f.is_file() and f.suffix in COMPRESSED_SUFFIXES:
            with open(f, "rb") as raw, gzip.open(f.with_name(f.name + ".gz"), "wb", compresslevel=9) as gz:
                shutil.copyfileobj(raw, gz)
            shutil.copystat(f, f.with_name(f.name + ".gz"))  # the same modification time: nginx's Last-Modified
    return dest


def block(conf: str, opening: str) -> str:
    """The body of the first nginx block that opens with ``opening`` (e.g. ``upstream streamlit``), up to its first
    closing brace: for ``server``, the directives before its first location. Raises ValueError if there is none."""
    match = re.search(re.escape(opening) + r"\s*\{(.*?)\n\s*\}", conf, re.S)
    if not match:
        raise ValueError(f"deploy/nginx.conf has no `{opening} {{ ... }}` block")
    return match.group(1)


def conf_for(template: str, servers: list[str], listen: str, workdir: Path, frontend: Path | None = None) -> str:
    """The shipped nginx.conf ``template`` with other upstream ``servers`` (host:port), ``listen`` address and log
    folder, and nginx's temporary files in ``workdir``: a config that runs as this user (``user`` is ignored when
    not root). ``frontend``: the folder ``write_frontend`` filled, served as /static/ (None: ``workdir/frontend``;
    where it holds no file, nginx passes the request on to the replicas). Raises ValueError if the template lacks
    what is replaced (one upstream, ``listen 80;`` once, ``root`` of the frontend once, the access log under
    /var/log/nginx/, one ``http`` block)."""
    body = block(template, "upstream streamlit")
    first = re.search(r"^(\s*)server\s+\S+([^;]*);", body, re.M)
    if first is None:
        raise ValueError("deploy/nginx.conf's upstream has no server")
    kept = [line for line in body.splitlines() if not re.match(r"\s*server\s", line)]
    new_body = "\n".join(kept) + "".join(f"\n{first.group(1)}server {s}{first.group(2)};" for s in servers)
    conf = template.replace(body, new_body, 1)
    conf, n = re.subn(r"^(\s*)listen\s+80;", rf"\g<1>listen {listen};", conf, flags=re.M)
    if n != 1:
        raise ValueError("deploy/nginx.conf must `listen 80;` once")
    conf, n = re.subn(
        rf"^(\s*)root\s+{re.escape(FRONTEND_ROOT)};", rf"\g<1>root {frontend or workdir / 'frontend'};", conf, flags=re.M
    )
    if n != 1:
        raise ValueError(f"deploy/nginx.conf must serve /static/ from `root {FRONTEND_ROOT};` once")
    if "/var/log/nginx/" not in conf:
        raise ValueError("deploy/nginx.conf must write its access log to /var/log/nginx/")
    conf = conf.replace("/var/log/nginx/", f"{workdir}/")
    temp = "".join(f"    {kind}_temp_path {workdir}/{kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf, n = re.subn(r"^http\s*\{\n", lambda m: m.group(0) + temp, conf, flags=re.M)
    if n != 1:
        raise ValueError("deploy/nginx.conf must have one `http {` block")
    return f"user {pwd.getpwuid(os.geteuid()).pw_name};\n" + conf


def missing() -> str | None:
    """Why nginx cannot run here, or None."""
    return None if Path(NGINX).exists() else f"{NGINX} is missing: apt-get install -y nginx"


def command(workdir: Path, *extra: str) -> list[str]:
    """nginx in the foreground with the prefix, config (``workdir/nginx.conf``), pid file and error log in
    ``workdir``; ``extra``: more options (``-t`` checks the config)."""
    conf = workdir / "nginx.conf"
    return [NGINX, *extra, "-p", str(workdir), "-c", str(conf), "-g", f"daemon off; pid {workdir}/nginx.pid; error_log stderr;"]


def write_conf(workdir: Path, servers: list[str], listen: str, frontend: Path | None = None) -> Path:
    """``conf_for`` of the shipped deploy/nginx.conf, written to ``workdir/nginx.conf`` (returned)."""
    out = workdir / "nginx.conf"
    out.write_text(conf_for(NGINX_CONF.read_text(encoding="utf-8"), servers, listen, workdir, frontend), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> None:
    """``python -m deploy.nginx_frontend frontend DEST``: ``write_frontend(DEST)`` (deploy/Dockerfile's proxy stage runs it)."""
    ap = argparse.ArgumentParser(prog="python -m deploy.nginx_frontend", description=main.__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    fe = sub.add_parser("frontend", help="copy the Streamlit frontend with gzip twins to DEST/static")
    fe.add_argument("dest")
    a = ap.parse_args(argv)
    dest = write_frontend(a.dest)
    files = [f for f in (dest / "static").rglob("*") if f.is_file()]
    print(f"{dest / 'static'}: {len(files)} files, {sum(f.stat().st_size for f in files) / 1e6:.1f} MB with the gzip twins")


if __name__ == "__main__":
    main()

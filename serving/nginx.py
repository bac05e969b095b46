"""deploy/nginx.conf run natively (Debian's nginx, as this user, on loopback): how the tests and bench/bench_class.py
put the shipped proxy in front of K local ``streamlit run`` replicas, since Docker's daemon does not run everywhere.

``conf_for`` rewrites the shipped config's upstream servers, listen address and file paths; ``command`` runs it in
the foreground. Nothing here changes the config's routing (the sticky ``ae_route`` cookie, the WebSocket upgrade).
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NGINX_CONF = ROOT / "deploy" / "nginx.conf"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def block(conf: str, opening: str) -> str:
    """The body of the first nginx block that opens with ``opening`` (e.g. ``upstream streamlit``), up to its first
    closing brace: for ``server``, the directives before its first location. Raises ValueError if there is none."""
    match = re.search(re.escape(opening) + r"\s*\{(.*?)\n\s*\}", conf, re.S)
    if not match:
        raise ValueError(f"deploy/nginx.conf has no `{opening} {{ ... }}` block")
    return match.group(1)


def conf_for(template: str, servers: list[str], listen: str, workdir: Path) -> str:
    """The shipped nginx.conf ``template`` with other upstream ``servers`` (host:port), ``listen`` address and log
    folder, and nginx's temporary files in ``workdir``: a config that runs as this user (``user`` is ignored when
    not root). Raises ValueError if the template lacks what is replaced (one upstream, ``listen 80;`` once, the
    access log under /var/log/nginx/, one ``http`` block)."""
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


def write_conf(workdir: Path, servers: list[str], listen: str) -> Path:
    """``conf_for`` of the shipped deploy/nginx.conf, written to ``workdir/nginx.conf`` (returned)."""
    out = workdir / "nginx.conf"
    out.write_text(conf_for(NGINX_CONF.read_text(encoding="utf-8"), servers, listen, workdir), encoding="utf-8")
    return out

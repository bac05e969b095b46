"""A room spans deploy/'s replicas: two ``streamlit run app.py`` processes sharing one real redis-server (as
deploy/compose.yaml runs them), with the shipped nginx.conf in front, all natively on loopback. Students reach the
room through either replica (and through nginx); the teacher's change reaches every one of them.

No browser: each student speaks Streamlit's websocket protocol (as bench/bench_room.py does) and polls the room's
fragment when the server asks it to (``auto_rerun``), as the browser does."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
from browser_support import ARTIFACTS, MODELS, free_port, stop, wait_healthy

from deploy import nginx_frontend as nginx
from tests.room_support import REDIS_SERVER, redis_server

ROOT = Path(__file__).resolve().parent.parent
if not os.path.exists(REDIS_SERVER) or nginx.missing() or not (MODELS / "reverse" / "config.json").exists():
    pytest.skip("needs redis-server, nginx and the reverse checkpoint", allow_module_level=True)

import websockets  # noqa: E402
from streamlit.proto.BackMsg_pb2 import BackMsg  # noqa: E402
from streamlit.proto.ClientState_pb2 import ClientState  # noqa: E402
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402

from classroom.store import open_store  # noqa: E402

FIRST, NEW = " q r s", " z y x w v"  # neither is one of the examples (the picker lists those on every page)


@contextlib.contextmanager
def replica(i: int, env: dict):
    port = free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.address", "127.0.0.1"]
    cmd += ["--server.port", str(port), "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]
    ARTIFACTS.mkdir(exist_ok=True)
    with open(ARTIFACTS / f"room-replica{i}.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=os.environ | env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_healthy(f"http://127.0.0.1:{port}", proc, f"replica {i}")
            yield port
        finally:
            stop(proc)


async def follow(port: int, code: str, ready: list, changed: asyncio.Event, timeout: float = 120) -> tuple[bool, bool]:
    """One student on ``port``: (its first screen showed FIRST, a later poll brought NEW after ``changed``); it adds
    itself to ``ready`` once its first screen is drawn."""
    query, page_hash, fragment, interval = urllib.parse.urlencode({"room": code}), "", "", 1.5
    async with websockets.connect(f"ws://127.0.0.1:{port}/_stcore/stream", subprotocols=["streamlit"], max_size=None) as ws:

        async def run(fragment_id: str = "") -> bytes:
            nonlocal query, page_hash, fragment, interval
            msg = ClientState(query_string=query, page_name="attention", page_script_hash=page_hash, fragment_id=fragment_id)
            await ws.send(BackMsg(rerun_script=msg).SerializeToString())
            seen = b""
            while True:
                data = await asyncio.wait_for(ws.recv(), timeout)
                seen += data
                fm = ForwardMsg()
                fm.ParseFromString(data)
                kind = fm.WhichOneof("type")
                if kind == "navigation":
                    page_hash = fm.navigation.page_script_hash
                elif kind == "page_info_changed":
                    query = fm.page_info_changed.query_string
                elif kind == "auto_rerun":
                    fragment, interval = fm.auto_rerun.fragment_id, fm.auto_rerun.interval
                elif kind == "script_finished" and fm.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                    return seen

        screen = await run()
        first = FIRST.encode() in screen and NEW.encode() not in screen
        ready.append(port)
        await changed.wait()
        end = time.monotonic() + 60
        while time.monotonic() < end:
            await asyncio.sleep(interval)
            if NEW.encode() in await run(fragment):
                return first, True
        return first, False


def test_a_room_spans_both_replicas_behind_nginx(tmp_path):
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(redis_server(tmp_path))
        env = {"ATTN_ROOM_STORE": url, "ATTENTION_EXPLORER_MODEL_PROCESS": "0", "OMP_NUM_THREADS": "1"}
        ports = [stack.enter_context(replica(i, env)) for i in (1, 2)]
        proxy_port = free_port()
        nginx.write_conf(
            tmp_path, [f"127.0.0.1:{p}" for p in ports], f"127.0.0.1:{proxy_port}", nginx.write_frontend(tmp_path / "fe")
        )
        proxy = subprocess.Popen(nginx.command(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        stack.callback(stop, proxy)
        wait_healthy(f"http://127.0.0.1:{proxy_port}", proxy, "nginx")

        store = open_store(url)
        code, secret = store.create({"page": "attention", "sentence": FIRST, "model": "reverse"})

        async def lesson():
            changed, ready = asyncio.Event(), []
            students = [asyncio.create_task(follow(p, code, ready, changed)) for p in [*ports, proxy_port]]
            end = time.monotonic() + 180
            while len(ready) < len(students) and time.monotonic() < end:  # every student has its first screen
                await asyncio.sleep(0.2)
            await asyncio.sleep(2)  # and polls
            store.publish(code, secret, store.room(code).view | {"sentence": NEW})
            changed.set()
            return await asyncio.gather(*students)

        results = asyncio.run(lesson())
        assert results == [(True, True)] * 3, results

"""The teacher's change is pushed to the students of a real ``streamlit run app.py`` (``ui.room.Watcher``): each
following student's app reruns without the student asking, within a second or so; nothing is pushed while nothing
changes, and a student exploring on their own is left alone.

No browser: each student speaks Streamlit's websocket protocol and only reads (it never polls), so a screen that
follows can only have been pushed. The room store is a SQLite file; the model the toy reverse one."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import pytest
from browser_support import ARTIFACTS, MODELS, free_port, stop, wait_healthy

ROOT = Path(__file__).resolve().parent.parent
if not (MODELS / "reverse" / "config.json").exists():
    pytest.skip("needs the reverse checkpoint", allow_module_level=True)

import websockets  # noqa: E402
from streamlit.proto.BackMsg_pb2 import BackMsg  # noqa: E402
from streamlit.proto.ClientState_pb2 import ClientState  # noqa: E402
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402
from streamlit.proto.WidgetStates_pb2 import WidgetState, WidgetStates  # noqa: E402

from classroom.store import open_store  # noqa: E402

FIRST, NEW, NEWER = " q r s", " z y x w v", " k j h"  # none is one of the examples (the picker lists those)
PUSHED_WITHIN_S = 5.0  # the watcher reads every 0.1 s; a student polls only every 10 s when pushed


class Student:
    """A browser that reads everything the server sends; it asks for a run only when it joins or clicks."""

    def __init__(self, port: int, code: str):
        self.port, self.query, self.page_hash = port, urllib.parse.urlencode({"room": code}), ""
        self.runs: list[tuple[float, bytes, list, str]] = []  # (finished at, what it sent, its buttons, how it ended)
        self.ws = None

    async def __aenter__(self) -> Student:
        self.ws = await websockets.connect(
            f"ws://127.0.0.1:{self.port}/_stcore/stream", subprotocols=["streamlit"], max_size=None
        )
        self.reader = asyncio.create_task(self.read())
        return self

    async def __aexit__(self, *exc) -> None:
        await self.ws.close()
        await asyncio.gather(self.reader, return_exceptions=True)

    async def read(self) -> None:
        seen, buttons = b"", []
        async for data in self.ws:
            seen += data
            msg = ForwardMsg()
            msg.ParseFromString(data)
            kind = msg.WhichOneof("type")
            if kind == "navigation":
                self.page_hash = msg.navigation.page_script_hash
            elif kind == "page_info_changed":
                self.query = msg.page_info_changed.query_string
            elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
                if msg.delta.new_element.WhichOneof("type") == "button":
                    buttons.append(msg.delta.new_element.button)
            elif kind == "script_finished" and msg.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                status = ForwardMsg.ScriptFinishedStatus.Name(msg.script_finished)
                self.runs.append((time.monotonic(), seen, buttons, status))
                seen, buttons = b"", []

    async def run(self, widgets: list[WidgetState] | None = None) -> bytes:
        """Ask for a run (as the browser does on load or a click) and wait for it."""
        n = len(self.runs)
        msg = ClientState(query_string=self.query, page_name="attention", page_script_hash=self.page_hash)
        if widgets:
            msg.widget_states.CopyFrom(WidgetStates(widgets=widgets))
        await self.ws.send(BackMsg(rerun_script=msg).SerializeToString())
        await self.until(lambda: len(self.runs) > n, 120)
        return self.runs[-1][1]

    async def until(self, done, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while not done():
            if time.monotonic() > end:
                return False
            await asyncio.sleep(0.05)
        return True

    def showed(self, text: str, after: float) -> float | None:
        """When the first run finished after ``after`` that sent ``text``; None if none did."""
        return next((t for t, seen, _, _ in self.runs if t > after and text.encode() in seen), None)

    def how(self, text: str, after: float) -> str:
        """How the first run after ``after`` that sent ``text`` ended (a fragment's run or the whole app's)."""
        return next(status for t, seen, _, status in self.runs if t > after and text.encode() in seen)


def test_the_teachers_change_is_pushed_to_every_following_student(tmp_path):
    store_url = f"sqlite:///{tmp_path / 'rooms.sqlite3'}"
    store = open_store(store_url)
    code, secret = store.create({"page": "attention", "sentence": FIRST, "model": "reverse"})
    port = free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.address", "127.0.0.1"]
    cmd += ["--server.port", str(port), "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]
    ARTIFACTS.mkdir(exist_ok=True)
    env = os.environ | {"ATTN_ROOM_STORE": store_url, "ATTENTION_EXPLORER_MODELS": str(MODELS)}
    with open(ARTIFACTS / "room-push.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_healthy(f"http://127.0.0.1:{port}", proc, "app")
            asyncio.run(class_of_three(port, code, secret, store))
        finally:
            stop(proc)


async def class_of_three(port: int, code: str, secret: str, store) -> None:
    async with Student(port, code) as a, Student(port, code) as b, Student(port, code) as loner:
        for s in (a, b, loner):
            assert FIRST.encode() in await s.run(), "each joins and sees the teacher's sentence"
        explore = next(w for w in loner.runs[-1][2] if w.label == "Explore on my own")
        await loner.run([WidgetState(id=explore.id, trigger_value=True)])

        quiet = time.monotonic()
        await asyncio.sleep(2.0)
        assert all(s.runs[-1][0] < quiet for s in (a, b, loner)), "nothing changed: nothing is pushed"

        changed = time.monotonic()
        store.publish(code, secret, store.room(code).view | {"sentence": NEW})
        for s in (a, b):
            assert await s.until(lambda s=s: s.showed(NEW, changed) is not None, PUSHED_WITHIN_S), (
                "a following student's screen shows the teacher's new sentence without asking for it"
            )
        assert {s.how(NEW, changed) for s in (a, b)} == {"FINISHED_FRAGMENT_RUN_SUCCESSFULLY"}, "the main area alone"
        await asyncio.sleep(1.0)
        assert loner.showed(NEW, changed) is None, "a student exploring on their own keeps their screen"

        changed = time.monotonic()
        store.publish(code, secret, store.room(code).view | {"sentence": NEWER})
        for s in (a, b):
            assert await s.until(lambda s=s: s.showed(NEWER, changed) is not None, PUSHED_WITHIN_S), "and the next change"
        pushed_runs = [sum(t > changed for t, *_ in s.runs) for s in (a, b)]
        assert pushed_runs == [1, 1], "one change, one rerun per student"

        changed = time.monotonic()
        store.ask(code, secret, "mask", "Does the output change?", ["yes", "no"], {"answer": "yes"})
        for s in (a, b):
            assert await s.until(lambda s=s: s.showed("Does the output change?", changed) is not None, PUSHED_WITHIN_S)
            assert s.how("Does the output change?", changed) == "FINISHED_FRAGMENT_RUN_SUCCESSFULLY", "the question alone"

        changed = time.monotonic()
        store.publish(code, secret, store.room(code).view | {"page": "steps"})
        for s in (a, b):
            assert await s.until(lambda s=s: s.showed(NEWER, changed) is not None, PUSHED_WITHIN_S), "a new page too"
            assert s.how(NEWER, changed) == "FINISHED_SUCCESSFULLY", "a new page reruns the whole app"


def test_a_teachers_change_on_this_server_wakes_the_watcher_at_once(monkeypatch):
    """``Watcher.wake`` (her publish, question or reveal) makes the watcher look now, not after its next ``PUSH_S``:
    with a read every 60 s, a woken watcher still reads within seconds, and an unwoken one does not."""
    from ui import room

    monkeypatch.setattr(room, "PUSH_S", 60.0)
    rounds = []
    watcher = room.Watcher()
    monkeypatch.setattr(watcher, "push_once", lambda: rounds.append(time.monotonic()) or 0)
    threading.Thread(target=watcher._watch, daemon=True).start()
    time.sleep(0.5)
    assert rounds == [], "asleep until its next read"
    watcher.wake()
    deadline = time.monotonic() + PUSHED_WITHIN_S
    while not rounds and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(rounds) == 1, "woken, it read the rooms at once"


def test_pushes_of_the_main_area_go_a_few_at_a_time(monkeypatch):
    """``PUSH_AT_ONCE`` pushed reruns run at once: the next waits until one has drawn the room (``follow``) or has
    not ended after ``PUSH_ENDS_S`` (a closed tab); first come, first served."""
    from ui import room

    monkeypatch.setattr(room, "PUSH_AT_ONCE", 2)
    monkeypatch.setattr(room, "PUSH_ENDS_S", 60.0)
    watcher, started = room.Watcher(), []
    watcher._thread = threading.current_thread()  # no watching thread: only the slots are under test

    def push(session_id: str) -> threading.Thread:
        thread = threading.Thread(target=lambda: (watcher._wait_for_a_slot(session_id), started.append(session_id)))
        thread.start()
        return thread

    push("a").join(5)
    push("b").join(5)
    third = push("c")
    third.join(0.5)
    assert started == ["a", "b"], "a third waits while two run"
    watcher.follow("ROOM42", "a", room.Shown(1, {}))  # a's rerun has drawn the room
    third.join(5)
    assert started == ["a", "b", "c"]

    monkeypatch.setattr(room, "PUSH_ENDS_S", 0.3)
    fourth = push("d")  # b and c never end (their tabs closed): counted ended after PUSH_ENDS_S
    fourth.join(5)
    assert started[-1] == "d"

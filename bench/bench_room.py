"""Benchmark 14: a class in one room. N students follow a teacher on one ``streamlit run app.py`` (or deploy/'s 2
replicas behind nginx, sharing a Redis room store).

    python bench/bench_room.py [--n 120] [--window 3] [--page attention] [--baseline] [--py-spy]
                               [--replicas 2 --redis-url redis://…]

No browser: each student speaks Streamlit's websocket protocol as the browser does. It reads all the time (the server
reruns a following student's app on its own when the teacher changes something: ``ui.room.Watcher``) and asks for
its poll fragment's rerun when that fragment's timer fires (``auto_rerun``: the browser's ``setInterval`` starts when
the fragment first arrives, so a class's polls are spread as its joins were). The teacher is a session of her own on
her teacher link (``?room=CODE&teach=SECRET``); her question goes through the store, with the same rules as her app.

Three phases, measured per student:

1. join: N students open ``/PAGE?room=CODE`` spread over the window; arrival -> ``script_finished`` of the first run;
2. follow: the teacher types a new sentence in her own app (her source box's value, as her browser sends it); that
   moment -> ``script_finished`` of the first run that shows the new sentence and the page's charts without an
   error (her app analyses it and publishes it, the watcher pushes it, the student's run draws it);
3. answers: the teacher asks "Which word comes next?" with 8 options (the time until it is on every screen is
   ``question``); then each student sends an answer (the pills' value and the "Send my answer" button, as the browser
   sends them) spread over the window, and the store's answers are counted: lost (a student's answer missing) and
   double (more answers than seats).

With ``--baseline``, first the comparison: N students open the page on one sentence without a room (on the same
server, just before). Also reported: the server's cores busy while the class only waits (``idle_polling_cores``), and
the CPU seconds of the server, the model worker and this process (the simulated browsers) per phase; ``--py-spy``
adds where the server's time went. Only 127.0.0.1 and at most 120 students.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import urllib.parse
from collections import Counter
from pathlib import Path

import bench_app as ba
import bench_class as bc
import benchlib as bl
import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ClientState_pb2 import ClientState
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState, WidgetStates

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from classroom.store import open_store  # noqa: E402

HOST = "127.0.0.1"
MAX_STUDENTS = 120
FIRST_SENTENCE = "The animal didn't cross the street because it was too tired."
BASELINE_SENTENCE = "Two young men are playing soccer in the park."
NEW_SENTENCE = "A red kite flies high above the quiet harbour."  # not an example (the picker lists those)


class Student:
    """One simulated browser in the room: its websocket (read all the time, as the browser does: the server may rerun
    the app on its own, when the teacher's change is pushed), query string (room and seat), page hash, poll fragment."""

    def __init__(self, i: int, port: int, page: str, code: str | None, sentence: str = FIRST_SENTENCE, secret: str | None = None):
        self.i, self.port, self.page = i, port, page
        room = {"room": code} | ({"teach": secret} if secret else {})
        self.query = urllib.parse.urlencode(room if code else {"sentence": sentence, "model": "en-de"})
        self.page_hash = ""
        self.fragment = ""
        self.interval = 1.5
        self.timer_start = 0.0  # when the poll fragment's timer started (its first auto_rerun)
        self.ws = None
        self.rec: dict = {"errors": []}
        self.last_run: bc.Run | None = None  # the last finished run that drew elements
        self.finished: asyncio.Queue = asyncio.Queue()  # (finished at, Run, whether it carried NEW_SENTENCE)
        self.changed_at: float | None = None  # when the teacher's change was published
        self.asked_at: float | None = None  # when the teacher asked the question
        self.seen_new = asyncio.Event()
        self.box_new = False  # a finished run has put NEW_SENTENCE in the box (later runs need not send it again)
        self.reader: asyncio.Task | None = None

    async def read_all(self) -> None:
        """Read ForwardMsgs until the connection closes; each finished run (a rerun it asked for goes on in the same
        run) goes to ``finished``. Keeps the query string, page hash and poll fragment the server sends."""
        run, carried = bc.Run(), False
        while True:
            try:
                data = await self.ws.recv()
            except websockets.ConnectionClosed:
                return
            msg = ForwardMsg()
            msg.ParseFromString(data)
            run.bytes += len(data)
            carried = carried or NEW_SENTENCE.encode() in data
            kind = msg.WhichOneof("type")
            if kind == "navigation":
                self.page_hash = msg.navigation.page_script_hash
            elif kind == "page_info_changed":
                self.query = msg.page_info_changed.query_string
            elif kind == "auto_rerun":
                if self.fragment != msg.auto_rerun.fragment_id or self.interval != msg.auto_rerun.interval:
                    self.timer_start = time.perf_counter()  # the browser (re)starts its timer on a new interval
                self.fragment, self.interval = msg.auto_rerun.fragment_id, msg.auto_rerun.interval
            elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
                el = msg.delta.new_element
                etype = el.WhichOneof("type")
                run.elements[tuple(msg.metadata.delta_path)] = (etype, el)
                run.fragments[tuple(msg.metadata.delta_path)] = msg.delta.fragment_id
                if etype == "exception":
                    run.errors.append(f"exception: {el.exception.message[:200]}")
                elif etype == "alert" and el.alert.format == el.alert.ERROR:
                    run.errors.append(f"error: {el.alert.body[:200]}")
            elif kind == "script_finished":
                run.status = ForwardMsg.ScriptFinishedStatus.Name(msg.script_finished)
                if run.status == "FINISHED_EARLY_FOR_RERUN":
                    continue
                now = time.perf_counter()
                self.rec["errors"] += run.errors
                self.last_run = run if run.elements else self.last_run
                # the teacher's change is on the screen: the new sentence in the box (sent by this run or an earlier
                # one: the box keeps it), and the page drawn with it (its charts)
                self.box_new = self.box_new or carried
                carried = self.box_new and not run.errors and any(k == "plotly_chart" for k, _el in run.elements.values())
                if self.changed_at is not None and "follow_s" not in self.rec:
                    self.rec["runs_to_follow"] = self.rec.get("runs_to_follow", 0) + 1
                    self.rec.setdefault("runs_seen", []).append(
                        (round(now - self.changed_at, 2), run.status, carried, len(run.elements))
                    )
                if carried and self.changed_at is not None and "follow_s" not in self.rec:
                    self.rec["follow_s"] = now - self.changed_at
                    self.rec["follow_run"] = run.status  # a fragment's run or the whole app's
                    self.seen_new.set()
                if (
                    self.asked_at is not None
                    and "question_s" not in self.rec
                    and any(k == "button" and el.button.label == "Send my answer" for k, el in run.elements.values())
                ):
                    self.rec["question_s"] = now - self.asked_at
                self.finished.put_nowait((now, run, carried))
                run, carried = bc.Run(), False

    async def next_run(self, timeout: float = bc.TIMEOUT_S) -> tuple[float, bc.Run, bool]:
        return await asyncio.wait_for(self.finished.get(), timeout)

    async def send(self, widgets: list[WidgetState] | None = None, fragment: str | None = None) -> None:
        msg = ClientState(query_string=self.query, page_name=self.page, page_script_hash=self.page_hash)
        if widgets:
            msg.widget_states.CopyFrom(WidgetStates(widgets=widgets))
        if fragment:
            msg.fragment_id = fragment
        await self.ws.send(BackMsg(rerun_script=msg).SerializeToString())

    async def join(self, at: float, t_start: float) -> None:
        await asyncio.sleep(max(0.0, t_start + at - time.perf_counter()))
        t0 = time.perf_counter()
        self.ws = await websockets.connect(
            f"ws://{HOST}:{self.port}/_stcore/stream", subprotocols=["streamlit"], max_size=None, open_timeout=bc.TIMEOUT_S
        )
        self.reader = asyncio.create_task(self.read_all())
        await self.send()
        done, _run, _ = await self.next_run()
        self.rec["join_s"] = done - t0

    async def close(self) -> None:
        await self.ws.close()
        if self.reader:
            await asyncio.gather(self.reader, return_exceptions=True)

    async def poll(self, stop: asyncio.Event) -> None:
        """Ask for the poll fragment's rerun every interval, as the browser does, until ``stop``: its ``setInterval``
        starts when the fragment's ``auto_rerun`` first arrives (at the student's join) and restarts only when the
        interval changes, so the class's polls are spread as their joins were."""
        while not stop.is_set():
            start, interval = self.timer_start, self.interval
            ticks = int((time.perf_counter() - start) / interval) + 1
            await asyncio.sleep(max(0.0, start + ticks * interval - time.perf_counter()))
            if (start, interval) == (self.timer_start, self.interval) and not stop.is_set():
                await self.send(fragment=self.fragment)

    def widgets(self) -> dict:
        """The question's widgets on the last run: {"pills": (element, fragment), "send": element}."""
        found = {}
        for kind, el in self.last_run.elements.values() if self.last_run else []:
            if kind == "button_group":
                found["pills"] = el.button_group
            elif kind == "button" and el.button.label == "Send my answer":
                found["send"] = el.button
        return found

    async def answer(self, at: float, t_start: float, choice: str) -> None:
        await asyncio.sleep(max(0.0, t_start + at - time.perf_counter()))
        w = self.widgets()
        if "pills" not in w or "send" not in w:
            self.rec["errors"].append("no question on screen")
            return
        pills = WidgetState(id=w["pills"].id)
        pills.string_array_value.data.append(choice)
        send = WidgetState(id=w["send"].id, trigger_value=True)
        t0 = time.perf_counter()
        while not self.finished.empty():
            self.finished.get_nowait()
        await self.send([pills, send], fragment=self.fragment)
        done, _run, _ = await self.next_run()
        self.rec["answer_s"] = done - t0
        self.rec["sent"] = choice


def stop_spy(spy) -> None:
    """Stop a ``py-spy record`` (it writes its file on SIGINT)."""
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)


def stats(xs: list[float]) -> dict:
    xs = sorted(xs)
    if not xs:
        return {}
    return {
        "n": len(xs),
        "min": round(xs[0], 2),
        "p50": round(statistics.median(xs), 2),
        "p95": round(xs[min(len(xs) - 1, int(0.95 * len(xs)))], 2),
        "max": round(xs[-1], 2),
    }


async def no_room(port: int, page: str, n: int, window: float) -> dict:
    """The comparison, on the same server just before: N students open ``/PAGE?sentence=…`` (one sentence for all, no
    room) spread over the window; their first screens."""
    students = [Student(i, port, page, None, BASELINE_SENTENCE) for i in range(n)]
    t_start = time.perf_counter()
    await asyncio.gather(*(s.join(i * window / n, t_start) for i, s in enumerate(students)))
    for s in students:
        await s.close()
    return stats([s.rec["join_s"] for s in students if "join_s" in s.rec])


async def lesson(
    pids: list[int],
    ports: list[int],
    port: int,
    page: str,
    n: int,
    window: float,
    store,
    model: str,
    baseline: bool,
    spy_to: Path | None = None,
) -> dict:
    code, secret = store.create({"page": page, "sentence": FIRST_SENTENCE, "model": model})
    for p in ports:  # the teacher's own screen on each replica, opened before the class (as bench_class's warm-up)
        warm = Student(-1, p, page, code)
        await warm.join(0, time.perf_counter())
        await warm.close()
    teacher = Student(-1, port, page, code, secret=secret)  # the teacher's own app (her teacher link), open all along
    await teacher.join(0, time.perf_counter())
    await asyncio.to_thread(bc.settle, pids)  # the model worker loaded, the server idle: the class arrives
    res = {}
    if baseline:
        res["no_room_first_screen"] = await no_room(port, page, n, window)
        await asyncio.sleep(5)  # the server idle again
    students = [Student(i, port, page, code) for i in range(n)]
    spy = ba.start_py_spy(pids[0], spy_to.with_suffix(".join.txt"), rate=bc.SPY_RATE, gil=True) if spy_to else None
    cpu0, own0, client0 = bc.cpu_seconds(pids), bc.cpu_seconds(pids, with_children=False), time.process_time()
    t_start = time.perf_counter()
    await asyncio.gather(*(s.join(i * window / n, t_start) for i, s in enumerate(students)))
    res["join"] = stats([s.rec["join_s"] for s in students if "join_s" in s.rec])
    res["join"]["server_cpu_s"] = round(bc.cpu_seconds(pids, with_children=False) - own0, 1)
    res["join"]["worker_cpu_s"] = round(bc.cpu_seconds(pids) - cpu0 - res["join"]["server_cpu_s"], 1)
    res["join"]["wall_s"] = round(time.perf_counter() - t_start, 1)
    res["join"]["client_cpu_s"] = round(time.process_time() - client0, 1)
    res["join"]["by_arrival"] = [round(s.rec.get("join_s", -1), 2) for s in students[::10]]  # every 10th, in order
    stop_spy(spy)

    stop = asyncio.Event()
    pollers = [asyncio.create_task(s.poll(stop)) for s in students]
    await asyncio.sleep(1.0)  # every student polling
    cpu0, t0 = bc.cpu_seconds(pids), time.perf_counter()
    await asyncio.sleep(4.0)
    res["idle_polling_cores"] = round((bc.cpu_seconds(pids) - cpu0) / (time.perf_counter() - t0), 2)
    spy = ba.start_py_spy(pids[0], spy_to.with_suffix(".follow.txt"), rate=bc.SPY_RATE, gil=True) if spy_to else None
    box, box_fragment = teacher.last_run.widget("Source sentence")
    own0, client0 = bc.cpu_seconds(pids, with_children=False), time.process_time()
    changed_at = time.perf_counter()
    for s in students:
        s.changed_at = changed_at
    # the teacher types the new sentence in her own app (as her browser sends it): her app analyses it, draws it and
    # publishes it to the room; the students' screens follow
    while not teacher.finished.empty():
        teacher.finished.get_nowait()
    await teacher.send([WidgetState(id=box.text_input.id, string_value=NEW_SENTENCE)], fragment=box_fragment)
    teacher_done = asyncio.create_task(teacher.next_run())
    try:
        await asyncio.wait_for(asyncio.gather(*(s.seen_new.wait() for s in students)), 60)
    except TimeoutError:
        pass
    res["follow"] = stats([s.rec["follow_s"] for s in students if "follow_s" in s.rec])
    res["follow"]["missed"] = sum("follow_s" not in s.rec for s in students)
    res["follow"]["runs_per_student"] = round(statistics.mean(s.rec.get("runs_to_follow", 0) for s in students), 2)
    res["follow"]["missed_runs"] = [s.rec.get("runs_seen") for s in students if "follow_s" not in s.rec][:3]
    res["follow"]["runs"] = dict(Counter(s.rec.get("follow_run", "none") for s in students))
    res["follow"]["server_cpu_s"] = round(bc.cpu_seconds(pids, with_children=False) - own0, 1)  # polls included
    res["follow"]["wall_s"] = round(time.perf_counter() - changed_at, 1)
    res["follow"]["published"] = store.room(code).view.get("sentence") == NEW_SENTENCE
    res["follow"]["teacher_run_s"] = round((await teacher_done)[0] - changed_at, 2)  # her own app's run, publish included
    res["follow"]["client_cpu_s"] = round(time.process_time() - client0, 1)  # the 120 simulated browsers, this process
    stop_spy(spy)

    options = ["Ein", "Der", "Hund", "Die", "Das", "Eine", "Zwei", "Ich"]
    for s in students:
        s.asked_at = time.perf_counter()
    q = store.ask(code, secret, "next", "Which word comes first?", options, {"probs": [0.125] * 8, "best": "Ein"})
    deadline = time.perf_counter() + 60
    while time.perf_counter() < deadline and not all(len(s.widgets()) == 2 for s in students):
        await asyncio.sleep(0.5)
    res["question"] = stats([s.rec["question_s"] for s in students if "question_s" in s.rec])
    t_start = time.perf_counter()
    await asyncio.gather(*(s.answer(i * window / n, t_start, options[i % 8]) for i, s in enumerate(students)))
    stop.set()
    for p in pollers:
        p.cancel()
    await asyncio.gather(*pollers, return_exceptions=True)
    for s in [*students, teacher]:
        await s.close()
    answers = store.answers(code, q.id)
    sent = {s.i: s.rec.get("sent") for s in students if s.rec.get("sent")}
    got = [a.choice for a in answers]
    res["answers"] = stats([s.rec["answer_s"] for s in students if "answer_s" in s.rec]) | {
        "sent": len(sent),
        "counted": len(answers),
        "lost": max(0, len(sent) - len(answers)),
        "double": max(0, len(answers) - len(sent)),
        "same_choices": sorted(got) == sorted(sent.values()),
    }
    res["errors"] = sorted({e for s in students for e in s.rec["errors"]})[:10]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=120)
    ap.add_argument("--window", type=float, default=3.0)
    ap.add_argument("--page", default="attention")
    ap.add_argument("--model", default="en-de")
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--redis-url", default=None, help="the room store the replicas share (default: a SQLite file)")
    ap.add_argument("--baseline", action="store_true", help="first measure N students on one sentence without a room")
    ap.add_argument("--py-spy", action="store_true", help="profile the server during the join and the follow")
    args = ap.parse_args()
    n = min(args.n, MAX_STUDENTS)
    url = args.redis_url or f"sqlite:///{Path(tempfile.mkdtemp(prefix='bench-room-')) / 'rooms.sqlite3'}"
    os.environ["ATTN_ROOM_STORE"] = url  # the servers inherit it
    store = open_store(url)
    setup = bc.Setup(replicas=args.replicas)
    with bc.Server(setup, "bench-room.log") as server:
        cpu0 = bc.cpu_seconds(server.pids)
        t0 = time.perf_counter()
        res = asyncio.run(
            lesson(
                server.pids,
                server.ports,
                server.port,
                args.page,
                n,
                args.window,
                store,
                args.model,
                args.baseline,
                bl.RESULTS / "logs" / "room-py-spy" if args.py_spy else None,
            )
        )
        res["server_cpu_s"] = round(bc.cpu_seconds(server.pids) - cpu0, 1)
        res["wall_s"] = round(time.perf_counter() - t0, 1)
    res["setup"] = {"n": n, "window_s": args.window, "page": args.page, "replicas": args.replicas, "store": url.split(":")[0]}
    if args.py_spy:
        for phase in ("join", "follow"):
            f = (bl.RESULTS / "logs" / "room-py-spy").with_suffix(f".{phase}.txt")
            if f.exists():
                res[f"py_spy_{phase}"] = [(k, round(v, 3)) for k, v in bc.work_shares(f)]
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

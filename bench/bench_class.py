"""Benchmark 8: a whole class at once. N students open one page of one ``streamlit run app.py`` server.

    python bench/bench_class.py [--n 60,120] [--windows 3] [--pages all] [--quick]
    python bench/bench_class.py --app-root /tmp/before ...   # the app of another checkout (before / after)
    python bench/bench_class.py --cpus 1 ...                 # server and students pinned to these CPUs
    python bench/bench_class.py --replicas 2 ...             # deploy/'s recipe: 2 replicas behind nginx

No browser: each simulated student speaks Streamlit's own websocket protocol, as the browser does.
It connects to ``ws://127.0.0.1:PORT/_stcore/stream`` (subprotocol ``streamlit``) and sends a
``BackMsg`` whose ``rerun_script`` is a ``ClientState`` with the student's query string
(``sentence=...``, every student a different sentence) and ``page_name`` = the page's URL path
(the frontend sends ``pageName``; ``PagesManager`` matches it against each page's ``url_pathname``).
It then reads ``ForwardMsg`` protos until ``script_finished``: that is its first run. After a think
time it changes one widget, as the browser does (a ``rerun_script`` with that widget's new value,
and the widget's ``fragment_id`` when it sits in an ``st.fragment``), and reads until that run
finishes too:

- Attention: the "Attention kind" radio to another kind (a fragment rerun: the mosaic and the zoom);
- Mask lab: the "Attention temperature" slider to 2.0 (a full rerun: a second analysis of the sentence);
- the other pages: no change (their first run is what a class waits for).

The N students arrive evenly spread over the arrival window (student i at ``i * window / N`` s),
on a fresh server that one warm-up student (another sentence) has already opened, as a teacher
would before the lesson (with ``--replicas``: each replica, directly). Measured per student: arrival (before the websocket connects) to
``script_finished`` of the first run, and the widget change's send to its ``script_finished``.
A student fails on a timeout, a closed connection, a run that does not finish, an exception
element or an error alert in the page. Server: CPU seconds (``/proc/PID/stat`` utime + stime, of the
server and its child processes: the model worker) from the first arrival to the last finished run,
shown as cores busy on average; peak RSS (``VmHWM``) of the server and of its children, started for
this measurement alone. The burst starts once the warm-up is over and the server is idle.

Correctness: each student's result (its translation and a digest of every chart spec, markdown,
HTML and text the run sent) is compared with the same sentence run by a single session alone on a
server of its own. The translation is the Mask lab's "Before" box; the Attention page shows none,
so there it is the predicted pieces on the zoom map's rows. A difference counts as a mismatch.

Only 127.0.0.1 and at most 120 students. The load generator (one asyncio loop, this process) runs
on the same machine; its own CPU time is reported too. ``--py-spy`` records the server (the thread
holding the GIL: where its one core goes) and the model worker (every busy thread: torch works without the GIL)
during the bursts (py-spy from bench/requirements.txt, ``SPY_RATE`` samples/s, not pausing them) and prints where
their busy samples went, by kind of work (``WORK``: the first kind whose marker a sample's stack holds). The
timings of a profiled burst are slower than without: py-spy shares the cores.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import functools
import hashlib
import html
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import bench_app as ba
import benchlib as bl
import numpy as np
import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ClientState_pb2 import ClientState
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState, WidgetStates

from deploy import nginx_frontend as nginx

HOST = "127.0.0.1"
MAX_STUDENTS = 120
P95_TARGET_S = 2.0  # issue 22: every page, 120 students arriving within 3 s
RSS_TARGET_MIB = 1536
TARGET_N, TARGET_WINDOW_S = 120, 3.0
TIMEOUT_S = 120.0
THINK_S = 2.0  # a student looks at the first page this long before changing a widget
PAGE_TITLES = {  # every page's URL path (ui/catalog.py) and title
    "translate": "Translate",
    "attention": "Attention",
    "steps": "Step through generation",
    "positional": "Positional encoding",
    "masks": "Mask lab",
    "stats": "Head statistics",
    "shapes": "Shapes",
    "head": "Inside one head",
    "compare": "Compare two sentences",
    "explain": "Attention vs attribution",
    "lesson": "Lesson",
}

# Caption-style sentences, one per student: subject i % 12, action i % 7, place i % 5 (12, 7, 5 coprime: all differ).
SUBJECTS = [
    "A young man", "Two little girls", "An old woman", "A brown dog", "Three students", "A tall police officer",
    "A boy in a red shirt", "Two musicians", "A woman with a hat", "Several workers", "A small child", "A man in a blue jacket",
]  # fmt: skip
ACTIONS = [
    "walked slowly",
    "waited for the bus",
    "sat on a bench",
    "played music",
    "ate lunch",
    "talked quietly",
    "looked at the sky",
]
PLACES = ["near the old bridge", "in the busy market", "on a sunny beach", "outside the train station", "under a large tree"]
WARMUP_SENTENCE = bl.SENTENCES[5]


def class_sentences(n: int) -> list[str]:
    """``n`` different sentences, the same list every time (student i gets sentence i)."""
    return [f"{SUBJECTS[i % 12]} {ACTIONS[i % 7]} {PLACES[i % 5]}." for i in range(n)]


# -- one simulated browser --------------------------------------------------------------------------------------------


@dataclass
class Change:
    """The widget a student changes after the first run: found by label; ``value`` for a slider, else another option."""

    label: str
    value: float | None = None


CHANGES = {"attention": Change("Attention kind"), "masks": Change("Attention temperature τ", 2.0)}


@dataclass
class Run:
    """What one script run sent to a session."""

    seconds: float = 0.0  # request sent (or arrival, for the first run) -> script_finished
    first_delta_s: float | None = None
    status: str = ""
    bytes: int = 0
    messages: int = 0
    elements: dict = field(default_factory=dict)  # delta path -> (element type, Element), the last one sent there
    fragments: dict = field(default_factory=dict)  # delta path -> fragment id of the delta
    errors: list = field(default_factory=list)

    def widget(self, label: str):
        """(element, fragment id) of the widget labelled ``label``, or (None, "")."""
        for path, (kind, el) in self.elements.items():
            w = getattr(el, kind)
            if getattr(w, "label", None) == label and getattr(w, "id", ""):
                return el, self.fragments.get(path, "")
        return None, ""

    def digest(self) -> str:
        """sha256 over what a student reads: chart specs, markdown, HTML, text, alerts and headings, in page order."""
        h = hashlib.sha256()
        for path in sorted(self.elements):
            kind, el = self.elements[path]
            body = el.plotly_chart.spec if kind == "plotly_chart" else getattr(getattr(el, kind), "body", None)
            if body is not None:
                h.update(f"{path}|{kind}|{body}\n".encode())
        return h.hexdigest()[:16]

    def content(self) -> list:
        """What a student reads, for ``same_as_shown``: (path, kind, body) in page order, each chart spec parsed with
        its typed arrays decoded to lists."""
        out = []
        for path in sorted(self.elements):
            kind, el = self.elements[path]
            if kind == "plotly_chart":
                out.append((path, kind, _plain(json.loads(el.plotly_chart.spec))))
            elif (body := getattr(getattr(el, kind), "body", None)) is not None:
                out.append((path, kind, body))
        return out

    def translation(self) -> str:
        """The "Before" translation box (Mask lab), else the predicted pieces on the zoom map's rows (Attention)."""
        boxes = [el.html.body for kind, el in self.elements.values() if kind == "html" and 'class="translation"' in el.html.body]
        if boxes:
            return html.unescape(re.sub(r"<[^>]+>", "", boxes[0])).strip()
        charts = [el.plotly_chart.spec for kind, el in self.elements.values() if kind == "plotly_chart"]
        for spec in charts[1:2]:  # the zoom map: the second chart of the page
            rows = json.loads(spec)["layout"].get("yaxis", {}).get("ticktext", [])
            return html.unescape(" ".join(t.split("→")[-1].strip() for t in rows))
        return ""


def _plain(v):
    """A plotly JSON value with every typed array ({"dtype", "bdata", "shape"}) as a (nested) list of numbers."""
    if isinstance(v, dict):
        if "bdata" in v and "dtype" in v:
            a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
            shape = v.get("shape")
            if isinstance(shape, str):
                shape = [int(x) for x in shape.split(",")]
            return (a.reshape(shape) if shape else a).tolist()
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


NUMBER = re.compile(r"-?\d+\.\d+")
# A batched model pass sums in another order: its numbers differ from one input's by ~1e-6, and gradients of a padded
# batch (explain_many) by up to 2.2e-5 of their largest value, which the explanation map divides them by (measured on 40
# class sentences, bench/README 8h). 1e-4 is five times that, and 1/100 of the two decimals a hover label prints.
ROUNDING = 1e-4


def same_as_shown(a, b) -> bool:
    """Whether two pages' ``Run.content`` read the same: equal structure and text, numbers within ``ROUNDING``, and
    numbers printed in text (hover labels, captions) within one unit of their last printed digit (a value
    0.1234996 vs 0.1235001 prints as 0.1235 vs 0.1235, but 0.12345 may print either way)."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        if a != a or b != b:  # NaN: the gaps of a mosaic
            return a != a and b != b
        return abs(a - b) <= ROUNDING * max(1.0, abs(a))
    if isinstance(a, str) and isinstance(b, str):
        if a == b:
            return True
        pa, pb = NUMBER.split(a), NUMBER.split(b)
        na, nb = NUMBER.findall(a), NUMBER.findall(b)
        if pa != pb or len(na) != len(nb):
            return False
        return all(
            len(x.split(".")[1]) == len(y.split(".")[1]) and abs(float(x) - float(y)) <= 1.01 * 10 ** -len(x.split(".")[1])
            for x, y in zip(na, nb, strict=True)
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_as_shown(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same_as_shown(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def first_difference(a, b, path: str = "") -> str | None:
    """Where two contents first differ beyond ``same_as_shown``: a path into them and both values, e.g.
    ``[3][1].data[0].z[2][5]: 0.4213 vs 0.42131`` (None where they read the same): what a mismatch reports."""
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return next((d for k in a if (d := first_difference(a[k], b[k], f"{path}.{k}")) is not None), None)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
        return next(
            (d for i, (x, y) in enumerate(zip(a, b, strict=True)) if (d := first_difference(x, y, f"{path}[{i}]")) is not None),
            None,
        )
    if same_as_shown(a, b):
        return None
    return f"{path or '.'}: {repr(a)[:120]} vs {repr(b)[:120]}"


async def read_run(ws, t0: float, deadline: float) -> tuple[Run, str | None]:
    """Read ForwardMsgs until the run finishes; returns the run and the script hash of the page it ran (from
    ``navigation``, as the browser keeps it for the next rerun)."""
    run, page_hash = Run(), None
    while True:
        data = await asyncio.wait_for(ws.recv(), max(0.01, deadline - time.perf_counter()))
        msg = ForwardMsg()
        msg.ParseFromString(data)
        run.bytes += len(data)
        run.messages += 1
        kind = msg.WhichOneof("type")
        if kind == "navigation":
            page_hash = msg.navigation.page_script_hash
        elif kind == "page_not_found":
            run.errors.append("page not found")
        elif kind == "delta":
            if run.first_delta_s is None:
                run.first_delta_s = time.perf_counter() - t0
            if msg.delta.WhichOneof("type") == "new_element":
                el = msg.delta.new_element
                etype = el.WhichOneof("type")
                path = tuple(msg.metadata.delta_path)
                run.elements[path] = (etype, el)
                run.fragments[path] = msg.delta.fragment_id
                if etype == "exception":
                    run.errors.append(f"exception: {el.exception.message[:200]}")
                elif etype == "alert" and el.alert.format == el.alert.ERROR:
                    run.errors.append(f"error: {el.alert.body[:200]}")
        elif kind == "script_finished":
            status = ForwardMsg.ScriptFinishedStatus.Name(msg.script_finished)
            if status == "FINISHED_EARLY_FOR_RERUN":  # the app reran itself (st.rerun, switch_page): wait for that run
                continue
            run.status = status
            run.seconds = time.perf_counter() - t0
            if status == "FINISHED_WITH_COMPILE_ERROR":
                run.errors.append(status)
            return run, page_hash


def widget_state(el, change: Change) -> WidgetState:
    """The new value of the widget ``el`` that ``change`` describes, as the browser sends it."""
    kind = el.WhichOneof("type")
    w = getattr(el, kind)
    state = WidgetState(id=w.id)
    if kind == "slider":
        state.double_array_value.data.append(change.value)
    elif kind == "radio":  # the formatted option (its label) is the value
        current = w.raw_value if w.set_value else w.options[w.default]
        state.string_value = next(o for o in w.options if o != current)
    else:
        raise ValueError(f"cannot change a {kind} widget")
    return state


async def student(
    port: int, page: str, sentence: str, start_at: float, t_start: float, change: Change | None, think: float
) -> dict:
    """One student: waits for its arrival time, opens ``page`` with ``sentence``, then, ``think`` s later, makes ``change``."""
    await asyncio.sleep(max(0.0, t_start + start_at - time.perf_counter()))
    query = urllib.parse.urlencode({"sentence": sentence})
    rec: dict = {"sentence": sentence, "arrival_s": start_at, "errors": []}
    t0 = time.perf_counter()
    deadline = t0 + TIMEOUT_S
    try:
        async with websockets.connect(
            f"ws://{HOST}:{port}/_stcore/stream", subprotocols=["streamlit"], max_size=None, open_timeout=TIMEOUT_S
        ) as ws:
            rec["connect_s"] = time.perf_counter() - t0
            await ws.send(BackMsg(rerun_script=ClientState(query_string=query, page_name=page)).SerializeToString())
            first, page_hash = await read_run(ws, t0, deadline)
            rec.update(first_s=first.seconds, first_delta_s=first.first_delta_s, bytes=first.bytes, messages=first.messages)
            rec["finished_at"] = time.perf_counter() - t_start
            rec["_first"] = first  # read by read_back, after the class: not on the CPUs the server is measured on
            rec["errors"] += first.errors
            if change is None or first.errors:
                return rec
            el, fragment = first.widget(change.label)
            if el is None:
                rec["errors"].append(f"no widget labelled {change.label!r}")
                return rec
            await asyncio.sleep(think)
            states = WidgetStates(widgets=[widget_state(el, change)])
            msg = ClientState(
                query_string=query, page_name=page, page_script_hash=page_hash or "", widget_states=states, fragment_id=fragment
            )
            t1 = time.perf_counter()
            await ws.send(BackMsg(rerun_script=msg).SerializeToString())
            second, _ = await read_run(ws, t1, deadline)
            rec.update(change_s=second.seconds, change_bytes=second.bytes)
            rec["_second"] = second
            rec["errors"] += second.errors
    except (TimeoutError, OSError, websockets.WebSocketException) as e:
        rec["errors"].append(f"{type(e).__name__}: {e}")
    return rec


def read_back(students: list[dict]) -> list[dict]:
    """Each student's runs read as the student saw them (translation, digests, and the content that is compared
    with a single session's, then dropped), once the class is over. Read during the class, the chart specs' JSON
    and typed arrays took 1-2 CPU s of a class of 120 from the two cores the server is measured on (bench/README.md,
    8i)."""
    for rec in students:
        if (first := rec.pop("_first", None)) is not None:
            rec.update(translation=first.translation(), digest=first.digest(), _content=first.content())
        if (second := rec.pop("_second", None)) is not None:
            rec.update(change_digest=second.digest(), _change_content=second.content())
    return students


async def crowd(
    port: int, page: str, sentences: list[str], window: float, change: Change | None, think: float = THINK_S
) -> list[dict]:
    n = len(sentences)
    t_start = time.perf_counter()
    tasks = [student(port, page, s, i * window / n, t_start, change, think) for i, s in enumerate(sentences)]
    return await asyncio.gather(*tasks)


# -- a server per measurement -----------------------------------------------------------------------------------------


def _stat(pid: int) -> list[str]:
    """Fields of ``/proc/PID/stat`` after the command name (field 3, the state, first)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (the app's model worker)."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if int(_stat(int(p.name))[1]) == pid:
                    out.append(int(p.name))
            except (OSError, IndexError):
                continue
    return out


def cpu_seconds(pid: int | list[int], *, with_children: bool = True) -> float:
    """User + system CPU time of process ``pid`` (all its threads; a list: of each) and of its children now, in s."""
    pids = [pid] if isinstance(pid, int) else [p for p in pid if p]
    total = 0.0
    for p in [*pids, *(c for q in pids for c in children(q))] if with_children else pids:
        try:
            f = _stat(p)
        except OSError:
            continue
        total += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    return total


def settle(pid: int | list[int], timeout: float = 60.0) -> None:
    """Wait until the server and its children use less than 10 % of a core (e.g. the model worker has loaded)."""
    end, last = time.monotonic() + timeout, cpu_seconds(pid)
    while time.monotonic() < end:
        time.sleep(0.5)
        now = cpu_seconds(pid)
        if now - last < 0.05:
            return
        last = now


def memory_mib(pids: list[int]) -> dict:
    """Peak RSS (``VmHWM``) of the server (the sum over replicas) and the sum of its children's (the model worker),
    in MiB."""
    kids = [ba.memory_kib(c)["peak_rss_kib"] or 0 for p in pids for c in children(p)]
    own = [ba.memory_kib(p)["peak_rss_kib"] or 0 for p in pids]
    return {"peak_rss_mib": sum(own) / 1024, "children_peak_rss_mib": sum(kids) / 1024}


@dataclass(frozen=True)
class Setup:
    """How the server is started: models folder, extra ``streamlit run`` flags, the checkout whose app runs,
    the CPUs it is pinned to (``taskset -c``; None: all), and ``replicas``: 1 for one ``streamlit run`` (its model
    calls in a worker process beside it), K > 1 for deploy/'s classroom recipe run natively: K ``streamlit run``
    processes (each with the model in its own process, ``ATTENTION_EXPLORER_MODEL_PROCESS=0``, one torch thread;
    replica i pinned to the i-th of ``cpus`` when given) behind Debian's nginx with the shipped deploy/nginx.conf."""

    models: str | None = None
    flags: tuple[str, ...] = ()
    root: Path = bl.ROOT
    cpus: str | None = None
    replicas: int = 1


REPLICA_ENV = {"ATTENTION_EXPLORER_MODEL_PROCESS": "0", "OMP_NUM_THREADS": "1"}  # as deploy/compose.yaml's app services


@functools.lru_cache(maxsize=1)
def frontend() -> Path:
    """The Streamlit frontend nginx serves, as deploy/'s proxy image holds it: made once per process, removed at exit."""
    folder = Path(tempfile.mkdtemp(prefix="bench-frontend-"))
    atexit.register(shutil.rmtree, folder, True)
    return nginx.write_frontend(folder)


class Server:
    """``streamlit run app.py`` on 127.0.0.1 at a free port (``port``), or ``Setup.replicas`` of them behind nginx
    (``port`` is nginx's); stopped on exit. ``pids``: the Streamlit processes (their children are the model worker
    or nothing); ``proxy_pid``: nginx's master process (its children are its workers), or None."""

    def __init__(self, setup: Setup, log_name: str):
        logs = bl.RESULTS / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen] = []
        self.proxy: subprocess.Popen | None = None
        self.ports = [ba.free_port() for _ in range(setup.replicas)]
        single = setup.replicas == 1
        cpus = [str(c) for part in setup.cpus.split(",") for c in _cpu_range(part)] if setup.cpus else []
        for i, port in enumerate(self.ports):
            log = logs / (log_name if single else log_name.replace(".log", f"-replica{i + 1}.log"))
            pin = setup.cpus if single else (cpus[i % len(cpus)] if cpus else None)
            env = None if single else REPLICA_ENV
            self.procs.append(ba.start_server(port, setup.models, log, list(setup.flags), root=setup.root, cpus=pin, env=env))
        self.port = self.ports[0]
        if not single:
            self.workdir = Path(tempfile.mkdtemp(prefix="bench-class-nginx-"))
            self.port = ba.free_port()
            nginx.write_conf(self.workdir, [f"{HOST}:{p}" for p in self.ports], f"{HOST}:{self.port}", frontend())
            out = (logs / log_name.replace(".log", "-nginx.log")).open("w")
            self.proxy = subprocess.Popen(
                nginx.command(self.workdir), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    @property
    def proxy_pid(self) -> int | None:
        return self.proxy.pid if self.proxy else None

    def __enter__(self) -> Server:
        try:
            for port, proc in zip(self.ports, self.procs, strict=True):
                ba.wait_health(port, proc)
            if self.proxy:
                ba.wait_health(self.port, self.proxy)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for proc in [*self.procs, *filter(None, [self.proxy])]:
            ba.stop_server(proc)
        if self.proxy:
            shutil.rmtree(self.workdir, ignore_errors=True)


WORK = [  # (kind of work, markers in a sample's stack), the first kind that matches names the sample
    ("model (torch)", ("torch/", "model/transformer.py")),
    ("plotly: figure to dict / JSON", ("return_figure_from_figure_or_data", "plotly/io/_json.py", "to_dict (plotly")),
    ("plotly: figure made and checked", ("plotly/basedatatypes.py", "_plotly_utils/")),
    ("figure builders (viz/)", ("(viz/",)),
    ("cache: hash, pickle, copy", ("streamlit/runtime/caching/",)),
    ("results crossing processes (pickle)", ("multiprocessing/", "concurrent/futures/")),
    ("Streamlit: messages to the browser", ("enqueue", "_write_to_self", "forward_msg", "websocket", "tornado/")),
    ("Streamlit: elements and widgets", ("streamlit/elements/", "delta_generator.py", "streamlit/navigation/")),
    ("pages and frame (ui/, app.py)", ("(ui/", "(app.py")),
]


SPY_RATE = 50  # samples/s: at 100-200 py-spy (0.4.3, --nonblocking) used a whole core and the server stalled
WORKER_WAITS = "_recv (multiprocessing/connection.py"  # the worker's leaf frame while it waits for a call


def work_shares(path: Path) -> list[tuple[str, float]]:
    """Share of the busy samples of one py-spy record (``bench_app.IDLE_FRAMES`` leaves are idle) per kind of
    ``WORK``, largest first; "other" for the rest (Python start-up, the script runner's own code, ...)."""
    counts: dict[str, int] = {}
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if any(idle in stack.rsplit(";", 1)[-1] for idle in (*ba.IDLE_FRAMES, WORKER_WAITS)):
            continue
        kind = next((k for k, marks in WORK if any(m in stack for m in marks)), "other")
        counts[kind] = counts.get(kind, 0) + int(n)
    total = sum(counts.values())
    return sorted(((k, c / total) for k, c in counts.items()), key=lambda x: -x[1]) if total else []


def quantile(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


def summarise(students: list[dict], wall_s: float, cpu_s: float, mem: dict, reference: dict) -> dict:
    ok = [s for s in students if not s["errors"]]
    first = [s["first_s"] for s in ok]
    change = [s["change_s"] for s in ok if "change_s" in s]
    mismatches, bitwise = [], 0
    for s in ok:
        ref = reference.get(s["sentence"])
        if ref is None:
            continue
        if s.get("translation") != ref.get("translation"):
            mismatches.append(
                {
                    "sentence": s["sentence"],
                    "what": "translation",
                    "got": s["translation"],
                    "single_session": ref.get("translation"),
                }
            )
        for run, k in (("_content", "digest"), ("_change_content", "change_digest")):
            if k not in s:
                continue
            if s[k] != ref.get(k):
                bitwise += 1
                if not same_as_shown(s.get(run), ref.get(run)):
                    mismatches.append(
                        {
                            "sentence": s["sentence"],
                            "what": k,
                            "got": s[k],
                            "single_session": ref.get(k),
                            "first_difference": first_difference(s.get(run), ref.get(run)),
                        }
                    )
    for s in students:  # the contents were for the comparison only
        s.pop("_content", None), s.pop("_change_content", None)
    return {
        "failures": len(students) - len(ok),
        "errors": sorted({e for s in students for e in s["errors"]}),
        "mismatches": mismatches,
        "bitwise_differences": bitwise,  # runs not byte-equal to the single session's, yet the same as shown
        "first_p50_s": quantile(first, 50),
        "first_p95_s": quantile(first, 95),
        "first_max_s": max(first, default=None),
        "change_p50_s": quantile(change, 50),
        "change_p95_s": quantile(change, 95),
        "change_max_s": max(change, default=None),
        "wall_s": wall_s,
        "server_cpu_s": cpu_s,
        "server_cores_busy": cpu_s / wall_s if wall_s else None,
        **mem,
    }


def references(page: str, sentences: list[str], setup: Setup) -> dict:
    """Each sentence opened (and changed) by a single session alone, one after another, on a fresh server."""
    out = {}
    with Server(setup, f"class-reference-{page}.log") as srv:
        for s in sentences:
            rec = read_back(asyncio.run(crowd(srv.port, page, [s], 0.0, CHANGES.get(page), think=0.0)))[0]
            if rec["errors"]:
                raise RuntimeError(f"single session failed on {s!r}: {rec['errors']}")
            out[s] = {
                k: rec.get(k)
                for k in ("translation", "digest", "change_digest", "first_s", "change_s", "_content", "_change_content")
            }
    return out


def burst(page: str, n: int, window: float, setup: Setup, reference: dict, spy_to: Path | None = None) -> dict:
    """N students on ``page`` within ``window`` seconds, on a fresh server after one warm-up student."""
    with Server(setup, f"class-{page}-{n}-{window:g}.log") as srv:
        for port in srv.ports:  # each replica directly (through nginx, a warm-up would reach one of them)
            warm = asyncio.run(crowd(port, page, [WARMUP_SENTENCE], 0.0, CHANGES.get(page), think=0.0))[0]
            if warm["errors"]:
                raise RuntimeError(f"warm-up student failed: {warm['errors']}")
        settle([*srv.pids, srv.proxy_pid])
        spies = []
        if spy_to:  # the first replica and its model worker
            spies = [ba.start_py_spy(srv.pids[0], spy_to, rate=SPY_RATE, gil=True)]  # its threads share one GIL
            workers = [c for c in children(srv.pids[0]) if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]
            spies += [ba.start_py_spy(w, spy_to.with_suffix(".worker.txt"), rate=SPY_RATE) for w in workers[:1]]
        load = os.getloadavg()[0]
        everything = [*srv.pids, srv.proxy_pid]
        cpu0, own0, t0 = cpu_seconds(everything), time.process_time(), time.perf_counter()
        alone0, proxy0 = cpu_seconds(srv.pids, with_children=False), cpu_seconds(srv.proxy_pid or [])
        students = asyncio.run(crowd(srv.port, page, class_sentences(n), window, CHANGES.get(page)))
        wall, cpu = time.perf_counter() - t0, cpu_seconds(everything) - cpu0
        alone = cpu_seconds(srv.pids, with_children=False) - alone0
        proxy = cpu_seconds(srv.proxy_pid or []) - proxy0
        own = time.process_time() - own0
        mem = memory_mib(srv.pids)
        for spy in filter(None, spies):
            spy.send_signal(signal.SIGINT)
            spy.wait(30)
    read_back(students)
    res = {"page": page, "n": n, "window_s": window, "load_avg_1m_before": round(load, 2), "client_cpu_s": own}
    res |= {"replicas": setup.replicas, "server_process_cpu_s": alone, "proxy_cpu_s": proxy}  # Streamlit; nginx
    res["worker_cpu_s"] = cpu - alone - proxy  # the model worker (replicas: none, the model runs in each one)
    res |= summarise(students, wall, cpu, mem, reference)
    res["students"] = students
    return res


def run(*, ns: list[int], windows: list[float], pages: list[str], setup: Setup = Setup(), py_spy: bool = False) -> dict:
    if max(ns) > MAX_STUDENTS:
        raise ValueError(f"at most {MAX_STUDENTS} students")
    res: dict = {"streamlit_flags": list(setup.flags), "think_s": THINK_S, "rows": [], "py_spy_top": {}}
    res |= {"app_root": str(setup.root), "cpus": setup.cpus, "commit": git_commit(setup.root), "replicas": setup.replicas}
    for page in pages:
        t = time.perf_counter()
        reference = references(page, class_sentences(max(ns)), setup)
        ref_first = [r["first_s"] for r in reference.values()]
        res.setdefault("single_session", {})[page] = {"first_median_s": statistics.median(ref_first), "n": len(ref_first)}
        print(f"{page}: {len(reference)} single-session references in {time.perf_counter() - t:.0f} s", flush=True)
        for window in windows:
            for n in ns:
                spy_to = bl.RESULTS / "logs" / f"class-py-spy-{page}-{n}-{window:g}.txt" if py_spy else None
                row = burst(page, n, window, setup, reference, spy_to)
                for proc, f in (("server", spy_to), ("model worker", spy_to and spy_to.with_suffix(".worker.txt"))):
                    if f is not None and f.exists():
                        res["py_spy_top"][f"{proc}, {page} {n} in {window:g} s"] = work_shares(f)
                res["rows"].append(row)
                print(row_line(row), flush=True)
    res["targets"] = targets(res["rows"])
    return res


def row_line(r: dict) -> str:
    f = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    return (
        f"{PAGE_TITLES[r['page']]}, {r['n']} in {r['window_s']:g} s: first run p50 {f(r['first_p50_s'])} "
        f"p95 {f(r['first_p95_s'])} max {f(r['first_max_s'])} s; change p50 {f(r['change_p50_s'])} p95 {f(r['change_p95_s'])} s; "
        f"{r['failures']} failed, {len(r['mismatches'])} mismatched ({r.get('bitwise_differences', 0)} not byte-equal); CPU {r['server_cores_busy']:.2f} cores; "
        f"peak RSS {r['peak_rss_mib']:.0f} + {r.get('children_peak_rss_mib', 0):.0f} MiB; load {r['load_avg_1m_before']}"
    )


def targets(rows: list[dict]) -> dict:
    """The issue's targets, per (page, N, window) row they name."""
    out = {}
    for r in rows:
        if (r["n"], r["window_s"]) == (TARGET_N, TARGET_WINDOW_S):
            met = (
                r["failures"] == 0
                and not r["mismatches"]
                and r["first_p95_s"] <= P95_TARGET_S
                and r["peak_rss_mib"] + r.get("children_peak_rss_mib", 0) <= RSS_TARGET_MIB
            )
            out[f"{r['page']} {r['n']} in {r['window_s']:g} s"] = met
    return out


def table(res: dict) -> str:
    def s(x) -> str:
        return "" if x is None else f"{x:.2f}"

    rows = [
        [
            PAGE_TITLES[r["page"]],
            r["n"],
            f"{r['window_s']:g} s",
            s(r["first_p50_s"]),
            s(r["first_p95_s"]),
            s(r["first_max_s"]),
            f"{s(r['change_p50_s'])} / {s(r['change_p95_s'])}",
            r["failures"],
            len(r["mismatches"]),
            f"{r['server_cores_busy']:.2f} ({r['server_cpu_s']:.0f} s: {r.get('server_process_cpu_s', 0):.0f} + "
            f"{r.get('worker_cpu_s', 0) + r.get('proxy_cpu_s', 0):.0f})",
            f"{r['peak_rss_mib']:.0f} + {r.get('children_peak_rss_mib', 0):.0f}",
            r["load_avg_1m_before"],
        ]
        for r in res["rows"]
    ]
    headers = ["page", "N", "arrivals within", "first run p50 (s)", "p95 (s)", "max (s)", "widget change p50 / p95 (s)",
               "failures", "≠ single session", "server CPU, cores (CPU s: Streamlit + model worker or nginx)", "peak RSS, server + worker (MiB)", "load before"]  # fmt: skip
    out = bl.md_table(headers, rows)
    single = "; ".join(f"{PAGE_TITLES[p]} {v['first_median_s']:.2f} s" for p, v in res.get("single_session", {}).items())
    out += f"\n\nOne session alone (the references), median first run: {single}."
    for what, met in res.get("targets", {}).items():
        out += "\n" + bl.target_line(f"{what}: p95 ≤ {P95_TARGET_S:g} s, 0 failures, RSS ≤ {RSS_TARGET_MIB} MiB", met)
    if res.get("streamlit_flags"):
        out += f"\n\nServer started with `{' '.join(res['streamlit_flags'])}`."
    if res.get("replicas", 1) > 1:
        out += (
            f"\n\n{res['replicas']} replicas behind nginx (deploy/nginx.conf), the model in each replica's process: "
            '"server" is their sum (Streamlit + nginx), "worker" none.'
        )
    if res.get("cpus"):
        out += f"\n\nServer, model worker and students pinned to CPU {res['cpus']} (`taskset -c`)."
    if res.get("commit"):
        out += f"\n\nApp of commit {res['commit']}."
    for what, top in res.get("py_spy_top", {}).items():
        lines = "\n".join(f"    {share:6.1%}  {f}" for f, share in top)
        out += f"\n\npy-spy, busy samples by kind of work ({what}):\n\n{lines}"
    return out


def git_commit(root: Path) -> str | None:
    """The short commit of checkout ``root`` (with "+changes" if its tracked files differ), or None outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=root).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + (" + uncommitted changes" if dirty else "")


def _cpu_range(part: str) -> range:
    """One item of a ``taskset -c`` list: "1" or "0-3"."""
    lo, _, hi = part.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def main() -> None:
    ap = bl.base_args(__doc__.splitlines()[0])
    ap.add_argument("--models", help="folder of checkpoint folders for the app (ATTENTION_EXPLORER_MODELS); default pretrained/")
    ap.add_argument("--n", default="60,120", help=f"students per burst, comma-separated (at most {MAX_STUDENTS})")
    ap.add_argument("--windows", default="3", help="arrival windows in seconds, comma-separated")
    ap.add_argument("--pages", default="all", help=f"pages (URL paths), comma-separated, or all: {', '.join(PAGE_TITLES)}")
    ap.add_argument(
        "--app-root", type=Path, default=bl.ROOT, help="the checkout whose app.py the server runs (default: this one)"
    )
    ap.add_argument("--cpus", help="pin the server (and its model worker) and the students to these CPUs (taskset -c list)")
    ap.add_argument("--flag", action="append", default=[], help="extra `streamlit run` option")
    ap.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="K > 1: deploy/'s recipe natively, K `streamlit run` replicas (model in-process) behind nginx (deploy/nginx.conf)",
    )
    ap.add_argument("--py-spy", action="store_true", help="profile the server and the model worker during each burst")
    ap.add_argument("--name", default="class", help="results file bench/results/<name>.json")
    args = ap.parse_args()
    ns = [2, 4] if args.quick else [int(x) for x in args.n.split(",")]
    windows = [1.0] if args.quick else [float(x) for x in args.windows.split(",")]
    pages = list(PAGE_TITLES) if args.pages == "all" else [p for p in args.pages.split(",") if p]
    unknown = set(pages) - set(PAGE_TITLES)
    if unknown:
        ap.error(f"unknown pages {sorted(unknown)}; known: {', '.join(PAGE_TITLES)}")
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for part in args.cpus.split(",") for c in _cpu_range(part)})
    if args.replicas > 1 and nginx.missing():
        ap.error(f"--replicas needs nginx: {nginx.missing()}")
    setup = Setup(args.models, tuple(args.flag), args.app_root.resolve(), args.cpus, max(1, args.replicas))
    res = run(ns=ns, windows=windows, pages=pages, setup=setup, py_spy=args.py_spy)
    print(table(res))
    if not args.no_write:
        print(f"\nwrote {bl.write_result(args.name, res)}")


if __name__ == "__main__":
    main()

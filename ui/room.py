"""The room in every page: students' apps follow the teacher's view, the teacher's app publishes it, and the question
being asked is shown above the page.

app.py calls ``arrive(pages, current)`` before the sidebar's widgets (a link's ``?room=CODE``, ``?teach=SECRET`` and
``?seat=ID`` are read; a following student takes the teacher's view: page, sentence, model, decoding, kind, layer,
head, step, lesson step), ``panel()`` before the main area (the sidebar's room box, the live question),
``catch_up()`` at the start of the main area's own runs and ``after_page()`` at its end (a teacher's view is
published once her page is drawn; a student's screen counts as showing that version).

A teacher's change reaches the students without their asking: the process's ``Watcher`` reads the room's version
and reruns each following student's main area (app.py's ``body`` fragment) when only its values changed (sentence,
kind, layer, head, step), the room's question (``poll``) for a new question or its reveal, and the whole app
otherwise (page, model, decoding). The teacher's app polls every ``POLL_S`` (answers coming in), a pushed
student's every ``SAFETY_POLL_S``. A question is one of the store's ``KINDS``: "exercise" carries an
``analysis.exercises.Exercise`` (sent from /room or with "Send to the class" beside an exercise), answered in the
exercise's own box and graded on reveal, once per process for the whole class (``graded``). Every text is in the
session's language (``i18n._``; the store's refusals through ``say``). The store is ``classroom.store.open_store()``
(SQLite, or Redis with ``ATTN_ROOM_STORE``); every change goes through its rules (only the teacher's secret changes
a room).
"""

from __future__ import annotations

import csv
import html
import io
import json
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial

import plotly.graph_objects as go
import streamlit as st
import streamlit.components.v1 as components

from classroom import codes
from classroom.store import MAX_EXERCISE_ANSWER, Question, Room, RoomError, RoomNotFound, RoomStore, open_store
from i18n import _
from ui import keys
from ui.widgets import md_escape

log = logging.getLogger("attention_explorer")

POLL_S = 1.5  # how often the teacher's app publishes and draws the answers (and a student's, where nothing pushes)
PUSH_S = 0.1  # how often the process's watcher reads the version of each room its students follow
# Pushed reruns of the main area that run at once in a process. All 120 at once, each rerun's thread fought for the one
# GIL before any passed app.py's gate, and Streamlit's event loop, which sends every screen, got a turn every few ms:
# the first student saw the change after ~1.4 s, the teacher's own screen too (bench/README.md, 14)
PUSH_AT_ONCE = 4
PUSH_ENDS_S = 2.0  # a pushed rerun not seen to end by then is counted ended (a closed tab, a run cut short)
SAFETY_POLL_S = 10.0  # a pushed student's own poll: it catches a change that no push brought (e.g. a dropped rerun)
VERSION_TTL_S = 0.5  # a room's version read from the store is reused this long by every session of the process
# What a student follows: session key -> its type (the teacher's widgets' values, as the teacher's session holds them)
FOLLOW = {
    keys.SENTENCE: str,
    keys.MODEL: str,
    keys.METHOD: str,
    keys.BEAM_SIZE: int,
    keys.ALPHA: float,
    keys.SAMPLE_TEMPERATURE: float,
    keys.TOP_K: int,
    keys.TOP_P: float,
    keys.SEED: int,
    keys.KIND: str,
    keys.LAYER: int,
    keys.HEAD: str,
    keys.STEP: int,
    keys.LESSON: int,
}
# What the main area alone (app.py's ``body`` fragment) shows: a change of only these reruns it, not the sidebar
BODY = frozenset({keys.SENTENCE, keys.KIND, keys.LAYER, keys.HEAD, keys.STEP, keys.LESSON})
RESETS = (keys.SENTENCE, keys.MODEL)  # a change of either starts per-input state again (as the widgets' callbacks do)
TEACHER_COOKIE = "attn_teach_"  # + a room's code: the cookie in which the teacher's browser keeps its secret
SECRET_CHARS = re.compile(r"[A-Za-z0-9_-]{16,128}")  # a teacher secret as the store makes it (``codes.new_secret``)

_store: RoomStore | None = None
_store_lock = threading.Lock()
_versions: dict[str, tuple[float, int]] = {}  # code -> (read at, version): one read per room every VERSION_TTL_S
_changes: dict[str, Room] = {}  # code -> the room as the watcher read its last change: the students it pushes take it
# (code, question id, the answers) -> the class's graded exercise: graded once per process, not per student and poll
# (120 answers take ~50 ms to grade; after the reveal the answers are closed, so every student's poll hits)
_graded: dict[tuple, object] = {}
_graded_lock = threading.Lock()
_full_run = threading.local()  # .active: this thread is in a full run's ``panel`` (not a fragment's own run)
MAX_GRADED = 64


class Watcher:
    """Pushes the teacher's change to the students of this server process: one thread reads the version of every
    room a student here follows (one store read per room every ``PUSH_S``, SQLite or the Redis the replicas share)
    and reruns the app of each following student whose screen shows an older version.

    Polling instead cost every student a fragment run every ``POLL_S`` (120 students: 0.3-0.4 of the one core a
    Streamlit process has, during the teacher's change too) and up to ``POLL_S`` of waiting (bench/README.md, 14).
    A rerun is asked for as Streamlit's own file watcher asks for one: ``AppSession.request_rerun`` with the
    session's last client state (its page and query string; the widgets keep their values). Where there is no
    Streamlit runtime (AppTest) nothing is pushed and students poll every ``POLL_S``.

    A teacher on this server wakes it (``wake``) when she changes the room. Reruns of the main area or the whole app
    go ``PUSH_AT_ONCE`` at a time: the next is asked for when one has drawn the room (``follow``), so the students'
    screens fill one after another, first come first served, and the teacher's own screen is not held up.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rooms: dict[str, dict[str, Shown]] = {}  # code -> {session id: what its screen shows}
        self._pushed: dict[str, int | None] = {}  # session id -> the version last pushed to it (one push per version)
        self._thread: threading.Thread | None = None
        self._woken = threading.Event()  # set by ``wake``: a teacher on this server changed a room
        self._running: dict[str, float] = {}  # session id -> when its pushed rerun was asked for, until it ends
        self._ended = threading.Condition(self._lock)  # notified when a pushed rerun ends

    @staticmethod
    def session_id() -> str | None:
        """This run's session id, where a Streamlit runtime can rerun it (a real server; not AppTest)."""
        from streamlit import runtime
        from streamlit.runtime.scriptrunner import get_script_run_ctx

        ctx = get_script_run_ctx()
        if ctx is None or not runtime.exists() or runtime.get_instance().get_app_session(ctx.session_id) is None:
            return None
        return ctx.session_id

    @staticmethod
    def fragment_id() -> str:
        """The id of the fragment this code runs in ("" outside one): where a push of the main area goes."""
        from streamlit.runtime.scriptrunner_utils.script_run_context import ThreadState

        return ThreadState.get().fragment_id or ""

    def follow(self, code: str, session_id: str, shown: Shown) -> None:
        """Session ``session_id`` follows room ``code`` and shows ``shown``."""
        with self._lock:
            for other, sessions in self._rooms.items():
                if other != code:
                    sessions.pop(session_id, None)
            self._rooms.setdefault(code, {})[session_id] = shown
            if self._running.pop(session_id, None) is not None:  # its pushed rerun has drawn the room
                self._ended.notify()
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="room-watcher", daemon=True)
                self._thread.start()

    def forget(self, session_id: str) -> None:
        """Session ``session_id`` follows no room (it left, explores on its own, or leads one)."""
        with self._lock:
            for sessions in self._rooms.values():
                sessions.pop(session_id, None)
            self._pushed.pop(session_id, None)
            if self._running.pop(session_id, None) is not None:
                self._ended.notify()

    def wake(self) -> None:
        """Look now: a teacher whose app runs in this process changed her room (her view, a question, a reveal). A
        change made on another replica is found by the next read, within ``PUSH_S``."""
        self._woken.set()

    def _watch(self) -> None:
        while True:
            self._woken.wait(PUSH_S)
            self._woken.clear()
            try:
                self.push_once()
            except Exception:  # a store that is down for a moment: the next round tries again
                log.exception("room watcher")

    def push_once(self) -> int:
        """One round: rerun every following session whose room changed since its screen was drawn; how many."""
        with self._lock:
            rooms = {code: dict(sessions) for code, sessions in self._rooms.items() if sessions}
            for code in [c for c, sessions in self._rooms.items() if not sessions]:
                del self._rooms[code]
        pushed = 0
        for code, sessions in rooms.items():
            try:
                room = store().room(code)  # one read: its version, and the view the students take (``catch_up``)
                version, view = room.version, room.view
                if all(shown.version >= version for shown in sessions.values()):
                    continue
            except RoomNotFound:  # expired: each student's next run says so
                version, view = None, {}
            else:
                _versions[code], _changes[code] = (time.monotonic(), version), room
            for session_id, shown in sessions.items():
                if version is not None and shown.version >= version:
                    continue
                with self._lock:
                    if self._pushed.get(session_id) == version:
                        continue
                    self._pushed[session_id] = version
                changed = changed_keys(view, shown.view)
                if version is not None and not changed and shown.live_fragment:  # a new question, or its reveal
                    fragment = shown.live_fragment
                elif version is not None and changed and not (changed - BODY):  # the main area's values only
                    fragment = shown.body_fragment
                else:
                    fragment = ""
                # a question's box is a short run: those go at once
                pushed += self._rerun(session_id, fragment, paced=fragment != shown.live_fragment)
        return pushed

    def _rerun(self, session_id: str, fragment_id: str = "", *, paced: bool = True) -> int:
        """Rerun session ``session_id``'s fragment ``fragment_id`` ("": the whole app), once fewer than
        ``PUSH_AT_ONCE`` paced pushes run (``paced``); 1 if asked for, 0 if the session is gone."""
        from streamlit import runtime
        from streamlit.proto.ClientState_pb2 import ClientState

        session = runtime.get_instance().get_app_session(session_id) if runtime.exists() else None
        last = getattr(session, "_client_state", None)
        if session is None or last is None:  # closed (or a Streamlit without it: the student's poll follows)
            self.forget(session_id)
            return 0
        if paced:
            self._wait_for_a_slot(session_id)
        state = ClientState()
        state.CopyFrom(last)
        state.fragment_id = fragment_id  # "" : the whole app
        on_loop = getattr(session, "_call_soon_on_event_loop", None)  # its methods belong to the event loop's thread
        if on_loop is not None:
            on_loop(partial(session.request_rerun, state))
        else:
            session.request_rerun(state)
        return 1

    def _wait_for_a_slot(self, session_id: str) -> None:
        """Wait until fewer than ``PUSH_AT_ONCE`` pushed reruns run (one that has not ended after ``PUSH_ENDS_S`` is
        counted ended: a closed tab), then count ``session_id``'s."""
        with self._lock:
            while True:
                now = time.monotonic()
                for other in [o for o, at in self._running.items() if now - at > PUSH_ENDS_S]:
                    del self._running[other]
                if len(self._running) < PUSH_AT_ONCE:
                    self._running[session_id] = now
                    return
                self._ended.wait(PUSH_ENDS_S)


WATCHER = Watcher()


@dataclass(frozen=True)
class Shown:
    """What a following student's screen shows (``Membership.screen``, told to the watcher) or a run draws
    (``Membership.drawing``): the room's version and the teacher's view, and the ids of the fragments that drew the
    main area (app.py's ``body``; "" if unknown: then a push reruns the whole app) and the question."""

    version: int
    view: dict
    body_fragment: str = ""
    live_fragment: str = ""  # the id of the room's live fragment (the question): a new question reruns it alone


def changed_keys(view: dict, shown: dict) -> set[str]:
    """The keys whose values differ between two teacher's views."""
    return {k for k in set(view) | set(shown) if view.get(k) != shown.get(k)}


def take(view: dict, names) -> None:
    """Put the teacher's values of ``names`` (``FOLLOW`` keys) from ``view`` into this session's widgets."""
    for k in names:
        if k in view:
            try:
                st.session_state[k] = FOLLOW[k](float(view[k])) if FOLLOW[k] is int else FOLLOW[k](view[k])
            except ValueError:
                continue


def in_full_run() -> bool:
    """Whether this thread runs app.py's whole script (``full_run``), not one of its fragments alone."""
    return getattr(_full_run, "active", False)


def say(e: Exception) -> str:
    """A refusal of the store (``RoomError``: English text marked ``N_``, and its values) in the session's language."""
    if isinstance(e, RoomError):
        return _(e.message).format(**e.values)
    return str(e)


def store() -> RoomStore:
    """The process's room store (opened on first use from ``ATTN_ROOM_STORE``)."""
    global _store
    with _store_lock:
        if _store is None:
            _store = open_store()
        return _store


def room_version(code: str) -> int:
    """The room's version, read from the store at most once per ``VERSION_TTL_S`` for all sessions of this process.
    Raises ``RoomNotFound``."""
    now = time.monotonic()
    hit = _versions.get(code)
    if hit and now - hit[0] < VERSION_TTL_S:
        return hit[1]
    v = store().version(code)
    _versions[code] = (now, v)
    return v


@dataclass
class Membership:
    """This session's place in a room: the teacher (holds the secret) or a student (holds a seat)."""

    code: str
    secret: str | None = None  # the teacher's control secret; None for a student
    seat: str = field(default_factory=codes.new_seat)
    following: bool = True  # a student follows the teacher (False: "Explore on my own")
    # what this student's screen shows (a run that drew it to the end: ``after_page``); a teacher's version is the
    # one she took the room's view at (once, on her teacher link)
    screen: Shown = field(default_factory=lambda: Shown(0, {}))
    drawing: Shown | None = None  # the room's version and the teacher's view this run draws
    published: dict = field(default_factory=dict)  # the view this teacher last published
    kept: bool = False  # this teacher's browser was asked to keep the secret (``keep_in_browser``)
    page: str = "attention"  # the last page that is not /room
    question: tuple[int, Question | None] = (0, None)  # (version read at, the current question)
    mine: dict = field(default_factory=dict)  # question id -> this seat's answer

    @property
    def teacher(self) -> bool:
        return self.secret is not None


def membership() -> Membership | None:
    """This session's room, if it is in one."""
    return st.session_state.get(keys.ROOM_SESSION)


def bucket(name: str) -> codes.Bucket:
    """This session's rate limit ``name`` ("join", "answer", "start")."""
    buckets = st.session_state.setdefault(keys.ROOM_BUCKETS, {})
    if name not in buckets:
        buckets[name] = {"join": codes.join_bucket, "answer": codes.answer_bucket, "start": codes.start_bucket}[name]()
    return buckets[name]


def join(code: str | None, secret: str | None = None, seat: str | None = None, *, kept: bool = False) -> bool:
    """Join room ``code`` (as its teacher when ``secret`` is its secret; ``kept``: the secret came from this
    browser's cookie, and a stale one joins quietly as a student); False after noting why not (a wrong or expired
    code, too many tries). Rate-limited per session and, for wrong codes, per process."""
    if not bucket("join").allow():
        st.session_state[keys.ROOM_NOTE] = _("Too many tries to join a class: wait a minute, then try again.")
        return False
    try:
        room = store().room(code)
    except RoomNotFound as e:
        if not codes.FAILED_JOINS.allow():  # many wrong codes from many sessions: each wrong try waits a little
            time.sleep(1.0)
        st.session_state[keys.ROOM_NOTE] = say(e)
        return False
    teacher = secret if codes.secret_matches(secret, room.secret_hash) else None
    if secret and not teacher and not kept:
        st.session_state[keys.ROOM_NOTE] = _("This teacher link is not valid for this class: you joined it as a student.")
    m = Membership(room.code, secret=teacher, seat=seat if codes.is_seat(seat) else codes.new_seat())
    m.page = room.view.get("page", m.page)
    m.published = dict(room.view) if teacher else {}
    st.session_state[keys.ROOM_SESSION] = m
    return True


def start(view: dict) -> Membership | None:
    """Start a class showing ``view`` with this session as its teacher; None after a note when rate-limited."""
    if not bucket("start").allow():
        st.session_state[keys.ROOM_NOTE] = _("You started several classes just now: wait a minute before starting another.")
        return None
    code, secret = store().create(view)
    m = Membership(code, secret=secret, published=dict(view), page=view.get("page", "attention"), screen=Shown(1, dict(view)))
    st.session_state[keys.ROOM_SESSION] = m
    return m


def leave() -> None:
    """Leave the room (a callback)."""
    st.session_state.pop(keys.ROOM_SESSION, None)
    if session_id := Watcher.session_id():
        WATCHER.forget(session_id)
    for k in (keys.ROOM, keys.SEAT, keys.TEACH, keys.LEAD):
        st.query_params.pop(k, None)


def current_view(page: str) -> dict[str, str]:
    """The teacher's view as the store keeps it: the page and every followed value this session holds."""
    view = {"page": page}
    for k in FOLLOW:
        v = st.session_state.get(k)
        if v is not None and not isinstance(v, bool):
            view[k] = str(v)
    return view


def apply_view(view: dict, pages: dict, current_path: str, m: Membership) -> None:
    """Put the teacher's ``view`` into this session's widgets (before they are drawn) and switch to its page."""
    from ui import state  # the callbacks' reset of per-input state (ui.state is the one module that reaches the model)

    if any(view.get(k) is not None and str(st.session_state.get(k)) != view[k] for k in RESETS):
        state.reset_per_input_state()
    take(view, FOLLOW)
    page = view.get("page")
    if page in pages and page != current_path:
        params = {keys.ROOM: m.code, keys.SEAT: m.seat}
        if lang := st.query_params.get(keys.LANG):  # the student's language goes along
            params[keys.LANG] = lang
        st.switch_page(pages[page], query_params=params)


def arrive(pages: dict, current) -> None:
    """Before any widget: read a link's room parameters, keep them in the URL, and make a following student's app
    show the teacher's view (switching page if the teacher is on another)."""
    params = st.query_params
    code, secret, seat = params.get(keys.ROOM), params.get(keys.TEACH), params.get(keys.SEAT)
    if current.url_path not in ("", "room"):
        st.session_state[keys.ROOM_LAST_PAGE] = current.url_path
    m = membership()
    kept = secret_in_browser(code) if code and not secret and m is None and params.get(keys.LEAD) == "1" else None
    if code and (m is None or m.code != codes.clean_code(code) or (secret and not m.teacher)):
        if not join(code, secret or kept, seat, kept=kept is not None):
            for k in (keys.ROOM, keys.TEACH, keys.SEAT, keys.LEAD):
                params.pop(k, None)
        m = membership()
    if secret:
        params.pop(keys.TEACH, None)  # never left in the address bar (a projector shows it)
    if m is None:
        return
    if params.get(keys.ROOM) != m.code:
        params[keys.ROOM] = m.code
    if not m.teacher and params.get(keys.SEAT) != m.seat:
        params[keys.SEAT] = m.seat
    if m.teacher and params.get(keys.LEAD) != "1":
        params[keys.LEAD] = "1"
    elif not m.teacher:
        params.pop(keys.LEAD, None)
    if current.url_path and current.url_path != "room":
        m.page = current.url_path
    if (m.teacher and m.screen.version) or not m.following:  # a teacher takes the room's view once, on a teacher link
        if session_id := Watcher.session_id():
            WATCHER.forget(session_id)
        return
    try:
        room = store().room(m.code)
    except RoomNotFound as e:
        st.session_state[keys.ROOM_NOTE] = say(e)
        leave()
        return
    _versions[m.code] = (time.monotonic(), room.version)
    m.drawing = Shown(room.version, dict(room.view))
    if room.version != m.screen.version:  # a student's: applied again by each run until one draws it to the end
        if m.teacher:  # hers: taken once
            m.screen = replace(m.screen, version=room.version)
        apply_view(room.view, pages, current.url_path, m)


def back_to_class() -> None:
    m = membership()
    if m:
        m.following, m.screen = True, replace(m.screen, version=0)


def explore() -> None:
    m = membership()
    if m:
        m.following = False


def secret_in_browser(code: str | None) -> str | None:
    """The teacher secret this browser keeps for room ``code`` (the cookie ``keep_in_browser`` set), if any."""
    clean = codes.clean_code(code)
    return st.context.cookies.get(TEACHER_COOKIE + clean) if clean else None


def keep_in_browser(m: Membership) -> None:
    """Once per teacher session: ask her browser to keep the room's secret in a cookie (path /, SameSite=Strict,
    for the room's life), so that a reload of her page keeps control. The secret never goes into the address bar,
    which a projector shows; her address carries ``lead=1`` instead, which the students' link never has.
    Streamlit reads cookies but cannot set them: a script in a component's frame (same origin) does."""
    if m.kept or not m.teacher:
        return
    m.kept = True
    if not (codes.clean_code(m.code) == m.code and SECRET_CHARS.fullmatch(m.secret or "")):
        return  # only what the store makes goes into the script (letters, digits, - and _)
    life = max(0, int(store().room(m.code).expires - time.time()))
    cookie = f"{TEACHER_COOKIE}{m.code}={m.secret}; path=/; max-age={life}; samesite=strict"
    components.html(f"<script>document.cookie = {json.dumps(cookie)};</script>", height=0)


def sidebar_box(m: Membership) -> None:
    """The sidebar's room box: which room, who leads, explore / back, nickname, leave."""
    sb = st.sidebar
    sb.subheader(_("Class {code}").format(code=m.code))
    if m.teacher:
        sb.caption(_("You lead this class: students' screens follow yours."))
        with sb:
            keep_in_browser(m)
    elif m.following:
        sb.caption(_("The teacher leads: your screen follows the teacher's."))
        sb.button(_("Explore on my own"), key=keys.ROOM_EXPLORE, on_click=explore, icon=":material/explore:")
    else:
        sb.caption(_("You are exploring on your own; the class goes on."))
        sb.button(_("Back to the class"), key=keys.ROOM_BACK, on_click=back_to_class, icon=":material/group:")
    if not m.teacher:
        sb.text_input(
            _("Nickname (optional)"),
            key=keys.ROOM_NICKNAME,
            max_chars=codes.MAX_NICKNAME,
            help=_("Shown to the teacher only."),
        )
    sb.button(_("Leave the class"), key=keys.ROOM_LEAVE, on_click=leave, type="tertiary")


def panel() -> None:
    """The room's part of a page run: a note, the sidebar box, the teacher's view published, the live question."""
    if note := st.session_state.pop(keys.ROOM_NOTE, None):
        st.warning(note)
    m = membership()
    if m is None:
        return
    sidebar_box(m)
    live()


@contextmanager
def full_run() -> Iterator[None]:
    """Marks app.py's full run (its fragments' own runs are not): there the teacher's view is published after the page
    (``after_page``) and a student's taken before the sidebar (``arrive``), not by the poll or ``catch_up``."""
    _full_run.active = True
    try:
        yield
    finally:
        _full_run.active = False


def catch_up() -> None:
    """In a run of app.py's ``body`` fragment alone (the watcher pushed the teacher's change, or the student changed a
    widget of the main area): a following student takes the teacher's new sentence, kind, layer, head, step and
    lesson step. A change of anything else (page, model, decoding) reruns the whole app, which ``arrive`` takes."""
    m = membership()
    if in_full_run() or m is None or m.teacher or not m.following:
        return
    try:
        version = room_version(m.code)
        if version == m.screen.version:  # the student's own change (the version the watcher read last)
            return
        room = _changes.get(m.code)
        if room is None or room.version != version:  # not the change the watcher read (no watcher: AppTest)
            room = store().room(m.code)
    except RoomNotFound as e:
        st.session_state[keys.ROOM_NOTE] = say(e)
        leave()
        st.rerun(scope="app")
    if room.version == m.screen.version:
        return
    changed = changed_keys(room.view, m.screen.view)
    if changed - BODY:
        st.rerun(scope="app")
    m.drawing = Shown(room.version, dict(room.view))
    if any(k in changed for k in RESETS):
        from ui import state  # the callbacks' reset of per-input state (ui.state is the one module that reaches the model)

        state.reset_per_input_state()
    take(room.view, changed & BODY)


def after_page() -> None:
    """After the page has run. A teacher's view is published now, so that the students' apps, rerun by the change,
    find the teacher's analysis and figures made (``ui.state``, ``ui.figures``) instead of waiting for them. A
    following student's screen now shows the version this run drew; the watcher pushes the next one."""
    m = membership()
    if m is None:
        return
    if m.teacher:
        publish(m)
        return
    if not m.following:
        return
    drawn = m.drawing or m.screen
    m.screen = replace(m.screen, version=drawn.version, view=drawn.view, body_fragment=Watcher.fragment_id())
    register(m)


def register(m: Membership) -> None:
    """Tell the process's watcher what this following student's screen shows now (where a runtime can push)."""
    if session_id := Watcher.session_id():
        WATCHER.follow(m.code, session_id, m.screen)


def publish(m: Membership) -> None:
    """Publish this teacher's view if it changed since the last time (a full run or the poll: fragments too)."""
    view = current_view(m.page)
    if view != m.published:
        try:
            store().publish(m.code, m.secret, view)
            m.published = view
            WATCHER.wake()
        except RoomError as e:
            log.info("view not published: %s", e)


def question_now(m: Membership, version: int) -> Question | None:
    """The room's current question, read again only when the room's version changed."""
    if m.question[0] != version:
        room = store().room(m.code)
        q = store().question(m.code, room.current) if room.current else None
        if q is not None and q.id not in m.mine and not m.teacher:  # a rejoining seat finds its answer
            mine = [a.choice for a in store().answers(m.code, q.id) if a.seat == m.seat]
            if mine:
                m.mine[q.id] = mine[0]
        m.question = (version, q)
    return m.question[1]


def live() -> None:
    """The room's live part, a fragment that polls: every ``POLL_S`` for the teacher and for a student nothing
    pushes to (``Watcher``), else every ``SAFETY_POLL_S``."""
    m = membership()
    pushed = not m.teacher and m.following and Watcher.session_id() is not None
    st.fragment(poll, run_every=SAFETY_POLL_S if pushed else POLL_S)()


def poll() -> None:
    """Poll the room: a following student's app reruns when the version changed; the teacher publishes; both see
    the question being asked (students answer it, the teacher sees the answers come in and reveals)."""
    m = membership()
    if m is None:
        return
    m.screen = replace(m.screen, live_fragment=Watcher.fragment_id())
    try:
        version = room_version(m.code)
    except RoomNotFound as e:
        st.session_state[keys.ROOM_NOTE] = say(e)
        leave()
        st.rerun(scope="app")
    if m.teacher:
        if not in_full_run():  # a fragment's run (e.g. the layer slider's): publish it now
            publish(m)
    elif m.following and version != m.screen.version and not in_full_run():  # a full run applied it
        if store().room(m.code).view != m.screen.view:
            st.rerun(scope="app")
        m.screen = m.drawing = replace(m.screen, version=version)  # only the question changed: shown below, by this run
        register(m)
    q = question_now(m, version)
    if q is None:
        return
    with st.container(border=True):
        if q.kind == "exercise":
            exercise_question(m, q)
        elif m.teacher:
            teacher_question(m, q)
        else:
            student_question(m, q)


def student_question(m: Membership, q: Question) -> None:
    """The question as a student sees it: the options to pick (or a word to type), then the reveal."""
    st.markdown(_("**Question {n}:** {prompt}").format(n=q.id, prompt=md_escape(q.prompt)))
    if q.revealed:
        mine = m.mine.get(q.id)
        st.caption(_("Your answer: {answer}. The model's answer:").format(answer=md_escape(mine) if mine else _("none")))
        results(m, q)
        return
    pick = st.pills(  # labels are Markdown there: escaped, a token shows as itself
        _("Your answer"), q.options, key=f"{keys.ROOM_PICK}_{q.id}", format_func=md_escape, label_visibility="collapsed"
    )
    typed = ""
    if q.kind == "next":
        typed = st.text_input(_("…or type a word"), key=f"{keys.ROOM_TYPED}_{q.id}", max_chars=codes.MAX_ANSWER)
    choice = (typed or "").strip() or pick
    send_answer(m, q, choice, codes.MAX_ANSWER, disabled=not choice)


def send_answer(m: Membership, q: Question, choice: str | None, limit: int, *, disabled: bool = False) -> None:
    """The "Send my answer" button of question ``q`` (rate-limited per session), then what was sent."""
    if st.button(_("Send my answer"), key=f"{keys.ROOM_SEND}_{q.id}", disabled=disabled, type="primary"):
        if not bucket("answer").allow():
            st.warning(_("You are answering very fast: wait a second and send again."))
        else:
            try:
                store().answer(m.code, q.id, m.seat, choice, st.session_state.get(keys.ROOM_NICKNAME) or "")
                m.mine[q.id] = codes.clean_text(choice, limit)
            except RoomError as e:
                st.warning(say(e))
    if q.id in m.mine:
        st.caption(
            _("Sent: {answer}. You can change it until the teacher reveals the answer.").format(answer=md_escape(m.mine[q.id]))
        )


def tally(q: Question, answers) -> tuple[list[str], list[int]]:
    """(labels, counts) of ``answers``: every option in order, then typed words, most frequent first."""
    counts = Counter(a.choice for a in answers)
    typed = [w for w, _n in counts.most_common() if w not in q.options]
    labels = list(q.options) + typed
    return labels, [counts.get(w, 0) for w in labels]


def figure(q: Question, answers) -> go.Figure:
    """The class's answers as bars (share of the class); after the reveal, the model's answer beside them."""
    labels, counts = tally(q, answers)
    n = max(1, sum(counts))
    # plotly reads tags and entities in labels (<a href>, <b>): a typed answer is escaped, so it shows as typed
    x = [html.escape(w) for w in labels]
    name = _("class ({n} answers)").format(n=sum(counts))
    fig = go.Figure(go.Bar(x=x, y=[c / n for c in counts], name=name, text=counts))
    truth = q.truth.get("probs") or q.truth.get("weights")
    if q.revealed and truth:
        name = _("model probability") if q.kind == "next" else _("head's weight")
        fig.add_bar(x=x[: len(q.options)], y=truth, name=name, text=[f"{p:.2f}" for p in truth])
    fig.update_layout(
        barmode="group",
        showlegend=True,
        legend=dict(orientation="h", y=1.15),
        height=320,
        margin=dict(l=10, r=10, t=30, b=10),
        yaxis=dict(range=[0, 1], title=_("share")),
    )
    return fig


def results(m: Membership, q: Question) -> None:
    """The class's answers to ``q`` so far: bars of the options (an exercise: graded, once revealed)."""
    answers = store().answers(m.code, q.id)
    if q.kind == "exercise":
        from analysis.exercises import Exercise

        if q.revealed:
            class_summary(m.code, q, Exercise.from_dict(q.truth), answers)
        else:
            st.caption(_("{n} answers so far").format(n=len(answers)))
        return
    n = len(answers)
    st.caption(_("{n} answers so far").format(n=n) if not q.revealed else _("{n} answers").format(n=n))
    st.plotly_chart(figure(q, answers), key=f"room_hist_{q.id}", config={"displaylogo": False})
    if q.revealed and q.kind == "mask":
        st.markdown(_("The model's answer: **{answer}**").format(answer=md_escape(q.truth.get("answer", "?"))))
        before, after = q.truth.get("before", ""), q.truth.get("after", "")
        st.text(_("before: {before}\nafter:  {after}").format(before=before, after=after))
    elif q.revealed and q.truth.get("best"):
        st.markdown(_("The model's answer: **{answer}**").format(answer=md_escape(q.truth["best"])))


def reveal(m: Membership, qid: int) -> None:
    try:
        store().reveal(m.code, m.secret, qid)
        WATCHER.wake()
    except RoomError as e:
        st.session_state[keys.ROOM_NOTE] = say(e)


def teacher_question(m: Membership, q: Question) -> None:
    """The question as the teacher (the projector) sees it: the answers as they come in, and "Reveal"."""
    st.markdown(_("**Question {n}:** {prompt}").format(n=q.id, prompt=md_escape(q.prompt)))
    results(m, q)
    reveal_button(m, q)


def reveal_button(m: Membership, q: Question) -> None:
    if not q.revealed:
        st.button(
            _("Reveal"), key=keys.ROOM_REVEAL, on_click=reveal, args=(m, q.id), type="primary", icon=":material/visibility:"
        )


def exercise_question(m: Membership, q: Question) -> None:
    """An exercise sent to the room (``q.truth``: ``Exercise.to_dict``): every screen shows it; a student answers in
    the exercise's own answer box; on "Reveal" the teacher sees how many answered, the share right and the most common
    named mistake (``analysis.exercises.class_result``), a student also whether their answer was right, and why not."""
    from analysis.exercises import Exercise, answer_text, grade, read_answer
    from ui import exercises as ux  # the exercise widgets (they reach the model's cached calls through ui.state)

    ex = Exercise.from_dict(q.truth)
    st.markdown(
        _("**Exercise {n}: {title}.** {prompt}").format(n=q.id, title=md_escape(_(ex.title)), prompt=md_escape(ex.prompt))
    )
    if ex.kind != "mask" or ex.labels:
        st.dataframe(ux._shown_table(ex), hide_index=True)  # headers and words in this session's language
    if ex.tolerance:
        st.caption(_("Graded on the rounded numbers shown: each number may be off by ±{tol}.").format(tol=f"{ex.tolerance:g}"))
    answers = store().answers(m.code, q.id) if m.teacher or q.revealed else []
    if not m.teacher and not q.revealed:
        answer = ux._answer_box(ex, f"{keys.ROOM_TYPED}_{q.id}")
        empty = not answer if isinstance(answer, str) else False  # "nothing is masked" is an answer
        send_answer(m, q, answer_text(answer), MAX_EXERCISE_ANSWER, disabled=empty)
        return
    if not q.revealed:
        st.caption(_("{n} answers so far").format(n=len(answers)))
        reveal_button(m, q)
        return
    class_summary(m.code, q, ex, answers)
    mine = m.mine.get(q.id)
    if not m.teacher:
        if mine is None:
            st.caption(_("You did not answer this exercise."))
        else:
            fb = grade(ex, read_answer(ex, mine))
            mark = st.success if fb.correct else st.warning
            mark(_("Your answer: {answer}").format(answer=md_escape(mine)) + "  \n" + md_escape(fb.message))
    with st.expander(_("The worked solution")):
        st.markdown(ux._md(grade(ex, "").solution))


def graded(code: str, q: Question, ex, answers):
    """``analysis.exercises.class_result`` of the answers to exercise ``q`` of room ``code``, computed once per
    process for the same answers (every student's poll after the reveal reads the same result)."""
    from analysis.exercises import class_result

    key = (code, q.id, q.asked, tuple(a.choice for a in answers))
    with _graded_lock:
        hit = _graded.get(key)
    if hit is None:
        hit = class_result(ex, list(key[3]))
        with _graded_lock:
            if len(_graded) >= MAX_GRADED:
                _graded.clear()
            _graded[key] = hit
    return hit


def send_button(ex, key: str) -> None:
    """ "Send to the class" beside exercise ``ex`` (``analysis.exercises.Exercise``), for the teacher of a room only:
    it becomes the room's question, on every student's screen above the page."""
    m = membership()
    if m is None or not m.teacher:
        return
    if st.button(_("Send to the class"), key=key, icon=":material/co_present:", type="tertiary"):
        try:
            store().ask(m.code, m.secret, "exercise", ex.title, [], ex.to_dict())
            WATCHER.wake()
        except RoomError as e:
            st.warning(say(e))
        else:
            st.rerun()  # the exercise above the page, at once


def class_summary(code: str, q: Question, ex, answers) -> None:
    """The class's answers to exercise ``ex``, graded: how many answered, the share right, the most common named
    mistake (``analysis.exercises.class_result``)."""
    from analysis.exercises import MISTAKES

    result = graded(code, q, ex, answers)
    common = MISTAKES.get(result.most_common or "", "")
    st.markdown(
        _("**Answered:** {n} · **right:** {share} %").format(n=result.n, share=round(100 * result.share_correct))
        + "  \n"
        + (
            _("**Most common mistake:** {mistake}").format(mistake=md_escape(_(common)))
            if common
            else _("No named mistake was made.")
        )
    )


def export_csv(m: Membership) -> str:
    """The room's questions and answers as CSV text: one row per answer (a question without any gets one row)."""
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["room", "question", "kind", "prompt", "options", "model_answer", "revealed", "seat", "nickname", "answer", "at"])
    for q in store().questions(m.code):
        model = q.truth.get("best") or q.truth.get("answer") or ""
        head = [m.code, q.id, q.kind, q.prompt, " | ".join(q.options), model, q.revealed]
        rows = store().answers(m.code, q.id) or [None]
        for a in rows:
            tail = [a.seat[:6], a.nickname, a.choice, time.strftime("%H:%M:%S", time.gmtime(a.at))] if a else ["", "", "", ""]
            w.writerow([csv_safe(x) for x in head + tail])
    return out.getvalue()


def csv_safe(value) -> str:
    """``value`` as a CSV cell that a spreadsheet does not run as a formula (a leading = + - @ is quoted with ')."""
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text

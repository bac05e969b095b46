"""Where rooms, questions and answers live: ``RoomStore`` (the rules), ``SqliteRoomStore`` (default, a WAL-mode file
under the app's data folder) and ``RedisRoomStore`` (``ATTN_ROOM_STORE=redis://…``: the replicas share rooms).

The rules, the same for both backends (tests/test_room_store.py runs its tests against each):

- a room is made by ``create`` with a fresh code and teacher secret (``classroom.codes``); only the secret's hash
  is kept; it expires ``ROOM_HOURS`` after it was made, and then reads as unknown;
- only the teacher's secret changes a room (``publish`` the view, ``ask``, ``reveal``): ``NotTeacher`` otherwise;
- the view holds only ``VIEW_KEYS``, each a short string; questions and options are length-limited;
- an "exercise" (``analysis.exercises.Exercise.to_dict``, sent by the teacher) is checked for its shape and size
  (``clean_exercise``: the fields of an exercise, short texts, a small table of numbers, ``MAX_EXERCISE`` characters
  of JSON in all);
- a seat answers the room's current, unrevealed question only, with one of its options (or, for "next", a short
  typed word; for an "exercise", its answer as text of at most ``MAX_EXERCISE_ANSWER`` characters); a repeat
  replaces its earlier answer (one answer per seat and question, never two);
- every change of what students see (view, question, reveal) adds one to the room's ``version``, which the
  students' apps poll.

Messages for users are English here, marked with ``N_`` for the catalogue (this package imports no ``i18n``): a
``RoomError`` keeps its text and values, and the app shows ``ui.room.say(e)``, in the session's language.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from classroom import codes

VIEW_KEYS = {  # what a teacher's view may hold (URL parameter names of the app) -> longest value, characters
    "page": 32,
    "sentence": 1000,
    "model": 64,
    "method": 16,
    "beam_size": 8,
    "alpha": 8,
    "sample_temperature": 8,
    "top_k": 8,
    "top_p": 8,
    "seed": 12,
    "kind": 16,
    "layer": 4,
    "head": 8,
    "step": 4,
    "lesson": 4,
    "query": 4,
    "token": 4,
}


def N_(message: str) -> str:
    """Mark ``message`` for the catalogue (``pybabel extract -k N_``); the app translates it where it is shown."""
    return message


KINDS = {
    "next": N_("Which word comes next?"),
    "source": N_("Which source word does this head read most?"),
    "mask": N_("Does it change?"),
    "exercise": N_("An exercise on the model's numbers"),
}
MAX_OPTIONS = 64
MAX_OPTION = 80  # characters of one option
MAX_PROMPT = 300
MAX_TRUTH = 20_000  # characters of the model's answer as JSON
MAX_QUESTIONS = 200  # per room
MAX_SEATS = 500  # answers per question
MAX_EXERCISE = 20_000  # characters of an exercise as JSON
MAX_EXERCISE_TEXT = 2_000  # characters of an exercise's prompt
MAX_EXERCISE_ROWS = 200  # rows of its table, labels
MAX_EXERCISE_COLUMNS = 16
MAX_EXERCISE_ANSWER = 2_000  # characters of one answer to an exercise (a mask answer is JSON)
EXERCISE_FIELDS = ("kind", "title", "prompt", "table", "params", "labels", "tolerance", "source")


class RoomError(ValueError):
    """A request the room refuses. ``message`` is the English text (marked ``N_``) with ``{name}`` fields, ``values``
    fill them; ``str(e)`` is the English message, ``ui.room.say(e)`` the message in the session's language."""

    def __init__(self, message: str, **values):
        self.message, self.values = message, values
        super().__init__(message.format(**values))


class RoomNotFound(RoomError):
    """No room has this code, or it expired."""


class NotTeacher(RoomError):
    """The secret given is not this room's teacher's."""


@dataclass(frozen=True)
class Room:
    """One class: its code, when it expires (epoch seconds), its version and the teacher's view."""

    code: str
    secret_hash: str = field(repr=False)
    created: float
    expires: float
    version: int
    view: dict[str, str]
    current: int | None  # the question being asked (its id), if any


@dataclass(frozen=True)
class Question:
    """A question of one room: id (1, 2, ... in the room), kind (``KINDS``), prompt, options, the model's answer
    (``truth``, JSON-able; shown on reveal) and whether it was revealed."""

    id: int
    kind: str
    prompt: str
    options: list[str]
    truth: dict
    revealed: bool
    asked: float


@dataclass(frozen=True)
class Answer:
    """One seat's answer to one question."""

    seat: str
    choice: str
    nickname: str
    at: float


def clean_view(view: dict) -> dict[str, str]:
    """``view`` with only ``VIEW_KEYS``, every value a string within its limit. Raises ``RoomError`` on anything else."""
    if not isinstance(view, dict):
        raise RoomError(N_("A view is a mapping of settings."))
    out = {}
    for k, v in view.items():
        if k not in VIEW_KEYS:
            raise RoomError(N_("A room's view cannot hold {name}."), name=repr(str(k)[:40]))
        v = str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
        if not isinstance(v, str) or len(v) > VIEW_KEYS[k]:
            raise RoomError(N_("The room's {name} is too long or not text."), name=k)
        out[k] = v
    return out


def _scalar(v, longest: int = MAX_OPTION) -> bool:
    """Whether ``v`` may be one cell of an exercise's table or one of its parameters: a finite number, a text of at
    most ``longest`` characters, a truth value or nothing."""
    if v is None or isinstance(v, bool):
        return True
    if isinstance(v, (int, float)):
        return math.isfinite(v)
    return isinstance(v, str) and len(v) <= longest


def _plain(v, longest: int = MAX_OPTION, depth: int = 0) -> bool:
    """Whether ``v`` is a scalar, or a short list or small mapping of them (three levels at most: a table of rows)."""
    if _scalar(v, longest):
        return True
    if depth >= 3:
        return False
    if isinstance(v, list):
        return len(v) <= MAX_EXERCISE_ROWS and all(_plain(x, longest, depth + 1) for x in v)
    if isinstance(v, dict):
        return (
            len(v) <= MAX_EXERCISE_COLUMNS
            and all(isinstance(k, str) and len(k) <= MAX_OPTION for k in v)
            and all(_plain(x, longest, depth + 1) for x in v.values())
        )
    return False


def clean_exercise(ex) -> dict:
    """``ex`` (an ``Exercise.to_dict()``, from the teacher's app) if it has the shape and size of one: exactly its
    fields; kind, title and labels short texts, the prompt at most ``MAX_EXERCISE_TEXT`` characters; the table at
    most ``MAX_EXERCISE_COLUMNS`` columns of one length, at most ``MAX_EXERCISE_ROWS`` cells each, of finite numbers
    or short texts; params and source small mappings of those (the source's sentence as long as a view's); a finite tolerance ≥ 0; ``MAX_EXERCISE`` characters of
    JSON in all. Raises ``RoomError`` otherwise (nothing is cut: an exercise is sent whole or not at all)."""
    bad = RoomError(N_("This exercise cannot be sent to the class: it is too large or not an exercise."))
    if not isinstance(ex, dict) or set(ex) != set(EXERCISE_FIELDS):
        raise bad
    text_ok = all(isinstance(ex[k], str) and 0 < len(ex[k]) <= n for k, n in (("kind", 32), ("title", MAX_PROMPT)))
    prompt_ok = isinstance(ex["prompt"], str) and len(ex["prompt"]) <= MAX_EXERCISE_TEXT
    labels = ex["labels"]
    labels_ok = (
        isinstance(labels, list)
        and len(labels) <= MAX_EXERCISE_ROWS
        and all(isinstance(x, str) and len(x) <= MAX_OPTION for x in labels)
    )
    table = ex["table"]
    table_ok = (
        isinstance(table, dict)
        and _plain(table)
        and all(isinstance(c, list) and all(_scalar(x) for x in c) for c in table.values())
        and len({len(c) for c in table.values()}) <= 1
    )
    tol = ex["tolerance"]
    tol_ok = isinstance(tol, (int, float)) and not isinstance(tol, bool) and math.isfinite(tol) and tol >= 0
    maps_ok = isinstance(ex["params"], dict) and _plain(ex["params"])  # the source's sentence: as long as the view's
    maps_ok = maps_ok and isinstance(ex["source"], dict) and _plain(ex["source"], VIEW_KEYS["sentence"])
    if not (text_ok and prompt_ok and labels_ok and table_ok and tol_ok and maps_ok):
        raise bad
    text = json.dumps(ex, ensure_ascii=False, allow_nan=False)
    if len(text) > MAX_EXERCISE:
        raise bad
    return json.loads(text)


class RoomStore(ABC):
    """The rules of rooms over a backend's primitives (the ``_`` methods). Thread-safe. Times are epoch seconds."""

    def __init__(self, clock=time.time):
        self.clock = clock

    # -- what the app calls

    def create(self, view: dict | None = None) -> tuple[str, str]:
        """A new room showing ``view``: returns (join code, teacher secret). Raises ``RoomError`` for a bad view."""
        view = clean_view(view or {})
        now = self.clock()
        secret = codes.new_secret()
        for _ in range(20):
            code = codes.new_code()
            if self._insert_room(code, codes.secret_hash(secret), now, now + codes.ROOM_HOURS * 3600, view):
                return code, secret
        raise RoomError(N_("Could not find a free room code; try again."))  # pragma: no cover - 20 collisions in 8.9e8

    def room(self, code: str | None) -> Room:
        """The room ``code`` names. Raises ``RoomNotFound`` (a clear message) if the code is malformed, unknown or expired."""
        clean = codes.clean_code(code)
        room = self._load_room(clean) if clean else None
        if room is None or room.expires <= self.clock():
            raise RoomNotFound(
                N_(
                    "No class has this code (or it has ended): check the code with your teacher. Codes have 6 letters "
                    "and digits and no O, 0, I, 1 or L."
                )
            )
        return room

    def version(self, code: str) -> int:
        """The room's version (changes whenever what students see changes). Raises ``RoomNotFound``."""
        return self.room(code).version

    def is_teacher(self, code: str, secret: str | None) -> bool:
        """Whether ``secret`` is the teacher secret of room ``code`` (False for an unknown room)."""
        try:
            return codes.secret_matches(secret, self.room(code).secret_hash)
        except RoomNotFound:
            return False

    def publish(self, code: str, secret: str | None, view: dict) -> int:
        """Show ``view`` to the room; returns the new version (the same one if the view did not change).
        Raises ``NotTeacher``, ``RoomNotFound``, ``RoomError`` (a bad view)."""
        room = self._teacher(code, secret)
        view = clean_view(view)
        if view == room.view:
            return room.version
        return self._set_view(room.code, view)

    def ask(self, code: str, secret: str | None, kind: str, prompt: str, options: list[str], truth: dict) -> Question:
        """Ask the room a new question (it becomes the current one). Raises ``NotTeacher``, ``RoomNotFound``,
        ``RoomError`` (unknown kind, too many or too long options, duplicate options, too many questions)."""
        room = self._teacher(code, secret)
        if kind not in KINDS:
            raise RoomError(N_("Unknown kind of question {kind}."), kind=repr(str(kind)[:40]))
        prompt = codes.clean_text(prompt, MAX_PROMPT)
        if kind == "exercise":  # the exercise is the truth: the answers are graded against it, no options
            if not prompt or options:
                raise RoomError(N_("An exercise needs a title and no options."))
            truth = clean_exercise(truth)
            options = []
        else:
            options = [codes.clean_text(o, MAX_OPTION) for o in options]
            if not prompt or not 2 <= len(options) <= MAX_OPTIONS or len(set(options)) != len(options) or "" in options:
                raise RoomError(N_("A question needs a prompt and 2 to 64 different options."))
        truth_json = json.dumps(truth, ensure_ascii=False)
        if len(truth_json) > MAX_TRUTH:
            raise RoomError(N_("The model's answer is too large to keep."))
        if len(self._questions(room.code)) >= MAX_QUESTIONS:
            raise RoomError(N_("A room keeps at most {n} questions."), n=MAX_QUESTIONS)
        return self._insert_question(room.code, kind, prompt, options, json.loads(truth_json), self.clock())

    def reveal(self, code: str, secret: str | None, qid: int) -> int:
        """Reveal the model's answer to question ``qid`` (answers close); returns the new version.
        Raises ``NotTeacher``, ``RoomNotFound``, ``RoomError`` (no such question in this room)."""
        room = self._teacher(code, secret)
        if self.question(room.code, qid) is None:
            raise RoomError(N_("This room has no such question."))
        return self._set_revealed(room.code, int(qid))

    def answer(self, code: str, qid: int, seat: str, choice: str, nickname: str = "") -> None:
        """Seat ``seat``'s answer ``choice`` to question ``qid`` of room ``code``, replacing its earlier one.

        Raises ``RoomNotFound``, ``RoomError`` when ``qid`` is not the room's current open question, the seat is
        malformed, the room is full, or ``choice`` is not one of the options (for "next": not a short typed word)."""
        room = self.room(code)
        if not codes.is_seat(seat):
            raise RoomError(N_("This answer has no valid seat."))
        if room.current is None or int(qid) != room.current:
            raise RoomError(N_("This question is no longer being asked."))
        q = self.question(room.code, int(qid))
        if q is None or q.revealed:
            raise RoomError(N_("This question is closed: the answer has been revealed."))
        if q.kind == "exercise":
            choice_clean = codes.clean_text(choice, MAX_EXERCISE_ANSWER + 1)
            if not choice_clean or len(choice_clean) > MAX_EXERCISE_ANSWER:
                raise RoomError(N_("An answer is 1 to {n} characters."), n=MAX_EXERCISE_ANSWER)
        else:
            choice_clean = codes.clean_text(choice, MAX_OPTION if choice in q.options else codes.MAX_ANSWER)
            if choice_clean not in q.options and (q.kind != "next" or not choice_clean):
                raise RoomError(N_("Pick one of the options."))
        nickname = codes.clean_text(nickname, codes.MAX_NICKNAME)
        if not self._put_answer(room.code, q.id, Answer(seat, choice_clean, nickname, self.clock()), room.expires):
            raise RoomError(N_("This question already has {n} answers."), n=MAX_SEATS)

    def question(self, code: str, qid: int) -> Question | None:
        """Question ``qid`` of room ``code`` (None if the room has none such). Raises ``RoomNotFound``."""
        return next((q for q in self.questions(code) if q.id == qid), None)

    def questions(self, code: str) -> list[Question]:
        """Every question of the room, in the order asked. Raises ``RoomNotFound``."""
        return self._questions(self.room(code).code)

    def answers(self, code: str, qid: int) -> list[Answer]:
        """The answers to question ``qid``, one per seat. Raises ``RoomNotFound``."""
        return self._answers(self.room(code).code, int(qid))

    def purge(self) -> int:
        """Delete expired rooms with their questions and answers; returns how many."""
        return self._purge(self.clock())

    # -- helpers

    def _teacher(self, code: str, secret: str | None) -> Room:
        room = self.room(code)
        if not codes.secret_matches(secret, room.secret_hash):
            raise NotTeacher(N_("Only the teacher who started this class can change it."))
        return room

    # -- what a backend provides

    @abstractmethod
    def _insert_room(self, code: str, secret_hash: str, created: float, expires: float, view: dict) -> bool:
        """Make the room unless the code is taken (False)."""

    @abstractmethod
    def _load_room(self, code: str) -> Room | None: ...

    @abstractmethod
    def _set_view(self, code: str, view: dict) -> int:
        """Set the view and add one to the version, atomically; the new version."""

    @abstractmethod
    def _insert_question(self, code: str, kind: str, prompt: str, options: list[str], truth: dict, at: float) -> Question:
        """Add the question with the next id, make it current, add one to the version, atomically."""

    @abstractmethod
    def _set_revealed(self, code: str, qid: int) -> int: ...

    @abstractmethod
    def _put_answer(self, code: str, qid: int, answer: Answer, expires: float) -> bool:
        """Insert or replace the seat's answer (False: the question is full with other seats)."""

    @abstractmethod
    def _questions(self, code: str) -> list[Question]: ...

    @abstractmethod
    def _answers(self, code: str, qid: int) -> list[Answer]: ...

    @abstractmethod
    def _purge(self, now: float) -> int: ...


SCHEMA = """
CREATE TABLE IF NOT EXISTS rooms (
    code TEXT PRIMARY KEY, secret_hash TEXT NOT NULL, created REAL NOT NULL, expires REAL NOT NULL,
    version INTEGER NOT NULL DEFAULT 1, view TEXT NOT NULL, current INTEGER
);
CREATE TABLE IF NOT EXISTS questions (
    room TEXT NOT NULL REFERENCES rooms(code) ON DELETE CASCADE, id INTEGER NOT NULL, kind TEXT NOT NULL,
    prompt TEXT NOT NULL, options TEXT NOT NULL, truth TEXT NOT NULL, revealed INTEGER NOT NULL DEFAULT 0,
    asked REAL NOT NULL, PRIMARY KEY (room, id)
);
CREATE TABLE IF NOT EXISTS answers (
    room TEXT NOT NULL, qid INTEGER NOT NULL, seat TEXT NOT NULL, choice TEXT NOT NULL, nickname TEXT NOT NULL,
    at REAL NOT NULL, PRIMARY KEY (room, qid, seat), FOREIGN KEY (room, qid) REFERENCES questions(room, id) ON DELETE CASCADE
);
"""


class SqliteRoomStore(RoomStore):
    """Rooms in one SQLite file (WAL mode; one connection per thread). Survives a restart of the server."""

    def __init__(self, path: str | os.PathLike, clock=time.time):
        super().__init__(clock)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.local = threading.local()
        with self._db() as db:
            db.executescript(SCHEMA)

    def _db(self) -> sqlite3.Connection:
        db = getattr(self.local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=10, isolation_level=None)  # autocommit; BEGIN IMMEDIATE below
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            self.local.db = db
        return db

    def _write(self, sql_steps):
        """Run ``sql_steps(db)`` in one write transaction; its result."""
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            out = sql_steps(db)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return out

    def _insert_room(self, code, secret_hash, created, expires, view):
        def run(db):
            db.execute("DELETE FROM rooms WHERE code = ? AND expires <= ?", (code, created))
            cur = db.execute(
                "INSERT OR IGNORE INTO rooms (code, secret_hash, created, expires, view) VALUES (?, ?, ?, ?, ?)",
                (code, secret_hash, created, expires, json.dumps(view)),
            )
            return cur.rowcount == 1

        return self._write(run)

    def _load_room(self, code):
        row = (
            self._db()
            .execute("SELECT code, secret_hash, created, expires, version, view, current FROM rooms WHERE code = ?", (code,))
            .fetchone()
        )
        return None if row is None else Room(*row[:5], json.loads(row[5]), row[6])

    def _set_view(self, code, view):
        def run(db):
            db.execute("UPDATE rooms SET view = ?, version = version + 1 WHERE code = ?", (json.dumps(view), code))
            return db.execute("SELECT version FROM rooms WHERE code = ?", (code,)).fetchone()[0]

        return self._write(run)

    def _insert_question(self, code, kind, prompt, options, truth, at):
        def run(db):
            qid = db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM questions WHERE room = ?", (code,)).fetchone()[0]
            db.execute(
                "INSERT INTO questions (room, id, kind, prompt, options, truth, asked) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (code, qid, kind, prompt, json.dumps(options), json.dumps(truth), at),
            )
            db.execute("UPDATE rooms SET current = ?, version = version + 1 WHERE code = ?", (qid, code))
            return Question(qid, kind, prompt, options, truth, False, at)

        return self._write(run)

    def _set_revealed(self, code, qid):
        def run(db):
            db.execute("UPDATE questions SET revealed = 1 WHERE room = ? AND id = ?", (code, qid))
            db.execute("UPDATE rooms SET version = version + 1 WHERE code = ?", (code,))
            return db.execute("SELECT version FROM rooms WHERE code = ?", (code,)).fetchone()[0]

        return self._write(run)

    def _put_answer(self, code, qid, answer, expires):
        def run(db):
            mine = db.execute("SELECT 1 FROM answers WHERE room = ? AND qid = ? AND seat = ?", (code, qid, answer.seat))
            if mine.fetchone() is None:
                n = db.execute("SELECT COUNT(*) FROM answers WHERE room = ? AND qid = ?", (code, qid)).fetchone()[0]
                if n >= MAX_SEATS:
                    return False
            db.execute(
                "INSERT OR REPLACE INTO answers (room, qid, seat, choice, nickname, at) VALUES (?, ?, ?, ?, ?, ?)",
                (code, qid, answer.seat, answer.choice, answer.nickname, answer.at),
            )
            return True

        return self._write(run)

    def _questions(self, code):
        rows = self._db().execute(
            "SELECT id, kind, prompt, options, truth, revealed, asked FROM questions WHERE room = ? ORDER BY id", (code,)
        )
        return [Question(r[0], r[1], r[2], json.loads(r[3]), json.loads(r[4]), bool(r[5]), r[6]) for r in rows]

    def _answers(self, code, qid):
        rows = self._db().execute(
            "SELECT seat, choice, nickname, at FROM answers WHERE room = ? AND qid = ? ORDER BY at, seat", (code, qid)
        )
        return [Answer(*r) for r in rows]

    def _purge(self, now):
        def run(db):
            old = [r[0] for r in db.execute("SELECT code FROM rooms WHERE expires <= ?", (now,))]
            for code in old:
                db.execute("DELETE FROM answers WHERE room = ?", (code,))
                db.execute("DELETE FROM questions WHERE room = ?", (code,))
                db.execute("DELETE FROM rooms WHERE code = ?", (code,))
            return len(old)

        return self._write(run)


class RedisRoomStore(RoomStore):
    """Rooms in Redis (``redis://host:port/db``), shared by every replica. Each room's keys expire with it (EXPIRE).

    Keys: ``room:CODE`` (hash: secret_hash, created, expires, version, view, current, nq), ``room:CODE:q`` (hash:
    id -> question JSON), ``room:CODE:a:ID`` (hash: seat -> answer JSON)."""

    def __init__(self, url: str, clock=time.time):
        import redis  # only where Redis is used

        super().__init__(clock)
        self.r = redis.Redis.from_url(url, decode_responses=True, socket_timeout=5, health_check_interval=30)
        self.r.ping()

    def _key(self, code: str, *rest) -> str:
        return ":".join(["room", code, *map(str, rest)])

    def _insert_room(self, code, secret_hash, created, expires, view):
        key = self._key(code)
        if not self.r.hsetnx(key, "secret_hash", secret_hash):
            return False
        fields = {"created": repr(created), "expires": repr(expires), "version": 1, "view": json.dumps(view), "nq": 0}
        pipe = self.r.pipeline()
        pipe.hset(key, mapping=fields)
        pipe.expire(key, self._ttl(expires))
        pipe.execute()
        return True

    def _load_room(self, code):
        h = self.r.hgetall(self._key(code))
        if "expires" not in h or "view" not in h:
            return None
        current = int(h["current"]) if h.get("current") else None
        return Room(
            code, h["secret_hash"], float(h["created"]), float(h["expires"]), int(h["version"]), json.loads(h["view"]), current
        )

    def _set_view(self, code, view):
        pipe = self.r.pipeline()
        pipe.hset(self._key(code), "view", json.dumps(view))
        pipe.hincrby(self._key(code), "version", 1)
        return int(pipe.execute()[1])

    def _ttl(self, expires: float) -> int:
        """Seconds until ``expires`` by the store's clock (Redis expires the keys then; the store's check comes first)."""
        return max(1, int(expires - self.clock()) + 1)

    def _expires(self, code) -> int:
        return self._ttl(float(self.r.hget(self._key(code), "expires") or 0))

    def _insert_question(self, code, kind, prompt, options, truth, at):
        qid = int(self.r.hincrby(self._key(code), "nq", 1))  # atomic: two tabs of the teacher never share an id
        q = Question(qid, kind, prompt, options, truth, False, at)
        pipe = self.r.pipeline()
        pipe.hset(self._key(code, "q"), str(qid), json.dumps(vars(q)))
        pipe.expire(self._key(code, "q"), self._expires(code))
        pipe.hset(self._key(code), "current", qid)
        pipe.hincrby(self._key(code), "version", 1)
        pipe.execute()
        return q

    def _set_revealed(self, code, qid):
        raw = self.r.hget(self._key(code, "q"), str(qid))
        q = json.loads(raw)
        q["revealed"] = True
        pipe = self.r.pipeline()
        pipe.hset(self._key(code, "q"), str(qid), json.dumps(q))
        pipe.hincrby(self._key(code), "version", 1)
        return int(pipe.execute()[1])

    # a seat's answer goes in unless the question is full with other seats: one script, atomic
    PUT_ANSWER = """
    if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
        return 0
    end
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
    redis.call('EXPIRE', KEYS[1], ARGV[4])
    return 1
    """

    def _put_answer(self, code, qid, answer, expires):
        key = self._key(code, "a", qid)
        return bool(self.r.eval(self.PUT_ANSWER, 1, key, answer.seat, json.dumps(vars(answer)), MAX_SEATS, self._ttl(expires)))

    def _questions(self, code):
        qs = [Question(**json.loads(v)) for v in self.r.hgetall(self._key(code, "q")).values()]
        return sorted(qs, key=lambda q: q.id)

    def _answers(self, code, qid):
        out = [Answer(**json.loads(v)) for v in self.r.hgetall(self._key(code, "a", qid)).values()]
        return sorted(out, key=lambda a: (a.at, a.seat))

    def _purge(self, now):
        return 0  # Redis expires each room's keys itself (EXPIRE)


DATA_DIR = Path(os.environ.get("ATTENTION_EXPLORER_DATA", Path(__file__).resolve().parent.parent / "data"))


def open_store(url: str | None = None) -> RoomStore:
    """The store ``url`` names, else ``ATTN_ROOM_STORE``: ``redis://…`` (or ``rediss://…``) for Redis,
    ``sqlite:///PATH`` or nothing for SQLite (default: ``rooms.sqlite3`` in the data folder, ``ATTENTION_EXPLORER_DATA``
    or ``data/``). Raises ``ValueError`` for another scheme, ``redis.ConnectionError`` when Redis does not answer."""
    url = url if url is not None else os.environ.get("ATTN_ROOM_STORE", "")
    if url.startswith(("redis://", "rediss://", "unix://")):
        return RedisRoomStore(url)
    if url.startswith("sqlite:///"):
        return SqliteRoomStore(url.removeprefix("sqlite:///"))
    if url:
        raise ValueError("ATTN_ROOM_STORE must be redis://HOST:PORT/DB or sqlite:///PATH")
    return SqliteRoomStore(default_path())


def default_path() -> Path:
    """``rooms.sqlite3`` in the data folder, or, where that folder cannot be written (deploy/Dockerfile's image: the
    code is root's), in ``~/.local/share/attention-explorer``. Raises ``OSError`` if neither can be."""
    for folder in (DATA_DIR, Path.home() / ".local" / "share" / "attention-explorer"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            return folder / "rooms.sqlite3"
    raise OSError("no writable folder for the rooms' database: set ATTENTION_EXPLORER_DATA or ATTN_ROOM_STORE")

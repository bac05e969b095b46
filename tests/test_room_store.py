"""The room store's rules (classroom/store.py), each test run against SQLite and a real redis-server alike:
codes, secrets, who may change a room, what may be in it, one answer per seat and question, expiry, restarts."""

from __future__ import annotations

import concurrent.futures as cf
import os
import subprocess
import sys
from pathlib import Path

import pytest

from classroom import codes
from classroom.store import NotTeacher, RoomError, RoomNotFound, SqliteRoomStore, open_store
from tests.room_support import REDIS_SERVER, redis_server

VIEW = {"page": "attention", "sentence": "I love you.", "kind": "cross", "layer": "2", "head": "3"}


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    if not os.path.exists(REDIS_SERVER):
        pytest.skip("no redis-server (Debian's redis-server package; .ci/run installs it)")
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(params=["sqlite", "redis"])
def backend(request, tmp_path):
    """(store, clock, reopen): a fresh store of each backend; ``reopen()`` opens the same data anew (a restart)."""
    clock = Clock()
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'rooms.sqlite3'}"
    else:
        import redis

        url = request.getfixturevalue("redis_url")
        redis.Redis.from_url(url).flushdb()

    def reopen():
        store = open_store(url)
        store.clock = clock
        return store

    return reopen(), clock, reopen


def test_open_store_picks_the_backend_from_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTN_ROOM_STORE", f"sqlite:///{tmp_path / 'x.sqlite3'}")
    store = open_store()
    assert isinstance(store, SqliteRoomStore) and (tmp_path / "x.sqlite3").exists()
    assert store._db().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with pytest.raises(ValueError):
        open_store("postgres://x")


def test_codes_are_six_symbols_without_look_alikes():
    seen = {codes.new_code() for _ in range(2000)}
    assert len(seen) == 2000  # 8.9e8 codes: 2000 draws collide with probability ~0.2 %
    assert all(len(c) == 6 and set(c) <= set(codes.ALPHABET) for c in seen)
    assert not set("O0I1L") & set("".join(seen)) and len(set("".join(seen))) == len(codes.ALPHABET) == 31
    assert codes.clean_code(" abc-dEF ") == "ABCDEF" and codes.clean_code("ABCDE") is None
    assert codes.clean_code("ABCDE0") is None and codes.clean_code("ABCDEFG") is None


def test_a_room_round_trips_and_survives_a_restart(backend):
    store, _, reopen = backend
    code, secret = store.create(VIEW)
    assert codes.clean_code(code) == code and len(secret) >= 32
    room = store.room(code.lower())
    assert room.view == VIEW and room.version == 1 and room.current is None
    assert secret not in repr(room) and room.secret_hash != secret
    v2 = store.publish(code, secret, VIEW | {"layer": "1"})
    assert v2 == 2 and store.publish(code, secret, VIEW | {"layer": "1"}) == 2  # no change, no new version
    q = store.ask(code, secret, "next", "Which word comes next?", ["ich", "du", "er"], {"probs": [0.5, 0.3, 0.2]})
    store.answer(code, q.id, codes.new_seat(), "du", "Ana")
    again = reopen()
    assert again.room(code).view["layer"] == "1" and again.version(code) == 3
    assert [a.choice for a in again.answers(code, q.id)] == ["du"] and again.questions(code)[0].truth == {
        "probs": [0.5, 0.3, 0.2]
    }


def test_wrong_and_guessed_codes_open_no_room(backend):
    store, _, _ = backend
    code, _ = store.create(VIEW)
    for wrong in ["", "ABC", code[:-1] + ("A" if code[-1] != "A" else "B"), code + "A", "O0I1L2", "<script>", None]:
        with pytest.raises(RoomNotFound, match="No class has this code"):
            store.room(wrong)
    guesses = {codes.new_code() for _ in range(3000)} - {code}
    found = 0
    for g in guesses:
        try:
            store.room(g)
            found += 1
        except RoomNotFound:
            pass
    assert found == 0


def test_only_the_teacher_changes_or_reveals(backend):
    store, _, _ = backend
    code, secret = store.create(VIEW)
    other_code, other_secret = store.create(VIEW)
    q = store.ask(code, secret, "mask", "Does it change?", ["yes", "no"], {"answer": "yes"})
    for bad in [None, "", "x" * 32, other_secret, secret[:-1]]:
        with pytest.raises(NotTeacher):
            store.publish(code, bad, VIEW | {"sentence": "pwned"})
        with pytest.raises(NotTeacher):
            store.ask(code, bad, "mask", "?", ["yes", "no"], {})
        with pytest.raises(NotTeacher):
            store.reveal(code, bad, q.id)
        assert not store.is_teacher(code, bad)
    assert store.room(code).view == VIEW and not store.question(code, q.id).revealed
    assert store.is_teacher(code, secret) and not store.is_teacher(other_code, secret)


def test_a_view_holds_only_known_short_settings(backend):
    store, _, _ = backend
    code, secret = store.create(VIEW)
    for bad in [{"evil": "1"}, {"sentence": "x" * 1001}, {"layer": ["1"]}, {"page": None}]:
        with pytest.raises(RoomError):
            store.publish(code, secret, bad)
    with pytest.raises(RoomError):
        store.create({"unsafe_html": "<b>"})
    with pytest.raises(RoomError):
        store.ask(code, secret, "next", "?", ["a"], {})  # one option is no question
    with pytest.raises(RoomError):
        store.ask(code, secret, "next", "?", ["a", "a"], {})
    with pytest.raises(RoomError):
        store.ask(code, secret, "poll", "?", ["a", "b"], {})
    assert store.room(code).version == 1


def test_a_seat_answers_once_and_a_repeat_replaces(backend):
    store, _, _ = backend
    code, secret = store.create(VIEW)
    q = store.ask(code, secret, "next", "Which word comes next?", ["ich", "du"], {})
    ana, ben = codes.new_seat(), codes.new_seat()
    store.answer(code, q.id, ana, "ich", "Ana")
    store.answer(code, q.id, ana, "du", "Ana")
    store.answer(code, q.id, ben, "  Haus\n ", "")  # "next" takes a typed word, cleaned
    got = {a.seat: a.choice for a in store.answers(code, q.id)}
    assert got == {ana: "du", ben: "Haus"}
    with pytest.raises(RoomError):
        store.answer(code, q.id, "not a seat!", "ich")


def test_answers_are_length_limited_and_kept_as_text(backend):
    store, _, _ = backend
    code, secret = store.create(VIEW)
    q = store.ask(code, secret, "next", "Which word comes next?", ["ich", "du"], {})
    seat = codes.new_seat()
    store.answer(code, q.id, seat, "<img src=x onerror=alert(1)>" * 5, "<b>Ana</b>" * 10)
    (a,) = store.answers(code, q.id)
    assert len(a.choice) == codes.MAX_ANSWER and len(a.nickname) == codes.MAX_NICKNAME
    assert a.choice.startswith("<img src=x")  # kept as typed (the page shows it as text), only cut


def test_a_replayed_answer_is_refused_under_another_question(backend):
    store, _, _ = backend
    code, secret = store.create(VIEW)
    other, other_secret = store.create(VIEW)
    q1 = store.ask(code, secret, "source", "Which source word?", ["I", "love", "you"], {"weights": [0.2, 0.5, 0.3]})
    seat = codes.new_seat()
    store.answer(code, q1.id, seat, "love")
    q2 = store.ask(code, secret, "mask", "Does it change?", ["yes", "no"], {"answer": "no"})
    with pytest.raises(RoomError, match="no longer"):
        store.answer(code, q1.id, seat, "you")  # the old question is closed once the next is asked
    with pytest.raises(RoomError, match="options"):
        store.answer(code, q2.id, seat, "love")  # q1's option replayed under q2
    oq = store.ask(other, other_secret, "mask", "Does it change?", ["yes", "no"], {})
    with pytest.raises(RoomError):
        store.answer(code, oq.id + 5, seat, "yes")  # another room's (or no) question id
    store.answer(code, q2.id, seat, "no")
    store.reveal(code, secret, q2.id)
    with pytest.raises(RoomError, match="revealed"):
        store.answer(code, q2.id, seat, "yes")
    assert [a.choice for a in store.answers(code, q1.id)] == ["love"]
    assert [a.choice for a in store.answers(code, q2.id)] == ["no"] and store.answers(other, oq.id) == []


def test_rooms_expire_after_twelve_hours(backend):
    store, clock, _ = backend
    code, secret = store.create(VIEW)
    clock.now += codes.ROOM_HOURS * 3600 - 1
    assert store.room(code).view == VIEW
    clock.now += 2
    with pytest.raises(RoomNotFound):
        store.room(code)
    with pytest.raises(RoomNotFound):
        store.publish(code, secret, VIEW)
    if isinstance(store, SqliteRoomStore):
        assert store.purge() == 1


def test_many_answers_at_once_are_all_counted_once(backend):
    store, _, reopen = backend
    code, secret = store.create(VIEW)
    q = store.ask(code, secret, "next", "Which word comes next?", ["ich", "du", "er"], {})
    seats = [codes.new_seat() for _ in range(120)]

    def send(i):
        s = reopen()  # a connection of its own, as each replica has
        s.answer(code, q.id, seats[i], ["ich", "du", "er"][i % 3])
        s.answer(code, q.id, seats[i], ["ich", "du", "er"][i % 3])  # a resend: still one answer

    with cf.ThreadPoolExecutor(16) as pool:
        list(pool.map(send, range(120)))
    got = store.answers(code, q.id)
    assert len(got) == 120 and {a.seat for a in got} == set(seats)
    assert sum(a.choice == "du" for a in got) == 40


def test_the_classroom_package_imports_no_torch_nor_streamlit():
    code = "import sys, classroom.store, classroom.codes; print(sorted(m for m in ('torch', 'streamlit') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent.parent, capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr


def test_rate_limits_let_a_burst_through_then_one_per_period():
    b = codes.Bucket(rate=1.0, burst=3)
    assert [b.allow(now=0.0) for _ in range(5)] == [True, True, True, False, False]
    assert b.allow(now=0.5) is False and b.allow(now=1.01) is True and b.allow(now=1.02) is False
    joins = codes.join_bucket()
    tries = sum(joins.allow(now=t / 10) for t in range(600))  # a guesser trying 10 codes a second for a minute
    assert 5 <= tries <= 16, tries  # 5 at once, then one every 6 s
    answers = codes.answer_bucket()
    assert sum(answers.allow(now=t / 100) for t in range(300)) <= 6 + 3 + 1  # 3 s of a client sending 100 a second


def test_a_room_code_guesser_is_slowed_to_hopelessness():
    """With the per-session join limit (5, then 1 per 6 s) and 31**6 codes, one session guessing for 12 hours
    (a room's life) finds any of 1000 open rooms with probability < 1 %; a second guess at the same code never helps."""
    per_session = 5 + 12 * 3600 / 6
    assert len(codes.ALPHABET) ** codes.CODE_LEN > 8e8
    assert per_session * 1000 / len(codes.ALPHABET) ** codes.CODE_LEN < 0.01


def exercise_dict(**changes) -> dict:
    """An exercise as ``analysis.exercises.Exercise.to_dict`` gives it (a scale exercise), with ``changes``."""
    ex = {
        "kind": "scale",
        "title": "Scale the scores",
        "prompt": "Divide each score by √d_head · τ.",
        "table": {"key": ["a", "b"], "q·k_j": [8.0, 4.0]},
        "params": {"d_head": 64, "temperature": 2.0},
        "labels": ["a", "b"],
        "tolerance": 0.01,
        "source": {"model": "reverse", "sentence": "I love you. " * 80},
    }
    return ex | changes


def test_an_exercise_is_sent_whole_checked_and_answered_as_text(backend):
    store, _clock, reopen = backend
    code, secret = store.create(VIEW)
    q = store.ask(code, secret, "exercise", "Scale the scores", [], exercise_dict())
    assert q.kind == "exercise" and q.options == [] and reopen().question(code, q.id).truth == exercise_dict()
    seat = codes.new_seat()
    store.answer(code, q.id, seat, "0.5,\n0.25")  # typed as in the text area: one line, kept as text
    store.answer(code, q.id, seat, '{"future": [1, 2]}')  # a repeat replaces
    assert [a.choice for a in store.answers(code, q.id)] == ['{"future": [1, 2]}']
    with pytest.raises(RoomError, match="1 to 2000 characters"):
        store.answer(code, q.id, seat, "1, " * 700)
    with pytest.raises(RoomError):
        store.answer(code, q.id, seat, "   ")
    with pytest.raises(NotTeacher):
        store.ask(code, "x" * 32, "exercise", "Scale", [], exercise_dict())
    assert len(store.questions(code)) == 1


@pytest.mark.parametrize(
    "bad",
    [
        "not a dict",
        {"kind": "scale"},  # fields missing
        exercise_dict(extra="x"),  # a field an exercise does not have
        exercise_dict(prompt="p" * 2001),
        exercise_dict(title=""),
        exercise_dict(table={"x": [1.0] * 201}),  # too many rows
        exercise_dict(table={"a": [1.0, 2.0], "b": [1.0]}),  # columns of different lengths
        exercise_dict(table={"a": [float("nan"), 1.0]}),  # not a finite number
        exercise_dict(table={"a": ["<script>" * 20]}),  # a cell longer than an option
        exercise_dict(table={"a": [[[[1]]]]}),  # nested too deep
        exercise_dict(labels=["x" * 81]),
        exercise_dict(tolerance=-1),
        exercise_dict(tolerance=True),
        exercise_dict(params={"rows": [[0.1] * 200] * 200}),  # each part in its limits, too large in all
        exercise_dict(source={"sentence": "s" * 1001}),
    ],
)
def test_an_exercise_of_the_wrong_shape_or_size_is_refused(backend, bad):
    store, _clock, _reopen = backend
    code, secret = store.create(VIEW)
    with pytest.raises(RoomError, match="cannot be sent to the class"):
        store.ask(code, secret, "exercise", "Scale the scores", [], bad)
    with pytest.raises(RoomError):
        store.ask(code, secret, "exercise", "Scale the scores", ["a", "b"], exercise_dict())  # an exercise has no options
    assert store.questions(code) == [] and store.room(code).current is None

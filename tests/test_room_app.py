"""The room in the app, headless (``AppTest``): a teacher starts a class on /room, a student's app opened with the
join link follows the teacher's page and sentence, a question is answered and revealed, a wrong code is refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
MODELS = Path(os.environ.get("ATTENTION_EXPLORER_MODELS", ROOT / "pretrained"))
if not (MODELS / "reverse" / "config.json").exists():
    pytest.skip("no reverse checkpoint", allow_module_level=True)

from app_charts import ok, switch_to  # noqa: E402  (tests/app_charts.py)
from streamlit.testing.v1 import AppTest  # noqa: E402

from classroom import codes  # noqa: E402
from ui import catalog, keys, room  # noqa: E402
from ui.widgets import md_escape  # noqa: E402

TIMEOUT = 120


@pytest.fixture(autouse=True)
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_EXPLORER_DEBUG", "1")
    monkeypatch.setenv("ATTN_ROOM_STORE", f"sqlite:///{tmp_path / 'rooms.sqlite3'}")
    monkeypatch.setattr(room, "_store", None)
    monkeypatch.setattr(room, "VERSION_TTL_S", 0.0)
    room._versions.clear()
    room._graded.clear()
    yield room.store()


def app(page: str | None = None, **params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    params.setdefault("model", "reverse")
    for k, v in params.items():
        at.query_params[k] = str(v)
    if page:
        switch_to(at, page)
    at.run()
    return ok(at)


def on_page(at: AppTest, page: str) -> bool:
    return catalog.PAGE_BY_PATH[page].teaches in [c.value for c in at.caption]


def test_a_student_follows_the_teacher_and_answers(store):
    teacher = app("room")
    teacher.button(key=keys.ROOM_START).click().run()
    ok(teacher)
    m = teacher.session_state[keys.ROOM_SESSION]
    assert m.teacher and codes.clean_code(m.code) == m.code
    shown = [c.value for c in teacher.code]
    join_link = next(s for s in shown if keys.TEACH not in s)
    assert join_link.endswith(f"?room={m.code}") and m.secret not in join_link
    assert any(f"teach={m.secret}" in s for s in shown), "the teacher link is on the page (in its expander)"
    assert m.secret not in json.dumps(dict(teacher.query_params)), "the secret never sits in the address bar"

    switch_to(teacher, "attention").run()
    teacher.text_input(key=keys.SENTENCE).set_value(" x y z").run()
    ok(teacher)
    assert store.room(m.code).view["page"] == "attention" and store.room(m.code).view["sentence"] == " x y z"

    student = app("translate", room=m.code)
    s = student.session_state[keys.ROOM_SESSION]
    assert not s.teacher and s.following and student.session_state[keys.SENTENCE] == " x y z"
    assert on_page(student, "attention"), "the student was taken to the teacher's page"
    assert student.query_params[keys.ROOM] == m.code and student.query_params[keys.SEAT] == s.seat

    teacher.text_input(key=keys.SENTENCE).set_value(" p q").run()
    switch_to(teacher, "steps").run()
    ok(teacher)
    assert store.room(m.code).view["page"] == "steps"
    student.run()
    ok(student)
    assert student.session_state[keys.SENTENCE] == " p q" and on_page(student, "steps")

    switch_to(teacher, "room").run()
    teacher.radio(key=keys.ROOM_ASK_KIND).set_value("next").run()
    teacher.button(key=keys.ROOM_ASK).click().run()
    ok(teacher)
    (q,) = store.questions(m.code)
    assert q.kind == "next" and 2 <= len(q.options) <= 8 and abs(sum(q.truth["probs"]) - 1) < 0.5
    student.run()
    ok(student)
    assert any(q.prompt in md.value for md in student.markdown), "the student sees the question"
    store.answer(m.code, q.id, s.seat, q.options[0], "Ana")  # what the student's "Send" does (pills: see the browser test)
    teacher.button(key=keys.ROOM_REVEAL).click().run()
    ok(teacher)
    assert store.question(m.code, q.id).revealed
    fig = json.loads(teacher.get("plotly_chart")[0].proto.spec)
    assert len(fig["data"]) == 2, "after the reveal the model's probabilities stand beside the class's answers"
    csv = room.export_csv(teacher.session_state[keys.ROOM_SESSION])
    assert q.prompt in csv and "Ana" in csv and q.options[0] in csv

    # "Explore on my own": the student's app no longer follows
    student.button(key=keys.ROOM_EXPLORE).click().run()
    store.publish(m.code, m.secret, store.room(m.code).view | {"sentence": " z z"})
    student.run()
    assert student.session_state[keys.SENTENCE] == " p q"
    student.button(key=keys.ROOM_BACK).click().run()
    student.run()
    assert student.session_state[keys.SENTENCE] == " z z"


def test_a_rejoining_seat_keeps_its_answer_and_a_wrong_code_is_refused(store):
    code, secret = store.create({"page": "translate", "sentence": " a b"})
    q = store.ask(code, secret, "mask", "Does it change?", ["yes", "no"], {"answer": "no"})
    seat = codes.new_seat()
    store.answer(code, q.id, seat, "yes")
    student = app("translate", room=code, seat=seat)
    assert student.session_state[keys.ROOM_SESSION].seat == seat
    assert any("Sent: yes" in c.value for c in student.caption), "the answer given before the drop is still there"

    wrong = app("translate", room="ZZZZZ9" if code != "ZZZZZ9" else "ZZZZZ8")
    assert keys.ROOM_SESSION not in wrong.session_state
    assert any("No class has this code" in w.value for w in wrong.warning)
    assert keys.ROOM not in wrong.query_params

    forged = app("translate", room=code, teach="x" * 32)
    assert not forged.session_state[keys.ROOM_SESSION].teacher
    assert keys.TEACH not in forged.query_params


def test_typed_answers_show_as_text_in_the_chart_and_the_csv(store):
    code, secret = store.create({"page": "translate"})
    q = store.ask(code, secret, "next", "Which word comes next?", ["ich", "du"], {"probs": [0.7, 0.3], "best": "ich"})
    evil = "<a href='https://x.test'>=1+1</a>"
    store.answer(code, q.id, codes.new_seat(), evil, "=cmd|' /C calc'!A0")
    store.reveal(code, secret, q.id)
    q = store.question(code, q.id)
    fig = room.figure(q, store.answers(code, q.id))
    labels = list(fig.data[0].x)
    assert labels[:2] == ["ich", "du"] and labels[2].startswith("&lt;a href=") and "<" not in labels[2]
    assert list(fig.data[1].y) == [0.7, 0.3], "the reveal stands the model's probabilities beside the class"
    csv = room.export_csv(room.Membership(code, secret=secret))
    assert "'=cmd" in csv and "\n=cmd" not in csv and ",=cmd" not in csv, "no cell starts a spreadsheet formula"


def test_an_exercise_sent_to_the_room_is_graded_on_reveal(store):
    from analysis import exercises as ex

    teacher = app("room")
    teacher.button(key=keys.ROOM_START).click().run()
    m = teacher.session_state[keys.ROOM_SESSION]
    teacher.radio(key=keys.ROOM_ASK_KIND).set_value("exercise").run()
    teacher.selectbox(key=keys.ROOM_ASK_EXERCISE).set_value("scale").run()
    teacher.button(key=keys.ROOM_ASK).click().run()
    ok(teacher)
    (q,) = store.questions(m.code)
    exercise = ex.Exercise.from_dict(q.truth)
    assert q.kind == "exercise" and q.options == [] and exercise.kind == "scale" and q.prompt == exercise.title
    right = ex.solve(exercise)
    slip, wrong = next(iter(ex.mistakes(exercise).items()))  # a named mistake's answer, distinct from the right one

    answered = []
    for answer in (right, wrong):  # two students, each in the exercise's own answer box, then "Send my answer"
        student = app("translate", room=m.code)
        assert any(exercise.title in md.value for md in student.markdown), "the student sees the exercise"
        box = f"{keys.ROOM_TYPED}_{q.id}"
        field = student.text_area(key=box) if len(exercise.labels) > 1 else student.text_input(key=box)
        field.set_value("\n".join(f"{v:.4f}" for v in answer)).run()
        student.button(key=f"{keys.ROOM_SEND}_{q.id}").click().run()
        ok(student)
        answered.append(student)
    assert len(store.answers(m.code, q.id)) == 2

    teacher.run()
    assert any("2 answers so far" in c.value for c in teacher.caption)
    teacher.button(key=keys.ROOM_REVEAL).click().run()
    ok(teacher)
    shown = "\n".join(md.value for md in teacher.markdown)
    assert "**Answered:** 2 · **right:** 50 %" in shown, shown
    assert md_escape(ex.MISTAKES[slip]) in shown, "the reveal names the most common mistake"
    for student, was_right in zip(answered, (True, False), strict=True):
        student.run()
        ok(student)
        said = [s.value for s in (student.success if was_right else student.warning)]
        assert any("Your answer" in s for s in said), said
    assert [k[:2] for k in room._graded] == [(m.code, q.id)], "the class is graded once, not once per screen and poll"


def test_a_german_session_sees_the_room_in_german(store):
    code, secret = store.create({"page": "translate"})
    store.ask(code, secret, "mask", "Ändert es sich?", ["ja", "nein"], {"answer": "nein"})
    student = app("translate", room=code, lang="de")
    assert any(h.value == f"Klasse {code}" for h in student.subheader), [h.value for h in student.subheader]
    assert student.button(key=keys.ROOM_LEAVE).label == "Klasse verlassen"
    assert any(md.value.startswith("**Frage 1:**") for md in student.markdown)
    assert student.button(key=f"{keys.ROOM_SEND}_1").label == "Meine Antwort senden"
    english = app("translate", room=code)
    assert english.button(key=keys.ROOM_LEAVE).label == "Leave the class", "German is never served to an English session"

    wrong = app("translate", room="ZZZZZ9" if code != "ZZZZZ9" else "ZZZZZ8", lang="de")
    assert any(w.value.startswith("Keine Klasse hat diesen Code") for w in wrong.warning), "the store's refusal, in German"


def test_plotly_serialises_with_the_pinned_orjson():
    """Every chart of every student's page is serialised by plotly: with orjson installed (requirements.txt pins it)
    plotly's "auto" engine takes it, several times faster than the json module on the arrays of a figure."""
    import importlib.metadata

    import plotly.io as pio

    pin = next(line for line in (ROOT / "requirements.txt").read_text().splitlines() if line.startswith("orjson=="))
    assert pin == f"orjson=={importlib.metadata.version('orjson')}", "the installed orjson is the pinned one"
    assert pio.json.config.default_engine in ("auto", "orjson")
    assert pio.json.to_json_plotly({"a": 1}, engine="orjson") == '{"a":1}', "plotly finds orjson"


def test_the_teacher_sends_the_exercise_on_screen_and_only_a_teacher_has_the_button(store):
    from analysis import exercises as ex

    teacher = app("room")
    teacher.button(key=keys.ROOM_START).click().run()
    m = teacher.session_state[keys.ROOM_SESSION]
    switch_to(teacher, "exercises").run()
    ok(teacher)
    base = keys.exercise("exercises", teacher.selectbox(key=keys.EXERCISE_PICK).value)
    teacher.button(key=f"{base}_send").click().run()
    ok(teacher)
    (q,) = store.questions(m.code)
    assert q.kind == "exercise" and ex.Exercise.from_dict(q.truth).to_dict() == teacher.session_state[f"{base}_exercise"]

    alone = app("exercises")
    assert f"{base}_send" not in [b.key for b in alone.button], "no room, no button"
    student = app("exercises", room=m.code)
    assert f"{base}_send" not in [b.key for b in student.button], "a student cannot send to the class"

"""Exercises in the app (issue 55), run headless with ``streamlit.testing.v1.AppTest``: on /exercises, in the
"Your turn" mode of /head, /positional and /shapes and in the lesson's "Try it" boxes, each exercise renders, takes
an answer and shows feedback (right, a named mistake, the general hint), with no exception, on the toy ``reverse``
model and on the shipped ``en-de``. While a "Your turn" exercise is unanswered the page's numbers that would give it
away are not drawn; once it is answered they are.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("ATTENTION_EXPLORER_MODELS", ROOT / "pretrained"))
TIMEOUT = 240
SENTENCES = {"reverse": " a b c d e", "en-de": "The dog sleeps in the garden."}
HAVE = [m for m in SENTENCES if (MODELS / m / "config.json").exists()]
if "reverse" not in HAVE:
    pytest.skip("no reverse checkpoint", allow_module_level=True)

from app_charts import ok, page_alone, switch_to, titles  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from analysis import exercises as ex  # noqa: E402
from ui import keys  # noqa: E402
from ui.widgets import md_escape  # noqa: E402


def open_page(page: str, model: str = "reverse", **params) -> AppTest:
    at = page_alone(page, str(MODELS / model), SENTENCES[model], timeout=TIMEOUT)
    for k, v in params.items():
        at.query_params[k] = str(v)
    return ok(at.run())


def exercise_of(at: AppTest, place: str, kind: str) -> ex.Exercise:
    """The exercise the page shows at ``place`` (the page keeps its dict in the session)."""
    return ex.Exercise.from_dict(at.session_state[f"{keys.exercise(place, kind)}_exercise"])


def answer(at: AppTest, place: str, e: ex.Exercise, value) -> AppTest:
    """Type ``value`` (what ``solve`` returns, or a mistake's answer) into the exercise's box and press Check."""
    base = keys.exercise(place, e.kind)
    if e.kind == "mask":
        for reason in ex.MASK_REASONS:
            at.multiselect(key=f"{base}_{reason}").set_value(sorted(value) if reason == "future" else [])
    else:
        text = str(list(value)) if e.kind == "shape" else ", ".join(f"{v:.4f}" for v in value)
        box = at.text_area(key=base) if e.kind not in ("shape",) and len(e.labels) > 1 else at.text_input(key=base)
        box.set_value(text)
    at.button(key=f"{base}_check").click().run()
    return ok(at)


def check_feedback(at: AppTest, place: str, kind: str) -> None:
    """A named mistake, an unrelated answer, then the right one (with the reasons) are each answered as they should be."""
    e = exercise_of(at, place, kind)
    wrong = ex.mistakes(e)
    if wrong:
        code, value = next(iter(wrong.items()))
        answer(at, place, e, value)
        assert any(md_escape(ex.MISTAKES[code]) in w.value for w in at.warning), (code, [w.value for w in at.warning])
        assert any("The step that fixes it" in w.value for w in at.warning)
    if e.kind == "shape":
        other = [*ex.solve(e), 5]
    elif e.kind == "mask":
        other = set(range(len(e.labels))) - ex.solve(e) or {0}
    else:
        other = [v + 0.37 * (i + 1) for i, v in enumerate(ex.solve(e))]
    answer(at, place, e, other)
    if e.kind != "mask" or other not in wrong.values():  # the general hint
        assert any("not one of the usual slips" in w.value for w in at.warning), [w.value for w in at.warning]
    base = keys.exercise(place, kind)
    if e.kind == "mask":  # the right keys, each under one of its reasons
        reasons = ex.key_reasons(e)
        for reason in ex.MASK_REASONS:
            at.multiselect(key=f"{base}_{reason}").set_value([j for j, why in enumerate(reasons) if why and min(why) == reason])
        at.button(key=f"{base}_check").click().run()
        ok(at)
    else:
        answer(at, place, e, ex.solve(e))
    assert [s.value for s in at.success] and at.success[0].value.startswith("Right"), [w.value for w in at.warning]
    at.toggle(key=f"{base}_solution").set_value(True).run()
    ok(at)
    assert any("**" in m.value for m in at.markdown)  # the worked solution, its results in bold


@pytest.mark.parametrize("model", HAVE)
@pytest.mark.parametrize("kind", ex.EXERCISE_KINDS)
def test_exercises_page(model, kind):
    at = open_page("exercises", model)
    at.selectbox(key=keys.EXERCISE_PICK).set_value(kind).run()
    ok(at)
    assert at.dataframe and at.get("download_button")
    check_feedback(at, "exercises", kind)
    progress = at.session_state[keys.EXERCISE_PROGRESS][kind]
    assert progress["solved"] == 1 and progress["tries"] >= 2
    before = exercise_of(at, "exercises", kind)
    at.button(key=keys.EXERCISE_NEW).click().run()  # new numbers: a fresh exercise, an empty answer
    ok(at)
    if exercise_of(at, "exercises", kind) != before:
        assert not at.success


@pytest.mark.parametrize("model", HAVE)
@pytest.mark.parametrize(
    "step, hidden_chart",
    [("scale", "Scores q"), ("mask", "keys K"), ("softmax", "Softmax weights"), ("weighted_sum", "Head output")],
)
def test_your_turn_on_the_head_page_hides_the_stage_until_answered(model, step, hidden_chart):
    at = open_page("head", model, kind="dec_self", layer=1, head=1, query=2)
    assert any(hidden_chart in t for t in titles(at))
    at.toggle(key=keys.HEAD_TURN).set_value(True).run()
    at.selectbox(key=keys.HEAD_TURN_STEP).set_value(step).run()
    ok(at)
    assert not any(hidden_chart in t for t in titles(at)), "the stage's numbers are hidden until answered"
    check_feedback(at, "head", step)
    assert any(hidden_chart in t for t in titles(at)), "answered: the page goes on"


@pytest.mark.parametrize("model", HAVE)
def test_your_turn_on_the_positional_page(model):
    at = open_page("positional", model)
    at.toggle(key=keys.PE_TURN).set_value(True).run()
    ok(at)
    n_before = len(titles(at))
    check_feedback(at, keys.PE_TURN, "positional")
    assert len(titles(at)) > n_before, "answered: the encoding's figures are drawn"


@pytest.mark.parametrize("model", HAVE)
def test_your_turn_on_the_shapes_page(model):
    at = open_page("shapes", model)
    n_tables = len(at.dataframe)
    at.toggle(key=keys.SHAPES_TURN).set_value(True).run()
    ok(at)
    assert len(at.dataframe) == 1, "only the exercise's own table: the shapes wait for the answer"
    check_feedback(at, keys.SHAPES_TURN, "shape")
    assert len(at.dataframe) == n_tables + 1


@pytest.mark.parametrize("model", HAVE)
@pytest.mark.parametrize("step, kind", [(3, "softmax"), (5, "mask"), (7, "next_token")])
def test_try_it_in_the_lesson(model, step, kind):
    at = open_page("lesson", model, lesson=step)
    assert any(e.label.startswith("Try it") for e in at.expander)
    check_feedback(at, "lesson", kind)


def test_lesson_steps_without_an_exercise_have_no_try_it():
    at = open_page("lesson", lesson=1)
    assert not any(e.label.startswith("Try it") for e in at.expander)


def test_the_page_is_in_the_app(monkeypatch):
    monkeypatch.setenv("ATTENTION_EXPLORER_DEBUG", "1")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params["model"] = "reverse"
    at.query_params["sentence"] = SENTENCES["reverse"]
    ok(at.run())
    ok(switch_to(at, "exercises").run())
    assert at.selectbox(key=keys.EXERCISE_PICK).value == "scale"
    assert not at.query_params.get(keys.EXERCISE_PICK), "progress and picks stay out of the URL"


def test_the_head_pages_exercise_shows_its_own_traces_numbers_rounded():
    """The exercise of /head is built from the page's traced pass: its inputs are ``head_trace``'s values, rounded."""
    import numpy as np

    from analysis.trace import head_trace
    from model.checkpoint import load_checkpoint

    rev = load_checkpoint(MODELS / "reverse", device="cpu")
    at = open_page("head", kind="dec_self", layer=2, head=2, query=3)
    at.toggle(key=keys.HEAD_TURN).set_value(True).run()
    traces = {
        q: head_trace(rev.model, rev.tokenizer, SENTENCES["reverse"], kind="dec_self", layer=1, head=1, query=q)
        for q in (2, 3, 4)
    }
    t = traces[3]
    for step in ("scale", "softmax", "weighted_sum"):
        at.selectbox(key=keys.HEAD_TURN_STEP).set_value(step).run()
        e = exercise_of(ok(at), "head", step)
        assert e.source["query"] == 3 and e.source["layer"] == 1 and e.source["head"] == 1
        if step == "scale":
            keys_shown = [int(k.split(":")[0]) for k in e.table["key"]]
            np.testing.assert_allclose(e.table["q·k_j"], np.round(t.scores[keys_shown].astype(float), 2), atol=1e-9)
        elif step == "softmax":
            np.testing.assert_allclose(e.table["scaled score"], np.round(t.scaled.astype(float), 2), atol=1e-9)
            assert e.params["rows"] == [2, 4]
            row4 = [np.nan if v is None else v for v in e.table["row of query 4"]]
            want = np.where(traces[4].mask, np.nan, np.round(traces[4].scaled.astype(float), 2))
            np.testing.assert_allclose(row4, want, atol=1e-9)
        else:
            np.testing.assert_allclose(e.table["w_j"], np.round(t.weights.astype(float), 2), atol=1e-9)
            d = e.params["dims"][0]
            np.testing.assert_allclose(e.table[f"v_j[{d}]"], np.round(t.v[:, d].astype(float), 2), atol=1e-9)

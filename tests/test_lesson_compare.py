"""The "Compare two sentences" and "Lesson" pages (ui/pages/compare.py, ui/pages/lesson.py) run headless
with ``streamlit.testing.v1.AppTest``, and the computation behind Compare (``analysis.analyze.align_pieces``,
``encoder_distance``).

The figures the pages hand to the browser (read back from the chart protos as JSON) carry the model's
numbers: Compare marks exactly the output pieces difflib finds changed (worked out here, independently,
from the two translations), its difference map is B's map minus A's when the two have the same shape and
is absent otherwise, and the encoder distances are 0 for identical inputs and positive where they differ.
The lesson walks from step 1 to the last with Next (the URL follows, every step draws its figure with the
model's numbers), goes back with Previous, opens at ``?lesson=5``, and presenter mode adds its CSS. Pages
run on their own (``app_charts.page_alone``: the ``page`` function handed the frame app.py would hand it) on
the small ``reverse`` checkpoint; the minimal pair "too tired / too wide" runs on ``en-de`` when it is there.
"""

from __future__ import annotations

import difflib
import html
import os
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("ATTENTION_EXPLORER_MODELS", ROOT / "pretrained"))
REVERSE, EN_DE = MODELS / "reverse", MODELS / "en-de"
TIMEOUT = 180  # seconds per script run: the first one loads the model

if not (REVERSE / "config.json").exists():
    pytest.skip(f"no reverse checkpoint at {REVERSE}", allow_module_level=True)

from app_charts import chart, chart_array, ok, page_alone, switch_to, titles  # noqa: E402  (tests/app_charts.py)
from streamlit.testing.v1 import AppTest  # noqa: E402

from analysis.analyze import align_pieces, analyze, encoder_distance, step_trace, teacher_forced  # noqa: E402
from analysis.attribution import explain  # noqa: E402
from analysis.records import ATTENTION, EncoderDistance, head_average  # noqa: E402
from model.checkpoint import load_checkpoint  # noqa: E402
from model.facts import shift_right  # noqa: E402
from model.transformer import Interventions  # noqa: E402
from ui import catalog, keys  # noqa: E402
from ui.lesson_text import LESSON  # noqa: E402
from viz.compare import distance_figure  # noqa: E402

SENTENCE = " a b c d e"
PAIRS = catalog.PAIRS["reverse"]


@pytest.fixture(autouse=True)
def _debug(monkeypatch):
    monkeypatch.setenv("ATTENTION_EXPLORER_DEBUG", "1")


@pytest.fixture(scope="module")
def rev():
    return load_checkpoint(REVERSE, device="cpu")


def open_page(page: str, model: Path = REVERSE, sentence: str = SENTENCE, **params) -> AppTest:
    """Run ``ui/pages/<page>.py`` once, with the frame app.py would set (greedy) and these URL parameters."""
    at = page_alone(page, str(model), sentence, timeout=TIMEOUT)
    for k, v in params.items():
        at.query_params[k] = str(v)
    return ok(at.run())


def chip_marks(at: AppTest, css: str) -> tuple[list[str], list[str]]:
    """Text and mark (the chip's title: "changed", or "token" when unmarked) of each chip of the row ``css``."""
    bodies = [h.proto.body for h in at.get("html") if f'class="{css}"' in h.proto.body]
    assert len(bodies) == 1, f"expected one chip row {css}, found {len(bodies)}"
    spans = re.findall(r'title="([^"]*)">(.*?)</span>', bodies[0])
    return [html.unescape(t) for _, t in spans], [m for m, _ in spans]


def changed_by_difflib(a: list[str], b: list[str]) -> tuple[set[int], set[int]]:
    """Positions of a and of b outside difflib's matching of the two."""
    ops = difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
    return (
        {i for op, i1, i2, _, _ in ops if op != "equal" for i in range(i1, i2)},
        {j for op, _, _, j1, j2 in ops if op != "equal" for j in range(j1, j2)},
    )


# -- the computation -------------------------------------------------------------------------------------------------


def test_align_pieces_pairs_by_position_or_by_matching():
    assert align_pieces([1, 2, 3], [1, 9, 3]) == [(0, 0), (1, 1), (2, 2)]
    assert align_pieces([1, 2, 3, 4], [1, 2, 5, 4, 6]) == [(0, 0), (1, 1), (2, 2), (3, 3)]  # 3 -> 5 substituted, 6 new
    assert align_pieces([1, 2, 3], [1, 7, 8, 3]) == [(0, 0), (2, 3)]  # 2 -> 7 8: no partner
    assert align_pieces([], [4]) == []


def test_encoder_distance_is_zero_for_one_input_and_positive_where_inputs_differ(rev):
    same = encoder_distance(rev.model, rev.tokenizer, " a b c d", " a b c d")
    assert same.by_position and (same.distance == 0).all() and same.same_piece.all() and same.scale > 0
    d = encoder_distance(rev.model, rev.tokenizer, " a b c d", " a b x d")
    assert d.by_position and d.same_piece.tolist() == [True, True, False, True, True]
    assert (d.distance > 0).all(), "self-attention carries the changed letter into every position's vector"
    longer = encoder_distance(rev.model, rev.tokenizer, " a b c d", " a b c d e")
    assert not longer.by_position and longer.unmatched_b == [4] and longer.unmatched_a == []
    assert longer.pairs[-1] == (4, 5)  # <eos> with <eos>


def test_distance_figure_draws_one_bar_per_pair_and_names_substituted_pieces():
    d = EncoderDistance(
        a_tokens=[" a", " c", "<eos>"],
        b_tokens=[" a", " x", " y", "<eos>"],
        pairs=[(0, 0), (1, 1), (2, 3)],
        distance=np.array([0.5, 2.0, 0.25], dtype=np.float32),
        same_piece=np.array([True, False, True]),
        by_position=False,
        scale=4.0,
    )
    fig = distance_figure(d)
    assert list(fig.data[0].y) == [0.5, 2.0, 0.25] and [list(p) for p in fig.data[0].customdata] == [[0, 0], [1, 1], [2, 3]]
    assert fig.layout.xaxis.ticktext == ("▁a", "▁c → ▁x", "&lt;eos&gt;")
    assert fig.layout.shapes[0].y0 == 4.0 and "matching pieces" in fig.layout.title.text
    assert d.unmatched_b == [2] and d.unmatched_a == []
    with pytest.raises(ValueError, match="one of each per pair"):
        distance_figure(EncoderDistance([" a"], [" a"], [(0, 0)], np.zeros(2, np.float32), np.ones(1, bool), True, 1.0))


# -- Compare two sentences ----------------------------------------------------------------------------------------------


def compare_marks_match_difflib(at: AppTest, a: str, b: str, model) -> None:
    ra, rb = analyze(model.model, model.tokenizer, a), analyze(model.model, model.tokenizer, b)
    want_a, want_b = changed_by_difflib(ra.tgt_out_tokens, rb.tgt_out_tokens)
    for css, r, want in (("cmp-out-a", ra, want_a), ("cmp-out-b", rb, want_b)):
        texts, marks = chip_marks(at, css)
        assert len(texts) == len(r.tgt_out_tokens)
        assert {i for i, m in enumerate(marks) if m == "changed"} == want, css
        assert set(marks) <= {"changed", "token"}
    texts = [h.proto.body for h in at.get("html") if 'class="translation"' in h.proto.body]
    assert [html.unescape(re.sub(r"<[^>]+>", "", t)).strip() for t in texts] == [ra.translation, rb.translation]


def test_compare_marks_exactly_the_changed_tokens(rev):
    at = open_page("compare", pair="one-letter")
    assert at.text_input(key=keys.COMPARE_A).value == PAIRS["one-letter"].sentence_a
    compare_marks_match_difflib(at, PAIRS["one-letter"].sentence_a, PAIRS["one-letter"].sentence_b, rev)
    _, marks = chip_marks(at, "cmp-out-b")
    assert marks.count("changed") == 1, "one letter changed: one output piece differs"


@pytest.mark.skipif(not (EN_DE / "config.json").exists(), reason=f"no en-de checkpoint at {EN_DE}")
def test_compare_marks_the_changed_tokens_of_the_minimal_pair_on_en_de():
    pair = catalog.PAIRS["translate"]["tired-wide"]
    at = open_page("compare", model=EN_DE, sentence="Hello.", pair="tired-wide")
    compare_marks_match_difflib(at, pair.sentence_a, pair.sentence_b, load_checkpoint(EN_DE, device="cpu"))
    assert dict(at.query_params) == {"pair": "tired-wide"}


def test_compare_difference_map_is_b_minus_a_when_the_counts_match(rev):
    at = open_page("compare", pair="one-letter", kind="cross", layer=1, head=2)
    pair = PAIRS["one-letter"]
    ra, rb = analyze(rev.model, rev.tokenizer, pair.sentence_a), analyze(rev.model, rev.tokenizer, pair.sentence_b)
    a_map, b_map = ra.maps.cross[0, 1], rb.maps.cross[0, 1]
    np.testing.assert_allclose(np.nan_to_num(chart_array(chart(at, "A: Cross")["data"][0]["z"])), a_map, atol=1e-6)
    diff = chart_array(chart(at, "B − A")["data"][0]["z"]).astype(float)
    np.testing.assert_allclose(diff, b_map - a_map, atol=1e-6)
    assert np.abs(diff).max() > 0

    at.radio(key=keys.KIND).set_value("enc_self").run()
    ok(at)
    diff = chart_array(chart(at, "B − A: Encoder")["data"][0]["z"]).astype(float)
    np.testing.assert_allclose(diff, rb.maps.enc_self[0, 1] - ra.maps.enc_self[0, 1], atol=1e-6)


@pytest.mark.skipif(not (EN_DE / "config.json").exists(), reason=f"no en-de checkpoint at {EN_DE}")
def test_compare_feeds_a_translation_to_b_when_only_the_translations_differ_in_length():
    """too tired / too big: the sources have the same pieces count, the translations not ("müde" and "groß": 18 and 17
    output pieces; the preset tired / wide differs in length no more since stage 10 wrote "zu breit"); the difference
    map is B's cross-attention while writing A's translation (teacher forcing) minus A's own."""
    m = load_checkpoint(EN_DE, device="cpu")
    a, b = (f"The animal didn't cross the street because it was too {w}." for w in ("tired", "big"))
    ra, rb = analyze(m.model, m.tokenizer, a), analyze(m.model, m.tokenizer, b)
    assert len(ra.source.ids) == len(rb.source.ids) and len(ra.out_ids) != len(rb.out_ids), "the case this test is for"
    at = open_page("compare", model=EN_DE, a=a, b=b, kind="cross", layer=2, head=3)
    cfg = m.model.cfg
    tgt_in, tgt_out = shift_right(ra.out_ids, bos_id=cfg.bos_id, eos_id=cfg.eos_id, max_len=cfg.max_len)
    forced = teacher_forced(m.model, rb.source.ids, tgt_in, tgt_out)
    diff = chart_array(chart(at, "B − A, both writing A's translation")["data"][0]["z"]).astype(float)
    np.testing.assert_allclose(diff, forced.cross[1, 2] - ra.maps.cross[1, 2], atol=1e-5)
    assert np.abs(diff).max() > 0 and not at.info


def test_compare_draws_no_difference_when_the_counts_differ():
    at = open_page("compare", pair="longer", kind="cross")
    assert not [t for t in titles(at) if t.startswith("B − A")], titles(at)
    assert any(i.value.startswith("No difference map") for i in at.info)
    assert {t.split(":")[0] for t in titles(at)} >= {"A", "B"}


def test_compare_distances_are_zero_for_identical_inputs_and_positive_where_they_differ(rev):
    at = open_page("compare", a=" a b c d", b=" a b c d")
    assert (chart_array(chart(at, "encoder output moved")["data"][0]["y"]) == 0).all()
    assert dict(at.query_params) == {"a": " a b c d", "b": " a b c d"}, "own sentences go to the URL as a= and b="
    _, marks = chip_marks(at, "cmp-out-b")
    assert "changed" not in marks

    at.text_input(key=keys.COMPARE_B).set_value(" a b x d").run()
    ok(at)
    y = chart_array(chart(at, "encoder output moved")["data"][0]["y"]).astype(float)
    want = encoder_distance(rev.model, rev.tokenizer, " a b c d", " a b x d").distance
    np.testing.assert_allclose(y, want, atol=1e-5)
    assert y[2] > 0 and y[2] == y.max(), "the changed letter's own vector moves most"
    assert dict(at.query_params) == {"pair": "one-letter"}, "a preset pair goes to the URL by its key"


def test_compare_preset_picker_fills_both_sentences():
    at = open_page("compare")
    at.selectbox(key=keys.COMPARE_PICK).set_value("order").run()
    ok(at)
    assert (at.text_input(key=keys.COMPARE_A).value, at.text_input(key=keys.COMPARE_B).value) == (" a b c", " c b a")
    assert at.query_params["pair"] == "order"


# -- Lesson ------------------------------------------------------------------------------------------------------------

LAST = len(LESSON)
FIGURE = {  # a part of the title of each step's figure (step 1 draws a table)
    2: "positional encoding added",
    3: "Encoder self-attention, layer",
    4: "every layer (rows)",
    5: "Decoder causal self-attention, layer",
    6: "Cross-attention, layer",
    7: "most probable next pieces",
    8: "hypothesis the beam kept",
    9: "hidden",
    10: "Why ",
}


def heading(at: AppTest) -> str:
    return at.subheader[0].value


def check_step_numbers(at: AppTest, k: int, rev) -> None:
    """The figure of step ``k`` holds the model's numbers for SENTENCE."""
    a = analyze(rev.model, rev.tokenizer, SENTENCE)
    cfg = rev.model.cfg
    if k == 1:
        assert at.dataframe[0].value["compact id"].tolist() == a.source.ids
        return
    fig = chart(at, FIGURE[k])
    if k == 2:
        pe = rev.model.positional_encoding(len(a.source.ids)).detach().numpy()
        np.testing.assert_allclose(chart_array(fig["data"][0]["z"]), pe, atol=1e-5)
    elif k in (3, 5, 6):  # the default: the last layer, mean over heads
        kind = {3: "enc_self", 5: "dec_self", 6: "cross"}[k]
        attn = getattr(a.maps, kind)
        z = chart_array(fig["data"][0]["z"]).astype(float)
        want = head_average(attn, attn.shape[0] - 1)
        drawn = ~np.isnan(z)
        np.testing.assert_allclose(z[drawn], want[drawn], atol=1e-5)
        assert np.allclose(np.nansum(z, axis=1), 1, atol=1e-4)
        assert (k == 5) == (~drawn).any(), "only the causal step greys cells (the masked future)"
    elif k == 4:
        assert fig["layout"]["meta"]["L"] == cfg.n_enc_layers and fig["layout"]["meta"]["H"] == cfg.n_heads
    elif k == 7:
        first = step_trace(rev.model, rev.tokenizer, a.source.ids)[0]
        np.testing.assert_allclose(chart_array(fig["data"][0]["x"]), [p for _, _, p in first.candidates], atol=1e-5)
    elif k == 10:  # the first output token, layer 2's mean over heads, the gradient methods on request
        e = explain(rev.model, rev.tokenizer, a.source.ids, a.out_ids, 0, ig_steps=0)
        z = chart_array(fig["data"][0]["z"]).astype(float)
        assert fig["layout"]["meta"]["methods"] == list(e.methods)
        np.testing.assert_allclose(z[0] * fig["layout"]["meta"]["scale"][0], e.scores(cfg.n_dec_layers - 1)[ATTENTION], atol=1e-5)
    elif k == 9:
        hidden = at.selectbox(key=keys.LESSON_HIDE).value
        z = chart_array(fig["data"][0]["z"]).astype(float)
        assert np.isnan(z[:, hidden]).all() and not np.isnan(np.delete(z, hidden, axis=1)).any()
        after = analyze(rev.model, rev.tokenizer, SENTENCE, interventions=Interventions(src_hidden=frozenset({hidden})))
        texts = [h.proto.body for h in at.get("html") if 'class="translation"' in h.proto.body]
        assert html.unescape(re.sub(r"<[^>]+>", "", texts[1])).strip() == after.translation


def test_lesson_next_walks_every_step_and_each_draws_its_figure(rev):
    at = open_page("lesson")
    assert heading(at) == "1 · Tokens and ids" and keys.LESSON not in at.query_params
    assert at.button(key=keys.LESSON_PREV).disabled
    check_step_numbers(at, 1, rev)
    for k in range(2, LAST + 1):
        at.button(key=keys.LESSON_NEXT).click().run()
        ok(at)
        assert at.query_params[keys.LESSON] == str(k)
        assert heading(at) == f"{k} · {LESSON[k - 1].title}"
        assert at.markdown[0].value.startswith(LESSON[k - 1].text.split("{")[0]), "the step's paragraph comes first"
        assert f"Step {k} of {LAST}" in at.get("progress")[0].proto.text
        check_step_numbers(at, k, rev)
        assert at.latex, "steps 2 to the last each have the paper's equation"
    assert at.button(key=keys.LESSON_NEXT).disabled
    at.button(key=keys.LESSON_PREV).click().run()
    ok(at)
    assert at.query_params[keys.LESSON] == str(LAST - 1) and heading(at).startswith(f"{LAST - 1} · ")


def test_lesson_opens_at_the_step_in_the_url_and_previous_goes_back(rev):
    at = open_page("lesson", lesson=5)
    assert heading(at) == "5 · The causal mask"
    check_step_numbers(at, 5, rev)
    assert r"-\infty" in at.latex[0].value
    at.button(key=keys.LESSON_PREV).click().run()
    ok(at)
    assert heading(at) == "4 · Many heads, many layers" and at.query_params[keys.LESSON] == "4"
    at = open_page("lesson", lesson=99)
    assert heading(at).startswith(f"{LAST} · ") and at.query_params[keys.LESSON] == str(LAST)
    at = open_page("lesson", step=3)  # as a teacher may write it
    assert heading(at).startswith("3 · ") and at.query_params[keys.LESSON] == "3"


def test_presenter_mode_adds_the_css_and_keeps_it_in_the_url():
    def css(at: AppTest) -> list[str]:
        return [h.proto.body for h in at.get("html") if "stSidebar" in h.proto.body]

    at = open_page("lesson", lesson=3)
    assert not css(at) and keys.PRESENTER not in at.query_params
    at.toggle(key=keys.PRESENTER).set_value(True).run()
    ok(at)
    (body,) = css(at)
    assert "display: none" in body and "font-size" in body and at.query_params[keys.PRESENTER] == "1"
    assert chart(at, FIGURE[3])["layout"]["font"]["size"] > 12, "figures get larger text too"
    at = open_page("lesson", presenter=1)
    assert css(at) and at.toggle(key=keys.PRESENTER).value
    at.toggle(key=keys.PRESENTER).set_value(False).run()
    assert not css(ok(at)) and keys.PRESENTER not in at.query_params


@pytest.mark.parametrize("page", ["compare", "lesson"])
def test_page_inside_the_app(page):
    assert page in catalog.PAGE_BY_PATH
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params["model"] = "reverse"
    at.query_params["sentence"] = SENTENCE
    ok(at.run())
    ok(switch_to(at, page).run())
    assert catalog.PAGE_BY_PATH[page].teaches in [c.value for c in at.caption]
    assert at.get("plotly_chart") or at.dataframe

"""The "Inside one head" page (ui/pages/head.py) run headless with ``streamlit.testing.v1.AppTest``.

The figures the page hands to the browser (read back from the chart protos as JSON) carry the model's
numbers: the weights bar sums to 1 and equals the head's map in ``analyze``; masked keys get weight 0
and a score of −∞ with the reason; an intervention picked on the page shows up in the numbers. The page
runs on its own (``app_charts.page_alone``: its ``page`` function handed the frame app.py would hand it) and, once
it is in the app's navigation (``ui.catalog.PAGES``), inside the app. On the small ``reverse`` checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("ATTENTION_EXPLORER_MODELS", ROOT / "pretrained"))
REVERSE = MODELS / "reverse"
TIMEOUT = 180  # seconds per script run: the first one loads the model

if not (REVERSE / "config.json").exists():
    pytest.skip(f"no reverse checkpoint at {REVERSE}", allow_module_level=True)

from app_charts import chart, chart_array, ok, page_alone, switch_to  # noqa: E402  (tests/app_charts.py)
from streamlit.testing.v1 import AppTest  # noqa: E402

from analysis.analyze import analyze  # noqa: E402
from model.checkpoint import load_checkpoint  # noqa: E402
from model.transformer import Interventions  # noqa: E402
from ui import catalog, keys  # noqa: E402

SENTENCE = " a b c d e"


@pytest.fixture(scope="module")
def rev():
    return load_checkpoint(REVERSE, device="cpu")


def open_page(**params) -> AppTest:
    """Run the page once, with the frame app.py would set (reverse model, greedy) and these URL parameters."""
    at = page_alone("head", str(REVERSE), SENTENCE, timeout=TIMEOUT)
    for k, v in params.items():
        at.query_params[k] = str(v)
    return ok(at.run())


def weights_and_scores(at: AppTest) -> tuple[np.ndarray, np.ndarray, dict]:
    """The weights bar's values, the scaled-score bars (NaN where −∞) and the scores figure."""
    w = chart_array(chart(at, "Softmax weights")["data"][0]["y"]).astype(float)
    scores = chart(at, "Scores q")
    return w, chart_array(scores["data"][1]["y"]).astype(float), scores


def minus_inf_keys(scores: dict) -> list[int]:
    """Keys the scores figure draws as −∞."""
    inf = [tr for tr in scores["data"] if tr.get("name", "").startswith("masked")]
    if not inf:
        return []
    assert set(inf[0]["text"]) == {"\u2212\u221e"}
    return [int(x) for x in chart_array(inf[0]["x"])]


@pytest.mark.parametrize("kind, layer, head, query", [("enc_self", 1, 1, 2), ("dec_self", 2, 2, 1), ("cross", 1, 2, 3)])
def test_page_weights_are_the_models_and_sum_to_one(rev, kind, layer, head, query):
    at = open_page(kind=kind, layer=layer, head=head, query=query)
    w, scaled, scores = weights_and_scores(at)
    assert abs(w.sum() - 1) < 1e-5
    a = analyze(rev.model, rev.tokenizer, SENTENCE)
    np.testing.assert_allclose(w, getattr(a.maps, kind)[layer - 1, head - 1, query], atol=1e-5)
    masked = minus_inf_keys(scores)
    if kind == "dec_self":  # the causal mask: every key after the query
        assert masked == list(range(query + 1, len(a.tgt_in_tokens)))
        assert all("causal" in cd[1] for cd in scores["data"][2]["customdata"])
    else:
        assert masked == []
    assert (w[masked] == 0).all() and np.isnan(scaled[masked]).all() and not np.isnan(np.delete(scaled, masked)).any()
    assert "sum = 1.000" in chart(at, "Softmax weights")["layout"]["title"]["text"]


def test_page_shows_every_stage_for_cross_attention():
    at = open_page(kind="cross", query=1)
    for title in ("input row x", "keys K", "Values V", "Scores q", "Softmax weights", "Head output", "Concatenate the heads"):
        chart(at, title)
    assert "encoder memory" in chart(at, "keys K")["layout"]["title"]["text"]
    text = " ".join(m.value for m in at.markdown)
    assert "q comes from the decoder state" in text and "softmax(QKᵀ/√d_k)" in text
    assert len(at.dataframe) == 1


def test_hidden_token_and_temperature_show_up_in_the_numbers(rev):
    at = open_page(kind="enc_self", layer=1, head=1, query=3)
    at.multiselect(key="trace_hide").set_value([1]).run()
    at.slider(key="trace_temp").set_value(2.0).run()
    ok(at)
    w, scaled, scores = weights_and_scores(at)
    assert minus_inf_keys(scores) == [1] and w[1] == 0 and abs(w.sum() - 1) < 1e-5
    interventions = Interventions(src_hidden=frozenset({1}), temperature=2.0)
    a = analyze(rev.model, rev.tokenizer, SENTENCE, interventions=interventions)
    np.testing.assert_allclose(w, a.maps.enc_self[0, 0, 3], atol=1e-5)
    assert "hidden" in scores["data"][2]["customdata"][0][1]
    assert "τ = 2" in scores["layout"]["title"]["text"]
    assert any(c.value.startswith("What if: hidden source tokens") and "τ = 2" in c.value for c in at.caption)


def test_switching_the_head_off_zeroes_its_block_of_the_concatenation(rev):
    at = open_page(kind="cross", layer=2, head=2, query=0)
    at.toggle(key="trace_off").set_value(True).run()
    ok(at)
    z = chart_array(chart(at, "Concatenate the heads")["data"][0]["z"])
    dh = rev.model.cfg.d_head
    assert (z[0, dh : 2 * dh] == 0).all() and (z[0, :dh] != 0).any()
    assert "switched off" in chart(at, "Softmax weights")["layout"]["title"]["text"]


def test_a_query_past_a_shorter_output_is_moved_inside_it():
    at = open_page(kind="enc_self", query=5)
    assert at.select_slider(key="query").value == 5
    at.radio(key=keys.KIND).set_value("dec_self").run()
    ok(at)
    assert at.select_slider(key="query").value < 6


@pytest.mark.skipif(
    "head" not in catalog.PAGE_BY_PATH, reason="ui/pages/head.py is not in the app's navigation (ui.catalog.PAGES) yet"
)
def test_page_inside_the_app(monkeypatch):
    monkeypatch.setenv("ATTENTION_EXPLORER_DEBUG", "1")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params["model"] = "reverse"
    at.query_params["sentence"] = SENTENCE
    ok(at.run())
    ok(switch_to(at, "head").run())
    w, _, _ = weights_and_scores(at)
    assert abs(w.sum() - 1) < 1e-5


def test_a_link_opens_its_head_and_out_of_range_values_move_to_the_last_one(rev):
    """``?head=N`` selects head N here as on every page (and the older ``?trace_head=N`` still does); a layer or
    head beyond the model's opens the last one, and the URL never names one that is not shown."""
    at = open_page(kind="cross", layer=2, head=2, query=0)
    assert at.slider(key="trace_head").value == 2 and at.slider(key="layer").value == 2
    assert at.query_params["head"] == "2"
    assert any("head 2" in m.value for m in at.markdown)
    at = open_page(kind="cross", trace_head=2, query=0)
    assert at.slider(key="trace_head").value == 2 and at.query_params["head"] == "2" and "trace_head" not in at.query_params
    n_dec, n_heads = rev.model.cfg.n_dec_layers, rev.model.cfg.n_heads
    at = open_page(kind="dec_self", layer=n_dec + 3, head=n_heads + 5, query=0)
    assert at.slider(key="layer").value == n_dec and at.slider(key="trace_head").value == n_heads
    assert at.query_params.get("layer", str(n_dec)) == str(n_dec), "the URL never names a layer that is not shown"
    assert at.query_params["head"] == str(n_heads)


HEAD_CONTROLS = {  # widget, key, value -> the interventions the "What if…" box means
    ("multiselect", "trace_hide", (1,)): Interventions(src_hidden=frozenset({1})),
    ("slider", "trace_window", 2): Interventions(window=2),
    ("slider", "trace_temp", 0.5): Interventions(temperature=0.5),
}
BITES = {  # (kind, control key): whether the control changes this head's weights for the query traced below
    ("enc_self", "trace_hide"): True,
    ("enc_self", "trace_window"): True,
    ("enc_self", "trace_temp"): True,
    ("cross", "trace_hide"): True,
    ("cross", "trace_window"): True,  # the window is a rule of self-attention, but it changes the encoder memory
    ("cross", "trace_temp"): True,
    ("dec_self", "trace_window"): True,
    ("dec_self", "trace_temp"): True,
}


@pytest.mark.parametrize(("kind", "control"), list(BITES))
def test_each_what_if_control_shows_analyze_under_its_interventions(rev, kind, control):
    """Issue 24: After equals ``analyze(..., interventions)``'s row for the same settings, and differs from Before
    where the control bites (here: everywhere, the window on cross-attention through the encoder memory it changes)."""
    (widget, key, value), interventions = next(
        (c, interventions) for c, interventions in HEAD_CONTROLS.items() if c[1] == control
    )
    at = open_page(kind=kind, layer=1, head=1, query=3)
    before, _, _ = weights_and_scores(at)
    getattr(at, widget)(key=key).set_value(list(value) if widget == "multiselect" else value).run()
    ok(at)
    after, _, _ = weights_and_scores(at)
    want = getattr(analyze(rev.model, rev.tokenizer, SENTENCE, interventions=interventions).maps, kind)[0, 0, 3]
    np.testing.assert_allclose(after, want[: len(after)], atol=1e-5)
    assert abs(after.sum() - 1) < 1e-5
    changed = before.shape != after.shape or not np.allclose(before, after, atol=1e-5)
    assert changed == BITES[(kind, control)], f"{control} on {kind}: After {'≠' if changed else '='} Before"

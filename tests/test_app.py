"""The Streamlit app run headless with ``streamlit.testing.v1.AppTest``.

Each page (opened by its URL path with ``app_charts.switch_to``), each slider/toggle/button
changed, with no exception; and the figures the app hands to the browser (read back from the chart
protos as JSON) hold the model's real numbers: heatmap rows sum to 1, masked cells are not drawn as
weights, axis labels are the tokens, a tile of a mosaic is the head it claims to be. The URL keeps
short keys (``kind=cross``, ``method=beam``), and links of the single-page app (``?view=Attention&
kind=Cross-attention``) still open their page. Runs on the small ``reverse`` checkpoint (fast); some
tests open the default ``en-de``. Skips when the checkpoints are missing.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
MODELS = Path(os.environ.get("ATTENTION_EXPLORER_MODELS", ROOT / "pretrained"))
REVERSE = MODELS / "reverse"
TIMEOUT = 120  # seconds per script run: the first one loads the model

if not (REVERSE / "config.json").exists():
    pytest.skip(
        f"no reverse checkpoint at {REVERSE} (python -m training.train --task reverse --out pretrained/reverse)",
        allow_module_level=True,
    )

from app_charts import chart, chart_array, charts, ok, switch_to  # noqa: E402  (tests/app_charts.py)
from streamlit.testing.v1 import AppTest  # noqa: E402

from analysis.analyze import analyze, step_trace  # noqa: E402
from model.checkpoint import load_checkpoint  # noqa: E402
from model.facts import KIND_NAMES  # noqa: E402
from model.settings import DecodeSettings  # noqa: E402
from model.transformer import Interventions  # noqa: E402
from ui import catalog, state  # noqa: E402
from viz.tokens import display  # noqa: E402

SENTENCE = " a b c d e"
PAGES = [p.path for p in catalog.PAGES]


@pytest.fixture(autouse=True)
def _debug(monkeypatch):
    monkeypatch.setenv("ATTENTION_EXPLORER_DEBUG", "1")  # the app re-raises instead of showing a polite error


@pytest.fixture(scope="module")
def rev():
    return load_checkpoint(REVERSE, device="cpu")


def open_url(**params) -> AppTest:
    """Run app.py once on the root URL with these query parameters (model defaults to reverse)."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    params.setdefault("model", "reverse")
    for k, v in params.items():
        at.query_params[k] = str(v)
    at.run()
    return ok(at)


def run_app(page: str | None = None, **params) -> AppTest:
    """Open ``page`` (its URL path, ``/<page>``; None: the root URL, which opens Translate) with these URL query
    parameters (short keys), and check it did not fail."""
    at = open_url(**params)
    if page is not None:
        switch_to(at, page).run()
    return ok(at)


def on_page(at: AppTest, page: str) -> bool:
    """Whether ``at`` shows ``page``: each page explains itself in one caption of its own."""
    return catalog.PAGE_BY_PATH[page].teaches in [c.value for c in at.caption]


def weights(fig: dict) -> np.ndarray:
    """The weight trace's z (data[0]) as float, NaN where not drawn as a weight."""
    return chart_array(fig["data"][0]["z"]).astype(float)


def grey(fig: dict) -> np.ndarray:
    """Cells drawn grey by the mask traces (heatmaps after data[0] with a flat colour scale)."""
    z = weights(fig)
    out = np.zeros(z.shape, dtype=bool)
    for tr in fig["data"][1:]:
        if tr.get("type") == "heatmap":
            out |= chart_array(tr["z"]).astype(float) == 1
    return out


def check_drawn_weights(fig: dict) -> np.ndarray:
    """NaN only where a mask trace draws grey (or in mosaic gutters); weights within [0, 1]. Returns z."""
    z = weights(fig)
    assert fig["data"][0].get("hoverongaps") is False
    drawn = z[~np.isnan(z)]
    assert ((drawn >= -1e-6) & (drawn <= 1 + 1e-6)).all()
    if "gap" not in fig["layout"]["meta"]:  # a single map: every NaN is a grey (masked) cell
        assert (np.isnan(z) == grey(fig)).all()
    return z


def tile(fig: dict, l: int, h: int) -> np.ndarray:
    m = fig["layout"]["meta"]
    Q, K, gap = m["Q"], m["K"], m["gap"]
    return weights(fig)[l * (Q + gap) : l * (Q + gap) + Q, h * (K + gap) : h * (K + gap) + K]


def tick_matches(ticks: list[str], tokens: list[str]) -> bool:
    """Tick labels are the display tokens (possibly cut with '…' and followed by ' → predicted')."""
    if len(ticks) != len(tokens):
        return False
    for tick, tok in zip(ticks, display(tokens), strict=True):
        t = html.unescape(tick).split(" \u2192 ")[0]
        if not (t == tok or (t.endswith("…") and tok.startswith(t[:-1]))):
            return False
    return True


# -- every view -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES)
def test_every_page_runs_and_explains_itself(page):
    at = run_app(page, sentence=SENTENCE)
    assert on_page(at, page), "no 'what this page teaches' caption"
    assert at.get("plotly_chart") or at.get("dataframe")
    assert at.get("download_button"), "no export on this view"


def test_default_model_opens_on_en_de():
    if not (MODELS / "en-de" / "config.json").exists():
        pytest.skip("pretrained/en-de is not trained yet")
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    ok(at)
    assert at.selectbox(key="model").value == "en-de"
    body = " ".join(h.proto.body for h in at.get("html"))
    assert 'class="translation"' in body


def test_switching_model_starts_over_with_its_own_example():
    if not (MODELS / "en-de" / "config.json").exists():
        pytest.skip("pretrained/en-de is not trained yet")
    at = run_app("steps", sentence=" x y z", step=2)
    at.selectbox(key="model").set_value("en-de").run()
    ok(at)
    assert at.text_input(key="sentence").value == catalog.EXAMPLES["translate"][0]
    assert at.select_slider(key="step").value == 1


def test_the_reverse_model_says_what_input_it_reads():
    at = run_app(sentence=" a b c")
    assert not [i for i in at.info if "single letters" in i.value]
    at = run_app(sentence="I love you.")
    assert [i for i in at.info if "single letters" in i.value]


def test_switching_between_two_translation_models_keeps_the_sentence():
    if not all((MODELS / m / "config.json").exists() for m in ("en-de", "en-de-captions")):
        pytest.skip("needs pretrained/en-de and pretrained/en-de-captions")
    typed = "How are you today?"
    at = run_app("attention", model="en-de", sentence=typed)
    at.selectbox(key="model").set_value("en-de-captions").run()
    ok(at)
    assert at.text_input(key="sentence").value == typed, "same task: the teacher's sentence stays"
    at.selectbox(key="model").set_value("reverse").run()
    ok(at)
    assert at.text_input(key="sentence").value == catalog.EXAMPLES["reverse"][0], "another task: its own example"


def test_layer_slider_spans_the_layers_of_the_kind_shown():
    """en-de has 5 encoder and 2 decoder layers: the zoom's Layer slider covers the kind's own layers,
    and encoder layer 5 becomes decoder layer 2 when the kind changes (no dead slider range)."""
    if not (MODELS / "en-de" / "config.json").exists():
        pytest.skip("pretrained/en-de is not trained yet")
    at = run_app("attention", model="en-de", sentence="A dog runs.", kind="enc_self")
    from model.checkpoint import load_checkpoint

    cfg = load_checkpoint(MODELS / "en-de", "cpu").model.cfg
    assert cfg.n_enc_layers > cfg.n_dec_layers, "this test needs a deeper encoder than decoder"
    assert at.slider(key="layer").max == cfg.n_enc_layers
    at.slider(key="layer").set_value(cfg.n_enc_layers).run()
    at.radio(key="kind").set_value("cross").run()
    ok(at)
    assert not at.warning, [w.value for w in at.warning]
    assert (at.slider(key="layer").value, at.slider(key="layer").max) == (cfg.n_dec_layers, cfg.n_dec_layers)
    assert chart(at, f"{KIND_NAMES['cross']}, layer {cfg.n_dec_layers}")


def test_model_picker_lists_checkpoint_folders():
    at = run_app(sentence=SENTENCE)
    expected = sorted(p.name for p in MODELS.iterdir() if (p / "config.json").is_file())
    options = at.selectbox(key="model").options
    assert sorted(options) == expected
    first = [m for m in state.MODEL_ORDER if m in options]
    assert options[: len(first)] == first, "en-de, en-de-captions, reverse come first, in this order"


# -- Translate -------------------------------------------------------------------------------------------------------


def test_translate_shows_the_models_translation_and_token_tables(rev):
    at = run_app(sentence=SENTENCE)
    a = analyze(rev.model, rev.tokenizer, SENTENCE)
    body = " ".join(h.proto.body for h in at.get("html"))
    assert html.escape(a.translation) in body
    src, out = at.dataframe[0].value, at.dataframe[1].value
    assert list(src["piece"]) == display(a.source.tokens)
    assert list(src["compact id"]) == a.source.ids
    assert list(src["cl100k id"])[:-1] == [rev.tokenizer.cl100k_of[i] for i in a.source.ids[:-1]]
    assert list(out["compact id"])[: len(a.out_ids)] == a.out_ids
    assert ((out["probability"] >= 0) & (out["probability"] <= 1)).all()
    counts = f"{len(src)} source tokens → {len(out)} output tokens"  # the caption counts the rows of the two tables
    assert any(counts in c.value for c in at.caption), [c.value for c in at.caption]


@pytest.mark.parametrize("text", ["<|endoftext|> 😀", "Grüße, 世界!\t\n", "<b>bold</b> <script>alert(1)</script>"])
def test_odd_text_is_ordinary_text(text):
    at = run_app(sentence=text)
    assert at.text_input(key="sentence").value == text
    assert at.dataframe[0].value["piece"].iloc[-1] == "<eos>"
    body = " ".join(h.proto.body for h in at.get("html"))
    assert "<script>" not in body and "<b>bold" not in body, "user text must never reach the page as HTML"


def test_empty_input_gives_a_hint_not_an_exception():
    at = run_app(sentence=SENTENCE)
    at.text_input(key="sentence").set_value("   ").run()
    ok(at)
    assert any("Type a sentence" in i.value for i in at.info)
    assert not at.get("plotly_chart")


def test_long_input_is_truncated_with_a_warning(rev):
    long = " a" * (rev.model.cfg.max_len + 40)
    at = run_app(sentence=long)
    assert any("cut off" in w.value for w in at.warning)
    assert len(at.dataframe[0].value) == rev.model.cfg.max_len  # max_len - 1 pieces + <eos>


def test_example_picker_sets_the_sentence():
    at = run_app(sentence=SENTENCE)
    ex = at.selectbox(key="example").options[2]
    at.selectbox(key="example").set_value(ex).run()
    ok(at)
    assert at.text_input(key="sentence").value == ex
    assert at.query_params["sentence"] == ex


@pytest.mark.parametrize(
    ("method", "changes"),
    [
        ("greedy", {}),
        ("beam", {"beam_size": 3, "alpha": 1.2}),
        ("sample", {"sample_temperature": 0.5, "top_k": 5, "top_p": 0.9}),
    ],
)
def test_decoding_settings(method, changes):
    at = run_app(sentence=SENTENCE, method=method)
    for key, value in changes.items():
        at.slider(key=key).set_value(value).run()
        ok(at)
    if method == "sample":
        at.number_input(key="seed").set_value(7).run()
        ok(at)
    if method == "beam":
        fig = chart(at, "")  # the beam tree is the only chart of this view
        assert fig["data"], "empty beam tree"
        assert "Beam search" in [s.value for s in at.subheader]
    # a link with the settings reopens the same decoding (the widgets are bound to the URL; AppTest does not show
    # a bound slider writing its value there, a browser does)
    expect = {**changes, **({"seed": 7} if method == "sample" else {})}
    again = run_app(sentence=SENTENCE, method=method, **expect)
    for key, value in changes.items():
        assert again.slider(key=key).value == pytest.approx(value)
    if method == "sample":
        assert again.number_input(key="seed").value == 7


def test_json_export_is_the_whole_analysis(rev):
    a = analyze(rev.model, rev.tokenizer, SENTENCE, DecodeSettings("beam"))
    data = json.loads(state.analysis_json(a))
    assert data["translation"] == a.translation
    L, H = rev.model.cfg.n_enc_layers, rev.model.cfg.n_heads
    assert np.asarray(data["attention"]["enc_self"]).shape == (L, H, len(a.source.ids), len(a.source.ids))
    assert data["beam"]["best_path"] == a.beam.best_path


# -- Attention -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["enc_self", "dec_self", "cross"])
def test_mosaic_tiles_are_the_models_maps(rev, kind):
    at = run_app("attention", sentence=SENTENCE, kind=kind)
    a = analyze(rev.model, rev.tokenizer, SENTENCE)
    attn = {"enc_self": a.maps.enc_self, "dec_self": a.maps.dec_self, "cross": a.maps.cross}[kind]
    fig = [c for c in charts(at) if c["layout"].get("meta", {}).get("gap") is not None and c["layout"]["meta"]["H"] > 1][0]
    meta = fig["layout"]["meta"]
    assert (meta["L"], meta["H"], meta["kind"]) == (attn.shape[0], attn.shape[1], kind)
    check_drawn_weights(fig)
    for l in range(meta["L"]):
        for h in range(meta["H"]):
            t = tile(fig, l, h)
            drawn = ~np.isnan(t)
            np.testing.assert_allclose(t[drawn], attn[l, h][drawn], atol=1e-6)
            assert np.allclose(np.nansum(t, axis=1), 1, atol=1e-4), "a drawn row does not sum to 1"
            if kind == "dec_self":
                assert np.isnan(t[np.triu_indices_from(t, 1)]).all(), "the causal future is drawn as a weight"
                assert not np.isnan(t[np.tril_indices_from(t)]).any()
            else:
                assert drawn.all()
    q = a.source.tokens if kind == "enc_self" else a.tgt_in_tokens
    y = fig["data"][0]["y"]
    assert all(html.unescape(y[i]).startswith(f"{tok} (pos {i})") for i, tok in enumerate(display(q)))


@pytest.mark.parametrize("kind", ["enc_self", "dec_self", "cross"])
def test_zoom_follows_layer_and_head(rev, kind):
    at = run_app("attention", sentence=SENTENCE, kind=kind)
    a = analyze(rev.model, rev.tokenizer, SENTENCE)
    attn = {"enc_self": a.maps.enc_self, "dec_self": a.maps.dec_self, "cross": a.maps.cross}[kind]
    at.slider(key="layer").set_value(1).run()
    at.select_slider(key="head").set_value("2").run()
    ok(at)
    fig = chart(at, "layer 1, head 2")
    z = check_drawn_weights(fig)
    np.testing.assert_allclose(np.nan_to_num(z), attn[0, 1], atol=1e-6)
    assert np.allclose(np.nansum(z, axis=1), 1, atol=1e-4)
    if kind == "dec_self":
        assert grey(fig)[np.triu_indices(z.shape[0], 1)].all()
    q, k = (
        (a.source.tokens, a.source.tokens)
        if kind == "enc_self"
        else (a.tgt_in_tokens, a.source.tokens if kind == "cross" else a.tgt_in_tokens)
    )
    assert tick_matches(fig["layout"]["xaxis"]["ticktext"], k)
    assert tick_matches(fig["layout"]["yaxis"]["ticktext"], q)
    if kind != "enc_self":
        assert all(" \u2192 " in t for t in fig["layout"]["yaxis"]["ticktext"]), "decoder rows must read 'input → predicted'"
    at.select_slider(key="head").set_value("mean").run()
    ok(at)
    z = weights(chart(at, "mean over heads"))
    np.testing.assert_allclose(np.nan_to_num(z), attn[0].mean(axis=0), atol=1e-6)


def test_all_three_kinds_at_once():
    at = run_app("attention", sentence=SENTENCE)
    n = len(charts(at))
    at.toggle(key="all_kinds").set_value(True).run()
    ok(at)
    kinds = {c["layout"]["meta"].get("kind") for c in charts(at) if c["layout"]["meta"].get("gap") is not None}
    assert kinds == {"enc_self", "dec_self", "cross"}
    assert len(charts(at)) == n + 2


def test_layer_means_toggle_draws_each_layers_mean_over_heads(rev):
    at = run_app("attention", sentence=SENTENCE, kind="cross")
    assert not [c for c in charts(at) if "per layer" in c["layout"].get("title", {}).get("text", "")]
    at.toggle(key="layer_means").set_value(True).run()
    ok(at)
    fig = chart(at, "Mean over heads, per layer")
    cross = analyze(rev.model, rev.tokenizer, SENTENCE).maps.cross  # (L, H, T, S)
    for l in range(cross.shape[0]):
        np.testing.assert_allclose(tile(fig, l, 0), cross[l].mean(axis=0), atol=1e-6)


# -- Step through generation ------------------------------------------------------------------------------------------


def cross_so_far(at: AppTest) -> dict:
    return [c for c in charts(at) if c["layout"].get("title", {}).get("text") == "Cross-attention"][0]


def test_a_link_past_the_last_step_or_layer_opens_the_last_one(rev):
    at = run_app("steps", sentence=SENTENCE, step=99)
    n = int(at.select_slider(key="step").options[-1])
    assert n > 1 and at.select_slider(key="step").value == n, "?step=99 opens the last step"
    assert at.query_params.get("step", str(n)) == str(n), "the URL never names a step that is not shown"
    n_dec = rev.model.cfg.n_dec_layers
    at = run_app("attention", sentence=SENTENCE, kind="dec_self", layer=n_dec + 3)
    assert at.slider(key="layer").value == n_dec
    assert at.query_params.get("layer", str(n_dec)) == str(n_dec)


def test_step_slider_buttons_and_play(rev):
    at = run_app("steps", sentence=SENTENCE)
    assert at.select_slider(key="step").value == 1  # steps count from 1, like "Step 1 of n"
    at.toggle(key="steps_all_heads").set_value(True).run()
    assert cross_so_far(at)["layout"]["meta"]["Q"] == 1
    at.select_slider(key="step").set_value(4).run()
    ok(at)
    fig = cross_so_far(at)
    assert fig["layout"]["meta"]["Q"] == 4
    a = analyze(rev.model, rev.tokenizer, SENTENCE)
    np.testing.assert_allclose(tile(fig, 0, 0), a.maps.cross[0, 0, :4], atol=1e-5)  # greedy trace = teacher-forced maps
    assert at.query_params["step"] == "4"
    at.button(key="next").click().run()
    ok(at)
    assert at.select_slider(key="step").value == 5
    at.button(key="prev").click().run()
    at.button(key="prev").click().run()
    ok(at)
    assert at.select_slider(key="step").value == 3
    bar = chart(at, "Top")
    assert len(chart_array(bar["data"][0]["x"] if bar["data"][0].get("orientation") == "h" else bar["data"][0]["y"])) > 1
    at.button(key="play").click().run()
    ok(at)
    assert at.session_state["playing"] is True
    at.button(key="play").click().run()
    ok(at)
    assert at.session_state["playing"] is False


def test_step_layer_head_pickers():
    at = run_app("steps", sentence=SENTENCE, step=3)
    for layer, head in [(1, "1"), (2, "2"), (2, "mean")]:
        at.slider(key="layer").set_value(layer).run()
        at.select_slider(key="head").set_value(head).run()
        ok(at)
        fig = chart(at, "Cross-attention of the new query")
        assert ("mean over heads" if head == "mean" else f"head {head}") in fig["layout"]["title"]["text"]


def test_forcing_a_candidate_changes_the_rest(rev):
    at = run_app("steps", sentence=SENTENCE, step=2)  # the second step: t = 1
    a = analyze(rev.model, rev.tokenizer, SENTENCE)
    free = step_trace(rev.model, rev.tokenizer, a.source.ids, k=8)
    other = [c for c in free[1].candidates if c[1] != free[1].chosen][2]  # the third-best other candidate at step 1
    at.selectbox(key="force_pick").set_value(other[1]).run()  # set_value takes the value (compact id), not the label
    ok(at)
    forced = at.session_state["forced"]["ids"]
    assert forced == (free[0].chosen, other[1])
    assert at.select_slider(key="step").value == 2, "forcing must stay on the step it happened"
    bar = chart(at, "you forced another one")
    assert other[1] in [int(i) for i in chart_array(bar["data"][0]["customdata"]).ravel()]
    body = " ".join(h.proto.body for h in at.get("html"))
    assert f'title="forced">{html.escape(display([other[0]])[0])}<' in body
    expected = step_trace(rev.model, rev.tokenizer, a.source.ids, forced=forced, k=8)
    at.toggle(key="steps_all_heads").set_value(True).run()
    at.select_slider(key="step").set_value(len(expected)).run()
    ok(at)
    assert cross_so_far(at)["layout"]["meta"]["Q"] == len(expected), "decoding went on from the forced token"
    at.button(key="unforce").click().run()
    ok(at)
    assert "forced" not in at.session_state or not at.session_state["forced"]


def test_reference_translation_compares_forced_and_free(rev):
    at = run_app("steps", sentence=SENTENCE)
    at.text_input(key="reference").set_value(" e d c b a").run()
    ok(at)
    forced = chart(at, "Teacher-forced reference")
    z = weights(forced)
    assert z.shape == (len(rev.tokenizer.encode(" e d c b a")) + 1, len(rev.tokenizer.encode(SENTENCE)) + 1)
    assert np.allclose(z.sum(axis=1), 1, atol=1e-4)
    chart(at, "Free-running")
    at.slider(key="ref_layer").set_value(1).run()
    at.select_slider(key="ref_head").set_value("2").run()
    ok(at)
    assert "layer 1, head 2" in chart(at, "Teacher-forced reference")["layout"]["title"]["text"]
    assert not any("longer than the decoder reads" in w.value for w in at.warning)


def test_a_reference_longer_than_the_decoder_reads_is_cut_with_a_warning(rev):
    at = run_app("steps", sentence=SENTENCE)
    at.text_input(key="reference").set_value(" a" * (2 * rev.model.cfg.max_len)).run()
    ok(at)
    n = rev.model.cfg.max_len
    assert any(f"only its first {n} pieces" in w.value for w in at.warning), [w.value for w in at.warning]
    assert weights(chart(at, "Teacher-forced reference")).shape[0] == n


def test_beam_settings_show_the_tree_on_the_step_view():
    at = run_app("steps", sentence=SENTENCE, method="beam")
    assert any("Beam search has no single next token" in i.value for i in at.info)
    assert "Beam search tree" in [s.value for s in at.subheader]


# -- Mask lab -------------------------------------------------------------------------------------------------------


def test_hiding_every_source_token_draws_no_nan_weight(rev):
    at = run_app("masks", sentence=SENTENCE)
    ms = at.multiselect(key="hide")
    ms.set_value(list(range(len(ms.options)))).run()  # set_value takes the values (positions), not the labels
    ok(at)
    assert any("Every source token is hidden" in w.value for w in at.warning)
    after = chart(at, "After:")
    z = check_drawn_weights(after)
    assert np.isnan(z).all(), "every key is hidden: every cell of cross-attention is masked (grey)"
    diff = chart_array(chart(at, "−")["data"][0]["z"]).astype(float)
    assert np.isfinite(diff).all()


def test_mask_lab_draws_after_and_difference_once_a_setting_changes(rev):
    """Unchanged, After would repeat Before and the difference would be 0: the page draws Before and says where the
    rest will appear; the first change draws After and the difference."""
    at = run_app("masks", sentence=SENTENCE)
    ok(at)
    titles = [c["layout"]["title"]["text"] for c in charts(at)]
    assert len(titles) == 1 and titles[0].startswith("Before:"), titles
    assert any("appears here" in c.value for c in at.caption)
    at.slider(key="attn_temp").set_value(2.0).run()
    ok(at)
    titles = [c["layout"]["title"]["text"] for c in charts(at)]
    assert [t.split(":")[0] for t in titles] == ["Before", "After", "After − before"], titles


def test_mask_lab_says_when_the_changed_output_runs_to_the_token_budget(rev):
    """Without positional encoding the toy reverse model repeats itself on " l l l l" until the budget
    (checked against analyze), and the page says so; with it, it ends and says nothing."""
    at = run_app("masks", sentence=" l l l l")
    assert not any("token budget" in w.value for w in at.warning)
    assert analyze(rev.model, rev.tokenizer, " l l l l", DecodeSettings(), Interventions()).finished
    assert not analyze(rev.model, rev.tokenizer, " l l l l", DecodeSettings(), Interventions(use_pos_encoding=False)).finished
    at.toggle(key="use_pe").set_value(False).run()
    ok(at)
    assert any("ran to the token budget" in w.value for w in at.warning), [w.value for w in at.warning]


def test_every_head_ablated_still_translates(rev):
    at = run_app("masks", sentence=SENTENCE)
    cfg = rev.model.cfg
    for kind in ("enc_self", "dec_self", "cross"):
        n_layers = cfg.n_enc_layers if kind == "enc_self" else cfg.n_dec_layers
        at.multiselect(key=f"ablate_{kind}").set_value([(l, h) for l in range(n_layers) for h in range(cfg.n_heads)]).run()
        ok(at)
    at.toggle(key="mask_mosaic_on").set_value(True).run()
    ok(at)
    mosaic = [c for c in charts(at) if c["layout"]["meta"].get("gap") is not None][0]
    assert len(mosaic["layout"]["meta"]["ablated"]) == cfg.n_dec_layers * cfg.n_heads
    assert len([h for h in at.get("html") if 'class="translation"' in h.proto.body]) == 2


MASK_CONTROLS = {  # (widget, key, value): the interventions the control means, and the kinds whose maps it changes
    ("toggle", "causal", False): (Interventions(causal=False), {"dec_self", "cross"}),
    ("slider", "window", 2): (Interventions(window=2), {"enc_self", "dec_self", "cross"}),
    ("slider", "attn_temp", 3.0): (Interventions(temperature=3.0), {"enc_self", "dec_self", "cross"}),
    ("toggle", "use_pe", False): (Interventions(use_pos_encoding=False), {"enc_self", "dec_self", "cross"}),
    ("slider", "attn_temp", 0.25): (Interventions(temperature=0.25), {"enc_self", "dec_self", "cross"}),
    ("multiselect", "hide", (1,)): (Interventions(src_hidden=frozenset({1})), {"enc_self", "dec_self", "cross"}),
    ("multiselect", "ablate_enc_self", ((0, 1),)): (Interventions(ablate=frozenset({("enc_self", 0, 1)})), {"dec_self", "cross"}),
}


@pytest.mark.parametrize(("widget", "key", "value"), list(MASK_CONTROLS))
@pytest.mark.parametrize("kind", ["enc_self", "dec_self", "cross"])
def test_mask_lab_controls(rev, widget, key, value, kind):
    """Each control draws, as After, exactly ``analyze(..., interventions)``'s map for the interventions it names (the
    shown layer's mean over heads), differs from Before where the control bites, and keeps rows summing to 1."""
    at = run_app("masks", sentence=SENTENCE)
    at.radio(key="mask_kind").set_value(kind).run()
    getattr(at, widget)(key=key).set_value(list(value) if widget == "multiselect" else value).run()
    ok(at)
    before, after = chart(at, "Before:"), chart(at, "After:")
    check_drawn_weights(before)
    z = check_drawn_weights(after)
    rows = np.nansum(z, axis=1)
    assert np.allclose(rows, 1, atol=1e-4), "each query row of the changed map still sums to 1 over the keys it may see"
    interventions, bites = MASK_CONTROLS[(widget, key, value)]
    want = analyze(rev.model, rev.tokenizer, SENTENCE, DecodeSettings(), interventions).view(kind)
    want_map = want.map(want.attn.shape[0] - 1, None)  # the default: the last layer, the mean of heads
    assert z.shape == want_map.w.shape
    np.testing.assert_allclose(np.nan_to_num(z), want_map.w, atol=1e-4, err_msg="After is not analyze(..., interventions)")
    if kind in bites:
        b = weights(before)
        assert b.shape != z.shape or not np.allclose(np.nan_to_num(b), np.nan_to_num(z), atol=1e-4), "the control did not bite"
    if key == "causal" and kind == "dec_self":
        q, k = np.indices(z.shape)
        assert grey(after)[k > q].all(), "causal mask off: a later token had not been written when the row's step ran"
        assert (np.nan_to_num(z)[k > q] == 0).all(), "causal mask off: no step reads a token it had not written"
    if key == "window" and kind != "cross":
        q = np.arange(z.shape[0])[:, None]
        k = np.arange(z.shape[1])[None, :]
        assert grey(after)[np.abs(q - k) >= value].all()
    assert chart_array(chart(at, "−")["data"][0]["z"]).shape == weights(before).shape


IV_HIDE_01 = Interventions(src_hidden=frozenset({0, 1}))


def test_mask_lab_marks_changed_output_tokens(rev):
    at = run_app("masks", sentence=SENTENCE)
    ms = at.multiselect(key="hide")
    ms.set_value([0, 1]).run()
    ok(at)
    body = " ".join(h.proto.body for h in at.get("html"))
    # the reverse model, reading only " c d e": its output changes (checked against analyze)
    a, b = (
        analyze(rev.model, rev.tokenizer, SENTENCE, DecodeSettings(), interventions)
        for interventions in (Interventions(), IV_HIDE_01)
    )
    assert a.out_ids != b.out_ids
    assert 'title="changed"' in body
    assert any("The output changed" in i.value for i in at.info)
    assert not any("Output unchanged" in c.value for c in at.caption)


# -- other views -----------------------------------------------------------------------------------------------------


def test_positional_encoding_view(rev):
    at = run_app("positional")
    at.slider(key="pe_n").set_value(20).run()
    at.multiselect(key="pe_dims").set_value([0, 1, 6]).run()
    ok(at)
    pe = chart_array(chart(at, "")["data"][0]["z"])  # the PE matrix comes first
    assert 20 in pe.shape
    metrics = {m.label: float(m.value) for m in at.metric}
    assert metrics["Largest difference, PE off"] < 1e-4 < metrics["Largest difference, PE on"]
    at.text_input(key="wo_b").set_value("a b z").run()
    assert not at.exception
    assert any("same words" in e.value for e in at.error)
    at.text_input(key="wo_a").set_value("  ").run()
    assert not at.exception
    assert any("Type a sentence in both boxes" in e.value for e in at.error)


def test_head_statistics_table(rev):
    at = run_app("stats", sentence=SENTENCE)
    df = at.dataframe[0].value
    cfg = rev.model.cfg
    assert len(df) == (cfg.n_enc_layers + 2 * cfg.n_dec_layers) * cfg.n_heads
    assert {"kind", "layer", "head", "entropy"} <= set(df.columns)
    assert df["entropy"].notna().all()
    assert set(df["kind"]) == set(KIND_NAMES.values()), "kinds by their names, not their short keys"


def test_shapes_view_uses_this_models_numbers(rev):
    at = run_app("shapes", sentence=SENTENCE)
    cfg = rev.model.cfg
    numbers = {r["name"]: r["value"] for r in at.dataframe[1].value.to_dict("records")}
    assert (numbers["d_model"], numbers["n_heads"], numbers["d_head"], numbers["vocab"]) == (
        cfg.d_model,
        cfg.n_heads,
        cfg.d_head,
        cfg.vocab_size,
    )
    shapes = at.dataframe[0].value.astype(str).to_string()
    assert f"{cfg.d_model}" in shapes and f"{cfg.vocab_size}" in shapes


# -- the URL -------------------------------------------------------------------------------------------------------


def test_url_restores_sentence_page_layer_head_step():
    at = run_app("steps", sentence=" q r s t", layer=1, head=2, step=3)
    assert at.text_input(key="sentence").value == " q r s t"
    assert on_page(at, "steps")
    assert at.slider(key="layer").value == 1
    assert at.select_slider(key="head").value == "2"
    assert at.select_slider(key="step").value == 3
    assert "layer 1, head 2" in chart(at, "Cross-attention of the new query")["layout"]["title"]["text"]
    at.select_slider(key="step").set_value(2).run()
    assert at.query_params["step"] == "2"


def test_url_keeps_short_keys_not_labels():
    at = run_app("attention", sentence=SENTENCE)
    assert "kind" not in at.query_params and "method" not in at.query_params, "defaults stay out of the URL"
    at.radio(key="kind").set_value("dec_self").run()
    ok(at)
    assert at.query_params["kind"] == "dec_self"
    at.radio(key="method").set_value("sample").run()
    ok(at)
    assert (at.query_params["method"], at.query_params["kind"]) == ("sample", "dec_self")
    at.radio(key="kind").set_value("cross").run()
    ok(at)
    assert "kind" not in at.query_params


def test_short_keys_in_the_url_open_those_settings():
    at = run_app("attention", sentence=SENTENCE, kind="enc_self", method="beam")
    assert (at.radio(key="kind").value, at.radio(key="method").value) == ("enc_self", "beam")
    assert chart(at, f"{KIND_NAMES['enc_self']}, layer")
    assert (at.query_params["kind"], at.query_params["method"]) == ("enc_self", "beam")


def test_old_link_with_labels_opens_the_attention_page_with_kind_cross():
    at = open_url(view="Attention", kind="Cross-attention", method="Beam search", sentence=SENTENCE)
    assert on_page(at, "attention")
    assert at.radio(key="kind").value == "cross"
    assert at.radio(key="method").value == "beam"
    assert at.text_input(key="sentence").value == SENTENCE
    assert chart(at, f"{KIND_NAMES['cross']}, layer")
    assert "view" not in at.query_params
    assert at.query_params["method"] == "beam", "the label became its short key"
    assert at.query_params.get("kind") in (None, "cross"), "cross is the default kind: no parameter needed"


@pytest.mark.parametrize(
    ("params", "page"),
    [
        ({"view": "attention", "kind": "enc_self"}, "attention"),
        ({"view": "Attention", "kind": "Decoder causal self-attention"}, "attention"),
        ({"view": "steps", "step": "3", "layer": "1", "head": "2"}, "steps"),
        ({"view": "Step through generation", "step": "3"}, "steps"),
        ({"view": "pe"}, "positional"),
        ({"view": "Mask lab"}, "masks"),
        ({"view": "stats"}, "stats"),
        ({"view": "Shapes"}, "shapes"),
        ({"view": "Translate", "method": "Sampling"}, "translate"),
        ({"view": "no such view"}, "translate"),
    ],
)
def test_old_links_open_their_page_and_settings(params, page):
    at = open_url(sentence=SENTENCE, **params)
    assert on_page(at, page)
    assert "view" not in at.query_params
    if "kind" in params:
        assert at.radio(key="kind").value == catalog.choice_key(KIND_NAMES, params["kind"])
        assert at.query_params["kind"] == at.radio(key="kind").value
    if "method" in params:
        assert at.query_params["method"] == at.radio(key="method").value == "sample"
    if "step" in params:
        assert at.select_slider(key="step").value == int(params["step"])
    if "head" in params:
        assert (at.slider(key="layer").value, at.select_slider(key="head").value) == (1, "2")


def test_old_link_rule_maps_every_old_view():
    old = {"translate": "translate", "attention": "attention", "steps": "steps", "pe": "positional"}
    old |= {"masks": "masks", "stats": "stats", "shapes": "shapes"}
    for view, page in old.items():
        spec, params = catalog.old_link({"view": view, "kind": "Cross-attention", "method": "beam", "sentence": "Hi."})
        assert spec.path == page
        assert params == {"kind": "cross", "method": "beam", "sentence": "Hi."}
    for spec in catalog.PAGES:  # the labels of the old "View" radio are the page titles
        assert catalog.old_link({"view": spec.title})[0] == spec
    assert catalog.old_link({"view": "x", "kind": "nonsense"}) == (None, {})


# -- model choice ------------------------------------------------------------------------------------------------------


def test_model_order_and_what_the_model_knows(tmp_path, monkeypatch):
    for name in ("reverse", "zz-other", "en-de-captions", "en-de"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    (tmp_path / "not-a-checkpoint").mkdir()
    monkeypatch.setattr(state, "MODELS_DIR", tmp_path)
    assert state.available_models() == ["en-de", "en-de-captions", "reverse", "zz-other"]
    limits = "Short everyday sentences, picture descriptions and chat turns; long or technical text comes out wrong."
    (tmp_path / "en-de" / "metrics.json").write_text(json.dumps({"card": {"limits": limits}}))
    (tmp_path / "reverse" / "metrics.json").write_text(json.dumps({"card": {"limits": 3}}))
    assert state.model_facts(str(tmp_path / "en-de")).limits == limits
    assert state.model_facts(str(tmp_path / "reverse")).limits is None
    assert state.model_facts(str(tmp_path / "en-de-captions")).limits is None


def test_examples_start_with_everyday_sentences():
    ex = catalog.EXAMPLES["translate"]
    assert ex[:4] == ["I love you.", "How are you today?", "Where do you live?", "Attention is all you need."]
    animal = "The animal didn't cross the street because it was too "
    assert ex[4:6] == [animal + "tired.", animal + "wide."]
    assert "A dog jumps over a green fence." in ex[6:], "the caption examples follow"


def test_the_model_card_line_sits_under_the_picker(tmp_path, monkeypatch):
    """metrics.json "card" -> "limits" is shown as one caption under the model picker."""
    limits = "Letters only; it writes them backwards."
    (tmp_path / "reverse").mkdir()
    for f in REVERSE.iterdir():
        if f.is_file() and f.name != "metrics.json":
            (tmp_path / "reverse" / f.name).symlink_to(f)
    metrics = json.loads((REVERSE / "metrics.json").read_text()) if (REVERSE / "metrics.json").exists() else {}
    (tmp_path / "reverse" / "metrics.json").write_text(json.dumps({**metrics, "card": {"limits": limits}}))
    monkeypatch.setattr(state, "MODELS_DIR", tmp_path)
    at = run_app(sentence=SENTENCE)
    assert at.selectbox(key="model").options == ["reverse"]
    assert limits in [c.value for c in at.sidebar.caption]


def test_sidebar_bleu_line_names_each_test_corpus_or_falls_back_to_dev():
    from ui.state import test_bleu_line

    evaluation = {
        "multi30k/test_2016_flickr": {"greedy": {"bleu": 34.6}, "beam5": {"bleu": 35.4}},
        "tatoeba/test": {"greedy": {"bleu": 21.43}},
        "test_2016_flickr": {"greedy": {"bleu": 36.4}},  # the older key form, without a corpus: left out
    }
    assert test_bleu_line({"evaluation": evaluation}) == "test BLEU (greedy): Tatoeba 21.4 · Multi30k 34.6"
    assert test_bleu_line({"training": {"val_bleu_greedy": 37.49}}) == "BLEU 37.5 (dev, greedy)"
    assert test_bleu_line({"evaluation": "broken", "training": []}) is None

"""Information not in colour alone (issue 56, part 2): every heatmap's text alternative, the marks on hidden
cells, the "Show as table" numbers, the colour-blind-safe scale and the contrast of the theme's text.

Colour-vision deficiencies are simulated with the matrices of Machado, Oliveira & Fernandes (2009) at full
severity (protanopia, deuteranopia, tritanopia) on linear RGB; colours are compared in CIELAB (D65).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import numpy as np
import plotly.colors
import pytest

from analysis.records import AttentionView, MapView, rollout
from model.facts import ABLATED, FUTURE, HIDDEN, UNWRITTEN, VISIBLE, cell_reasons
from viz import _common as vc
from viz.attention import (
    SAFE_COLORSCALE,
    alt_of,
    attention_heatmap,
    attention_mosaic,
    difference_heatmap,
    map_table,
    with_safe_colors,
)
from viz.head import vector_strip
from viz.positional import pe_matrix, pe_similarity
from viz.stats import rollout_figure
from viz.steps import step_attention

ROOT = Path(__file__).resolve().parent.parent
SRC = [" A", " dog", " jumps", " over", " a", " fence", ".", "<eos>"]
TGT_IN = ["<bos>", " Ein", " Hund", " springt", " über", " einen", " Zaun"]
TGT_OUT = TGT_IN[1:] + ["<eos>"]


def rows(*shape: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(shape[-1], 0.5), size=shape[:-1]).astype(np.float32)


def cross_view(layer=1, head=2) -> MapView:
    Q, K = len(TGT_IN), len(SRC)
    return MapView("cross", rows(Q, K), TGT_IN, SRC, TGT_OUT, cell_reasons("cross", Q, K), layer, head)


def dec_view(reasons=None) -> MapView:
    T = len(TGT_IN)
    r = cell_reasons("dec_self", T, T) if reasons is None else reasons
    w = np.where(r == VISIBLE, rows(T, T), 0).astype(np.float32)
    return MapView("dec_self", w, TGT_IN, TGT_IN, TGT_OUT, r, 0, None)


def mask_traces(fig) -> dict[str, object]:
    """The grey heatmaps of a figure, by their reason's name."""
    return {t.name: t for t in fig.data if t.type == "heatmap" and t.name not in ("attention", "difference")}


# -- text alternatives -------------------------------------------------------------------------------------------
def test_one_map_says_what_it_is_rows_and_columns():
    fig = attention_heatmap(cross_view(layer=1, head=2))
    alt = alt_of(fig)
    assert alt.startswith("Cross-attention, layer 2, head 3: rows are output tokens, columns source tokens"), alt
    assert f"({len(TGT_IN)} × {len(SRC)} cells)" in alt and "0 (light) to 1 (dark)" in alt
    # a page's own title is kept, and the kind, layer and head are said once
    titled = attention_heatmap(cross_view(1, 2), title="Cross-attention, layer 2, head 3")
    assert alt_of(titled).count("layer 2") == 1
    other = attention_heatmap(cross_view(0, None), title="Free-running (model's own output)")
    assert alt_of(other).startswith("Cross-attention, layer 1, head average. Free-running (model's own output): rows")


def test_mosaic_and_difference_maps_have_a_text_alternative():
    T, S = len(TGT_IN), len(SRC)
    view = AttentionView("dec_self", rows(2, 4, T, T), TGT_IN, TGT_IN, TGT_OUT, cell_reasons("dec_self", T, T))
    alt = alt_of(attention_mosaic(view, title="Decoder self-attention"))
    assert alt.startswith("Decoder self-attention: rows are 2 layers and columns 4 heads of tiles")
    assert "marked × future" in alt
    before, after = cross_view(0, 0), MapView("cross", rows(T, S, seed=1), TGT_IN, SRC, TGT_OUT, cross_view().reasons)
    diff = alt_of(difference_heatmap(before, after))
    assert "rows are output tokens, columns source tokens" in diff and "(blue, less attention" in diff


@pytest.mark.parametrize(
    "make",
    [
        lambda: pe_matrix(np.sin(np.arange(40, dtype=np.float32).reshape(5, 8))),
        lambda: pe_similarity(np.cos(np.arange(40, dtype=np.float32).reshape(5, 8))),
        lambda: rollout_figure(rollout(rows(3, 4, 5, 5)), SRC[:5]),
        lambda: step_attention(rows(4, len(SRC)), SRC, title="Cross-attention of the new query", layer=0),
        lambda: vector_strip([("q", np.arange(8.0)), ("k", -np.arange(8.0))], title="Query and key"),
    ],
    ids=["pe_matrix", "pe_similarity", "rollout", "step_attention", "vector_strip"],
)
def test_every_other_heatmap_has_a_text_alternative(make):
    fig = make()
    assert any(t.type == "heatmap" for t in fig.data)
    alt = fig.layout.meta["alt"]
    assert re.search(r": rows are .+, columns .+ \(\d+ × \d+ cells\)\.", alt), alt
    assert "Colour:" in alt and "<" not in alt  # plain text: no plotly tags


def test_alt_text_is_plain_text():
    assert vc.alt_text("A<br><sup>b &lt;eos&gt;</sup>", rows="r", cols="c") == "A. b <eos>: rows are r, columns c."


# -- hidden cells are marked, not only grey ---------------------------------------------------------------------------
def test_masked_future_cells_carry_a_mark_exactly_where_they_are_grey():
    view = dec_view()
    fig = attention_heatmap(view)
    future = mask_traces(fig)["future"]
    text = np.asarray(future.text, dtype=object)
    assert future.texttemplate == "%{text}"
    assert np.array_equal(text == "×", view.reasons == FUTURE) and (text[view.reasons == VISIBLE] == "").all()
    assert np.array_equal(~np.isnan(np.asarray(future.z, dtype=float)), view.reasons == FUTURE)
    assert "marked × future" in alt_of(fig)


def test_every_reason_has_its_own_mark_and_readable_ink():
    T = len(TGT_IN)
    r = cell_reasons("dec_self", T, T, causal=False, window=1)  # UNWRITTEN after the query, WINDOW far before it
    r[:, 0] = HIDDEN
    fig = attention_heatmap(dec_view(r))
    marks = {name: set(np.asarray(t.text, dtype=object).ravel()) - {""} for name, t in mask_traces(fig).items()}
    assert marks == {"not yet written": {"…"}, "window": {"–"}, "hidden": {"∅"}}
    assert len(set(vc.MASK_MARKS.values())) == len(vc.MASK_MARKS)
    for reason, grey in vc.MASK_COLORS.items():  # a mark is a graphic: 3:1 against its grey (WCAG 1.4.11)
        assert contrast(vc.MASK_MARK_COLORS[reason], grey) >= 3.0, reason


def test_an_ablated_head_is_marked():
    view = AttentionView("cross", rows(1, 2, 3, 4), TGT_IN[:3], SRC[:4], TGT_OUT[:3], np.zeros((3, 4), np.int8), {(0, 1)})
    fig = attention_mosaic(view)
    ablated = mask_traces(fig)["ablated"]
    assert set(np.asarray(ablated.text, dtype=object).ravel()) == {"", vc.MASK_MARKS[ABLATED]}
    assert "marked / ablated" in alt_of(fig)


def test_too_many_or_too_small_cells_get_no_marks_but_the_text_says_grey():
    sel = np.ones((100, 100), bool)
    assert vc.mask_marks(sel, FUTURE, 20) == {}  # 10 000 marks would slow the redraw
    assert vc.mask_marks(sel[:10, :10], FUTURE, 5) == {}  # a 5 px cell holds no glyph
    assert vc.mask_marks(sel[:10, :10], FUTURE, 12)["text"].shape == (10, 10)
    assert vc.marks_legend([VISIBLE, UNWRITTEN]) == "grey cells are hidden from the query, marked … not yet written"


# -- the numbers as a table ----------------------------------------------------------------------------------------
def test_map_table_has_the_figures_numbers_and_says_why_a_cell_is_hidden():
    view = dec_view()
    t = map_table(view.w, view.q_tokens, view.k_tokens, predicted=view.predicted, reasons=view.reasons)
    assert t.shape == view.w.shape
    assert t.index[1] == "1: ▁Ein → ▁Hund" and t.columns[2] == "2: ▁Hund"
    assert t.iloc[0, 1] == "× future" and t.iloc[3, 1] == f"{view.w[3, 1]:.3f}"
    shown = t.to_numpy()[view.reasons == VISIBLE].astype(float)
    np.testing.assert_allclose(shown, view.w[view.reasons == VISIBLE], atol=5e-4)
    with pytest.raises(ValueError):
        map_table(view.w, view.q_tokens[:-1], view.k_tokens)


# -- colours ---------------------------------------------------------------------------------------------------------
MACHADO = {  # Machado et al. 2009, severity 1.0, on linear RGB
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]],
    "normal": np.eye(3).tolist(),
}


def linear(hex_or_rgb: str) -> np.ndarray:
    r, g, b = plotly.colors.hex_to_rgb(hex_or_rgb) if hex_or_rgb.startswith("#") else plotly.colors.unlabel_rgb(hex_or_rgb)
    c = np.array([r, g, b], dtype=float) / 255
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def lab(lin: np.ndarray) -> np.ndarray:
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ np.clip(lin, 0, 1)
    t = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(t > (6 / 29) ** 3, np.cbrt(t), t / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def seen(color: str, cvd: str) -> np.ndarray:
    return lab(np.asarray(MACHADO[cvd]) @ linear(color))


def sample(scale, x: float) -> str:
    """The colour of ``scale`` ([[pos, colour], ...]) at ``x``, as plotly interpolates it."""
    cols = [c if c.startswith("rgb") else plotly.colors.label_rgb(plotly.colors.hex_to_rgb(c)) for _, c in scale]
    return plotly.colors.sample_colorscale([[p, c] for (p, _), c in zip(scale, cols, strict=True)], [x])[0]


def contrast(a: str, b: str) -> float:
    la, lb = (0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2] for v in (linear(a), linear(b)))
    hi, lo = max(la, lb), min(la, lb)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("cvd", list(MACHADO))
@pytest.mark.parametrize("scale", ["safe", "attention"])
def test_sequential_scales_read_by_lightness_in_every_colour_vision(scale, cvd):
    s = SAFE_COLORSCALE if scale == "safe" else vc.ATTENTION_COLORSCALE
    L = [seen(sample(s, x), cvd)[0] for x in np.linspace(0, 1, 11)]
    assert all(b < a - 3 for a, b in zip(L, L[1:], strict=False)), L  # darker with every tenth: order reads without hue
    assert L[0] - L[-1] > 60


@pytest.mark.parametrize("cvd", list(MACHADO))
def test_diverging_scale_tells_more_from_less_in_every_colour_vision(cvd):
    s = vc.DIVERGING_COLORSCALE
    for t in (0.2, 0.3, 0.4, 0.5):
        neg, pos = seen(sample(s, 0.5 - t), cvd), seen(sample(s, 0.5 + t), cvd)
        assert np.linalg.norm(neg - pos) > 20, (cvd, t)  # ΔE*ab: clearly two colours
        zero = seen(sample(s, 0.5), cvd)
        assert min(np.linalg.norm(neg - zero), np.linalg.norm(pos - zero)) > 10 * t  # both sides leave white


def test_safe_colours_are_one_toggle_away_and_leave_the_rest():
    mosaic = attention_mosaic(AttentionView("enc_self", rows(2, 2, 4, 4), SRC[:4], SRC[:4], None, np.zeros((4, 4), np.int8)))
    safe = with_safe_colors(mosaic)
    assert [c for _, c in safe.layout.coloraxis.colorscale] == [c for _, c in SAFE_COLORSCALE]
    assert mosaic.layout.coloraxis.colorscale[0][1] == vc.ATTENTION_COLORSCALE[0][1]  # the (cached) original is kept
    one = with_safe_colors(attention_heatmap(dec_view()))
    assert [c for _, c in one.data[0].colorscale] == [c for _, c in SAFE_COLORSCALE]
    greys = [t for t in one.data if t.type == "heatmap" and t.name == "future"]
    assert greys[0].colorscale[0][1] == vc.MASK_COLORS[FUTURE]
    bars = with_safe_colors(step_attention(rows(len(SRC)), SRC, title="t"))
    assert [c for _, c in bars.data[0].marker.colorscale] == [c for _, c in SAFE_COLORSCALE]
    T, S = len(TGT_IN), len(SRC)
    diff = difference_heatmap(cross_view(), MapView("cross", rows(T, S, seed=3), TGT_IN, SRC, TGT_OUT, cross_view().reasons))
    assert with_safe_colors(diff).data[0].colorscale == diff.data[0].colorscale


def test_theme_and_figure_text_contrast_at_least_4_5():
    theme = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())["theme"]
    text, primary = theme["textColor"], theme["primaryColor"]
    for bg in (theme["backgroundColor"], theme["secondaryBackgroundColor"]):
        rgb_bg = np.array(plotly.colors.hex_to_rgb(bg), float)
        caption = 0.6 * np.array(plotly.colors.hex_to_rgb(text), float) + 0.4 * rgb_bg  # Streamlit's faded text
        caption_hex = "#" + "".join(f"{round(v):02x}" for v in caption)
        assert contrast(caption_hex, bg) >= 4.5, (caption_hex, bg)
        assert contrast(text, bg) >= 4.5 and contrast(primary, bg) >= 4.5
    assert contrast(vc.TEMPLATE["layout"]["font"]["color"], "#ffffff") >= 4.5  # axis and tick text
    assert contrast("#444444", "#ffffff") >= 4.5  # tile labels (vc.tile_label)
    assert vc.tile_label(0, 0, "x")["font"]["color"] == "#444"


def test_substituted_pieces_are_hatched_as_well_as_orange():
    from analysis.records import EncoderDistance
    from viz.compare import distance_figure

    same = np.array([True, False, True])
    d = EncoderDistance([" a", " b", " c"], [" a", " x", " c"], [(0, 0), (1, 1), (2, 2)], np.ones(3, np.float32), same, True, 1.0)
    fig = distance_figure(d)
    assert list(fig.data[0].marker.pattern.shape) == ["", "/", ""]
    assert "hatched orange bars are substituted pieces" in alt_of(fig)

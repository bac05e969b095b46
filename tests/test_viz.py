"""viz/: figures carry exactly the data they were given, labelled with the right tokens.

Every test builds small random maps (Dirichlet rows, which sum to 1 like softmax rows) or
hand-made ones whose statistics are known, wraps them in the records of ``analysis.records`` (the
hidden cells given as reason codes) and reads the numbers back out of the figure.
"""

from __future__ import annotations

import dataclasses
import html
import io
import json
import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.records import (
    AttentionView,
    BeamTree,
    EncoderStates,
    MapView,
    Stage,
    StepView,
    WordOrder,
    head_average,
    layer_average,
    rollout,
)
from analysis.stats import head_stats
from model.facts import FUTURE, HIDDEN, VISIBLE, WINDOW, cell_reasons
from viz.attention import attention_heatmap, attention_mosaic, difference_heatmap, mosaic_tile
from viz.export import attention_csv, figure_html
from viz.positional import pe_curves, pe_matrix, pe_similarity, wavelength, word_order_figure
from viz.shapes import shapes_figure, shapes_table
from viz.stats import rollout_figure
from viz.steps import beam_tree, candidates_bar, step_attention
from viz.tokens import display, row_labels

SRC = [" A", " dog", " jumps", " over", " a", " dog", ".", "<eos>"]  # " dog" twice on purpose
TGT_IN = ["<bos>", " Ein", " Hund", " springt", " über", " einen", " Hund"]
TGT_OUT = TGT_IN[1:] + ["<eos>"]
ZW = "\u200b"


def dirichlet(*shape: int, seed: int = 0) -> np.ndarray:
    """Random attention maps ``shape = (..., Q, K)``: every row sums to 1."""
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(shape[-1], 0.5), size=shape[:-1]).astype(np.float32)


def causal(a: np.ndarray) -> np.ndarray:
    """Zero the future (k > q) and renormalise rows, like a causally masked softmax."""
    Q, K = a.shape[-2:]
    a = a * np.tril(np.ones((Q, K), dtype=np.float32))
    return (a / a.sum(axis=-1, keepdims=True)).astype(np.float32)


def gutter_mask(meta: dict, shape: tuple[int, int]) -> np.ndarray:
    """True on mosaic cells that belong to no tile."""
    inside = np.zeros(shape, dtype=bool)
    Q, K, gap = meta["Q"], meta["K"], meta["gap"]
    for l in range(meta["L"]):
        for h in range(meta["H"]):
            inside[l * (Q + gap) : l * (Q + gap) + Q, h * (K + gap) : h * (K + gap) + K] = True
    return ~inside


def shown(tokens: list[str]) -> list[str]:
    """Tokens as plotly shows them: display form, with < > & escaped (``<eos>`` is text, not a tag)."""
    return [html.escape(t, quote=False) for t in display(tokens)]


def z_of(trace) -> np.ndarray:
    return np.asarray(trace.z, dtype=np.float32)


def default_reasons(kind: str, n_q: int, n_k: int) -> np.ndarray:
    """What the model hides without interventions: the causal future of dec_self, nothing else."""
    return cell_reasons("dec_self", n_q, n_k) if kind == "dec_self" else np.zeros((n_q, n_k), np.int8)


def view(a, q, k, *, kind: str, predicted=None, reasons=None, ablated=(), head_names=None) -> AttentionView:
    """An ``AttentionView`` of ``a (L, H, Q, K)``; reasons default to ``default_reasons``."""
    Q, K = np.shape(a)[-2:]
    r = default_reasons(kind, Q, K) if reasons is None else reasons
    return AttentionView(kind, a, list(q), list(k), predicted, r, frozenset(ablated), head_names)


def one_map(w, q, k, *, kind: str, predicted=None, reasons=None, layer=None, head=None) -> MapView:
    """A ``MapView`` of ``w (Q, K)``; reasons default to ``default_reasons``."""
    Q, K = np.shape(w)
    r = default_reasons(kind, Q, K) if reasons is None else reasons
    return MapView(kind, w, list(q), list(k), predicted, r, layer, head)


def mosaic(a, q, k, **kw) -> go.Figure:
    return attention_mosaic(view(a, q, k, **kw))


def heatmap(w, q, k, *, title=None, **kw) -> go.Figure:
    return attention_heatmap(one_map(w, q, k, **kw), title=title)


def step(candidates, chosen: int, *, forced: bool = False) -> StepView:
    """A ``StepView`` with these candidates and chosen id (its maps are not drawn by candidates_bar)."""
    return StepView(0, ["<bos>"], candidates, chosen, "x", 0.5, forced, np.zeros((1, 1, 1)), np.zeros((1, 1, 1)), {})


# -- tokens ----------------------------------------------------------------------------------------
def test_display_makes_spaces_and_control_characters_visible():
    assert display([" dog", "dog", "  x", "a\nb", "\t", "", "<bos>"]) == ["▁dog", "dog", "▁▁x", "a⏎b", "⇥", "∅", "<bos>"]


def test_row_labels_are_unique_and_name_the_prediction():
    assert row_labels([" a", " a"]) == ["0: ▁a", "1: ▁a"]
    assert row_labels(["<bos>", " Ein"], [" Ein", "<eos>"]) == ["0: <bos> → ▁Ein", "1: ▁Ein → <eos>"]
    with pytest.raises(ValueError, match="predicted has 1 tokens but q_tokens has 2"):
        row_labels(["<bos>", " Ein"], [" Ein"])


# -- the mosaic ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kind, q, k, pred",
    [("enc_self", SRC, SRC, None), ("cross", TGT_IN, SRC, TGT_OUT), ("cross", TGT_IN[:2], SRC, None)],
)
def test_mosaic_tiles_recover_the_input_maps_and_only_gutters_are_nan(kind, q, k, pred):
    a = dirichlet(3, 4, len(q), len(k))
    fig = mosaic(a, q, k, kind=kind, predicted=pred)
    heat = [t for t in fig.data if isinstance(t, go.Heatmap)]
    assert len(heat) == 1, "no mask: the whole mosaic is ONE heatmap trace"
    meta = fig.layout.meta
    assert (meta["L"], meta["H"], meta["Q"], meta["K"]) == a.shape
    z = z_of(fig.data[0])
    gut = gutter_mask(meta, z.shape)
    assert np.isnan(z[gut]).all() and not np.isnan(z[~gut]).any()
    for l in range(3):
        for h in range(4):
            np.testing.assert_array_equal(mosaic_tile(fig, l, h), a[l, h])
    assert fig.data[0].hoverongaps is False
    assert fig.layout.coloraxis.cmin == 0 and fig.layout.coloraxis.cmax == 1


@settings(max_examples=15, deadline=None)
@given(L=st.integers(1, 3), H=st.integers(1, 4), Q=st.integers(1, 9), K=st.integers(1, 9), seed=st.integers(0, 10**6))
def test_mosaic_tile_recovery_for_any_shape(L, H, Q, K, seed):
    a = dirichlet(L, H, Q, K, seed=seed)
    fig = mosaic(a, [f" t{i}" for i in range(Q)], [f" s{j}" for j in range(K)], kind="cross")
    tiles = np.stack([np.stack([mosaic_tile(fig, l, h) for h in range(H)]) for l in range(L)])
    np.testing.assert_array_equal(tiles, a)
    assert len(fig.data[0].x) == len(set(fig.data[0].x)) == z_of(fig.data[0]).shape[1]
    assert len(fig.data[0].y) == len(set(fig.data[0].y)) == z_of(fig.data[0]).shape[0]


def test_dec_self_future_cells_are_masked_grey_not_zero_weight():
    T = len(TGT_IN)
    a = causal(dirichlet(2, 3, T, T))
    fig = mosaic(a, TGT_IN, TGT_IN, kind="dec_self", predicted=TGT_OUT)
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    grey = {t.name: t for t in fig.data[1:]}
    assert set(grey) == {"future"}
    gz = z_of(grey["future"])
    meta = fig.layout.meta
    for l in range(2):
        for h in range(3):
            tile = mosaic_tile(fig, l, h)
            assert np.isnan(tile[future]).all(), "a masked cell must not be drawn as weight 0"
            np.testing.assert_array_equal(tile[~future], a[l, h][~future])
            y0, x0 = l * (T + meta["gap"]), h * (T + meta["gap"])
            g = gz[y0 : y0 + T, x0 : x0 + T]
            assert (g[future] == 1).all() and np.isnan(g[~future]).all()
    assert "causal mask" in grey["future"].hovertemplate
    assert grey["future"].colorscale[0][1] != fig.layout.coloraxis.colorscale[0][1], "grey differs from the colour of weight 0"


def test_dec_self_without_causal_mask_greys_the_tokens_not_yet_written():
    """Without the causal mask each row is its own step's pass: the keys after the query did not exist yet.
    They are drawn grey with their own name and hover text, not as weight 0 and not as "causal mask"."""
    T = len(TGT_IN)
    a = np.tril(dirichlet(1, 2, T, T))
    a /= a.sum(-1, keepdims=True)
    fig = mosaic(a, TGT_IN, TGT_IN, kind="dec_self", reasons=cell_reasons("dec_self", T, T, causal=False))
    later = np.triu(np.ones((T, T), bool), 1)
    assert [t.name for t in fig.data[1:]] == ["not yet written"]
    assert "causal mask off" in fig.data[1].hovertemplate and "hides the future" not in fig.data[1].hovertemplate
    tile = mosaic_tile(fig, 0, 1)
    assert np.isnan(tile[later]).all()
    np.testing.assert_array_equal(tile[~later], a[0, 1][~later])


def test_ablated_heads_and_hidden_tokens_are_grey_and_labelled():
    a = dirichlet(2, 3, len(TGT_IN), len(SRC))
    a[1, 2] = 0.0  # the model reports zeros for an ablated head
    hidden = cell_reasons("cross", len(TGT_IN), len(SRC), src_hidden=[2])
    fig = mosaic(a, TGT_IN, SRC, kind="cross", predicted=TGT_OUT, reasons=hidden, ablated={(1, 2)})
    assert fig.layout.meta["ablated"] == [[1, 2]]
    assert np.isnan(mosaic_tile(fig, 1, 2)).all()
    assert np.isnan(mosaic_tile(fig, 0, 0)[:, 2]).all()
    np.testing.assert_array_equal(np.delete(mosaic_tile(fig, 0, 0), 2, axis=1), np.delete(a[0, 0], 2, axis=1))
    assert {t.name for t in fig.data[1:]} == {"hidden", "ablated"}
    texts = [ann.text for ann in fig.layout.annotations]
    assert any("L2 H3" in t and "ablated" in t for t in texts)
    assert sum("ablated" in t for t in texts) == 1


def test_viz_draws_the_reasons_it_is_given_and_computes_none_of_its_own():
    """Grey cells are exactly the view's reasons: a dec_self view without FUTURE cells draws the
    future, and reasons no mask rule would give (scattered cells) are drawn where they are."""
    T = len(TGT_IN)
    a = dirichlet(1, 2, T, T)
    reasons = np.zeros((T, T), np.int8)  # no causal mask, although the kind is dec_self
    reasons[0, 3], reasons[4, 1], reasons[2, 2] = WINDOW, HIDDEN, FUTURE  # no rule hides these cells alone
    for fig, tile in (
        (mosaic(a, TGT_IN, TGT_IN, kind="dec_self", reasons=reasons), lambda f: mosaic_tile(f, 0, 1)),
        (heatmap(a[0, 1], TGT_IN, TGT_IN, kind="dec_self", reasons=reasons), lambda f: z_of(f.data[0])),
    ):
        z = tile(fig)
        np.testing.assert_array_equal(np.isnan(z), reasons != VISIBLE)
        np.testing.assert_array_equal(z[reasons == VISIBLE], a[0, 1][reasons == VISIBLE])
        assert {t.name for t in fig.data if isinstance(t, go.Heatmap)} == {"attention", "window", "hidden", "future"}
    heat = heatmap(a[0, 1], TGT_IN, TGT_IN, kind="dec_self", reasons=reasons)
    cells = {t.name: np.asarray(t.customdata).tolist() for t in heat.data if isinstance(t, go.Scatter)}
    assert cells["cells: window"] == [[0, 3]] and cells["cells: hidden"] == [[4, 1]] and cells["cells: future"] == [[2, 2]]
    with pytest.raises(ValueError, match="reasons has shape"):
        mosaic(a, TGT_IN, TGT_IN, kind="dec_self", reasons=reasons[:3])


def test_zoom_draws_a_head_ablated_in_the_view_as_ablated():
    a = dirichlet(2, 2, len(TGT_IN), len(SRC))
    a[1, 0] = 0.0
    v = view(a, TGT_IN, SRC, kind="cross", ablated={(1, 0)})
    fig = attention_heatmap(v.map(1, 0), title="t")
    assert np.isnan(z_of(fig.data[0])).all() and fig.data[1].name == "ablated"
    other = attention_heatmap(v.map(1, 1), title="t")
    assert not np.isnan(z_of(other.data[0])).any()
    np.testing.assert_allclose(z_of(attention_heatmap(v.map(1)).data[0]), a[1, 1], rtol=1e-6)  # the mean leaves it out


def test_layer_means_mosaic_is_one_column_named_mean():
    a = dirichlet(2, 3, len(TGT_IN), len(SRC))
    a[0, 1] = 0.0  # an ablated head: the layer's mean leaves it out
    fig = attention_mosaic(view(a, TGT_IN, SRC, kind="cross", predicted=TGT_OUT, ablated={(0, 1)}).layer_means())
    assert (fig.layout.meta["H"], fig.layout.meta["ablated"]) == (1, [])
    np.testing.assert_allclose(mosaic_tile(fig, 0, 0), a[0, [0, 2]].mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(mosaic_tile(fig, 1, 0), a[1].mean(axis=0), rtol=1e-6)
    assert "layer %{customdata[0]}, mean" in fig.data[0].hovertemplate
    assert [ann.text for ann in fig.layout.annotations] == ["<b>L1 mean</b>", "<b>L2 mean</b>"]


def test_mosaic_hover_names_layer_head_query_key_and_weight():
    a = dirichlet(2, 3, len(TGT_IN), len(SRC))
    fig = mosaic(a, TGT_IN, SRC, kind="cross", predicted=TGT_OUT)
    tr, meta = fig.data[0], fig.layout.meta
    l, h, q, k = 1, 2, 2, 5  # layer 2, head 3, query " Hund" (pos 2), key the second " dog" (pos 5)
    r, c = l * (meta["Q"] + meta["gap"]) + q, h * (meta["K"] + meta["gap"]) + k
    assert tr.y[r].rstrip(ZW) == "▁Hund (pos 2) → predicts ▁springt"
    assert tr.x[c].rstrip(ZW) == "▁dog (pos 5)"
    assert list(np.asarray(tr.customdata)[r, c]) == [2, 3]
    assert z_of(tr)[r, c] == a[l, h, q, k]
    for field in ("layer %{customdata[0]}", "head %{customdata[1]}", "query: %{y}", "key: %{x}", "weight %{z:.3f}"):
        assert field in tr.hovertemplate


def test_labels_match_tokens_and_duplicates_do_not_merge():
    a = dirichlet(1, 2, len(SRC), len(SRC))
    fig = mosaic(a, SRC, SRC, kind="enc_self")
    labels = shown(SRC)
    assert list(fig.layout.yaxis.ticktext) == labels
    assert list(fig.layout.xaxis.ticktext) == labels * 2
    assert len(set(fig.data[0].x)) == len(fig.data[0].x)  # the two " dog" columns stay two columns
    z = heatmap(a[0, 0], SRC, SRC, title="t", kind="enc_self")
    assert list(z.layout.xaxis.ticktext) == labels and list(z.layout.xaxis.tickvals) == list(range(len(SRC)))
    assert list(z.layout.yaxis.ticktext) == labels
    assert list(np.asarray(z.data[0].x)) == list(range(len(SRC)))  # integer axis: one column per position


def test_special_tokens_are_escaped_for_plotly():
    fig = heatmap(dirichlet(2, 2), ["<bos>", " Ein"], ["<bos>", " Ein"], title="t", kind="dec_self")
    assert fig.layout.xaxis.ticktext[0] == "&lt;bos&gt;"


def test_mosaic_payload_is_base64_not_lists():
    a = dirichlet(3, 4, 20, 20)
    spec = json.loads(mosaic(a, [f" w{i}" for i in range(20)], [f" w{i}" for i in range(20)], kind="enc_self").to_json())
    assert set(spec["data"][0]["z"]) >= {"dtype", "bdata"} and spec["data"][0]["z"]["dtype"] == "f4"
    assert set(spec["data"][0]["customdata"]) >= {"dtype", "bdata"}


# -- one head zoomed ---------------------------------------------------------------------------------
def test_heatmap_click_scatter_and_hover_for_one_cell():
    T = len(TGT_IN)
    w = causal(dirichlet(T, T))
    fig = heatmap(w, TGT_IN, TGT_IN, kind="dec_self", predicted=TGT_OUT, layer=1, head=2)
    np.testing.assert_array_equal(z_of(fig.data[0])[np.tril_indices(T)], w[np.tril_indices(T)])
    assert np.isnan(z_of(fig.data[0])[np.triu_indices(T, 1)]).all()
    # click layer: invisible markers, one per cell, customdata [q, k] at (x, y) = (k, q)
    layer = [t for t in fig.data if isinstance(t, go.Scatter)]
    assert [t.name for t in layer] == ["cells: future", "cells"] and fig.data[-1] is layer[-1]
    cells = {}
    for t in layer:
        assert t.marker.opacity == 0 and t.selected.marker.opacity == 0 and t.unselected.marker.opacity == 0
        assert t.text is None and t.hovertext is None, "no text per cell: the hover is a template"
        for (q, k), x, y in zip(np.asarray(t.customdata).tolist(), t.x, t.y, strict=True):
            assert (x, y) == (k, q) and (q, k) not in cells
            cells[(q, k)] = t.name
    assert cells == {(q, k): "cells" if k <= q else "cells: future" for q in range(T) for k in range(T)}
    sc = fig.data[-1]
    q, k = 3, 1
    i = np.asarray(sc.customdata).tolist().index([q, k])
    assert json.loads(fig.to_json())["data"][-1]["customdata"][i] == [q, k]  # a plain list reaches on_select as [q, k]
    assert np.float32(sc.marker.color[i]) == w[q, k]
    # hover: plotly.js shows the tick text of the row / column for %{y} / %{x} on these integer axes
    assert "layer 2, head 3" in sc.hovertemplate
    for field in ("query %{customdata[0]}: %{y}", "key %{customdata[1]}: %{x}", "weight %{marker.color:.3f}"):
        assert field in sc.hovertemplate
    ya, xa = fig.layout.yaxis, fig.layout.xaxis
    assert ya.ticktext[list(ya.tickvals).index(q)] == "▁springt → ▁über" and xa.ticktext[list(xa.tickvals).index(k)] == "▁Ein"
    assert "causal mask" in layer[0].hovertemplate  # a future cell says why it is empty


def test_labels_fit_in_explicit_margins():
    """Every axis grows its margin if needed (automargin, whatever the plotly template), and the explicit
    margins already hold the longest tick label, so plotly.js need not lay the figure out twice."""
    from viz._common import MARGIN_MIN, text_px

    row = dirichlet(4, len(SRC))
    pe = sinusoidal(64, 32)
    figs = {
        "step_attention": step_attention(row, SRC, title="t", key_title="source token"),
        "step_attention 1-D": step_attention(row[0], SRC, title="t"),
        "candidates_bar": candidates_bar(step([(" Hund", 55, 0.6), (" extraordinarily", 12, 0.3)], 55)),
        "pe_matrix": pe_matrix(pe),
        "pe_curves": pe_curves(pe, [0, 1, 8]),
        "pe_similarity": pe_similarity(pe),
        "attention_mosaic": mosaic(dirichlet(2, 2, len(TGT_IN), len(SRC)), TGT_IN, SRC, kind="cross", predicted=TGT_OUT),
        "attention_heatmap": heatmap(dirichlet(len(TGT_IN), len(SRC)), TGT_IN, SRC, title="t", kind="cross"),
    }
    for name, fig in figs.items():
        for ax in (fig.layout.xaxis, fig.layout.yaxis):
            assert ax.automargin is True, name
            if ax.title.text:
                assert ax.title.standoff is not None, f"{name}: the title is placed beyond the tick labels"
        m = fig.layout.margin
        assert min(m.l, m.r, m.b) >= MARGIN_MIN, name
        y_ticks = fig.layout.yaxis.ticktext
        if y_ticks:
            widest = max(text_px(t, (fig.layout.yaxis.tickfont.size or 12)) for t in y_ticks)
            assert m.l > widest + MARGIN_MIN + (20 if fig.layout.yaxis.title.text else 0), name
    assert figs["step_attention"].layout.margin.l > text_px("mean of heads") + MARGIN_MIN
    assert figs["candidates_bar"].layout.margin.l > text_px("▁extraordinarily") + MARGIN_MIN
    assert figs["pe_matrix"].layout.margin.b > 2 * 12 + MARGIN_MIN  # tick labels and the title "dimension" below them


# -- before / after ----------------------------------------------------------------------------------
def test_difference_heatmap_is_after_minus_before_on_a_symmetric_scale():
    before, after = dirichlet(5, 8, seed=1), dirichlet(5, 8, seed=2)
    b, a = (one_map(w, TGT_IN[:5], SRC, kind="cross") for w in (before, after))
    fig = difference_heatmap(b, a, title="x")
    np.testing.assert_allclose(z_of(fig.data[0]), after - before, atol=0)
    tr = fig.data[0]
    m = np.abs(after - before).max()
    assert tr.zmid == 0 and tr.zmin == pytest.approx(-m) and tr.zmax == pytest.approx(m)
    np.testing.assert_array_equal(np.asarray(tr.customdata)[2, 3], [before[2, 3], after[2, 3]])
    same = difference_heatmap(b, b)
    assert same.data[0].zmax == pytest.approx(1e-6) and not np.isnan(z_of(same.data[0])).any()


# -- errors --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: mosaic(dirichlet(4, 8, 8), SRC, SRC, kind="enc_self"), r"attn must be 4-D, got shape \(4, 8, 8\)"),
        (lambda: mosaic(dirichlet(1, 1, 8, 8), SRC, SRC[:3], kind="enc_self"), "k_tokens has 3 tokens but"),
        (lambda: mosaic(dirichlet(1, 1, 7, 8), TGT_IN, SRC, kind="dec_self"), "did you mean kind='cross'"),
        (lambda: mosaic(dirichlet(1, 1, 8, 8), SRC, SRC, kind="encoder"), "kind must be one of"),
        (lambda: mosaic(dirichlet(1, 1, 8, 8), SRC, SRC, kind="enc_self", ablated={(0, 1)}), "out of range"),
        (lambda: mosaic(dirichlet(1, 1, 8, 8), SRC, SRC, kind="enc_self", predicted=SRC), "decoder rows"),
        (lambda: mosaic(np.full((1, 1, 8, 8), np.nan), SRC, SRC, kind="enc_self"), "NaN"),
        (lambda: heatmap(dirichlet(7, 8), TGT_IN, SRC, title="t", kind="cross", predicted=TGT_OUT[:2]), "predicted has 2"),
        (
            lambda: difference_heatmap(
                one_map(dirichlet(7, 8), TGT_IN, SRC, kind="cross"), one_map(dirichlet(6, 8), TGT_IN[:6], SRC, kind="cross")
            ),
            "same kind, queries and keys",
        ),
        (lambda: step_attention(dirichlet(4, 8), SRC[:5], title="t"), "k_tokens has 5 tokens"),
        (lambda: rollout(dirichlet(2, 2, 3, 4)), "square"),
        (lambda: pe_curves(np.zeros((10, 8)), [8]), r"dims \[8\] are out of range"),
        (lambda: word_order_figure({"a_tokens": []}), "word_order_demo"),
        (lambda: beam_tree(BeamTree([], [], [0], [])), "no nodes"),
        (lambda: candidates_bar(step([], 1)), "candidates are empty"),
        (lambda: shapes_table([Stage("x", "not a shape", "")]), "shape must be a tuple of ints"),
        (lambda: shapes_table([("x", (1, 2), "")]), "must be a analysis.records.Stage"),
    ],
)
def test_bad_input_raises_a_value_error_that_says_what_to_fix(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_torch_tensors_are_accepted():
    torch = pytest.importorskip("torch")
    a = dirichlet(1, 2, 3, 3)
    fig = mosaic(torch.from_numpy(a).requires_grad_(), SRC[:3], SRC[:3], kind="enc_self")
    np.testing.assert_array_equal(mosaic_tile(fig, 0, 1), a[0, 1])


# -- averages, statistics, rollout ---------------------------------------------------------------------
def test_averages_leave_out_ablated_heads():
    a = dirichlet(2, 4, 5, 5)
    a[1, 3] = 0.0
    avg = layer_average(a)
    np.testing.assert_allclose(avg[0], a[0].mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(avg[1], a[1, :3].mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(avg.sum(axis=-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(head_average(a, 1), avg[1])
    np.testing.assert_allclose(head_average(a[0]), avg[0])


def _one_head(m: np.ndarray) -> np.ndarray:
    return m[None, None].astype(np.float32)  # (Q, K) -> (1, 1, Q, K)


def test_head_stats_on_hand_made_maps():
    K = 6
    identity = np.eye(K)
    uniform = np.full((K, K), 1 / K)
    previous = np.zeros((K, K))
    previous[0, 1] = 1.0  # row 0 has no previous token: it looks one ahead, also at distance 1
    previous[np.arange(1, K), np.arange(K - 1)] = 1.0
    enc = np.concatenate(
        [_one_head(identity), _one_head(uniform), _one_head(previous), np.zeros((1, 1, K, K), np.float32)], axis=1
    )
    df = head_stats(enc, None, None)
    assert list(df.columns) == [
        "kind",
        "layer",
        "head",
        "entropy",
        "mean_distance",
        "diagonal",
        "previous",
        "first",
        "last",
        "max",
        "rows",
    ]
    ident, unif, prev, ablated = (df.iloc[i] for i in range(4))
    assert (ident.diagonal, ident.entropy, ident.mean_distance, ident["max"]) == (pytest.approx(1), pytest.approx(0), 0, 1)
    assert unif.entropy == pytest.approx(math.log(K)) and unif.first == pytest.approx(1 / K) and unif.last == pytest.approx(1 / K)
    assert prev.previous == pytest.approx(1) and prev.mean_distance == pytest.approx(1) and prev.diagonal == 0
    assert ablated.rows == 0 and np.isnan(ablated.entropy)
    assert list(df["head"]) == [1, 2, 3, 4] and set(df.layer) == {1} and set(df.kind) == {"enc_self"}


def test_head_stats_cross_uses_the_proportional_diagonal():
    T, S = 3, 5
    m = np.zeros((T, S))
    m[[0, 1, 2], [0, 2, 4]] = 1.0  # first word to first word, middle to middle, <eos> to <eos>
    df = head_stats(cross=_one_head(m))
    assert df.loc[0, "diagonal"] == pytest.approx(1) and df.loc[0, "mean_distance"] == pytest.approx(0)
    assert df.loc[0, "previous"] == 0


def test_rollout_rows_sum_to_one_and_match_a_hand_computed_example():
    roll = rollout(dirichlet(3, 4, 6, 6), residual=0.5)
    assert roll.shape == (3, 6, 6)
    np.testing.assert_allclose(roll.sum(axis=-1), 1.0, rtol=1e-5)
    a1 = np.array([[1.0, 0.0], [0.5, 0.5]])
    a2 = np.array([[0.0, 1.0], [1.0, 0.0]])
    # Â1 = .5 I + .5 A1 = [[1, 0], [.25, .75]];  Â2 = [[.5, .5], [.5, .5]];  R2 = Â2 Â1
    r = rollout(np.stack([a1[None], a2[None]]), residual=0.5)
    np.testing.assert_allclose(r[0], [[1.0, 0.0], [0.25, 0.75]])
    np.testing.assert_allclose(r[1], [[0.625, 0.375], [0.625, 0.375]])
    np.testing.assert_allclose(rollout(np.stack([a1[None], a2[None]]), residual=1.0)[1], np.eye(2))


def test_rollout_figure_tiles_every_layer():
    roll = rollout(dirichlet(3, 2, 5, 5))
    fig = rollout_figure(roll, SRC[:5])
    z, meta = z_of(fig.data[0]), fig.layout.meta
    for l in range(3):
        x0 = l * (5 + meta["gap"])
        np.testing.assert_array_equal(z[:, x0 : x0 + 5], roll[l])


# -- export --------------------------------------------------------------------------------------------
def test_attention_csv_round_trips_through_pandas():
    w = dirichlet(len(TGT_IN), len(SRC))
    text = attention_csv(w, TGT_IN, SRC, predicted=TGT_OUT)
    back = pd.read_csv(io.StringIO(text), index_col=0)
    np.testing.assert_array_equal(back.to_numpy().astype(np.float32), w)
    assert list(back.index) == row_labels(TGT_IN, TGT_OUT)
    assert list(back.columns) == row_labels(SRC)  # the two " dog" columns stay apart: "1: ▁dog", "5: ▁dog"


def test_figure_html_is_a_full_page():
    page = figure_html(heatmap(dirichlet(2, 2), SRC[:2], SRC[:2], title="t", kind="enc_self"))
    assert page.lstrip().lower().startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert "cdn.plot.ly" in page and len(page) < 100_000


# -- positional encoding -----------------------------------------------------------------------------
def sinusoidal(n: int, d: int) -> np.ndarray:
    pos = np.arange(n)[:, None]
    ang = pos / 10000 ** (np.arange(0, d, 2) / d)
    pe = np.zeros((n, d), np.float32)
    pe[:, 0::2], pe[:, 1::2] = np.sin(ang), np.cos(ang)
    return pe


def test_pe_curves_wavelengths_match_the_formula():
    d = 32
    pe = sinusoidal(50, d)
    dims = [0, 1, 6, 7, 31]
    fig = pe_curves(pe, dims)
    for tr, dim in zip(fig.data, dims, strict=True):
        lam = 2 * math.pi * 10000 ** (2 * (dim // 2) / d)
        assert tr.meta["wavelength"] == pytest.approx(lam) and wavelength(dim, d) == pytest.approx(lam)
        assert f"{lam:,.1f}" in tr.name
        wave = np.sin if dim % 2 == 0 else np.cos
        np.testing.assert_allclose(tr.y, wave(2 * math.pi * np.arange(50) / lam), atol=1e-5)  # the curve has that period


def test_pe_matrix_and_similarity():
    pe = sinusoidal(20, 16)
    m = pe_matrix(pe)
    np.testing.assert_array_equal(z_of(m.data[0]), pe)
    assert m.data[0].zmin == -1 and m.data[0].zmax == 1 and "wavelength" in m.data[0].x[0]
    s = z_of(pe_similarity(pe).data[0])
    np.testing.assert_allclose(np.diag(s), 1.0, rtol=1e-5)
    np.testing.assert_allclose(s, s.T, atol=1e-6)


def test_word_order_figure_on_a_demo_dict():
    rng = np.random.default_rng(0)
    a_tok, b_tok, perm = [" John", " loves", " Mary", "<eos>"], [" Mary", " loves", " John", "<eos>"], [2, 1, 0, 3]
    ea = rng.normal(size=(4, 8)).astype(np.float32)
    eb_on = rng.normal(size=(4, 8)).astype(np.float32)
    demo = WordOrder(
        a_tok,
        b_tok,
        perm,
        pe_off=EncoderStates(ea, ea[perm], 0.0),
        pe_on=EncoderStates(ea, eb_on, float(np.abs(eb_on - ea[perm]).max())),
    )
    fig = word_order_figure(demo)
    off, on = fig.data
    np.testing.assert_array_equal(off.y, 0)
    np.testing.assert_allclose(on.y, np.linalg.norm(eb_on - ea[perm], axis=1), rtol=1e-6)
    assert list(fig.layout.xaxis.ticktext) == shown(b_tok)
    assert "John loves Mary" in fig.layout.title.text and "Mary loves John" in fig.layout.title.text
    with pytest.raises(ValueError, match="permutation"):
        word_order_figure(dataclasses.replace(demo, perm=[0, 0, 1, 2]))


# -- decoding steps --------------------------------------------------------------------------------------
def test_candidates_bar_highlights_the_chosen_token():
    cands = [(" Hund", 55, 0.6), (" Mann", 12, 0.3), (" dog", 7, 0.1)]
    fig = candidates_bar(step(cands, 12, forced=True))
    bar = fig.data[0]
    np.testing.assert_allclose(bar.x, [0.6, 0.3, 0.1])
    assert [c == bar.marker.color[1] for c in bar.marker.color] == [False, True, False]
    assert "forced" in bar.text[1] and fig.layout.xaxis.range[0] == 0
    outside = candidates_bar(step(cands, 999))
    assert "not in the top 3" in outside.layout.annotations[0].text


def test_step_attention_per_head_and_mean():
    row = dirichlet(4, len(SRC))
    fig = step_attention(row, SRC, title="t", query=" Hund", layer=0)
    z = z_of(fig.data[0])
    np.testing.assert_array_equal(z[:4], row)
    assert np.isnan(z[4]).all()
    np.testing.assert_allclose(z[5], row.mean(axis=0), rtol=1e-6)
    assert fig.data[0].zmin == 0 and fig.data[0].zmax == 1
    one = step_attention(row[1], SRC, title="t")
    np.testing.assert_array_equal(one.data[0].y, row[1])
    assert "▁dog (pos 5)" in one.data[0].hovertext[5]


def test_beam_tree_highlights_the_best_path():
    from model.decoding import BeamNode

    nodes = [
        BeamNode(0, -1, 1, -1, 0.0),
        BeamNode(1, 0, 5, 0, -0.1),
        BeamNode(2, 0, 6, 0, -0.9),
        BeamNode(3, 1, 7, 1, -0.3),
        BeamNode(4, 3, 2, 2, -0.4, finished=True, score=-0.35),
    ]
    texts = ["<bos>", " Ein", " Der", " Hund", "<eos>"]
    fig = beam_tree(BeamTree(nodes, texts, [0, 1, 3, 4], [(" Ein Hund", -0.35)]))
    best = next(t for t in fig.data if t.name == "best hypothesis")
    assert [v for v in best.x if v is not None] == [0, 1, 1, 2, 2, 3]
    finished = next(t for t in fig.data if t.name == "finished hypotheses")
    assert "hypothesis: Ein Hund" in finished.hovertext[0] and "score" in finished.hovertext[0]
    with pytest.raises(ValueError, match="parent 9"):
        beam_tree(BeamTree([*nodes, dataclasses.replace(nodes[1], id=5, parent=9)], [*texts, "x"], [0], []))


# -- shapes ------------------------------------------------------------------------------------------
def test_shapes_table_and_figure():
    shapes = [
        Stage("source token ids", (1, 7), "B x S"),
        Stage("memory (encoder output)", (1, 7, 256), "B x S x D"),
        Stage("logits", (1, 5, 900), "B x T x V"),
    ]
    df = shapes_table(shapes)
    assert list(df.columns) == ["stage", "shape", "meaning"] and list(df["shape"]) == ["[1, 7]", "[1, 7, 256]", "[1, 5, 900]"]
    fig = shapes_figure(shapes)
    assert len(fig.layout.shapes) == 3 and len(fig.data[0].hovertext) == 3


# -- plotly's property check: on in the tests, off in the app ------------------------------------------
def test_the_tests_check_every_figure_and_a_bad_property_fails():
    from viz import _common as vc

    assert vc.VALIDATE_FIGURES, "tests/conftest.py switches plotly's check on for every test"
    with pytest.raises(ValueError, match="colourscale"):
        vc.figure([dict(type="heatmap", z=[[1.0]], colourscale="Blues")], {})


def test_an_unchecked_figure_sends_the_browser_the_same_json(monkeypatch):
    """What Streamlit sends (``plotly.io.to_json`` of ``return_figure_from_figure_or_data``) is the same JSON
    (the same values; keys may come in another order) whether plotly checked the figure or not."""
    import plotly.io as pio
    import plotly.tools

    from viz import _common as vc

    T = len(TGT_IN)
    a = causal(dirichlet(2, 4, T, T))
    builders = [
        lambda: mosaic(a, TGT_IN, TGT_IN, kind="dec_self", predicted=TGT_OUT),
        lambda: heatmap(a[1, 2], TGT_IN, TGT_IN, kind="dec_self", predicted=TGT_OUT, layer=1, head=2),
        lambda: difference_heatmap(
            one_map(a[0, 0], TGT_IN, TGT_IN, kind="dec_self"), one_map(a[1, 1], TGT_IN, TGT_IN, kind="dec_self")
        ),
    ]

    def sent(fig: go.Figure) -> dict:
        return json.loads(pio.to_json(plotly.tools.return_figure_from_figure_or_data(fig, True), validate=False))

    checked = [sent(b()) for b in builders]
    monkeypatch.setattr(vc, "VALIDATE_FIGURES", False)
    assert [sent(b()) for b in builders] == checked


def test_figures_keep_plotlys_default_look_in_a_template_cut_to_what_they_draw():
    """Figures carry plotly's default template ("plotly") cut to the settings that reach them: every kept setting is
    the default's (a part of it, never another value), and every trace a builder draws is of a type the builders
    declare. That the cut changes no pixel and no trace is checked in a browser (tests/test_template_look.py)."""
    import plotly.io as pio

    from viz import _common as vc

    def part_of(cut, full) -> bool:
        if isinstance(cut, dict):
            return isinstance(full, dict) and all(k in full and part_of(v, full[k]) for k, v in cut.items())
        if isinstance(cut, list) and cut and isinstance(cut[0], dict):
            return isinstance(full, list) and len(cut) == len(full) and all(map(part_of, cut, full))
        return cut == full

    full, cut = pio.templates["plotly"].to_plotly_json(), vc.TEMPLATE
    assert part_of(cut, full)
    assert set(cut["layout"]) == {*vc.TEMPLATE_LAYOUT, "colorscale"}
    assert set(cut["data"]) <= set(vc.TRACE_TYPES)
    T = len(TGT_IN)
    a = causal(dirichlet(2, 4, T, T))
    figs = [
        mosaic(a, TGT_IN, TGT_IN, kind="dec_self", predicted=TGT_OUT),
        heatmap(a[1, 2], TGT_IN, TGT_IN, kind="dec_self", predicted=TGT_OUT, layer=1, head=2),
        candidates_bar(step([(" Hund", 5, 0.7), (" Katze", 6, 0.2)], 5)),
    ]
    for fig in figs:
        assert {t.type for t in fig.data} <= set(vc.TRACE_TYPES)
        assert json.loads(fig.to_json())["layout"]["template"] == json.loads(json.dumps(cut))


@pytest.mark.parametrize("p", [0.5, 0.9, 0.987654, 1.0])
def test_candidates_bar_layout_does_not_move_with_a_probabilitys_last_bits(p):
    """A class's batched decoding and one user's differ in a probability's last bits (~1e-6): the chart's layout must
    not (bench/README 8j: a right margin computed from p moved by a pixel once in 120 students)."""
    layouts = []
    for dp in np.linspace(-3e-5, 3e-5, 61):
        q = float(np.float32(min(1.0, p + dp)))
        fig = candidates_bar(step([("Ein", 5, q), ("Der", 6, (1 - q) / 2)], 5))
        layouts.append((fig.layout.margin.to_plotly_json(), fig.layout.height))
    assert all(lay == layouts[0] for lay in layouts)

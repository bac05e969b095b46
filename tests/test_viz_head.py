"""viz/head.py: the "Inside one head" figures carry the HeadTrace's numbers, labelled with its tokens.

The traces are built by hand (no model): a query, keys and values with known numbers, some keys
masked for a stated reason. Every test reads the numbers back out of the figure.
"""

from __future__ import annotations

import html
import math

import numpy as np
import pytest

from analysis.trace import HeadTrace
from model.facts import FUTURE, HIDDEN, REASONS, VISIBLE, WINDOW
from viz import head as vh
from viz.tokens import display

SRC = [" a", " dog", " runs", " a", "<eos>"]  # " a" twice on purpose
TGT = ["<bos>", " Ein", " Hund"]
PRED = [" Ein", " Hund", "<eos>"]


def make_trace(kind: str = "enc_self", reasons=(VISIBLE,) * 5, *, ablated=frozenset(), tau: float = 1.0, norm_first=True):
    """A consistent HeadTrace with random numbers: D = 8, H = 2, d_head = 4; the keys' reasons as given."""
    rng = np.random.default_rng(0)
    k_tokens = TGT if kind == "dec_self" else SRC
    q_tokens = SRC if kind == "enc_self" else TGT
    K, D, H, Dh = len(k_tokens), 8, 2, 4
    reasons = np.array(reasons[:K], dtype=np.int8)
    mask = reasons != VISIBLE
    f32 = lambda *s: rng.normal(size=s).astype(np.float32)  # noqa: E731
    q, k, v = f32(Dh), f32(K, Dh), f32(K, Dh)
    scores = (k @ q).astype(np.float32)
    scaled = (scores / (math.sqrt(Dh) * tau)).astype(np.float32)
    w = np.zeros(K, np.float32)
    if not mask.all():
        e = np.exp(scaled[~mask] - scaled[~mask].max())
        w[~mask] = e / e.sum()
    head_out = (w @ v).astype(np.float32)
    heads = np.stack([head_out, f32(Dh)])
    keep = np.array([h not in ablated for h in range(H)], np.float32)
    concat = (heads * keep[:, None]).reshape(D)
    resid, attn_out = f32(D), f32(D)
    added = resid + attn_out
    return HeadTrace(
        kind=kind,
        layer=1,
        head=0,
        query=1,
        d_head=Dh,
        temperature=tau,
        norm_first=norm_first,
        q_tokens=q_tokens,
        k_tokens=k_tokens,
        predicted=None if kind == "enc_self" else PRED,
        resid=resid,
        x=f32(D),
        kv_x=f32(K, D),
        q=q,
        k=k,
        v=v,
        scores=scores,
        scaled=scaled,
        mask=mask,
        reasons=reasons,
        weights=w,
        head_out=head_out,
        heads=heads,
        ablated_heads=frozenset(ablated),
        concat=concat,
        attn_out=attn_out,
        added=added,
        normed=((added - added.mean()) / added.std()).astype(np.float32),
        norm_label="test",
    )


def z(fig, i: int = 0) -> np.ndarray:
    return np.asarray(fig.data[i].z, dtype=np.float32)


def ticks(tokens: list[str]) -> list[str]:
    return [html.escape(t, quote=False) for t in display(tokens)]


MASKED = (VISIBLE, HIDDEN, VISIBLE, WINDOW, VISIBLE)


def test_weights_bar_holds_the_weights_sums_to_one_and_masks_at_zero():
    t = make_trace("enc_self", MASKED)
    fig = vh.weights_figure(t)
    bar = fig.data[0]
    y = np.asarray(bar.y, dtype=np.float32)
    np.testing.assert_allclose(y, t.weights, atol=1e-7)
    assert abs(y.sum() - 1) < 1e-6 and fig.layout.meta["sum"] == pytest.approx(1, abs=1e-6)
    assert "sum = 1.000" in fig.layout.title.text
    assert (y[[1, 3]] == 0).all()
    assert list(fig.layout.xaxis.ticktext) == ticks(SRC) and list(fig.layout.xaxis.tickvals) == list(range(5))
    # masked keys are grey, with their reason in hover
    assert REASONS[HIDDEN] in bar.customdata[1][1] and REASONS[WINDOW] in bar.customdata[3][1]
    assert bar.customdata[0][1] == ""
    assert bar.marker.color[1] != bar.marker.color[0]


def test_weights_bar_with_every_key_masked_sums_to_zero():
    t = make_trace("cross", (HIDDEN,) * 5)
    fig = vh.weights_figure(t)
    assert (np.asarray(fig.data[0].y) == 0).all()
    assert "sum = 0.000" in fig.layout.title.text and "every key is masked" in fig.layout.title.text


def test_weights_bar_says_an_ablated_head_is_off():
    assert "switched off" in vh.weights_figure(make_trace(ablated={0})).layout.title.text
    assert "switched off" not in vh.weights_figure(make_trace(ablated={1})).layout.title.text


@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_scores_figure_raw_scaled_and_minus_infinity_with_reasons(tau):
    t = make_trace("dec_self", (VISIBLE, VISIBLE, FUTURE), tau=tau)
    fig = vh.scores_figure(t)
    raw, scaled, masked = fig.data
    np.testing.assert_allclose(np.asarray(raw.y, np.float32), t.scores)
    s = np.asarray(scaled.y, dtype=np.float32)
    np.testing.assert_allclose(s[:2], t.scores[:2] / (2 * tau), rtol=1e-6)
    assert np.isnan(s[2])  # not drawn as a number: it is −∞
    assert list(masked.x) == [2] and list(masked.text) == ["\u2212\u221e"]
    assert REASONS[FUTURE] in masked.customdata[0][1]
    assert ("τ = 0.5" in fig.layout.title.text) == (tau == 0.5)
    assert list(fig.layout.xaxis.ticktext) == ticks(TGT)


def test_scores_table_has_minus_infinity_and_the_reason():
    t = make_trace("enc_self", MASKED, tau=2.0)
    df = vh.scores_table(t)
    assert list(df.columns) == ["key", "token", "q·k", "÷ √4 · 2", "softmax input", "weight", "masked because"]
    assert list(df["token"]) == display(SRC)
    assert np.isneginf(df["softmax input"][[1, 3]]).all() and (df["softmax input"][[0, 2, 4]] == t.scaled[[0, 2, 4]]).all()
    assert df["weight"].sum() == pytest.approx(1, abs=1e-6) and (df["weight"][[1, 3]] == 0).all()
    assert list(df["masked because"]) == ["", REASONS[HIDDEN], "", REASONS[WINDOW], ""]


def test_scores_figure_without_mask_has_no_minus_infinity():
    fig = vh.scores_figure(make_trace("cross"))
    assert len(fig.data) == 2 and not np.isnan(np.asarray(fig.data[1].y, dtype=float)).any()


def test_input_figure_rows_are_resid_and_x():
    t = make_trace("cross")
    fig = vh.input_figure(t)
    np.testing.assert_array_equal(z(fig), np.stack([t.resid, t.x]))
    assert "decoder state" in fig.data[0].y[0]
    assert "query 1: \u2581Ein \u2192 \u2581Hund" in fig.layout.title.text
    post = vh.input_figure(make_trace(norm_first=False))
    assert z(post).shape == (1, 8) and post.data[0].y[0].startswith("x = ")


@pytest.mark.parametrize("kind", ["enc_self", "cross"])
def test_kv_figure_rows_are_q_then_keys_or_the_values_labelled_with_tokens(kind):
    t = make_trace(kind, MASKED)
    fk, fv = vh.kv_figure(t, "k"), vh.kv_figure(t, "v")
    np.testing.assert_array_equal(z(fk), np.concatenate([t.q[None], t.k]))
    np.testing.assert_array_equal(z(fv), t.v)
    names = list(fv.data[0].y)
    assert names[1] == "v1: \u2581dog (pos 1) (masked)" and names[0] == "v0: \u2581a (pos 0)"
    assert names[3].startswith("v3: \u2581a (pos 3)")  # the repeated token keeps its own row
    assert fk.data[0].y[0].startswith("q (query 1")
    assert ("encoder memory" in fk.layout.title.text) == (kind == "cross")
    assert list(fk.data[0].x) == list(range(t.d_head))
    with pytest.raises(ValueError, match="which must be"):
        vh.kv_figure(t, "q")


def test_weighted_sum_rows_add_up_to_the_head_output():
    t = make_trace("enc_self", MASKED)
    m = z(vh.weighted_sum_figure(t))
    np.testing.assert_allclose(m[:-1], t.weights[:, None] * t.v, atol=1e-7)
    np.testing.assert_allclose(m[:-1].sum(axis=0), m[-1], atol=1e-5)
    np.testing.assert_array_equal(m[-1], t.head_out)


def test_output_figure_concat_attn_out_residual_and_norm():
    t = make_trace("dec_self", (VISIBLE, VISIBLE, FUTURE), ablated={1})
    fig = vh.output_figure(t)
    m = z(fig)
    np.testing.assert_array_equal(m, np.stack([t.concat, t.attn_out, t.resid, t.added, t.normed]))
    np.testing.assert_allclose(m[3], m[1] + m[2], atol=1e-6)
    assert (m[0, 4:] == 0).all()  # head 2 is ablated: its block of the concatenation is zero
    notes = [a.text for a in fig.layout.annotations]
    assert notes == ["head 1", "head 2 (off)"]
    assert [s.x0 for s in fig.layout.shapes] == [3.5]


def test_vector_strip_checks_its_rows():
    with pytest.raises(ValueError, match="same length"):
        vh.vector_strip([("a", np.zeros(3)), ("b", np.zeros(4))], title=None)
    with pytest.raises(ValueError, match="empty"):
        vh.vector_strip([], title=None)
    with pytest.raises(ValueError, match="do not split"):
        vh.vector_strip([("a", np.zeros(6))], title=None, heads=4)
    with pytest.raises(ValueError, match="NaN"):
        vh.vector_strip([("a", np.array([1.0, np.nan]))], title=None)


def test_figures_refuse_what_is_not_a_consistent_head_trace():
    with pytest.raises(ValueError, match="HeadTrace"):
        vh.weights_figure({"weights": [1.0]})
    t = make_trace()
    bad = HeadTrace(**{**t.__dict__, "weights": t.weights[:3]})
    with pytest.raises(ValueError, match="weights has shape"):
        vh.weights_figure(bad)

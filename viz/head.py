"""Inside one head: the numbers of one attention head for one query, stage by stage (a ``HeadTrace``).

Each figure draws what ``analysis.trace.head_trace`` computed and works nothing out again:

    vector_strip      named vectors of one length as rows of a heatmap, dimension index on x
    input_figure      the query's residual-stream row and its LayerNorm x (what W^Q multiplies)
    kv_figure         q on top of the keys K, or the values V: (n_keys x d_head), rows labelled with tokens
    scores_table      the same per key as a table: token, q·k_j, scaled, softmax input (−∞ when masked), weight, why
    scores_figure     q·k_j, then ÷ (√d_head · τ) with the mask: −∞ drawn as such, the reason in hover
    weights_figure    the softmax weights as bars; the title gives their sum (1, or 0 with every key masked)
    weighted_sum_figure   w_j v_j per key and their sum, the head's output (eq. 1)
    output_figure     the heads concatenated, W^O, the residual add and the LayerNorm (sections 3.2.2, 3.1)

Signed values use the blue-white-red scale centred on 0, weights the blue 0–1 scale and masked keys the
grey of their reason (``viz._common``), as in every attention figure. Keys are the x axis (or the rows)
at integer positions with their tokens as tick text, so a repeated token keeps its own place.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.records import HeadTrace
from i18n import _
from model.facts import KIND_NAMES, REASONS, VISIBLE
from viz._common import (
    ATTENTION_COLORSCALE,
    MASK_COLORS,
    alt_text,
    as_array,
    axis,
    axis_margin,
    base_layout,
    check_kind,
    check_tokens,
    colorbar_margin,
    diverging_colors,
    esc,
    figure,
    token_labels,
)
from viz.tokens import display

MINUS_INF = "\u2212\u221e"  # −∞
ROW_PX = 34  # height of one row of a strip or key heatmap


def _check(t: HeadTrace) -> HeadTrace:
    """Raise ValueError unless ``t`` is a ``HeadTrace`` whose arrays have consistent shapes."""
    if not isinstance(t, HeadTrace):
        raise ValueError(f"pass a HeadTrace (analysis.trace.head_trace), got {type(t).__name__}")
    check_kind(t.kind)
    n_keys = len(check_tokens(t.k_tokens, "k_tokens"))
    D, Dh = np.shape(t.x)[0], t.d_head
    want = {"q": (Dh,), "head_out": (Dh,), "k": (n_keys, Dh), "v": (n_keys, Dh), "concat": (D,), "attn_out": (D,)}
    want |= dict.fromkeys(("scores", "scaled", "mask", "reasons", "weights"), (n_keys,))
    for name, shape in want.items():
        if np.shape(getattr(t, name)) != shape:
            raise ValueError(f"HeadTrace.{name} has shape {np.shape(getattr(t, name))}, expected {shape} for {n_keys} keys")
    return t


def _keys(t: HeadTrace) -> tuple[list[str], list[str]]:
    """Hover and tick text of the keys: ``"▁a (pos 2)"``, ``"▁a"``."""
    return token_labels(display(t.k_tokens))


def query_name(t: HeadTrace) -> str:
    """The traced query as text: ``"query 2: ▁Ein → ▁Hund"`` (decoder rows say what they predicted)."""
    q = display([t.query_token])[0]
    if t.predicted is not None:
        q += f" \u2192 {display([t.predicted[t.query]])[0]}"
    return _("query {i}: {token}").format(i=t.query, token=q)


def where(t: HeadTrace) -> str:
    """``"Cross-attention · layer 2 · head 1"``, 1-based for people."""
    return _("{kind} \u00b7 layer {l} \u00b7 head {h}").format(kind=_(KIND_NAMES[t.kind]), l=t.layer + 1, h=t.head + 1)


def _key_axis(ticks: list[str], title: str | None = None) -> tuple[dict, int]:
    """x axis over the keys at integer positions, tokens as tick text (axis title ``title``, None: "key"); and the bottom
    margin it needs."""
    title = _("key") if title is None else title
    angle = -45 if len(ticks) > 8 else 0
    x = axis(
        title, tickmode="array", tickvals=list(range(len(ticks))), ticktext=ticks, tickangle=angle, showgrid=False, zeroline=False
    )
    return x, axis_margin(ticks, angle=angle, along_y=False, title=True)


# -- vectors -----------------------------------------------------------------------------------------
def vector_strip(
    rows: Sequence[tuple[str, np.ndarray]],
    *,
    title: str | None,
    heads: int | None = None,
    ablated: Sequence[int] = (),
    label: str | None = None,
) -> go.Figure:
    """Named vectors of one length as the rows of one heatmap: x = dimension index, colour = value.

    Args:
        rows: (name, vector) pairs, top row first; every vector the same length n.
        title: the figure title.
        heads: split the dimensions into this many equal blocks (head h owns dimensions h·n/heads ..),
            drawn with a line between blocks and a label above each: for the concatenated heads.
        ablated: heads (0-based) labelled "off" (their block is zero).
        label: colour-bar title (None: "value").

    Returns:
        A figure whose ``data[0].z`` is ``(len(rows), n)`` float32, ``y`` the row names.

    Raises:
        ValueError: for no rows, vectors of other lengths or dimensions, or n not divisible by ``heads``.
    """
    if not rows:
        raise ValueError("rows is empty: pass (name, vector) pairs")
    z = [as_array(v, f"row {name!r}", 1) for name, v in rows]
    n = z[0].shape[0]
    if any(r.shape[0] != n for r in z):
        raise ValueError(f"every row must have the same length; got {[r.shape[0] for r in z]}")
    if heads is not None and (heads < 1 or n % heads):
        raise ValueError(f"{n} dimensions do not split into {heads} heads")
    label = _("value") if label is None else label
    zz = np.stack(z).astype(np.float32)  # (R, n)
    r = max(float(np.abs(zz).max()), 1e-6)
    names = [name for name, _vec in rows]
    colors = diverging_colors(label, r)
    if len(rows) <= 3:  # a strip of a few rows is ~70-140 px tall: room for three labelled ticks, −r, 0 and r
        colors["colorbar"].update(tickmode="array", tickvals=[-r, 0.0, r], ticktext=[f"{-r:.2g}", "0", f"{r:.2g}"])
    trace = dict(
        type="heatmap",
        z=zz,
        x=np.arange(n),
        y=names,
        **colors,
        xgap=0,
        ygap=2,
        hovertemplate="<b>%{y}</b><br>" + _("dimension %{x}: %{z:.4f}") + "<extra></extra>",
        name=_("vectors"),
    )
    shapes, notes = [], []
    if heads is not None:
        dh = n // heads
        for h in range(heads):
            if h:
                shapes.append(dict(type="line", x0=h * dh - 0.5, x1=h * dh - 0.5, y0=0, y1=1, yref="paper", line=dict(width=1.5)))
            text = _("head {h}").format(h=h + 1) + (_(" (off)") if h in ablated else "")
            notes.append(dict(x=h * dh + (dh - 1) / 2, y=1, yref="paper", yanchor="bottom", text=text, showarrow=False))
    top = (60 if title else 30) + (18 if heads else 0)
    left = axis_margin(names, along_y=True, title=False)
    layout = base_layout(
        title,
        height=top + 60 + ROW_PX * len(rows),
        margin=dict(l=left, r=colorbar_margin(label), t=top, b=60),
        xaxis=axis(_("dimension"), showgrid=False, range=[-0.5, n - 0.5]),
        yaxis=axis(type="category", autorange="reversed", showgrid=False),
        shapes=shapes,
        annotations=notes,
        meta={
            "rows": names,
            "n": n,
            "alt": alt_text(
                title or _("Vectors"),
                rows=", ".join(names),
                cols=_("dimensions"),
                shape=(len(names), n),
                notes=[
                    _("colour: the {label} from −{r} (blue) through 0 (white) to +{r} (red)").format(label=label, r=f"{r:.2g}")
                ],
            ),
        },
    )
    return figure([trace], layout)


def input_figure(t: HeadTrace, *, title: str | None = None) -> go.Figure:
    """The query's row before the sub-layer and ``x``, the row W^Q multiplies (LayerNorm of it in pre-LN).

    For cross-attention the row is the decoder state after the self-attention sub-layer.
    """
    _check(t)
    state = _("decoder state after self-attention") if t.kind == "cross" else _("layer input (residual stream)")
    rows = [(state, t.resid)]
    if t.norm_first:
        rows.append((_("x = LayerNorm(row)"), t.x))
    else:
        rows[0] = (f"x = {state}", t.x)
    default = _("The query's input row x (d_model = {D}) · {query}").format(D=t.x.shape[0], query=esc(query_name(t)))
    return vector_strip(rows, title=default if title is None else title)


def kv_figure(t: HeadTrace, which: str, *, title: str | None = None) -> go.Figure:
    """Keys ``"k"`` (with the query's q as the top row) or values ``"v"`` of this head: one row per key token.

    Rows of masked keys are labelled with their reason; they are still computed (a mask acts on the scores).
    Returns a figure whose ``data[0].z`` is ``(1 + n_keys, d_head)`` for K (q first) and ``(n_keys, d_head)`` for V.

    Raises:
        ValueError: if ``which`` is not "k" or "v".
    """
    _check(t)
    if which not in ("k", "v"):
        raise ValueError(f"which must be 'k' (keys) or 'v' (values), got {which!r}")
    hover, _ticks = _keys(t)
    src = _("the encoder memory") if t.kind == "cross" else _("the same layer's input rows")
    masked = _(" (masked)")
    mark = [masked if m else "" for m in t.mask]
    rows = [(f"{which}{j}: {h}{m}", vec) for j, (h, m, vec) in enumerate(zip(hover, mark, getattr(t, which), strict=True))]
    if which == "k":
        q_from = _("the decoder state") if t.kind == "cross" else _("the query's row")
        rows.insert(0, (f"q ({esc(query_name(t))})", t.q))
        default = _("q (from {q_from}) and keys K (from {src})").format(q_from=q_from, src=src)
    else:
        default = _("Values V (from {src})").format(src=src)
    return vector_strip(rows, title=default if title is None else title)


# -- scores and weights ----------------------------------------------------------------------------------
def scores_table(t: HeadTrace) -> pd.DataFrame:
    """One row per key: position, token, q·k, scaled, softmax input (−∞ on masked keys), weight, and why
    a key is masked (empty when it is visible). The weight column sums to 1 (0 with every key masked)."""
    _check(t)
    return pd.DataFrame(
        {
            _("key"): np.arange(len(t.k_tokens)),
            _("token"): display(t.k_tokens),
            "q·k": t.scores,
            f"÷ √{t.d_head}" + (f" · {t.temperature:g}" if t.temperature != 1 else ""): t.scaled,
            _("softmax input"): t.masked,
            _("weight"): t.weights,
            _("masked because"): [_(w) if w else "" for w in t.why],
        }
    )


def scores_figure(t: HeadTrace, *, title: str | None = None) -> go.Figure:
    """Per key, the raw score q·k_j and the softmax input q·k_j / (√d_head · τ), with the mask.

    Two bar traces side by side over the keys: "raw q·k" (``t.scores``) and "scaled" (``t.scaled``,
    NaN on masked keys); a masked key instead gets a marker labelled −∞ in the trace "masked: −∞",
    whose hover gives the reason (``model.facts.REASONS``).
    """
    _check(t)
    hover, ticks = _keys(t)
    K = len(ticks)
    scaled = np.where(t.mask, np.float32(np.nan), t.scaled).astype(np.float32)
    tau = f" · {t.temperature:g}" if t.temperature != 1 else ""
    traces = [
        dict(
            type="bar",
            x=np.arange(K),
            y=t.scores,
            name=_("raw q·k"),
            marker=dict(color="#bab0ac"),
            customdata=hover,
            hovertemplate=_("key %{customdata}<br>q·k = %{y:.4f}") + "<extra></extra>",
        ),
        dict(
            type="bar",
            x=np.arange(K),
            y=scaled,
            name=_("scaled ÷ (√{d_head}{tau})").format(d_head=t.d_head, tau=tau),
            marker=dict(color="#4c78a8"),
            customdata=hover,
            hovertemplate=_("key %{customdata}<br>scaled %{y:.4f}") + "<extra></extra>",
        ),
    ]
    js = np.flatnonzero(t.mask)
    if len(js):
        traces.append(
            dict(
                type="scatter",
                x=js,
                y=np.zeros(len(js), np.float32),
                mode="markers+text",
                text=[MINUS_INF] * len(js),
                textposition="top center",
                textfont=dict(size=14, color="#555"),
                marker=dict(symbol="x", size=10, color=[MASK_COLORS[int(t.reasons[j])] for j in js]),
                customdata=[[hover[j], _(REASONS[int(t.reasons[j])])] for j in js],
                hovertemplate=_("key %{customdata[0]}<br>scaled score = −∞") + "<br><i>%{customdata[1]}</i><extra></extra>",
                name=_("masked: {minus_inf}").format(minus_inf=MINUS_INF),
            )
        )
    x, bottom = _key_axis(ticks)
    scale = f"(√d_head · τ), τ = {t.temperature:g}" if t.temperature != 1 else "√d_head"
    default = (
        _("Scores q·k<sub>j</sub> and scaled scores q·k<sub>j</sub> / {scale} (masked keys: {minus_inf})").format(
            scale=scale, minus_inf=MINUS_INF
        )
        + f"<br><sup>{esc(where(t))} · {esc(query_name(t))}</sup>"
    )
    layout = base_layout(
        default if title is None else title,
        barmode="group",
        height=300 + bottom,
        margin=dict(l=axis_margin(["-10.0"], along_y=True, title=True), r=20, t=80, b=bottom),
        legend=dict(orientation="h", x=0, y=1.0, yanchor="bottom"),
        xaxis=x,
        yaxis=axis(_("score")),
        meta={"mask": t.mask.tolist()},
    )
    return figure(traces, layout)


def weights_figure(t: HeadTrace, *, title: str | None = None) -> go.Figure:
    """The softmax weights w_j as bars on a 0–1 axis; masked keys get a grey bar of height 0 and their reason.

    ``data[0]`` ("weights") holds every key's weight in ``y``; the title gives the sum (1 over the
    allowed keys, 0 when every key is masked) and says when the head is ablated.
    """
    _check(t)
    hover, ticks = _keys(t)
    K = len(ticks)
    colors = [MASK_COLORS[int(r)] if r != VISIBLE else ATTENTION_COLORSCALE[-3][1] for r in t.reasons]
    why = ["" if r == VISIBLE else f"<br><i>{_(REASONS[int(r)])}</i>" for r in t.reasons]
    trace = dict(
        type="bar",
        x=np.arange(K),
        y=t.weights,
        marker=dict(color=colors),
        customdata=[[h, w] for h, w in zip(hover, why, strict=True)],
        texttemplate="%{y:.2f}",
        textposition="outside",
        hovertemplate=_("key %{customdata[0]}<br>weight %{y:.4f}") + "%{customdata[1]}<extra></extra>",
        name="weights",
    )
    total = float(t.weights.sum())
    note = _(" (every key is masked: no weight at all)") if t.mask.all() else ""
    off = (
        "<br><sup>" + _("this head is switched off: its output is zeroed before W<sup>O</sup>, whatever it attends to") + "</sup>"
    )
    default = _("Softmax weights w<sub>j</sub> · sum = {total}{note}").format(total=f"{total:.3f}", note=note) + (
        off if t.ablated else ""
    )
    x, bottom = _key_axis(ticks)
    layout = base_layout(
        default if title is None else title,
        height=280 + bottom,
        showlegend=False,
        margin=dict(l=axis_margin(["0.8"], along_y=True, title=True), r=20, t=70, b=bottom),
        xaxis=x,
        yaxis=axis(_("weight"), range=[0, 1.12]),
        meta={"sum": total},
    )
    return figure([trace], layout)


def weighted_sum_figure(t: HeadTrace, *, title: str | None = None) -> go.Figure:
    """The head's output as a sum: one row w_j v_j per key, then their sum Σ_j w_j v_j (``t.head_out``).

    ``data[0].z`` is ``(n_keys + 1, d_head)``: rows 0 .. n_keys - 1 are ``weights[j] * v[j]``, the last is head_out.
    """
    _check(t)
    hover, _ticks = _keys(t)
    rows = [(f"{w:.2f} \u00d7 v{j}: {h}", w * v) for j, (h, w, v) in enumerate(zip(hover, t.weights, t.v, strict=True))]
    rows.append((_("\u03a3 = head output"), t.head_out))
    default = _("Head output = \u03a3<sub>j</sub> w<sub>j</sub> v<sub>j</sub> (d_head = {d_head})").format(d_head=t.d_head)
    return vector_strip(rows, title=default if title is None else title)


def output_figure(t: HeadTrace, *, title: str | None = None) -> go.Figure:
    """From the heads to the layer's new state: concat, W^O, the residual add and the LayerNorm.

    Rows (each d_model long): the H heads side by side ("Concat", ablated heads zero), the sub-layer
    output concat W^O + b (``attn_out``), the query's row before the sub-layer (``resid``), their sum
    (``added``) and its LayerNorm (``normed``: post-LN, this sub-layer's; pre-LN, the next one's).
    """
    _check(t)
    before = _("decoder state after self-attention") if t.kind == "cross" else _("row before the sub-layer")
    after = _("LayerNorm(sum): the new state") if not t.norm_first else _("LayerNorm(sum): next sub-layer's input")
    rows = [
        (_("Concat(head 1 .. head H)"), t.concat),
        (_("attention output = Concat W\u1d3c + b"), t.attn_out),
        (f"+ {before}", t.resid),
        (_("= residual sum"), t.added),
        (after, t.normed),
    ]
    default = _("Concatenate the heads, project with W<sup>O</sup>, add the residual, LayerNorm")
    fig = vector_strip(rows, title=default if title is None else title, heads=t.n_heads, ablated=sorted(t.ablated_heads))
    return fig

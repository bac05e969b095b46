"""Attention beside attribution for one output token, and a lens on every layer: figures of the records that
``analysis.attribution`` computes (``Explanation``, ``LayerLens``). Nothing here recomputes a score.

    methods_figure     one row per method (attention, norm-weighted, rollout, Integrated Gradients, gradient ×
                       input) over the source tokens, each row scaled to its largest |value|: where they agree
    heads_figure       one layer, head by head: the weight α, the value vector's length ‖f(x_j)‖ and their
                       product ‖α f(x_j)‖ (Kobayashi et al. 2020): a large weight on a short vector adds little
    agreement_figure   Spearman's ρ of every pair of methods, as a matrix
    agreement_table    the same pairs with ρ and one sentence in plain words (a DataFrame)
    logit_lens_figure  which piece each decoder layer would write at each step of decoding, and how sure it is
    decoder_lens_table the translation when the decoder reads each encoder layer (DecoderLens), a DataFrame
    logit_lens_note, decoder_lens_note   what the two lenses are under the sidebar's decoding and the causal mask

No NaN reaches a figure: a score the record does not define (ρ of a constant vector, every source token hidden)
is drawn as 0 with "n/a" and says why in hover. Hidden source tokens are marked with a grey square and "hidden" in
hover (their scores are exactly 0: no query may read them).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.records import ATTENTION, GRAD_INPUT, IG, METHODS, NORM, ROLLOUT, Explanation, LayerLens
from i18n import N_, _
from model.settings import DecodeSettings
from viz._common import (
    ATTENTION_COLORSCALE,
    COLORBAR,
    MASK_COLORS,
    Translated,
    axis,
    base_layout,
    check_tokens,
    diverging_colors,
    esc,
    figure,
    heatmap_axes,
    heatmap_margins,
    short,
    tick_style,
    token_labels,
    weight_colors,
)
from viz.tokens import display

HIDDEN_GREY = MASK_COLORS[2]  # analysis.records.HIDDEN's grey, as on every attention map
UNITS = Translated(
    {
        ATTENTION: N_("weight (0–1)"),
        NORM: N_("‖α f(x)‖, length of a d_model vector"),
        ROLLOUT: N_("share of the input (0–1)"),
        IG: N_("nats of the objective"),
        GRAD_INPUT: N_("nats of the objective (first order)"),
    }
)
"""What each method's raw numbers are, for hover and tables."""
MEANS = Translated(
    {
        ATTENTION: N_("how much the query weighs each source token (softmax of q·k, eq. 1 of Vaswani et al. 2017)"),
        NORM: N_(
            "how long the vector each token actually adds is: weight × the length of its value vector (Kobayashi et al. 2020)"
        ),
        ROLLOUT: N_("attention followed back through the encoder's self-attention to the input words (Abnar & Zuidema 2020)"),
        IG: N_(
            "how much each word's embedding moves the objective, summed along the path from no word to the word "
            "(Sundararajan et al. 2017); the scores add up to the change of the objective"
        ),
        GRAD_INPUT: N_(
            "the gradient of the objective times the embedding: a first-order, one-point estimate (Shrikumar et al. 2016)"
        ),
    }
)
"""What each method measures, in one line (the page's text and the figures' hover)."""
METHOD_NAMES = Translated(
    {
        ATTENTION: N_("attention"),
        NORM: N_("norm-weighted"),
        ROLLOUT: N_("rollout"),
        IG: N_("integrated gradients"),
        GRAD_INPUT: N_("gradient × input"),
    }
)
"""Each method's name as the figures show it (the records and ``layout.meta`` keep the English names)."""


def _lens_name(name: str) -> str:
    """A lens row's name (``LayerLens.dec_names``: "embeddings", "layer 2") in the current language."""
    if name == "embeddings":
        return _("embeddings")
    if (m := re.fullmatch(r"layer (\d+)", name)) is not None:
        return _("layer {l}").format(l=m.group(1))
    return name


def _check(e: Explanation) -> tuple[int, int, int]:
    """(L, H, S) of an ``Explanation``; raises ValueError naming an array of the wrong shape."""
    if not isinstance(e, Explanation):
        raise ValueError(f"pass an Explanation (analysis.attribution.explain), got {type(e).__name__}")
    S = len(check_tokens(e.src_tokens, "src_tokens"))
    L, H = np.shape(e.attn)[:2]
    want = {"attn": (L, H, S), "value_norm": (L, H, S), "norm_heads": (L, H, S), "norm_sum": (L, S), "rollout": (L, S)}
    want |= {"hidden": (S,), "grad_input": (S,)}
    for name, shape in want.items():
        if np.shape(getattr(e, name)) != shape:
            raise ValueError(f"Explanation.{name} has shape {np.shape(getattr(e, name))}, expected {shape} for {S} source tokens")
    if e.ig is not None and np.shape(e.ig.ig) != (S,):
        raise ValueError(f"Explanation.ig.ig has shape {np.shape(e.ig.ig)}, expected ({S},)")
    return L, H, S


def _finite(a) -> np.ndarray:
    return np.nan_to_num(np.asarray(a, dtype=np.float32), nan=0.0, posinf=0.0, neginf=0.0)


def _token_ticks(e: Explanation) -> tuple[list[str], list[str]]:
    """Hover and tick text of the source tokens, ``(hidden)`` after a hidden one."""
    hover, tick = token_labels(display(e.src_tokens))
    hidden = _(" · hidden")
    hover = [h + (hidden if e.hidden[j] else "") for j, h in enumerate(hover)]
    return hover, tick


def _hidden_marks(e: Explanation, n_rows: int) -> list[dict]:
    """Grey squares over the hidden source tokens' cells, rows 0 .. n_rows - 1 (no trace when none is hidden)."""
    cols = np.flatnonzero(e.hidden)
    if not cols.size:
        return []
    xs, ys = np.meshgrid(cols, np.arange(n_rows))
    return [
        dict(
            type="scatter",
            x=xs.ravel(),
            y=ys.ravel(),
            mode="markers",
            marker=dict(symbol="square", size=14, color=HIDDEN_GREY),
            hovertemplate=_("hidden source token: no query may read it, every score is 0") + "<extra></extra>",
            name="hidden",
            showlegend=False,
        )
    ]


def objective_text(e: Explanation) -> str:
    """The explained output in words: ‘Hund’ (log p = −0.12), or ‘es’ rather than ‘sie’ (log p −0.3 vs −1.9)."""
    y = esc(display([e.target])[0])
    if e.contrast is None:
        return _("‘{y}’ (log p = {logp})").format(y=y, logp=f"{e.target_logprob:.2f}")
    c = esc(display([e.contrast])[0])
    return _("‘{y}’ rather than ‘{c}’ (log p {logp} vs {logp_c})").format(
        y=y, c=c, logp=f"{e.target_logprob:.2f}", logp_c=f"{e.contrast_logprob:.2f}"
    )


def methods_figure(e: Explanation, layer: int, head: int | None = None, *, title: str | None = None) -> go.Figure:
    """One row per method of ``e.methods`` over the source tokens, for cross-attention ``layer`` and ``head``
    (0-based; None: the mean over heads, and norm-weighted summed over heads), from ``Explanation.scores``.

    Each row is divided by its largest |value|, so rows in different units share one −1..1 scale (red: pushes the
    objective up or draws weight; blue: pushes it down); the cell text and hover give the raw value and its unit.
    ``layout.meta``: ``{"methods", "S", "scale"}`` (each row's divisor). Raises ValueError for a wrong record or
    a layer or head out of range.
    """
    _L, _H, S = _check(e)
    scores = e.scores(layer, head)
    names = list(scores)
    raw = _finite(np.stack([scores[m] for m in names]))  # (M, S)
    scale = np.abs(raw).max(axis=1)  # (M,)
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    z = raw / scale[:, None]  # (M, S) in -1..1
    hover, tick = _token_ticks(e)
    units = np.array([[UNITS[m]] * S for m in names])  # (M, S)
    text = [[f"{v:.2g}" for v in row] for row in raw]
    who = _("mean over heads") if head is None else _("head {h}").format(h=head + 1)
    heat = dict(
        type="heatmap",
        z=z,
        x=np.arange(S),
        y=np.arange(len(names)),
        customdata=np.stack([raw.astype(object), units.astype(object)], axis=-1),
        text=text,
        texttemplate="%{text}",
        **diverging_colors(_("÷ row max"), 1.0),
        hovertemplate="<b>%{y}</b><br>" + _("source token %{x}") + "<br>%{customdata[0]:.4g} (%{customdata[1]})<extra></extra>",
        name="scores",
    )
    cell = float(np.clip(760 / max(S, 1), 26, 60))
    x_ticks = dict(tickvals=list(range(S)), ticktext=tick, **tick_style(cell, rotate=True))
    y_names = [f"{METHOD_NAMES.get(m, m)} ({who})" if m in (ATTENTION, NORM) else METHOD_NAMES.get(m, m) for m in names]
    y_ticks = dict(tickvals=list(range(len(names))), ticktext=[esc(n) for n in y_names])
    xaxis, yaxis = heatmap_axes(_("source token"), "", x_ticks, y_ticks, shape=(len(names), S), zeroline=False)
    yaxis["scaleanchor"] = None  # rows need not be square
    top = 80
    layout = base_layout(
        title
        if title is not None
        else _("Why {objective}? Layer {l}, {who}<br><sup>each row ÷ its largest |value|; cell text: the raw value</sup>").format(
            objective=objective_text(e), l=layer + 1, who=who
        ),
        height=int(len(names) * 46 + top + 150),
        meta={"methods": names, "S": S, "scale": scale.tolist()},
        margin=heatmap_margins(x_ticks, y_ticks, top=top, colorbar=_("÷ row max")),
        xaxis=xaxis,
        yaxis=yaxis,
        hovermode="closest",
    )
    return figure([heat, *_hidden_marks(e, len(names))], layout)


def heads_figure(e: Explanation, layer: int, *, title: str | None = None) -> go.Figure:
    """Cross-attention ``layer`` head by head, three heatmaps side by side (rows = heads, columns = source tokens):
    the weight α, the length ‖f(x_j)‖ of what the token would add at weight 1, and ‖α f(x_j)‖ = α·‖f(x_j)‖
    (Kobayashi et al. 2020). The last two share one colour scale (0 .. their largest value, in the units of the
    residual stream); weights have the 0–1 scale of every attention map. ``layout.meta``: ``{"H", "S", "vmax"}``.
    Raises ValueError for a wrong record or a layer out of range.
    """
    L, H, S = _check(e)
    if not 0 <= layer < L:
        raise ValueError(f"layer {layer} is out of range for {L} decoder layers (count from 0)")
    a, f, n = (_finite(x[layer]) for x in (e.attn, e.value_norm, e.norm_heads))  # (H, S) each
    vmax = float(max(f.max(), n.max(), 1e-6))
    hover, tick = _token_ticks(e)
    heads = [_("head {h}").format(h=h + 1) + (_(" (off)") if (layer, h) in e.ablated else "") for h in range(H)]
    panels = ((_("α (weight)"), a, "coloraxis"), (_("‖f(x_j)‖ (value length)"), f, "coloraxis2"), ("‖α f(x_j)‖", n, "coloraxis2"))
    traces, width = [], 1 / 3
    layout_axes = {}
    for p, (name, z, cax) in enumerate(panels):
        xa, ya = ("x", "y") if p == 0 else (f"x{p + 1}", f"y{p + 1}")
        traces.append(
            dict(
                type="heatmap",
                z=z,
                x=list(range(S)),
                y=list(range(H)),
                coloraxis=cax,
                xaxis=xa,
                yaxis=ya,
                customdata=np.array([hover] * H, dtype=object),
                hovertemplate=f"<b>{esc(name)}</b><br>%{{customdata}}<br>" + _("head %{y}: %{z:.3g}") + "<extra></extra>",
                name=name,
            )
        )
        dom = [p * width + 0.02, (p + 1) * width - 0.04]
        key = "" if p == 0 else str(p + 1)
        layout_axes[f"xaxis{key}"] = axis(
            name, domain=dom, tickmode="array", tickvals=list(range(S)), ticktext=tick, **tick_style(24, rotate=True)
        )
        layout_axes[f"yaxis{key}"] = axis(
            tickmode="array",
            tickvals=list(range(H)),
            ticktext=heads if p == 0 else [""] * H,
            autorange="reversed",
            anchor=f"x{key}",
        )
    layout = base_layout(
        title
        if title is not None
        else _(
            "Cross-attention layer {l}, head by head, for {objective}"
            "<br><sup>a large weight on a short value vector adds little: norm-weighted = weight × value length</sup>"
        ).format(l=layer + 1, objective=objective_text(e)),
        height=int(H * 34 + 240),
        coloraxis=dict(
            colorscale=ATTENTION_COLORSCALE,
            cmin=0,
            cmax=1,
            colorbar=dict(title=dict(text="α"), x=0.30, len=0.8, thickness=10, xpad=2),
        ),
        coloraxis2=dict(
            colorscale=ATTENTION_COLORSCALE, cmin=0, cmax=vmax, colorbar=dict(title=dict(text=_("length")), **COLORBAR)
        ),
        meta={"H": H, "S": S, "vmax": vmax},
        margin=dict(l=90, r=90, t=80, b=120),
        **layout_axes,
    )
    return figure(traces, layout)


def agreement_figure(e: Explanation, layer: int, head: int | None = None, *, title: str | None = None) -> go.Figure:
    """Spearman's ρ of every pair of ``e.methods`` over the visible source tokens (``Explanation.agreement``), as a
    symmetric matrix on the −1..1 scale (1 on the diagonal). A ρ that is not defined is drawn 0 with "n/a".
    ``layout.meta``: ``{"methods"}``. Raises ValueError as ``methods_figure``."""
    _check(e)
    pairs = e.agreement(layer, head)
    names = list(e.methods)
    M = len(names)
    rho = np.eye(M, dtype=np.float32)
    text = [["1" if i == j else "" for j in range(M)] for i in range(M)]
    same = _("the same method")
    why = [[same if i == j else "" for j in range(M)] for i in range(M)]
    for p in pairs:
        i, j = names.index(p.method_a), names.index(p.method_b)
        for r, c in ((i, j), (j, i)):
            rho[r, c] = 0.0 if p.rho is None else p.rho
            text[r][c] = _("n/a") if p.rho is None else f"{p.rho:+.2f}"
            why[r][c] = esc(p.sentence)
    heat = dict(
        type="heatmap",
        z=rho,
        x=list(range(M)),
        y=list(range(M)),
        text=text,
        texttemplate="%{text}",
        customdata=np.array(why, dtype=object),
        **diverging_colors("Spearman ρ", 1.0),
        hovertemplate="%{customdata}<extra></extra>",
        name="spearman",
    )
    ticks = [esc(METHOD_NAMES.get(n, n)) for n in names]
    x_ticks = dict(tickvals=list(range(M)), ticktext=ticks, tickangle=-30)
    y_ticks = dict(tickvals=list(range(M)), ticktext=ticks)
    xaxis, yaxis = heatmap_axes("", "", x_ticks, y_ticks, shape=(M, M), zeroline=False)
    layout = base_layout(
        title
        if title is not None
        else _(
            "Do the methods rank the source words alike? Spearman's ρ<br><sup>1: same order, 0: unrelated, −1: reversed</sup>"
        ),
        height=80 + M * 56 + 140,
        meta={"methods": names},
        margin=heatmap_margins(x_ticks, y_ticks, top=80, colorbar="Spearman ρ", cb_ticks=["−0.5"]),
        xaxis=xaxis,
        yaxis=yaxis,
    )
    return figure([heat], layout)


def agreement_table(e: Explanation, layer: int, head: int | None = None) -> pd.DataFrame:
    """One row per pair of methods: the two, ρ (None where not defined) and the sentence in plain words."""
    rows = [(p.method_a, p.method_b, None if p.rho is None else round(p.rho, 3), p.sentence) for p in e.agreement(layer, head)]
    return pd.DataFrame(rows, columns=[_("method"), _("and method"), "Spearman ρ", _("in words")])


def scores_table(e: Explanation, layer: int, head: int | None = None) -> pd.DataFrame:
    """The raw scores of ``methods_figure`` as a table: one row per source token, one column per method."""
    _check(e)
    df = pd.DataFrame({m: _finite(v) for m, v in e.scores(layer, head).items()})
    df.insert(0, _("source token"), display(e.src_tokens))
    df.insert(1, _("hidden"), e.hidden.astype(bool))
    return df


def logit_lens_figure(lens: LayerLens, *, title: str | None = None) -> go.Figure:
    """The logit lens on the decoder: rows = the decoder's input and each layer, columns = output positions
    (``input → written``); the cell's text is the piece that layer would write, its colour that piece's probability,
    and hover adds the probability of the piece the model wrote. ``layout.meta``: ``{"rows", "T"}``.
    Raises ValueError if the arrays and tokens disagree."""
    R, T = np.shape(lens.top_probs)
    if np.shape(lens.target_probs) != (R, T) or len(lens.dec_names) != R or len(lens.top_tokens) != R:
        raise ValueError(f"LayerLens arrays disagree: top_probs {(R, T)}, target_probs {np.shape(lens.target_probs)}")
    q = display(check_tokens(lens.tgt_in_tokens, "tgt_in_tokens", T))
    w = display(check_tokens(lens.tgt_out_tokens, "tgt_out_tokens", T))
    cols = [f"{esc(short(a, 10))} → {esc(short(b, 10))}" for a, b in zip(q, w, strict=True)]
    top = [[esc(short(t, 10)) for t in display(row)] for row in lens.top_tokens]
    right = np.array([[a == b for a, b in zip(row, lens.tgt_out_tokens, strict=True)] for row in lens.top_tokens])
    written = np.array([w] * R, dtype=object)
    heat = dict(
        type="heatmap",
        z=_finite(lens.top_probs),
        x=list(range(T)),
        y=list(range(R)),
        text=top,
        texttemplate="%{text}",
        customdata=np.stack([written, _finite(lens.target_probs).astype(object), right.astype(object)], axis=-1),
        **weight_colors(_("p(top piece)")),
        hovertemplate=_(
            "%{y}, position %{x}<br>would write <b>%{text}</b> (p = %{z:.3f})<br>"
            "the model wrote %{customdata[0]}: p = %{customdata[1]:.3f}"
        )
        + "<extra></extra>",
        name="logit lens",
    )
    x_ticks = dict(tickvals=list(range(T)), ticktext=cols, **tick_style(30, rotate=True))
    y_ticks = dict(tickvals=list(range(R)), ticktext=[esc(_lens_name(n)) for n in lens.dec_names])
    xaxis, yaxis = heatmap_axes(
        _("output position (decoder input → the piece written)"), _("decoder"), x_ticks, y_ticks, shape=(R, T)
    )
    yaxis["scaleanchor"] = None
    layout = base_layout(
        title
        if title is not None
        else _(
            "Logit lens: what each decoder layer would write<br><sup>each layer's output through the final "
            "LayerNorm and the output matrix, at each step of decoding; the last row is the distribution decoding used</sup>"
        ),
        height=int(R * 52 + 80 + 170),
        meta={"rows": list(lens.dec_names), "T": T},
        margin=heatmap_margins(x_ticks, y_ticks, top=80, colorbar=_("p(top piece)")),
        xaxis=xaxis,
        yaxis=yaxis,
    )
    return figure([heat], layout)


def decoder_lens_table(lens: LayerLens) -> pd.DataFrame:
    """DecoderLens as a table: one row per encoder layer the decoder read, its translation (decoded as the shown
    translation was: ``decoder_lens_note`` says how), how many pieces, whether it ended with <eos>, and whether it is
    the final translation (the last row's)."""
    final = lens.lens_texts[-1] if lens.lens_texts else ""
    return pd.DataFrame(
        {
            _("decoder reads"): [_("encoder {name}").format(name=_lens_name(n)) for n in lens.enc_names],
            _("translation"): lens.lens_texts,
            _("pieces"): [len(t) for t in lens.lens_tokens],
            _("ended with <eos>"): lens.lens_finished,
            "= final": [t == final for t in lens.lens_texts],
        }
    )


def decoding_text(settings: DecodeSettings) -> str:
    """The decoding method of ``settings`` in words: "greedy decoding", "beam search (beam 5, α = 1.5)", "sampling
    (temperature 1.5, top-k 5, seed 3)"."""
    if settings.method == "beam":
        stop = _(", stops once the beam is full") if settings.early_stop else ""
        return _("beam search (beam {k}, α = {alpha}{stop})").format(k=settings.beam_size, alpha=f"{settings.alpha:g}", stop=stop)
    if settings.method == "sample":
        parts = [_("temperature {t}").format(t=f"{settings.temperature:g}")]
        parts += [f"top-k {settings.top_k}"] if settings.top_k else []
        parts += [f"top-p {settings.top_p:g}"] if settings.top_p < 1 else []
        return _("sampling ({filters}, seed {seed})").format(filters=", ".join(parts), seed=settings.seed)
    return _("greedy decoding")


def logit_lens_note(settings: DecodeSettings, causal: bool) -> str:
    """What the logit lens shows under the sidebar's ``settings`` and the Mask lab's causal mask (``causal``): which
    passes its columns come from, and what its last row is to the piece written. Markdown, for a caption."""
    passes = (
        _(
            "Column t is step t of decoding: the decoder fed `<bos>` and the pieces written before t. One teacher-forced "
            "pass gives every column at once, since the causal mask hides each position's later pieces."
        )
        if causal
        else _(
            "Column t is step t of decoding: the decoder fed `<bos>` and the pieces written before t. The causal mask "
            "is off (Mask lab), so one pass would let each position read the pieces after it, the one it predicts "
            "included: each step is replayed as decoding ran it, over the pieces written before it only."
        )
    )
    if settings.method == "beam":
        last = _(
            "The last row is the model's distribution at each step of the hypothesis {decoding} kept; "
            "beam search ranks whole hypotheses, so the piece written need not be a step's top piece (hover gives its "
            "probability)."
        ).format(decoding=decoding_text(settings))
    elif settings.method == "sample":
        last = _(
            "The last row is the model's distribution at each step, before {decoding} filtered and "
            "drew from it, so the piece written need not be the top piece (hover gives its probability)."
        ).format(decoding=decoding_text(settings))
    else:
        last = _("The last row is the distribution greedy decoding used at each step: its top piece is the piece written.")
    return f"{passes} {last}"


def decoder_lens_note(settings: DecodeSettings) -> str:
    """What DecoderLens runs: each encoder layer's output decoded as the shown translation was (``settings``: method
    and budget, ``analysis.attribution.lens_budget``). Markdown, for a caption."""
    same = _(" with the same seed, so every row draws from the same random numbers") if settings.method == "sample" else ""
    budget = (
        _("at most {n} pieces").format(n=settings.max_new)
        if settings.max_new
        else _("at most 2 × the source's length + 10 pieces (the default budget)")
    )
    return _(
        "Each row is decoded as the translation above was: {decoding}{same}, {budget}; the last row is that translation."
    ).format(decoding=decoding_text(settings), same=same, budget=budget)


__all__ = [
    "MEANS",
    "METHODS",
    "UNITS",
    "agreement_figure",
    "agreement_table",
    "decoder_lens_note",
    "decoder_lens_table",
    "decoding_text",
    "heads_figure",
    "logit_lens_figure",
    "logit_lens_note",
    "methods_figure",
    "objective_text",
    "scores_table",
]

"""Token-by-token decoding: next-token candidates (a ``StepView``), the new query's attention, and the
beam-search tree (a ``BeamTree``); the records come from ``analysis.analyze``."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from analysis.records import BeamTree, StepView, head_average
from i18n import _
from viz._common import (
    ATTENTION_COLORSCALE,
    FONT,
    HIGHLIGHT,
    MARGIN_MIN,
    MUTED,
    alt_text,
    as_array,
    axis,
    axis_margin,
    base_layout,
    check_tokens,
    colorbar_margin,
    esc,
    figure,
    overhang,
    plain,
    short,
    text_px,
    token_labels,
    weight_colors,
)
from viz.tokens import display


def candidates_bar(step: StepView, *, title: str | None = None) -> go.Figure:
    """The top-k next-token candidates of one decoding step as horizontal bars (best on top),
    probabilities on a 0–1 axis.

    The chosen token (``step.chosen``) is highlighted, and marked when the user forced it
    (``step.forced``); if it is not among the candidates (sampled or forced from outside the top k)
    a note says so.

    Args:
        step: ``StepView`` (``analysis.analyze.step_trace``); its ``candidates`` are
            ``(piece text, compact id, probability)``, best first.

    Raises:
        ValueError: if the candidates are empty or malformed, or a probability is outside [0, 1].
    """
    candidates, chosen_id, forced = step.candidates, step.chosen, step.forced
    if not candidates:
        raise ValueError("the step's candidates are empty: pass a StepView of analysis.analyze.step_trace (k >= 1)")
    rows = []
    for c in candidates:
        if len(c) != 3 or not isinstance(c[0], str):
            raise ValueError(f"each candidate must be (piece text, compact id, probability), got {c!r}")
        text, cid, p = c[0], int(c[1]), float(c[2])
        if not (0.0 <= p <= 1.0 + 1e-6) or not np.isfinite(p):
            raise ValueError(f"candidate {text!r} has probability {p}; probabilities lie in [0, 1]")
        rows.append((text, cid, p))
    shown = display([r[0] for r in rows])
    ids = [r[1] for r in rows]
    probs = np.array([r[2] for r in rows], dtype=np.float32)
    n = len(rows)
    chosen_here = chosen_id in ids
    colors = [HIGHLIGHT if i == chosen_id else MUTED for i in ids]
    ticktext = [esc(short(s, 18)) + (" ✓" if i == chosen_id else "") for s, i in zip(shown, ids, strict=True)]
    forced_note, chosen_note = _(" (forced)"), "<br><i>" + _("chosen") + "</i>"
    labels = [f"{p:.1%}" + (forced_note if forced and i == chosen_id else "") for p, i in zip(probs, ids, strict=True)]
    line = _("<b>{token}</b> (id {id})<br>rank {rank}<br>probability {p}")
    hover = [
        line.format(token=esc(s), id=i, rank=r + 1, p=f"{p:.3f}") + (chosen_note if i == chosen_id else "")
        for r, (s, i, p) in enumerate(zip(shown, ids, probs, strict=True))
    ]
    bar = dict(
        type="bar",
        x=probs,
        y=np.arange(n),
        orientation="h",
        marker=dict(color=colors),
        text=labels,
        textposition="outside",
        cliponaxis=False,
        hovertext=hover,
        hoverinfo="text",
        customdata=np.array(ids, dtype=np.int64),
        name="candidates",
    )
    x_ticks = ["0%", "25%", "50%", "75%", "100%"]
    axis_px = axis_margin(x_ticks, along_y=False, title=True)  # x tick labels + "probability"
    annotations = []
    if not chosen_here:  # a note below the x axis title
        annotations.append(
            dict(
                x=1,
                y=0,
                xref="paper",
                yref="paper",
                yshift=-(axis_px - MARGIN_MIN),
                showarrow=False,
                xanchor="right",
                yanchor="top",
                text=_("chosen token (id {id}) is not in the top {n}").format(id=chosen_id, n=n)
                + (forced_note if forced else ""),
                font=dict(size=11, color=HIGHLIGHT),
            )
        )
    # the bar labels stand outside the bars (cliponaxis off); the x range ends at 1.12, so on a plot >= 200 px wide a
    # label of a bar reaching p needs what passes 200 * (1 - p / 1.12) px on the right. The margin assumes p = 1 for
    # every label: it then depends on the labels' text alone, not on the last bits of a probability (a class's batched
    # decoding and one user's differ there by ~1e-6, and a margin computed from p moved by a pixel, bench/README 8j)
    spill = max(text_px(t) + 4 - 200 * (1 - 1 / 1.12) for t in labels)
    top = 60
    bottom = axis_px + (18 if annotations else 0)
    layout = base_layout(
        title or _("Next-token candidates") + (_(" · forced choice") if forced else ""),
        height=max(180, 34 * n + top + bottom),
        showlegend=False,
        annotations=annotations,
        bargap=0.25,
        margin=dict(l=axis_margin(ticktext, along_y=True, title=False), r=MARGIN_MIN + max(0, math.ceil(spill)), t=top, b=bottom),
        xaxis=axis(_("probability"), range=[0, 1.12], tickvals=[0, 0.25, 0.5, 0.75, 1.0], ticktext=x_ticks, showgrid=True),
        yaxis=axis(tickmode="array", tickvals=list(range(n)), ticktext=ticktext, autorange="reversed"),
    )
    return figure([bar], layout)


def step_attention(
    row,
    k_tokens: Sequence[str],
    *,
    title: str | None,
    query: str | None = None,
    layer: int | None = None,
    key_title: str | None = None,
) -> go.Figure:
    """The new query's attention over the keys at one decoding step.

    ``row (K,)`` (one head or an average) is drawn as bars on a 0–1 axis; ``row (H, K)`` as a
    heatmap with one row per head (plus the head average below, for H > 1), on the same
    0–1 colour scale as every attention map. Hover: head, key token and position, weight.

    Args:
        row: ``StepView.cross_attn[layer]`` (keys = source tokens) or ``StepView.self_attn[layer]``
            (keys = the prefix ``[<bos>, y_1 .. y_t]``), or one head of it.
        k_tokens: the K key tokens. query: the query token (display only). layer: 0-based, for hover.
        key_title: x-axis title, e.g. "source token" or "target prefix".

    Raises:
        ValueError: if ``row`` is not 1-D or 2-D, or ``k_tokens`` does not match its last axis.
    """
    r = as_array(row, "row", (1, 2))
    K = r.shape[-1]
    if K == 0:
        raise ValueError("row has no keys (its last axis is empty)")
    k_hover, k_tick = token_labels(display(check_tokens(k_tokens, "k_tokens", K, "row's last axis (keys)")))
    key_title = _("key") if key_title is None else key_title
    where = _("layer {l}").format(l=layer + 1) if layer is not None else ""
    q = _("query: {token}").format(token=esc(display([query])[0])) + "<br>" if query is not None else ""
    # key labels are turned when they would collide on a plot ~400 px wide (a half-page column)
    angle = -45 if max(text_px(t) for t in k_tick) > 0.8 * 400 / K else 0
    x_axis = axis(
        key_title,
        type="category" if r.ndim == 2 else "linear",
        tickmode="array",
        tickvals=list(range(K)),
        ticktext=k_tick,
        tickangle=angle,
        showgrid=False,
    )
    bottom = axis_margin(k_tick, angle=angle, along_y=False, title=True)
    top = 60 if title else 30
    if r.ndim == 1:
        trace = dict(
            type="bar",
            x=np.arange(K),
            y=r,
            marker=dict(color=r, colorscale=ATTENTION_COLORSCALE, cmin=0, cmax=1, line=dict(color="#6b8fb3", width=0.5)),
            customdata=np.arange(K),
            hovertext=[
                f"{('<b>' + where + '</b><br>') if where else ''}{q}" + _("key: {key}<br>weight {w}").format(key=kh, w=f"{w:.3f}")
                for kh, w in zip(k_hover, r, strict=True)
            ],
            hoverinfo="text",
            name="attention",
        )
        y_axis = axis(_("attention weight"), range=[0, 1.02])
        left = axis_margin(["0.8"], along_y=True, title=True)
        right = MARGIN_MIN + (math.ceil(text_px(k_tick[-1]) / 2) if not angle else 0)  # the last label's right half
        height = top + bottom + 200
    else:
        H = r.shape[0]
        z = r
        names = [_("head {h}").format(h=h + 1) for h in range(H)]
        if H > 1:
            mean = head_average(r[:, None, :])  # (H, 1, K) -> (1, K); ablated (all-zero) heads left out
            z = np.concatenate([r, np.full((1, K), np.nan, np.float32), mean], axis=0)  # (H + 2, K)
            names += ["\u2002", _("mean of heads")]
        trace = dict(
            type="heatmap",
            z=z.astype(np.float32),
            x=k_hover,
            y=names,
            **weight_colors(),
            hoverongaps=False,
            xgap=1,
            ygap=1,
            hovertemplate=(f"<b>{where}, " if where else "<b>")
            + "%{y}</b><br>"
            + q
            + _("key: %{x}<br>weight %{z:.3f}")
            + "<extra></extra>",
            name="attention",
        )
        y_axis = axis(
            type="category",
            autorange="reversed",
            tickmode="array",
            tickvals=list(range(len(names))),
            ticktext=names,
            showgrid=False,
        )
        left = axis_margin(names, along_y=True, title=False)
        right = colorbar_margin(_("weight"))
        height = top + bottom + 30 * len(names) + 20
    if r.ndim == 1:
        alt = _("{what}: a bar per key ({keys}), the height is the attention weight from 0 to 1 ({K} bars).").format(
            what=plain(title) or _("Attention of the new query"), keys=key_title, K=K
        )
    else:
        alt = alt_text(
            title or _("Attention of the new query"),
            rows=_("heads (then the mean of heads)") if r.shape[0] > 1 else _("heads"),
            cols=_("keys ({keys})").format(keys=key_title),
            shape=(r.shape[0], K),
            notes=[_("colour: the attention weight from 0 (light) to 1 (dark)")],
        )
    layout = base_layout(
        title,
        showlegend=False,
        meta={"alt": alt},
        height=int(height),
        margin=dict(l=max(left, overhang(k_tick, FONT["size"], angle)), r=right, t=top, b=bottom),
        xaxis=x_axis,
        yaxis=y_axis,
    )
    return figure([trace], layout)


# -- beam search -----------------------------------------------------------------------------------
def _tree_layout(children: dict[int, list[int]], root: int) -> dict[int, float]:
    """y of every node: leaves get consecutive rows in depth-first order, a parent sits at the mean
    of its children (an iterative tidy-tree layout; no recursion limit on long beams)."""
    y: dict[int, float] = {}
    nxt = 0.0
    stack: list[tuple[int, bool]] = [(root, False)]
    while stack:
        nid, done = stack.pop()
        kids = children.get(nid, [])
        if not kids:
            y[nid] = nxt
            nxt += 1
        elif done:
            y[nid] = float(np.mean([y[c] for c in kids]))
        else:
            stack.append((nid, True))
            stack.extend((c, False) for c in reversed(kids))
    return y


def beam_tree(beam: BeamTree, *, title: str | None = None) -> go.Figure:
    """The beam-search tree: x = output step, one line per expansion, best hypothesis highlighted.

    Args:
        beam: ``BeamTree`` (``Analysis.beam``): its nodes (root: parent -1, step -1), their piece
            texts and ``best_path``, the node ids from the root to the best hypothesis's end.

    Hover shows the hypothesis so far, its cumulative log-probability (natural log) and, for
    finished hypotheses, the length-normalised score (Wu et al. 2016, eq. 14).

    Raises:
        ValueError: if there are no nodes, a parent is unknown, or ``best_path`` names an unknown node.
    """
    nodes, best_path = beam.nodes, beam.best_path
    if not nodes:
        raise ValueError("the beam has no nodes: pass Analysis.beam (beam search settings only)")
    if len(beam.texts) != len(nodes):
        raise ValueError(f"the beam has {len(nodes)} nodes but {len(beam.texts)} texts: pass one text per node")
    by_id = {int(n.id): n for n in nodes}
    text = {int(n.id): t for n, t in zip(nodes, beam.texts, strict=True)}
    children: dict[int, list[int]] = {}
    roots = []
    for nid, n in by_id.items():
        p = int(n.parent)
        if p == -1:
            roots.append(nid)
        elif p not in by_id:
            raise ValueError(f"beam node {nid} has parent {p}, which is not in nodes")
        else:
            children.setdefault(p, []).append(nid)
    if len(roots) != 1:
        raise ValueError(f"a beam tree has exactly one root (parent -1), got {len(roots)}")
    bad = [i for i in best_path if int(i) not in by_id]
    if bad:
        raise ValueError(f"best_path names nodes {bad} that are not in nodes")
    root = roots[0]
    y = _tree_layout(children, root)
    x = {nid: int(n.step) + 1 for nid, n in by_id.items()}  # root (step -1) at 0

    prefix: dict[int, str] = {root: ""}
    order = [root]
    for nid in order:  # breadth-first: parents before children
        for c in children.get(nid, []):
            t = text[c]
            prefix[c] = prefix[nid] + ("" if t in ("<eos>", "<pad>") else t)
            order.append(c)

    best = [int(i) for i in best_path]
    best_edges = set(zip(best[:-1], best[1:], strict=False))
    ex, ey, bx, by = [], [], [], []
    for nid in order[1:]:
        p = int(by_id[nid].parent)
        xs, ys = (bx, by) if (p, nid) in best_edges else (ex, ey)
        xs += [x[p], x[nid], None]
        ys += [y[p], y[nid], None]
    traces = [
        dict(type="scatter", x=ex, y=ey, mode="lines", line=dict(color="#c9c9c9", width=1), hoverinfo="skip", name="expansions"),
        dict(
            type="scatter",
            x=bx,
            y=by,
            mode="lines",
            line=dict(color=HIGHLIGHT, width=3),
            hoverinfo="skip",
            name="best hypothesis",
        ),
    ]
    best_set = set(best)
    for finished in (False, True):
        ids = [nid for nid in order if bool(by_id[nid].finished) == finished]
        if not ids:
            continue
        hover = []
        node = _("<b>{token}</b> (step {step})<br>hypothesis: {text}")
        normalised, on_best = _("score (length-normalised) = {score}"), _("on the best path")
        for nid in ids:
            n = by_id[nid]
            s = node.format(token=esc(display([text[nid]])[0]), step=int(n.step) + 1, text=esc(prefix[nid].strip()) or "∅")
            s += f"<br>log p = {float(n.logprob):.3f}"
            if n.score is not None:
                s += "<br>" + normalised.format(score=f"{float(n.score):.3f}")
            if nid in best_set:
                s += f"<br><i>{on_best}</i>"
            hover.append(s)
        traces.append(
            dict(
                type="scatter",
                x=[x[i] for i in ids],
                y=[y[i] for i in ids],
                mode="markers+text",
                text=[esc(short(display([text[i]])[0], 12)) for i in ids],
                textposition="middle right",
                textfont=dict(size=10, color=["#111" if i in best_set else "#777" for i in ids]),
                marker=dict(
                    symbol="square" if finished else "circle",
                    size=[11 if i in best_set else 8 for i in ids],
                    color=[HIGHLIGHT if i in best_set else ("#555" if finished else "#9ecae1") for i in ids],
                    line=dict(color="white", width=1),
                ),
                customdata=np.array(ids, dtype=np.int64),
                hovertext=hover,
                hoverinfo="text",
                name="finished hypotheses" if finished else "live hypotheses",
                showlegend=False,
            )
        )
    for label, symbol, color in (
        (_("live hypothesis"), "circle", "#9ecae1"),
        (_("finished (ended with &lt;eos&gt;)"), "square", "#555"),
    ):
        traces.append(
            dict(type="scatter", x=[None], y=[None], mode="markers", marker=dict(symbol=symbol, size=9, color=color), name=label)
        )
    n_leaves = max(1, int(max(y.values())) + 1)
    max_x = max(x.values())
    layout = base_layout(
        title
        or _("Beam search tree<br><sup>each column is one output step; orange: the best hypothesis; squares: finished</sup>"),
        height=int(np.clip(22 * n_leaves + 190, 260, 900)),
        legend=dict(orientation="h", x=0, y=1.0, yanchor="bottom"),
        hovermode="closest",
        margin=dict(t=100, l=10, r=10, b=60),  # room below for the step numbers and the axis title
        xaxis=dict(
            title=dict(text=_("output step")),
            dtick=1,
            range=[-0.3, max_x + 0.9],
            showgrid=True,
            gridcolor="#f0f0f0",
            zeroline=False,
        ),
        yaxis=dict(visible=False, autorange="reversed"),
    )
    return figure(traces, layout)

"""Attention maps: every (layer, head) as one tiled heatmap, one head zoomed, and before/after differences.

The figures draw the records of ``analysis.records``: ``attention_mosaic`` an ``AttentionView``
(``Analysis.view(kind)``), ``attention_heatmap`` a ``MapView`` (``view.map(layer, head)``).

Conventions (shared with ``analysis.analyze``):

* shapes: enc_self ``(L, H, S, S)``, dec_self ``(L, H, T, T)``, cross ``(L, H, T, S)``; a single
  map is ``(Q, K)``: rows are queries, columns keys, row 0 on top.
* decoder rows: the decoder is fed ``[<bos>, y_1 .. y_n]`` and predicts ``[y_1 .. y_n, <eos>]``;
  row t is the query at input token t that predicted token t + 1. The views carry the decoder
  inputs as ``q_tokens`` and the predictions as ``predicted``: rows are labelled ``"<bos> → ▁Ein"``.
* weights are drawn on one fixed 0–1 colour scale. Cells the view's ``reasons`` mark as hidden
  (the causal mask's future, hidden source tokens, outside a local window) are drawn grey, never
  as weight 0; so are the view's ablated heads. Nothing here decides which cells are hidden: the
  view says so. A softmax row sums to 1 over the allowed keys (Vaswani et al. 2017, eq. 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.records import AttentionView, MapView
from i18n import N_, _
from model.facts import ABLATED, KIND_NAMES, REASON_NAMES, REASONS, VISIBLE
from viz._common import (
    ATTENTION_COLORSCALE,
    COLORBAR,
    GREY_ORDER,
    MASK_COLORS,
    MASK_MARKS,
    SAFE_COLORSCALE,
    alt_text,
    as_array,
    base_layout,
    check_ablated,
    check_kind,
    check_reasons,
    check_square,
    check_tokens,
    diverging_colors,
    esc,
    figure,
    gap_for,
    heatmap_axes,
    heatmap_margins,
    marks_legend,
    mask_marks,
    mosaic_axis,
    plain,
    short,
    tick_style,
    tile,
    tile_label,
    tile_origin,
    token_labels,
    weight_colors,
)
from viz.tokens import display

KIND_EXPLAIN = {
    "enc_self": N_("each source token (row) mixes in the source tokens (columns) it attends to"),
    "dec_self": N_("each target position (row) sees only itself and earlier tokens (grey: masked future)"),
    "cross": N_("each target position (row) looks at the source sentence (columns) to choose the next word"),
}  # English, marked for the catalogue: shown through _()
ROWS_COLS = {  # what a map's rows and columns are, in words (its text alternative)
    "enc_self": (N_("source tokens (queries)"), N_("source tokens (keys)")),
    "dec_self": (N_("output tokens (queries)"), N_("output tokens (keys)")),
    "cross": (N_("output tokens"), N_("source tokens")),
}


def _rows_cols(kind: str) -> tuple[str, str]:
    """``ROWS_COLS[kind]`` in the current language."""
    rows, cols = ROWS_COLS[kind]
    return _(rows), _(cols)


def kind_name(kind: str) -> str:
    """``model.facts.KIND_NAMES[kind]`` in the current language (the catalogue viz.po carries the three names)."""
    return _(KIND_NAMES[kind])


# -- labels ---------------------------------------------------------------------------------------
@dataclass
class _Labels:
    """Escaped token text for one map: long names for hover, short ones for ticks, axis titles."""

    q_hover: list[str]  # "▁Ein (pos 1) → predicts ▁Hund"
    k_hover: list[str]  # "▁dog (pos 1)"
    q_tick: list[str]  # "▁Ein → ▁Hund"
    k_tick: list[str]  # "▁dog"
    x_title: str
    y_title: str


def _labels(kind: str, q_tokens, k_tokens, predicted, n_q: int, n_k: int) -> _Labels:
    q = display(check_tokens(q_tokens, "q_tokens", n_q, "the map's query axis (rows)"))
    k = display(check_tokens(k_tokens, "k_tokens", n_k, "the map's key axis (columns)"))
    p = None
    if predicted is not None:
        if kind == "enc_self":
            raise ValueError("predicted is for decoder rows (kind 'dec_self' or 'cross'); encoder rows predict nothing")
        p = display(check_tokens(predicted, "predicted", n_q, "the map's query axis (rows)"))
    q_hover, q_tick = token_labels(q)
    if p:
        predicts = _("{query} \u2192 predicts {token}")
        q_hover = [predicts.format(query=h, token=esc(n)) for h, n in zip(q_hover, p, strict=True)]
        q_tick = [f"{t} \u2192 {esc(short(n))}" for t, n in zip(q_tick, p, strict=True)]
    k_hover, k_tick = token_labels(k)
    tgt = _("query (target token → predicts)") if p else _("query (target token)")
    if kind == "enc_self":
        x_title, y_title = _("key (source token)"), _("query (source token)")
    elif kind == "dec_self":
        x_title, y_title = _("key (target token)"), tgt
    else:  # cross
        x_title, y_title = _("key (source token)"), tgt
    return _Labels(q_hover, k_hover, q_tick, k_tick, x_title, y_title)


def _mask_trace(sel: np.ndarray, reason: int, x, y, hovertemplate: str | None, customdata=None, *, cell_px: float = 0) -> dict:
    """A flat grey heatmap over the cells in ``sel`` (NaN elsewhere): masked cells are not weight 0.

    ``reason`` is a reason code of ``analysis.records``. Cells ``cell_px`` big (8 px or more) also carry the reason's
    mark (``viz._common.MASK_MARKS``: × future, … not yet written, ...), so grey is not the only sign. A trace dict
    (``type="heatmap"``) for ``viz._common.figure``."""
    z = np.where(sel, np.float32(1), np.float32(np.nan)).astype(np.float32)
    color = MASK_COLORS[reason]
    kw = dict(hoverinfo="skip") if hovertemplate is None else dict(hovertemplate=hovertemplate, customdata=customdata)
    return dict(
        type="heatmap",
        z=z,
        x=x,
        y=y,
        colorscale=[[0, color], [1, color]],
        zmin=0,
        zmax=1,
        showscale=False,
        hoverongaps=False,
        name=_(REASON_NAMES[reason]),
        xgap=0,
        ygap=0,
        **mask_marks(sel, reason, cell_px),
        **kw,
    )


def _cell_ticks(lab: _Labels, cell: float) -> tuple[dict, dict]:
    """x and y tick settings of one map (not a mosaic) with cells ``cell`` px big: a token per column / row."""
    x_ticks = dict(tickvals=list(range(len(lab.k_tick))), ticktext=lab.k_tick, **tick_style(cell, rotate=True))
    y_ticks = dict(tickvals=list(range(len(lab.q_tick))), ticktext=lab.q_tick, **tick_style(cell, rotate=False))
    return x_ticks, y_ticks


def _check_map(kind: str, x, name: str, ndim: int) -> np.ndarray:
    """The view's weights as float32, checked: ``ndim``-D, not empty, square for self-attention."""
    check_kind(kind)
    checked = as_array(x, name, ndim)
    if 0 in checked.shape:
        axes = "(layers, heads, queries, keys)" if ndim == 4 else "(queries, keys)"
        raise ValueError(f"{name} is empty (shape {checked.shape}); expected {axes}")
    check_square(kind, *checked.shape[-2:])
    return checked


# -- the mosaic -----------------------------------------------------------------------------------
def attention_mosaic(view: AttentionView, *, title: str | None = None) -> go.Figure:
    """Every (layer, head) map of one kind, tiled into ONE heatmap: rows = layers, columns = heads.

    One trace draws fast (a slider move redraws ~0.4 s for 72 maps, against ~3.5 s for 72 charts):
    tiles are separated by NaN gutters (``hoverongaps=False``) and share one 0–1 colour axis.
    Cells the view marks hidden (``view.reasons``) are drawn grey by a second heatmap (one per
    reason), never as weight 0; the view's ablated heads are grey and labelled. Token tick labels
    appear when the cells are big enough. Hover: layer, head, query, key, weight (or why grey).

    Args:
        view: ``AttentionView`` (``Analysis.view(kind)``, ``trace_view``, ``view.layer_means()``):
            ``attn (L, H, Q, K)`` post-softmax weights (numpy or torch), its tokens, reasons
            ``(Q, K)``, ablated heads and optional head names.
        title: figure title; None: a default naming the kind; "": none.

    Returns:
        A figure whose ``layout.meta`` is ``{"L", "H", "Q", "K", "gap", "kind", "ablated"}``: tile
        (l, h) is ``z[l*(Q+gap) : l*(Q+gap)+Q, h*(K+gap) : h*(K+gap)+K]`` of ``data[0]`` (masked
        and ablated cells NaN there, drawn by the grey traces ``data[1:]``).

    Raises:
        ValueError: wrong dimensions, token counts that do not match the array, a non-square
            self-attention map, NaN weights, an unknown kind, reasons of the wrong shape, an
            ablated head out of range.
    """
    kind = view.kind
    attn = _check_map(kind, view.attn, "attn", 4)  # (L, H, Q, K)
    L, H, Q, K = attn.shape
    lab = _labels(kind, view.q_tokens, view.k_tokens, view.predicted, Q, K)
    head_names = view.head_names
    if head_names is not None and len(head_names) != H:
        raise ValueError(f"head_names has {len(head_names)} names but attn has {H} heads")
    reasons = check_reasons(view.reasons, Q, K)
    abl = check_ablated(view.ablated, L, H)
    measure = _(view.measure)  # "weight" or "share": in the session's language

    # geometry: cell size from an assumed ~900 px plot width, gutter tall enough for the tile labels
    gap = gap_for(max(Q, K))
    n_cols = H * K + (H - 1) * gap
    cell = float(np.clip(900 / n_cols, 5, 30))
    gap = max(gap, int(np.ceil(15 / cell)))
    n_cols, n_rows = H * K + (H - 1) * gap, L * Q + (L - 1) * gap
    cell = float(np.clip(900 / n_cols, 5, 30))
    ticks = cell >= 8

    z = tile(attn, gap)  # (n_rows, n_cols), NaN gutters
    why = np.zeros(z.shape, dtype=np.int8)  # reason code per mosaic cell (VISIBLE: drawn)
    cd_type = np.uint8 if max(L, H) < 256 else np.uint16
    cd = np.zeros((*z.shape, 2), dtype=cd_type)  # (n_rows, n_cols, [layer, head]) 1-based, for hover
    for l in range(L):
        for h in range(H):
            y0, x0 = tile_origin(l, h, Q, K, gap)
            why[y0 : y0 + Q, x0 : x0 + K] = ABLATED if (l, h) in abl else reasons
            cd[y0 : y0 + Q, x0 : x0 + K] = (l + 1, h + 1)
    z[why != VISIBLE] = np.nan

    y = mosaic_axis([lab.q_hover] * L, gap)
    x = mosaic_axis([lab.k_hover] * H, gap)
    if head_names is not None and H == 1:
        who = _("layer %{customdata[0]}, {head}").replace("{head}", esc(head_names[0]))  # not format: %{...} is plotly's
    else:
        who = _("layer %{customdata[0]}, head %{customdata[1]}")
    head = f"<b>{who}</b><br>" + _("query: %{y}<br>key: %{x}<br>")
    traces = [
        dict(
            type="heatmap",
            z=z,
            x=x,
            y=y,
            customdata=cd,
            coloraxis="coloraxis",
            hoverongaps=False,
            hovertemplate=head + f"{esc(measure)} %{{z:.3f}}<extra></extra>",
            name="attention",
        )
    ]
    for reason in GREY_ORDER:
        sel = why == reason
        if sel.any():
            hover = head + f"<i>{_(REASONS[reason])}</i><extra></extra>"
            traces.append(_mask_trace(sel, reason, x, y, hover, cd, cell_px=cell if ticks else 0))

    # ticks: token labels for each layer's rows and each head's columns, else "layer l" / "head h"
    rows_at = [tile_origin(l, 0, Q, K, gap)[0] + i for l in range(L) for i in range(Q)]
    cols_at = [tile_origin(0, h, Q, K, gap)[1] + j for h in range(H) for j in range(K)]
    names = [esc(n) for n in head_names] if head_names is not None else [_("head {h}").format(h=h + 1) for h in range(H)]
    if ticks:
        yaxis_ticks = dict(tickvals=rows_at, ticktext=lab.q_tick * L, **tick_style(cell, rotate=False))
        xaxis_ticks = dict(tickvals=cols_at, ticktext=lab.k_tick * H, **tick_style(cell, rotate=True))
    else:
        yaxis_ticks = dict(
            tickvals=[tile_origin(l, 0, Q, K, gap)[0] + (Q - 1) / 2 for l in range(L)],
            ticktext=[_("layer {l}").format(l=l + 1) for l in range(L)],
        )
        xaxis_ticks = dict(tickvals=[tile_origin(0, h, Q, K, gap)[1] + (K - 1) / 2 for h in range(H)], ticktext=names)

    annotations, outlines = [], []
    for l in range(L):
        for h in range(H):
            y0, x0 = tile_origin(l, h, Q, K, gap)
            name = _("H{h}").format(h=h + 1) if head_names is None else names[h]
            tile_name = _("L{l} {head}").format(l=l + 1, head=name)
            annotations.append(tile_label(x0, y0, f"<b>{tile_name}</b>" + (_(" · ablated") if (l, h) in abl else "")))
            outlines.append(f"M{x0 - 0.5},{y0 - 0.5}H{x0 + K - 0.5}V{y0 + Q - 0.5}H{x0 - 0.5}Z")
    # every tile's frame in ONE path shape: a shape per tile costs ~0.1 ms each to build and one DOM node each to draw
    frames = dict(type="path", path="".join(outlines), xref="x", yref="y", line=dict(color="#c8c8c8", width=0.6), layer="above")

    # the whole layout as one dict, handed to the figure once: every update_layout / update_xaxes call
    # re-walks plotly's property tree, which took ~3/4 of the time to build a mosaic
    kind_title = _("{kind} · every layer (rows) × head (columns)").format(kind=kind_name(kind))
    top = 85 if title is None or title else 45
    rows, cols = _rows_cols(kind)
    alt = alt_text(
        title or kind_title,
        rows=_("{L} layers and columns {H} heads of tiles; in each tile rows are {rows}").format(L=L, H=H, rows=rows),
        cols=cols,
        shape=(Q, K),
        notes=[
            marks_legend(np.unique(why).tolist()),
            _("colour: {measure} from 0 (light) to 1 (dark)").format(measure=measure),
        ],
    )
    xaxis, yaxis = heatmap_axes(lab.x_title, lab.y_title, xaxis_ticks, yaxis_ticks, zeroline=False)
    layout = base_layout(
        title if title is not None else f"{kind_title}<br><sup>{_(KIND_EXPLAIN[kind])}</sup>",
        coloraxis=dict(
            colorscale=ATTENTION_COLORSCALE,
            cmin=0,
            cmax=1,
            colorbar=dict(title=dict(text=esc(measure)), len=0.6, **COLORBAR),
        ),
        annotations=annotations,
        shapes=[frames],
        height=int(n_rows * cell + top + (120 if ticks else 50)),
        meta={"L": L, "H": H, "Q": Q, "K": K, "gap": gap, "kind": kind, "ablated": sorted([list(p) for p in abl]), "alt": alt},
        hovermode="closest",
        margin=heatmap_margins(xaxis_ticks, yaxis_ticks, top=top),
        xaxis=xaxis,
        yaxis=yaxis,
    )
    return figure(traces, layout)


def mosaic_tile(fig: go.Figure, layer: int, head: int) -> np.ndarray:
    """Tile (layer, head) of an ``attention_mosaic`` figure as drawn: ``(Q, K)``, NaN where grey.

    Raises:
        ValueError: if ``fig`` has no mosaic meta or the tile is out of range.
    """
    meta = fig.layout.meta
    if not isinstance(meta, dict) or not {"L", "H", "Q", "K", "gap"} <= set(meta):
        raise ValueError("fig is not an attention_mosaic figure (layout.meta lacks L, H, Q, K, gap)")
    if not (0 <= layer < meta["L"] and 0 <= head < meta["H"]):
        raise ValueError(f"tile (layer {layer}, head {head}) is out of range for {meta['L']} layers x {meta['H']} heads")
    y0, x0 = tile_origin(layer, head, meta["Q"], meta["K"], meta["gap"])
    z = np.asarray(fig.data[0].z, dtype=np.float32)
    return z[y0 : y0 + meta["Q"], x0 : x0 + meta["K"]].copy()


# -- one map zoomed ------------------------------------------------------------------------------
def attention_heatmap(view: MapView, *, title: str | None = None) -> go.Figure:
    """One head (or a head average) zoomed in, tokens on both axes, row 0 on top.

    Axes are integer positions with the tokens as tick text, so a repeated token keeps its own row
    and column. Cells the view marks hidden (``view.reasons``; all of them for an ablated head) are
    grey, not weight 0. Invisible ``go.Scatter`` markers sit at every cell centre with
    ``customdata = [query, key]`` (0-based): clicks on a heatmap do not reach
    ``st.plotly_chart(on_select=...)`` (streamlit issue 8760) but clicks on them do. ``data[-1]``
    (name "cells") holds the drawn cells, row-major, with the weight in ``marker.color``; each grey
    reason has its own trace before it (name "cells: future", ...). They carry the hover — query and
    key (position and tick text), weight or why the cell is grey — with no text per cell.

    Args:
        view: ``MapView`` (``AttentionView.map(layer, head)``): ``w (Q, K)``, its tokens, reasons
            ``(Q, K)``, and layer / head (0-based; head None: a head average) for hover and title.
        title: figure title (None: a default naming the kind, layer and head).

    Raises:
        ValueError: as ``attention_mosaic``.
    """
    kind, layer, head = view.kind, view.layer, view.head
    m = _check_map(kind, view.w, "w", 2)  # (Q, K)
    Q, K = m.shape
    lab = _labels(kind, view.q_tokens, view.k_tokens, view.predicted, Q, K)
    reasons = check_reasons(view.reasons, Q, K)
    z = np.where(reasons != VISIBLE, np.float32(np.nan), m).astype(np.float32)

    who = _("head average") if head is None else _("head {h}").format(h=head + 1)
    who = _("layer {l}, {head}").format(l=layer + 1, head=who) if layer is not None else ("" if head is None else who)
    cell = float(np.clip(640 / max(Q, K), 12, 44))
    traces = [
        dict(
            type="heatmap",
            z=z,
            x=np.arange(K),
            y=np.arange(Q),
            **weight_colors(),
            hoverinfo="skip",
            hoverongaps=False,
            name=_("attention"),
        )
    ]
    for reason in GREY_ORDER:
        sel = reasons == reason
        if sel.any():
            traces.append(_mask_trace(sel, reason, np.arange(K), np.arange(Q), None, cell_px=cell))

    # click layer: invisible markers at the cell centres, [query, key] in customdata. The hover needs no
    # text per cell: %{y} / %{x} show the tick text of the row / column (plotly.js looks a tickvals
    # value up in ticktext), the weight rides in marker.color. Grey cells get one trace per reason.
    hover_head = f"<b>{who}</b><br>" if who else ""
    where = hover_head + _("query %{customdata[0]}: %{y}<br>key %{customdata[1]}: %{x}<br>")
    marker = dict(size=max(6, cell * 0.8), opacity=0, symbol="square")
    for reason in (*GREY_ORDER, VISIBLE):
        qs, ks = np.nonzero(reasons == reason)  # (n,) each, row-major
        if reason != VISIBLE and not len(qs):
            continue  # a reason no cell has: no trace (the drawn cells always get one, last)
        traces.append(
            dict(
                type="scatter",
                x=ks.astype(np.int16),
                y=qs.astype(np.int16),
                # [query, key] pairs as plain lists: a typed array would reach Streamlit's selection as
                # an Int16Array, which JSON-encodes to {"0": q, "1": k} instead of [q, k]
                customdata=np.stack([qs, ks], axis=1).tolist(),
                mode="markers",
                marker=dict(marker, color=m[qs, ks]) if reason == VISIBLE else marker,
                selected=dict(marker=dict(opacity=0)),  # a selected cell stays invisible (no coloured square)
                unselected=dict(marker=dict(opacity=0)),
                hovertemplate=where
                + (f"<i>{_(REASONS[reason])}</i>" if reason != VISIBLE else _("weight %{marker.color:.3f}"))
                + "<extra></extra>",
                showlegend=False,
                name="cells" if reason == VISIBLE else f"cells: {REASON_NAMES[reason]}",
            )
        )
    kname = kind_name(kind)
    default_title = kname + (f" · {who}" if who else "") + f"<br><sup>{_(KIND_EXPLAIN[kind])}</sup>"
    top = 80
    rows, cols = _rows_cols(kind)
    name = kname + (f", {who}" if who else "")
    shown = plain(title) if title else ""
    alt = alt_text(
        shown if shown.lower().startswith(kname.lower()) else ". ".join(filter(None, [name, shown])),
        rows=rows,
        cols=cols,
        shape=(Q, K),
        notes=[marks_legend(np.unique(reasons).tolist()), _("colour: attention weight from 0 (light) to 1 (dark)")],
    )
    x_ticks, y_ticks = _cell_ticks(lab, cell)
    xaxis, yaxis = heatmap_axes(lab.x_title, lab.y_title, x_ticks, y_ticks, shape=(Q, K), zeroline=False)
    layout = base_layout(
        title if title is not None else default_title,
        height=int(Q * cell + top + 130),
        hovermode="closest",
        hoverdistance=-1,
        meta={"Q": Q, "K": K, "kind": kind, "alt": alt},
        clickmode="event+select",
        margin=heatmap_margins(x_ticks, y_ticks, top=top),
        xaxis=xaxis,
        yaxis=yaxis,
    )
    return figure(traces, layout)


# -- before / after ---------------------------------------------------------------------------------
def difference_heatmap(
    before: MapView, after: MapView, *, title: str | None = None, names: tuple[str, str] = (N_("before"), N_("after"))
) -> go.Figure:
    """``after − before`` of one map, on a diverging scale centred on 0 (red: more attention after).

    The scale runs over ±max|after − before| (at least ±1e-6, so an unchanged map is all white,
    not a division by zero). Hover gives query, key, before, after and the change. Rows and
    columns are labelled with ``before``'s tokens.

    Args:
        before, after: ``MapView`` of the same kind over the same tokens (e.g. without / with an
            intervention, the changed model teacher-forced on the original output).
        names: what hover and colour bar call the two (e.g. ("A", "B") for two sentences); the default pair is
            shown in the current language.

    Raises:
        ValueError: if the shapes differ (call it only when both runs have the same token
            sequences), or token counts do not match.
    """
    kind = before.kind
    before_w = as_array(before.w, "before", 2)
    after_w = as_array(after.w, "after", 2)
    if after_w.shape != before_w.shape or after.kind != kind:
        raise ValueError(
            f"before is {kind} {before_w.shape} but after is {after.kind} {after_w.shape}: a difference needs the same kind, queries "
            "and keys; show the two maps side by side instead when the translations differ"
        )
    check_kind(kind)
    Q, K = after_w.shape
    lab = _labels(kind, before.q_tokens, before.k_tokens, before.predicted, Q, K)
    default_names = names == ("before", "after")
    n0, n1 = (esc(_(n) if default_names else n) for n in names)
    change = f"{n1} − {n0}"
    more = _("after the change") if default_names else _("in {name}").format(name=n1)
    diff = (after_w - before_w).astype(np.float32)  # (Q, K)
    limit = max(float(np.abs(diff).max()) if diff.size else 0.0, 1e-6)
    cell = float(np.clip(640 / max(Q, K, 1), 12, 44))
    heat = dict(
        type="heatmap",
        z=diff,
        x=lab.k_hover,
        y=lab.q_hover,
        customdata=np.stack([before_w, after_w], axis=-1),  # (Q, K, 2): before, after
        **diverging_colors(change, limit),
        hovertemplate=_("query: %{y}<br>key: %{x}<br>")
        + f"{n0} %{{customdata[0]:.3f}} → {n1} %{{customdata[1]:.3f}}<br><b>"
        + _("change %{z:+.3f}")
        + "</b><extra></extra>",
        name=_("difference"),
    )
    x_ticks, y_ticks = _cell_ticks(lab, cell)
    xaxis, yaxis = heatmap_axes(lab.x_title, lab.y_title, x_ticks, y_ticks)
    rows, cols = _rows_cols(kind)
    alt = alt_text(
        title or _("Change in {kind} ({change})").format(kind=kind_name(kind), change=change),
        rows=rows,
        cols=cols,
        shape=(Q, K),
        notes=[
            _("colour: the change from −{limit} (blue, less attention {more}) through 0 (white) to +{limit} (red, more)").format(
                limit=f"{limit:.2g}", more=more
            )
        ],
    )
    layout = base_layout(
        title
        if title is not None
        else _("Change in attention ({change})<br><sup>red: the query attends more to this key {more}; blue: less</sup>").format(
            change=change, more=more
        ),
        height=int(Q * cell + 210),
        meta={"Q": Q, "K": K, "range": limit, "alt": alt},
        margin=heatmap_margins(x_ticks, y_ticks, top=80, colorbar=change, cb_ticks=[f"−{limit:.2g}"]),
        xaxis=xaxis,
        yaxis=yaxis,
    )
    return figure([heat], layout)


# -- the colour-blind-safe scale, one click away ------------------------------------------------------------------
def _is_attention_scale(scale) -> bool:
    try:
        return [str(c).lower() for _stop, c in scale] == [c for _stop, c in ATTENTION_COLORSCALE]
    except (TypeError, ValueError):
        return False


def with_safe_colors(fig: go.Figure) -> go.Figure:
    """A copy of ``fig`` with every use of the attention scale (white to blue) swapped for ``SAFE_COLORSCALE``
    (plotly's Viridis, light yellow at 0 to dark purple at 1): heatmaps, colour axes and coloured bars. Diverging
    scales and the greys of hidden cells are kept. ``fig`` itself is left as it is (it may be cached)."""
    d = fig.to_dict()
    for tr in d.get("data", []):
        for holder in (tr, tr.get("marker") or {}):
            if _is_attention_scale(holder.get("colorscale")):
                holder["colorscale"] = SAFE_COLORSCALE
    for name, value in d.get("layout", {}).items():
        if name.startswith("coloraxis") and isinstance(value, dict) and _is_attention_scale(value.get("colorscale")):
            value["colorscale"] = SAFE_COLORSCALE
    return figure(d.get("data", []), d.get("layout", {}))


# -- text alternatives ------------------------------------------------------------------------------------------
def alt_of(fig: go.Figure) -> str:
    """A figure's text alternative for screen readers: ``layout.meta["alt"]`` (every heatmap here and in
    ``viz.steps``, ``viz.positional``, ``viz.stats``, ``viz.head`` sets one), else its title as plain text."""
    meta = fig.layout.meta
    if isinstance(meta, dict) and meta.get("alt"):
        return str(meta["alt"])
    title = fig.layout.title.text if fig.layout.title else None
    return plain(title) or _("Figure")


def map_table(w, q_tokens, k_tokens, *, predicted=None, reasons=None) -> pd.DataFrame:
    """The numbers of one attention map as a table of text, for screen readers ("Show as table"): a row per query
    (``"1: ▁Ein → ▁Hund"``), a column per key (``"3: ▁dog"``), the weight with 3 decimals, or the mark and reason of
    a hidden cell (``"× future"``) where the figure draws grey.

    Args:
        w: ``(Q, K)`` weights. q_tokens, k_tokens: Q and K tokens. predicted: Q tokens the decoder rows predicted.
        reasons: ``(Q, K)`` reason codes of ``model.facts`` (None: every cell shown).

    Raises:
        ValueError: for a non-2-D or non-finite ``w``, or tokens / reasons that do not match it.
    """
    weights = as_array(w, "w", 2)
    Q, K = weights.shape
    q = display(check_tokens(q_tokens, "q_tokens", Q, "w's rows"))
    k = display(check_tokens(k_tokens, "k_tokens", K, "w's columns"))
    if predicted is not None:
        q = [f"{x} \u2192 {y}" for x, y in zip(q, display(check_tokens(predicted, "predicted", Q, "w's rows")), strict=True)]
    cells = np.char.mod("%.3f", weights).astype(object)
    if reasons is not None:
        r = check_reasons(reasons, Q, K)
        for code, mark in MASK_MARKS.items():
            cells[r == code] = f"{mark} {_(REASON_NAMES[code])}"
    rows = pd.Index([f"{i}: {t}" for i, t in enumerate(q)], name=_("query \\ key"))
    return pd.DataFrame(cells, index=rows, columns=[f"{j}: {t}" for j, t in enumerate(k)])

"""Attention maps: every (layer, head) as one tiled heatmap, one head zoomed, and before/after differences.

Conventions (shared with ``model.analysis``):

* shapes: enc_self ``(L, H, S, S)``, dec_self ``(L, H, T, T)``, cross ``(L, H, T, S)``; a single
  map is ``(Q, K)``: rows are queries, columns keys, row 0 on top.
* decoder rows: the decoder is fed ``[<bos>, y_1 .. y_n]`` and predicts ``[y_1 .. y_n, <eos>]``;
  row t is the query at input token t that predicted token t + 1. Pass the decoder inputs as
  ``q_tokens`` and the predictions as ``predicted``: rows are labelled ``"<bos> → ▁Ein"``.
* weights are drawn on one fixed 0–1 colour scale. Cells a query was not allowed to see (the
  causal mask's future, hidden source tokens, outside a local window) are drawn grey, never as
  weight 0; so are heads that were ablated. A softmax row sums to 1 over the allowed keys
  (Vaswani et al. 2017, eq. 1).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from viz._common import (
    ATTENTION_COLORSCALE,
    COLORBAR,
    MASK_COLORS,
    MASK_REASONS,
    ablated_heads,
    as_array,
    base_layout,
    cell_reasons,
    check_kind,
    check_square,
    check_tokens,
    diverging_colors,
    esc,
    gap_for,
    heatmap_axes,
    heatmap_margins,
    mask_reasons,
    mosaic_axis,
    resolve_masks,
    short,
    tick_style,
    tile,
    tile_label,
    tile_origin,
    token_labels,
    weight_colors,
)
from viz.tokens import display

KIND_TITLES = {
    "enc_self": "Encoder self-attention",
    "dec_self": "Decoder causal self-attention",
    "cross": "Cross-attention (decoder → encoder)",
}
KIND_EXPLAIN = {
    "enc_self": "each source token (row) mixes in the source tokens (columns) it attends to",
    "dec_self": "each target position (row) sees only itself and earlier tokens (grey: masked future)",
    "cross": "each target position (row) looks at the source sentence (columns) to choose the next word",
}


def masked_cells(
    kind: str, n_q: int, n_k: int, *, causal: bool = True, window: int | None = None, hidden: Iterable[int] = ()
) -> np.ndarray:
    """Bool ``(n_q, n_k)``: True where the model did not let the query see the key.

    Same rules as ``model.transformer``: dec_self hides keys after the query when ``causal``
    (section 3.2.3); a local ``window`` hides |query - key| >= window in self-attention;
    ``hidden`` source positions are hidden keys of enc_self and cross.

    Raises:
        ValueError: for an unknown ``kind``.
    """
    check_kind(kind)
    return mask_reasons(kind, n_q, n_k, causal=causal, window=window, hidden=hidden) != ""


def layer_average(attn) -> np.ndarray:
    """Mean over heads for each layer: ``(L, H, Q, K) -> (L, Q, K)``.

    Heads whose map is all zero (ablated heads: ``model.transformer`` reports zeros for them) are
    left out, so each row of the average still sums to 1 over the allowed keys; a layer with every
    head ablated averages to zeros.

    Raises:
        ValueError: if ``attn`` is not 4-D or holds NaN.
    """
    a = as_array(attn, "attn", 4)  # (L, H, Q, K)
    live = np.abs(a).reshape(a.shape[0], a.shape[1], -1).max(axis=2) > 0  # (L, H)
    n = np.maximum(live.sum(axis=1), 1).astype(np.float32)  # (L,)
    return (a * live[:, :, None, None]).sum(axis=1) / n[:, None, None]  # (L, Q, K)


def head_average(attn, layer: int | None = None) -> np.ndarray:
    """Mean over heads: ``(H, Q, K) -> (Q, K)``; for ``(L, H, Q, K)`` the heads of ``layer``
    (0-based), or of every layer when ``layer`` is None. All-zero (ablated) heads are left out.

    Raises:
        ValueError: for other shapes or a layer out of range.
    """
    a = as_array(attn, "attn", (3, 4))
    if a.ndim == 3:
        if layer is not None:
            raise ValueError("layer is only for a (L, H, Q, K) array; this one is (H, Q, K)")
        return layer_average(a[None])[0]
    if layer is None:
        return layer_average(a.reshape(1, -1, *a.shape[2:]))[0]  # (L, H, Q, K) -> (1, L*H, Q, K)
    if not 0 <= layer < a.shape[0]:
        raise ValueError(f"layer {layer} is out of range: the array has {a.shape[0]} layers (count from 0)")
    return layer_average(a[layer : layer + 1])[0]


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


def _labels(kind: str | None, q_tokens, k_tokens, predicted, n_q: int, n_k: int) -> _Labels:
    q = display(check_tokens(q_tokens, "q_tokens", n_q, "the map's query axis (rows)"))
    k = display(check_tokens(k_tokens, "k_tokens", n_k, "the map's key axis (columns)"))
    p = None
    if predicted is not None:
        if kind == "enc_self":
            raise ValueError("predicted is for decoder rows (kind 'dec_self' or 'cross'); encoder rows predict nothing")
        p = display(check_tokens(predicted, "predicted", n_q, "the map's query axis (rows)"))
    q_hover, q_tick = token_labels(q)
    if p:
        q_hover = [f"{h} \u2192 predicts {esc(n)}" for h, n in zip(q_hover, p, strict=True)]
        q_tick = [f"{t} \u2192 {esc(short(n))}" for t, n in zip(q_tick, p, strict=True)]
    k_hover, k_tick = token_labels(k)
    src = "source token"
    tgt = "target token" + (" → predicts" if p else "")
    if kind == "enc_self":
        x_title, y_title = f"key ({src})", f"query ({src})"
    elif kind == "dec_self":
        x_title, y_title = "key (target token)", f"query ({tgt})"
    elif kind == "cross":
        x_title, y_title = f"key ({src})", f"query ({tgt})"
    else:
        x_title, y_title = "key", "query" + (" (→ predicts)" if p else "")
    return _Labels(q_hover, k_hover, q_tick, k_tick, x_title, y_title)


def _mask_trace(sel: np.ndarray, reason: str, x, y, hovertemplate: str | None, customdata=None) -> dict:
    """A flat grey heatmap over the cells in ``sel`` (NaN elsewhere): masked cells are not weight 0.

    A trace dict (``type="heatmap"``) for ``go.Figure(data=...)``: a ``go.Heatmap`` object would be
    validated twice, once made and once copied into the figure."""
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
        name=reason,
        xgap=0,
        ygap=0,
        **kw,
    )


def _cell_ticks(lab: _Labels, cell: float) -> tuple[dict, dict]:
    """x and y tick settings of one map (not a mosaic) with cells ``cell`` px big: a token per column / row."""
    x_ticks = dict(tickvals=list(range(len(lab.k_tick))), ticktext=lab.k_tick, **tick_style(cell, rotate=True))
    y_ticks = dict(tickvals=list(range(len(lab.q_tick))), ticktext=lab.q_tick, **tick_style(cell, rotate=False))
    return x_ticks, y_ticks


# -- the mosaic -----------------------------------------------------------------------------------
def attention_mosaic(
    attn,
    q_tokens: Sequence[str],
    k_tokens: Sequence[str],
    *,
    kind: str,
    predicted: Sequence[str] | None = None,
    title: str | None = None,
    ablated: Iterable[tuple[int, int]] = frozenset(),
    interventions: dict | None = None,
    masked=None,
    causal: bool | None = None,
    head_names: Sequence[str] | None = None,
    token_ticks: bool | None = None,
    height: int | None = None,
) -> go.Figure:
    """Every (layer, head) map of one kind, tiled into ONE heatmap: rows = layers, columns = heads.

    One trace draws fast (a slider move redraws ~0.4 s for 72 maps, against ~3.5 s for 72 charts):
    tiles are separated by NaN gutters (``hoverongaps=False``) and share one 0–1 colour axis.
    Cells the query could not see are drawn grey by a second heatmap (one per reason), never as
    weight 0; ablated heads are grey and labelled. Hover: layer, head, query, key, weight.

    Args:
        attn: ``(L, H, Q, K)`` post-softmax weights (numpy or torch), e.g. ``Maps.cross``.
        q_tokens: Q query tokens (decoder inputs for dec_self/cross); k_tokens: K key tokens.
        kind: "enc_self", "dec_self" or "cross" (titles, axis names and the causal mask).
        predicted: for decoder kinds, the Q tokens each row predicted (``Analysis.tgt_out_tokens``).
        ablated: (layer, head) pairs, 0-based, drawn as ablated.
        interventions: the dict of ``model.analysis.iv_dict`` (``Analysis.interventions``): its
            causal flag, window, hidden source tokens and ablated heads of this kind are drawn.
        masked: bool ``(Q, K)``, True = not allowed; overrides ``interventions``' masks.
        causal: overrides the causal flag (default: True, or ``interventions["causal"]``).
        head_names: names of the H columns (e.g. ``["mean"]`` for ``layer_average(a)[:, None]``).
        token_ticks: token tick labels on the axes; default: when the cells are big enough.
        height: figure height in px; default from the number of rows.

    Returns:
        A figure whose ``layout.meta`` is ``{"L", "H", "Q", "K", "gap", "kind", "ablated"}``: tile
        (l, h) is ``z[l*(Q+gap) : l*(Q+gap)+Q, h*(K+gap) : h*(K+gap)+K]`` of ``data[0]`` (masked
        and ablated cells NaN there, drawn by the grey traces ``data[1:]``).

    Raises:
        ValueError: wrong dimensions, token counts that do not match the array, a non-square
            self-attention map, NaN weights, an unknown kind, an ablated head out of range.
    """
    check_kind(kind)
    a = as_array(attn, "attn", 4)  # (L, H, Q, K)
    L, H, Q, K = a.shape
    if 0 in a.shape:
        raise ValueError(f"attn is empty (shape {a.shape}); expected (layers, heads, queries, keys)")
    check_square(kind, Q, K)
    lab = _labels(kind, q_tokens, k_tokens, predicted, Q, K)
    if head_names is not None and len(head_names) != H:
        raise ValueError(f"head_names has {len(head_names)} names but attn has {H} heads")
    reasons, abl = resolve_masks(kind, L, H, Q, K, masked=masked, interventions=interventions, causal=causal, ablated=ablated)

    # geometry: cell size from an assumed ~900 px plot width, gutter tall enough for the tile labels
    gap = gap_for(max(Q, K))
    n_cols = H * K + (H - 1) * gap
    cell = float(np.clip(900 / n_cols, 5, 30))
    gap = max(gap, int(np.ceil(15 / cell)))
    n_cols, n_rows = H * K + (H - 1) * gap, L * Q + (L - 1) * gap
    cell = float(np.clip(900 / n_cols, 5, 30))
    ticks = token_ticks if token_ticks is not None else cell >= 8

    z = tile(a, gap)  # (n_rows, n_cols), NaN gutters
    why = np.full(z.shape, "", dtype=object)  # reason a cell is grey, per mosaic cell
    cd_type = np.uint8 if max(L, H) < 256 else np.uint16
    cd = np.zeros((*z.shape, 2), dtype=cd_type)  # (n_rows, n_cols, [layer, head]) 1-based, for hover
    for l in range(L):
        for h in range(H):
            y0, x0 = tile_origin(l, h, Q, K, gap)
            why[y0 : y0 + Q, x0 : x0 + K] = "ablated" if (l, h) in abl else reasons
            cd[y0 : y0 + Q, x0 : x0 + K] = (l + 1, h + 1)
    grey = why != ""
    z[grey] = np.nan

    y = mosaic_axis([lab.q_hover] * L, gap)
    x = mosaic_axis([lab.k_hover] * H, gap)
    if head_names is not None and H == 1:
        who = f"layer %{{customdata[0]}}, {esc(head_names[0])}"
    else:
        who = "layer %{customdata[0]}, head %{customdata[1]}"
    head = f"<b>{who}</b><br>query: %{{y}}<br>key: %{{x}}<br>"
    traces = [
        dict(
            type="heatmap",
            z=z,
            x=x,
            y=y,
            customdata=cd,
            coloraxis="coloraxis",
            hoverongaps=False,
            hovertemplate=head + "weight %{z:.3f}<extra></extra>",
            name="attention",
        )
    ]
    for reason in ("future", "window", "hidden", "masked", "ablated"):
        sel = why == reason
        if sel.any():
            traces.append(_mask_trace(sel, reason, x, y, head + f"<i>{MASK_REASONS[reason]}</i><extra></extra>", cd))

    # ticks: token labels for each layer's rows and each head's columns, else "layer l" / "head h"
    rows_at = [tile_origin(l, 0, Q, K, gap)[0] + i for l in range(L) for i in range(Q)]
    cols_at = [tile_origin(0, h, Q, K, gap)[1] + j for h in range(H) for j in range(K)]
    names = [esc(n) for n in head_names] if head_names is not None else [f"head {h + 1}" for h in range(H)]
    if ticks:
        yaxis_ticks = dict(tickvals=rows_at, ticktext=lab.q_tick * L, **tick_style(cell, rotate=False))
        xaxis_ticks = dict(tickvals=cols_at, ticktext=lab.k_tick * H, **tick_style(cell, rotate=True))
    else:
        yaxis_ticks = dict(
            tickvals=[tile_origin(l, 0, Q, K, gap)[0] + (Q - 1) / 2 for l in range(L)],
            ticktext=[f"layer {l + 1}" for l in range(L)],
        )
        xaxis_ticks = dict(tickvals=[tile_origin(0, h, Q, K, gap)[1] + (K - 1) / 2 for h in range(H)], ticktext=names)

    annotations, outlines = [], []
    for l in range(L):
        for h in range(H):
            y0, x0 = tile_origin(l, h, Q, K, gap)
            name = f"H{h + 1}" if head_names is None else names[h]
            annotations.append(tile_label(x0, y0, f"<b>L{l + 1} {name}</b>" + (" · ablated" if (l, h) in abl else "")))
            outlines.append(f"M{x0 - 0.5},{y0 - 0.5}H{x0 + K - 0.5}V{y0 + Q - 0.5}H{x0 - 0.5}Z")
    # every tile's frame in ONE path shape: a shape per tile costs ~0.1 ms each to build and one DOM node each to draw
    frames = dict(type="path", path="".join(outlines), xref="x", yref="y", line=dict(color="#c8c8c8", width=0.6), layer="above")

    # the whole layout as one dict, handed to go.Figure once: every update_layout / update_xaxes call
    # re-walks plotly's property tree, which took ~3/4 of the time to build a mosaic
    kind_title = KIND_TITLES[kind] + " · every layer (rows) × head (columns)"
    top = 85 if title is None or title else 45
    xaxis, yaxis = heatmap_axes(lab.x_title, lab.y_title, xaxis_ticks, yaxis_ticks, zeroline=False)
    layout = base_layout(
        title if title is not None else f"{kind_title}<br><sup>{KIND_EXPLAIN[kind]}</sup>",
        coloraxis=dict(
            colorscale=ATTENTION_COLORSCALE, cmin=0, cmax=1, colorbar=dict(title=dict(text="weight"), len=0.6, **COLORBAR)
        ),
        annotations=annotations,
        shapes=[frames],
        height=height or int(n_rows * cell + top + (120 if ticks else 50)),
        meta={"L": L, "H": H, "Q": Q, "K": K, "gap": gap, "kind": kind, "ablated": sorted([list(p) for p in abl])},
        hovermode="closest",
        margin=heatmap_margins(xaxis_ticks, yaxis_ticks, top=top),
        xaxis=xaxis,
        yaxis=yaxis,
    )
    return go.Figure(data=traces, layout=layout)


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
def attention_heatmap(
    w,
    q_tokens: Sequence[str],
    k_tokens: Sequence[str],
    *,
    title: str | None,
    kind: str,
    predicted: Sequence[str] | None = None,
    zmax: float = 1.0,
    show_values: bool = False,
    masked=None,
    interventions: dict | None = None,
    causal: bool | None = None,
    layer: int | None = None,
    head: int | None = None,
    ablated: bool = False,
    height: int | None = None,
) -> go.Figure:
    """One head (or a head average) zoomed in, tokens on both axes, row 0 on top.

    Axes are integer positions with the tokens as tick text, so a repeated token keeps its own row
    and column. Masked cells are grey (not weight 0). Invisible ``go.Scatter`` markers sit at every
    cell centre with ``customdata = [query, key]`` (0-based): clicks on a heatmap do not reach
    ``st.plotly_chart(on_select=...)`` (streamlit issue 8760) but clicks on them do. ``data[-1]``
    (name "cells") holds the drawn cells, row-major, with the weight in ``marker.color``; each grey
    reason has its own trace before it (name "cells: future", ...). They carry the hover — query and
    key (position and tick text), weight or why the cell is grey — with no text per cell.

    Args:
        w: ``(Q, K)`` weights; q_tokens / k_tokens / kind / predicted / masked / interventions /
            causal: as in ``attention_mosaic``.
        title: figure title (None: a default naming the kind, layer and head).
        zmax: top of the colour scale (1.0 keeps every figure comparable; lower it for averages).
        show_values: write each weight in its cell (readable up to ~20 tokens).
        layer, head: 0-based, for the hover and default title; ``head=None`` means a head average.
        ablated: draw the whole map as an ablated head (also automatic when ``interventions``
            ablates (kind, layer, head)).

    Raises:
        ValueError: as ``attention_mosaic``; also for ``zmax <= 0``.
    """
    check_kind(kind)
    m = as_array(w, "w", 2)  # (Q, K)
    Q, K = m.shape
    if 0 in m.shape:
        raise ValueError(f"w is empty (shape {m.shape}); expected (queries, keys)")
    check_square(kind, Q, K)
    if not zmax > 0:
        raise ValueError(f"zmax must be > 0, got {zmax}")
    lab = _labels(kind, q_tokens, k_tokens, predicted, Q, K)
    reasons = cell_reasons(kind, Q, K, masked=masked, interventions=interventions, causal=causal)
    if ablated or (layer is not None and head is not None and (layer, head) in ablated_heads(kind, (), interventions)):
        reasons = np.full((Q, K), "ablated", dtype=object)
    grey = reasons != ""
    z = np.where(grey, np.float32(np.nan), m).astype(np.float32)

    who = "head average" if head is None else f"head {head + 1}"
    who = f"layer {layer + 1}, {who}" if layer is not None else ("" if head is None else who)
    cell = float(np.clip(640 / max(Q, K), 12, 44))
    heat = dict(
        type="heatmap",
        z=z,
        x=np.arange(K),
        y=np.arange(Q),
        **weight_colors(zmax=zmax),
        hoverinfo="skip",
        hoverongaps=False,
        name="attention",
    )
    if show_values:
        heat.update(texttemplate="%{z:.2f}", textfont=dict(size=int(np.clip(cell * 0.32, 7, 12))))
    traces = [heat]
    for reason in ("future", "window", "hidden", "masked", "ablated"):
        sel = reasons == reason
        if sel.any():
            traces.append(_mask_trace(sel, reason, np.arange(K), np.arange(Q), None))

    # click layer: invisible markers at the cell centres, [query, key] in customdata. The hover needs no
    # text per cell: %{y} / %{x} show the tick text of the row / column (plotly.js looks a tickvals
    # value up in ticktext), the weight rides in marker.color. Grey cells get one trace per reason.
    hover_head = f"<b>{who}</b><br>" if who else ""
    where = hover_head + "query %{customdata[0]}: %{y}<br>key %{customdata[1]}: %{x}<br>"
    marker = dict(size=max(6, cell * 0.8), opacity=0, symbol="square")
    for reason in ("future", "window", "hidden", "masked", "ablated", ""):
        qs, ks = np.nonzero(reasons == reason)  # (n,) each, row-major
        traces.append(
            dict(
                type="scatter",
                x=ks.astype(np.int16),
                y=qs.astype(np.int16),
                # [query, key] pairs as plain lists: a typed array would reach Streamlit's selection as
                # an Int16Array, which JSON-encodes to {"0": q, "1": k} instead of [q, k]
                customdata=np.stack([qs, ks], axis=1).tolist(),
                mode="markers",
                marker=dict(marker, color=m[qs, ks]) if not reason else marker,
                selected=dict(marker=dict(opacity=0)),  # a selected cell stays invisible (no coloured square)
                unselected=dict(marker=dict(opacity=0)),
                hovertemplate=where
                + (f"<i>{MASK_REASONS[reason]}</i>" if reason else "weight %{marker.color:.3f}")
                + "<extra></extra>",
                showlegend=False,
                name=f"cells: {reason}" if reason else "cells",
            )
        )
        if reason and not len(qs):
            traces.pop()  # a reason no cell has: no trace (the drawn cells always get one, last)
    default_title = KIND_TITLES[kind] + (f" · {who}" if who else "") + f"<br><sup>{KIND_EXPLAIN[kind]}</sup>"
    top = 80
    x_ticks, y_ticks = _cell_ticks(lab, cell)
    xaxis, yaxis = heatmap_axes(lab.x_title, lab.y_title, x_ticks, y_ticks, shape=(Q, K), zeroline=False)
    layout = base_layout(
        title if title is not None else default_title,
        height=height or int(Q * cell + top + 130),
        hovermode="closest",
        hoverdistance=-1,
        meta={"Q": Q, "K": K, "kind": kind},
        clickmode="event+select",
        margin=heatmap_margins(x_ticks, y_ticks, top=top, cb_ticks=[f"{zmax * 0.8:.2g}"]),
        xaxis=xaxis,
        yaxis=yaxis,
    )
    return go.Figure(data=traces, layout=layout)


# -- before / after ---------------------------------------------------------------------------------
def difference_heatmap(
    before,
    after,
    q_tokens: Sequence[str],
    k_tokens: Sequence[str],
    *,
    title: str | None,
    kind: str | None = None,
    predicted: Sequence[str] | None = None,
    height: int | None = None,
) -> go.Figure:
    """``after − before`` of one map, on a diverging scale centred on 0 (red: more attention after).

    The scale runs over ±max|after − before| (at least ±1e-6, so an unchanged map is all white,
    not a division by zero). Hover gives query, key, before, after and the change.

    Args:
        before, after: ``(Q, K)`` maps over the same tokens (e.g. without / with an intervention).
        kind: optional, for axis titles; predicted: optional decoder predictions for row labels.

    Raises:
        ValueError: if the shapes differ (call it only when both runs have the same token
            sequences), or token counts do not match.
    """
    b = as_array(before, "before", 2)
    a = as_array(after, "after", 2)
    if a.shape != b.shape:
        raise ValueError(
            f"before has shape {b.shape} but after has {a.shape}: a difference needs the same queries and keys; "
            "show the two maps side by side instead when the translations differ"
        )
    if kind is not None:
        check_kind(kind)
    Q, K = a.shape
    lab = _labels(kind, q_tokens, k_tokens, predicted, Q, K)
    d = (a - b).astype(np.float32)  # (Q, K)
    r = max(float(np.abs(d).max()) if d.size else 0.0, 1e-6)
    cell = float(np.clip(640 / max(Q, K, 1), 12, 44))
    heat = dict(
        type="heatmap",
        z=d,
        x=lab.k_hover,
        y=lab.q_hover,
        customdata=np.stack([b, a], axis=-1),  # (Q, K, 2): before, after
        **diverging_colors("after − before", r),
        hovertemplate="query: %{y}<br>key: %{x}<br>before %{customdata[0]:.3f} → after %{customdata[1]:.3f}"
        "<br><b>change %{z:+.3f}</b><extra></extra>",
        name="difference",
    )
    x_ticks, y_ticks = _cell_ticks(lab, cell)
    xaxis, yaxis = heatmap_axes(lab.x_title, lab.y_title, x_ticks, y_ticks)
    layout = base_layout(
        title
        if title is not None
        else "Change in attention (after − before)<br><sup>red: the query attends more to this key after the change; blue: less</sup>",
        height=height or int(Q * cell + 210),
        meta={"Q": Q, "K": K, "range": r},
        margin=heatmap_margins(x_ticks, y_ticks, top=80, colorbar="after − before", cb_ticks=[f"−{r:.2g}"]),
        xaxis=xaxis,
        yaxis=yaxis,
    )
    return go.Figure(data=[heat], layout=layout)

"""Numbers per head (entropy, distance, where the weight goes) and attention rollout across layers."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from viz import _common as vc
from viz.tokens import display

STAT_COLUMNS = ("kind", "layer", "head", "entropy", "mean_distance", "diagonal", "previous", "first", "last", "max", "rows")
COLUMN_HELP = {
    "kind": "encoder self-attention, decoder causal self-attention or cross-attention (in the CSV: enc_self, dec_self, cross)",
    "layer": "layer, counting from 1",
    "head": "head, counting from 1",
    "entropy": "mean over query rows of −Σ w·ln w (nats): 0 = looks at one token, ln K = spread evenly over K tokens",
    "mean_distance": "mean over query rows of Σ_k w·|q − k| in tokens (cross: distance from the proportional diagonal "
    "k = q·(S−1)/(T−1), in source tokens)",
    "diagonal": "mean weight on the query's own position (cross: on the proportional diagonal)",
    "previous": "mean weight on the token just before the query (rows that have one)",
    "first": "mean weight on the first key (source: the first word; decoder self: <bos>)",
    "last": "mean weight on the last key (source: <eos>; decoder self: the last target token)",
    "max": "mean over query rows of the largest weight: 1 = one-hot, 1/K = uniform",
    "rows": "query rows that attend to something (0 for an ablated head: its statistics are empty)",
}


def _kind_stats(kind: str, a: np.ndarray) -> list[dict]:
    """Statistics of every head of one kind; ``a`` is ``(L, H, Q, K)``."""
    L, H, Q, K = a.shape
    q = np.arange(Q)
    if kind == "cross":  # queries and keys are different sentences: compare relative positions
        scale = (K - 1) / (Q - 1) if Q > 1 else 0.0
        diag = np.rint(q * scale).astype(int)  # (Q,) the key on the proportional diagonal
        dist = np.abs(q[:, None] * scale - np.arange(K)[None, :])  # (Q, K) in source tokens
    else:
        diag = q.copy()
        dist = np.abs(q[:, None] - np.arange(K)[None, :]).astype(np.float64)  # (Q, K)
    diag = np.clip(diag, 0, K - 1)
    a64 = a.astype(np.float64)
    live = a64.sum(axis=-1) > 0  # (L, H, Q): rows that attend to anything (not ablated / fully masked)
    plogp = np.where(a64 > 0, a64 * np.log(np.where(a64 > 0, a64, 1.0)), 0.0)
    per_row = {
        "entropy": -plogp.sum(axis=-1),  # (L, H, Q) nats
        "mean_distance": (a64 * dist).sum(axis=-1),
        "diagonal": a64[..., q, diag],
        "first": a64[..., 0],
        "last": a64[..., K - 1],
        "max": a64.max(axis=-1),
    }
    has_prev = diag >= 1 if kind == "cross" else q >= 1  # (Q,)
    prev = a64[..., q, np.maximum(diag - 1, 0)]  # (L, H, Q)
    rows = []
    for l in range(L):
        for h in range(H):
            m = live[l, h]
            n = int(m.sum())
            row = {"kind": kind, "layer": l + 1, "head": h + 1}
            for name, v in per_row.items():
                row[name] = float(v[l, h][m].mean()) if n else np.nan
            mp = m & has_prev
            row["previous"] = float(prev[l, h][mp].mean()) if mp.any() else np.nan
            row["rows"] = n
            rows.append(row)
    return rows


def head_stats(enc_self=None, dec_self=None, cross=None) -> pd.DataFrame:
    """One row per (kind, layer, head) with where its attention goes; ``COLUMN_HELP`` explains each column.

    Columns: kind, layer, head (both from 1), entropy (nats), mean_distance (tokens), diagonal,
    previous, first, last (shares of weight, 0–1), max (mean row maximum), rows (query rows that
    attend to something). Every statistic is averaged over query rows that attend to something,
    so an ablated head (all-zero map) gets NaN, not a misleading 0.

    For cross-attention, queries (target) and keys (source) are different sentences, so the
    "diagonal" is the proportional one, key ``round(q·(S−1)/(T−1))`` (first word with first
    word, <eos> with the row predicting <eos>), and mean_distance is measured from it.

    Args:
        enc_self ``(L, H, S, S)``, dec_self ``(L, H, T, T)``, cross ``(L, H, T, S)``; any may be None.

    Raises:
        ValueError: if an array is not 4-D, a self-attention map is not square, or all are None.
    """
    rows: list[dict] = []
    given = 0
    for kind, arr in (("enc_self", enc_self), ("dec_self", dec_self), ("cross", cross)):
        if arr is None:
            continue
        given += 1
        a = vc.as_array(arr, kind, 4)  # (L, H, Q, K)
        if 0 in a.shape:
            raise ValueError(f"{kind} is empty (shape {a.shape})")
        if kind != "cross" and a.shape[2] != a.shape[3]:
            raise ValueError(f"{kind} maps must be square (queries and keys are the same tokens), got {a.shape}")
        rows += _kind_stats(kind, a)
    if not given:
        raise ValueError("pass at least one of enc_self, dec_self, cross")
    return pd.DataFrame(rows, columns=list(STAT_COLUMNS))


def rollout(enc_self, *, residual: float = 0.5) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020, eq. in section 3): how much each position's state
    after layer l draws on each input token, through every layer below.

    Per layer, ``Â_l = r·I + (1 − r)·mean_h A_l`` (the residual connection as identity), rows
    renormalised to sum to 1; then ``R_1 = Â_1`` and ``R_l = Â_l · R_{l−1}``. Returns every
    ``R_l``: rows sum to 1. A row with no weight at all (every key hidden) keeps its own token.

    Args:
        enc_self: ``(L, H, S, S)`` self-attention (the decoder's ``(L, H, T, T)`` works too).
        residual: r in [0, 1], the share kept by the residual stream (0.5 in the paper).

    Returns:
        ``(L, S, S)`` float32.

    Raises:
        ValueError: if the maps are not square ``(L, H, S, S)`` or r is outside [0, 1].
    """
    a = vc.as_array(enc_self, "enc_self", 4).astype(np.float64)  # (L, H, S, S)
    L, H, S, S2 = a.shape
    if S != S2 or 0 in a.shape:
        raise ValueError(f"rollout needs square self-attention maps (L, H, S, S), got {a.shape}")
    if not 0.0 <= residual <= 1.0:
        raise ValueError(f"residual must be in [0, 1], got {residual}")
    eye = np.eye(S)
    out = np.empty((L, S, S))
    acc = eye
    for l in range(L):
        hat = residual * eye + (1 - residual) * a[l].mean(axis=0)  # (S, S)
        s = hat.sum(axis=-1, keepdims=True)  # (S, 1)
        hat = np.where(s > 0, hat / np.where(s > 0, s, 1.0), eye)
        acc = hat @ acc  # (S, S): layer l composed with everything below
        out[l] = acc
    return out.astype(np.float32)


def rollout_figure(roll, tokens: Sequence[str], *, title: str | None = None, height: int | None = None) -> go.Figure:
    """Rollout after each layer, side by side in ONE heatmap (columns = layers, NaN gutters).

    Row i of tile l: the position-i state after layer l; column j: the input token it draws on.

    Args:
        roll: ``(L, S, S)`` from ``rollout``; tokens: the S tokens.

    Raises:
        ValueError: if ``roll`` is not ``(L, S, S)`` or the tokens do not match.
    """
    r = vc.as_array(roll, "roll", 3)  # (L, S, S)
    L, S, S2 = r.shape
    if S != S2 or 0 in r.shape:
        raise ValueError(f"roll must be (layers, S, S) as returned by rollout, got {r.shape}")
    hover, tick = vc.token_labels(display(vc.check_tokens(tokens, "tokens", S, "roll's last axes")))
    gap = max(1, round(S / 8))
    z = vc.tile(r[None], gap)  # (S, L*S + (L-1)*gap)
    cd = np.zeros(z.shape, dtype=np.uint8 if L < 256 else np.uint16)
    for l in range(L):
        x0 = vc.tile_origin(0, l, S, S, gap)[1]
        cd[:, x0 : x0 + S] = l + 1
    x = vc.mosaic_axis([hover] * L, gap)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=x,
            y=hover,
            customdata=cd,
            **vc.weight_colors("share"),
            hoverongaps=False,
            hovertemplate="<b>rollout through layer %{customdata}</b><br>state at: %{y}<br>draws on input token: %{x}"
            "<br>share %{z:.3f}<extra></extra>",
            name="rollout",
        )
    )
    cols_at = [vc.tile_origin(0, l, S, S, gap)[1] + j for l in range(L) for j in range(S)]
    annotations = [vc.tile_label(vc.tile_origin(0, l, S, S, gap)[1], 0, f"<b>after layer {l + 1}</b>") for l in range(L)]
    cell = float(np.clip(900 / (L * S + (L - 1) * gap), 6, 36))
    fig.update_layout(
        **vc.base_layout(
            title
            or "Attention rollout (Abnar & Zuidema 2020)<br><sup>how much each position (row) draws on each input token (column), "
            "through the residual stream and every layer so far</sup>"
        ),
        annotations=annotations,
        height=height or int(S * cell + 230),
        meta={"L": L, "S": S, "gap": gap},
    )
    x_ticks = dict(tickvals=cols_at, ticktext=tick * L, **vc.tick_style(cell, rotate=True))  # cell < 40 px: ticks turned -90°
    y_ticks = dict(tickvals=list(range(S)), ticktext=tick)
    fig.update_layout(margin=vc.heatmap_margins(x_ticks, y_ticks, top=90, colorbar="share"))
    xaxis, yaxis = vc.heatmap_axes("input token", "position (state after the layer)", x_ticks, y_ticks)
    fig.update_xaxes(**xaxis)
    fig.update_yaxes(**yaxis)
    return fig

"""Numbers per head of one translation: entropy, distance, and where the weight goes (the Head statistics page).

Computed here, from the maps of a ``analysis.records.Maps``, as a pandas table; ``viz.stats`` explains and draws it.
Importing this module never imports torch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

STAT_COLUMNS = ("kind", "layer", "head", "entropy", "mean_distance", "diagonal", "previous", "first", "last", "max", "rows")


def _kind_stats(kind: str, weights: np.ndarray) -> list[dict]:
    """Statistics of every head of one kind; ``weights`` is ``(L, H, Q, K)``."""
    L, H, Q, K = weights.shape
    q = np.arange(Q)
    if kind == "cross":  # queries and keys are different sentences: compare relative positions
        scale = (K - 1) / (Q - 1) if Q > 1 else 0.0
        diag = np.rint(q * scale).astype(int)  # (Q,) the key on the proportional diagonal
        dist = np.abs(q[:, None] * scale - np.arange(K)[None, :])  # (Q, K) in source tokens
    else:
        diag = q.copy()
        dist = np.abs(q[:, None] - np.arange(K)[None, :]).astype(np.float64)  # (Q, K)
    diag = np.clip(diag, 0, K - 1)
    weights64 = weights.astype(np.float64)
    live = weights64.sum(axis=-1) > 0  # (L, H, Q): rows that attend to anything (not ablated / fully masked)
    plogp = np.where(weights64 > 0, weights64 * np.log(np.where(weights64 > 0, weights64, 1.0)), 0.0)
    per_row = {
        "entropy": -plogp.sum(axis=-1),  # (L, H, Q) nats
        "mean_distance": (weights64 * dist).sum(axis=-1),
        "diagonal": weights64[..., q, diag],
        "first": weights64[..., 0],
        "last": weights64[..., K - 1],
        "max": weights64.max(axis=-1),
    }
    has_prev = diag >= 1 if kind == "cross" else q >= 1  # (Q,)
    prev = weights64[..., q, np.maximum(diag - 1, 0)]  # (L, H, Q)
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
    """One row per (kind, layer, head) with where its attention goes; ``viz.stats.COLUMN_HELP`` explains each column.

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
        weights = np.asarray(arr, dtype=np.float32)  # (L, H, Q, K)
        if weights.ndim != 4:
            raise ValueError(f"{kind} must be 4-D (layers, heads, queries, keys), got shape {weights.shape}")
        if 0 in weights.shape:
            raise ValueError(f"{kind} is empty (shape {weights.shape})")
        if kind != "cross" and weights.shape[2] != weights.shape[3]:
            raise ValueError(f"{kind} maps must be square (queries and keys are the same tokens), got {weights.shape}")
        rows += _kind_stats(kind, weights)
    if not given:
        raise ValueError("pass at least one of enc_self, dec_self, cross")
    return pd.DataFrame(rows, columns=list(STAT_COLUMNS))

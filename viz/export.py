"""Exports: an attention map as CSV, any figure as a standalone HTML page."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from i18n import _
from viz._common import as_array, check_tokens
from viz.tokens import col_labels, row_labels


def attention_frame(
    w, q_tokens: Sequence[str], k_tokens: Sequence[str], *, predicted: Sequence[str] | None = None
) -> pd.DataFrame:
    """One map ``(Q, K)`` as a DataFrame: index = unique query labels ``"i: tok"`` (or
    ``"i: tok → next"`` with ``predicted``), columns = unique key labels ``"j: tok"``.

    Raises:
        ValueError: if ``w`` is not 2-D or the tokens do not match its axes.
    """
    m = as_array(w, "w", 2)  # (Q, K)
    Q, K = m.shape
    q = check_tokens(q_tokens, "q_tokens", Q, "w's rows")
    k = check_tokens(k_tokens, "k_tokens", K, "w's columns")
    df = pd.DataFrame(m, index=pd.Index(row_labels(q, predicted), name=_("query \\ key")), columns=col_labels(k))
    return df


def attention_csv(w, q_tokens: Sequence[str], k_tokens: Sequence[str], *, predicted: Sequence[str] | None = None) -> str:
    """One map ``(Q, K)`` as CSV text: rows are queries, columns keys (see ``attention_frame``).

    Labels carry the position, so repeated tokens stay distinct and no cell starts with ``=``,
    ``+`` or ``-`` (spreadsheets would read it as a formula). Values are written in full float32
    precision: ``pd.read_csv(io.StringIO(text), index_col=0)`` gives the same numbers back.

    Raises:
        ValueError: if ``w`` is not 2-D or the tokens do not match its axes.
    """
    return attention_frame(w, q_tokens, k_tokens, predicted=predicted).to_csv()


def figure_html(fig: go.Figure, *, offline: bool = False) -> str:
    """A complete HTML page of ``fig``. plotly.js comes from the CDN (~20 KB page) unless
    ``offline``, which inlines it (~4.8 MB, opens without internet).

    Raises:
        ValueError: if ``fig`` is not a plotly figure.
    """
    if not isinstance(fig, go.Figure):
        raise ValueError(f"fig must be a plotly go.Figure, got {type(fig).__name__}")
    return fig.to_html(include_plotlyjs=True if offline else "cdn", full_html=True)

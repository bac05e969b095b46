"""Head statistics (/stats): a sortable table of every head (entropy, distance, diagonal, previous, first and
last token, maximum weight) and attention rollout across the encoder layers (Abnar & Zuidema 2020)."""

from __future__ import annotations

from functools import partial

import streamlit as st

from i18n import _
from model.facts import KIND_NAMES
from ui import state
from ui.widgets import download, show
from viz import stats as vst


def render(ctx: state.Ctx) -> None:
    df, roll = state.run_head_stats(ctx.path, ctx.text, ctx.settings)
    st.caption(_("Click a column header to sort. Layer and head count from 1."))
    shown = (
        df.assign(kind=df["kind"].map(lambda k: _(KIND_NAMES.get(k, k)))) if "kind" in df else df
    )  # the CSV keeps the short keys
    st.dataframe(
        shown,
        width="stretch",
        hide_index=True,
        column_config={
            c: st.column_config.NumberColumn(c.replace("_", " "), format="%.3f", help=vst.COLUMN_HELP.get(c))
            if df[c].dtype.kind == "f"
            else st.column_config.Column(c.replace("_", " "), help=vst.COLUMN_HELP.get(c))
            for c in df.columns
        },
    )
    download(_("Table (CSV)"), partial(df.to_csv, index=False), "head-statistics.csv", "text/csv")
    st.subheader(_("Attention rollout (encoder)"))
    st.caption(
        _(
            "Rollout of layer l: Â = ½·I + ½·mean over heads of A, rows renormalised, multiplied from layer 1 to l. Row i: "
            "how much each source token contributes to encoder output i, through all layers."
        )
    )
    show(vst.rollout_figure(roll, ctx.analysis.source.tokens), "rollout")


def page(frame: state.Frame) -> None:
    """Head statistics for the frame's input: what app.py's navigation runs (a hint instead when there is none)."""
    if (ctx := state.page_context(frame)) is not None:
        render(ctx)

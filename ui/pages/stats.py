"""Head statistics (/stats): a sortable table of every head (entropy, distance, diagonal, previous, first and
last token, maximum weight) and attention rollout across the encoder layers (Abnar & Zuidema 2020)."""

from __future__ import annotations

from functools import partial

import streamlit as st

from i18n import N_, _
from model.facts import KIND_NAMES
from ui import state
from ui.widgets import download, show
from viz import stats as vst

COLUMNS = {  # the table's columns (the CSV keeps these names) -> the header shown, translated where shown
    "kind": N_("kind"),
    "layer": N_("layer"),
    "head": N_("head"),
    "entropy": N_("entropy"),
    "mean_distance": N_("mean distance"),
    "diagonal": N_("diagonal"),
    "previous": N_("previous"),
    "first": N_("first"),
    "last": N_("last"),
    "max": N_("max"),
    "rows": N_("rows"),
}


def render(ctx: state.Ctx) -> None:
    df, roll = state.run_head_stats(ctx.path, ctx.text, ctx.settings)
    st.caption(_("Click a column header to sort. Layer and head count from 1."))

    def header(c: str) -> str:
        return _(COLUMNS[c]) if c in COLUMNS else c.replace("_", " ")

    shown = (
        df.assign(kind=df["kind"].map(lambda k: _(KIND_NAMES.get(k, k)))) if "kind" in df else df
    )  # the CSV keeps the short keys
    st.dataframe(
        shown,
        width="stretch",
        hide_index=True,
        column_config={
            c: st.column_config.NumberColumn(header(c), format="%.3f", help=vst.COLUMN_HELP.get(c))
            if df[c].dtype.kind == "f"
            else st.column_config.Column(header(c), help=vst.COLUMN_HELP.get(c))
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

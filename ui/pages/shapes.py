"""Shapes (/shapes): every stage of one forward pass with this input's tensor shapes, and this model's numbers."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from i18n import _
from ui import exercises, state
from ui.widgets import show, table_height
from viz import shapes as vsh


def render(ctx: state.Ctx) -> None:
    if (turn := exercises.shapes_turn(ctx)) and turn.at("shape"):  # the table below would give it away
        return
    cfg = ctx.cfg
    numbers = pd.DataFrame(
        [
            ("d_model", cfg.d_model, _("width of every token vector")),
            ("n_heads", cfg.n_heads, _("attention heads per layer")),
            ("d_head", cfg.d_head, _("d_model / n_heads: width of one head's queries, keys, values")),
            ("d_ff", cfg.d_ff, _("hidden width of the feed-forward network")),
            (_("encoder layers"), cfg.n_enc_layers, _("N in the paper (6 there)")),
            (_("decoder layers"), cfg.n_dec_layers, _("N in the paper (6 there); may differ from the encoder's")),
            ("vocab", cfg.vocab_size, _("pieces in the shared embedding matrix (source and target)")),
            (_("target vocab"), cfg.n_logits, _("the first pieces of it, those the decoder can write: one logit each")),
            ("max_len", cfg.max_len, _("longest sequence, in tokens")),
            (_("parameters"), state.n_params(ctx.path), _("tied embeddings counted once")),
        ],
        columns=[_("name"), _("value"), _("meaning")],
    )
    c1, c2 = st.columns([3, 2])
    with c1:
        st.markdown(
            _("**This input**: B = 1 sentence, S = {s} source tokens, T = {t} decoder inputs").format(
                s=len(ctx.analysis.source.ids), t=len(ctx.analysis.tgt_in_tokens)
            )
        )
        table = vsh.shapes_table(ctx.analysis.maps.shapes)
        st.dataframe(table, width="stretch", hide_index=True, height=table_height(table))
    with c2:
        st.markdown(_("**This model**"))
        st.dataframe(numbers, width="stretch", hide_index=True, height=table_height(numbers))
    if hasattr(vsh, "shapes_figure"):
        show(vsh.shapes_figure(ctx.analysis.maps.shapes), "shapes_figure")


def page(frame: state.Frame) -> None:
    """Shapes for the frame's input: what app.py's navigation runs (a hint instead when there is none)."""
    if (ctx := state.page_context(frame)) is not None:
        render(ctx)

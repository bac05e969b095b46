"""Attention vs attribution (/explain): for one output token of the translation, the cross-attention weights beside
what the literature measures instead, from the same forward pass and the same interventions (the Mask lab's): the
norm-weighted attention ‖α f(x)‖ (Kobayashi et al. 2020), attention rollout through the encoder (Abnar & Zuidema
2020), Integrated Gradients (Sundararajan et al. 2017) and gradient × input of log p(y), or of log p(y) − log p(y′) in
contrastive mode (Yin & Neubig 2022); Spearman's ρ of every pair of methods in numbers and in words; then a layer lens:
the logit lens on each decoder layer and DecoderLens (Langedijk et al. 2023) on each encoder layer.
"""

from __future__ import annotations

import streamlit as st

from analysis.records import METHODS
from i18n import N_, _
from model.settings import Interventions
from ui import explaining, keys, state
from ui.widgets import download, md_escape, n_layers_of, pick_layer_head, show, table_height, text_box
from viz import explain as ve
from viz import tokens as vt

INTRO = N_(  # translated where shown
    "A large attention weight is often read as “the model used this word”. Attention says how much a query *weighs* "
    "each source token; it does not say how much the token *changed* the output (Jain & Wallace 2019, “Attention is not "
    "Explanation”; Wiegreffe & Pinter 2019, “Attention is not not Explanation”). Here five measures score the source "
    "tokens for the output token you pick:"
)


def interventions_note(interventions: Interventions, src_tokens: list[str]) -> None:
    """Which of the Mask lab's interventions this page follows."""
    if interventions == state.NO_INTERVENTIONS:
        st.caption(
            _("No interventions: set them in the Mask lab (hidden source tokens, switched-off heads, …) and this page follows.")
        )
        return
    src = vt.display(src_tokens)
    said = (
        [
            _("hidden source tokens {tokens}").format(
                tokens=", ".join(src[i] for i in sorted(interventions.src_hidden) if i < len(src))
            )
        ]
        if interventions.src_hidden
        else []
    )
    said += [_("causal mask off")] if not interventions.causal else []
    said += [_("window {window}").format(window=interventions.window)] if interventions.window else []
    said += [_("temperature τ = {tau:g}").format(tau=interventions.temperature)] if interventions.temperature != 1 else []
    said += [_("positional encoding off")] if not interventions.use_pos_encoding else []
    said += [_("{n} heads switched off").format(n=len(interventions.ablate))] if interventions.ablate else []
    st.info(
        _("Following the Mask lab's interventions: {what}. The translation and every score below are computed with them.").format(
            what=md_escape("; ".join(said))
        )
    )


def render(ctx: state.Ctx) -> None:
    st.markdown(_(INTRO))
    st.markdown("\n".join(f"- **{m}**: {ve.MEANS[m]}." for m in METHODS))
    interventions = state.mask_interventions()
    interventions_note(interventions, ctx.analysis.source.tokens)
    analysis = ctx.under(interventions)
    text_box(analysis.translation)
    c1, c2 = st.columns([3, 2])
    with c1:
        position = explaining.pick_token(explaining.output_rows(ctx, interventions), key=keys.TOKEN, param=keys.TOKEN)
    with c2:
        first = state.run_explanation(ctx.path, ctx.text, ctx.settings, interventions, position, None)
        contrast = explaining.pick_contrast(first)
    layer, head = pick_layer_head(n_layers_of(ctx.cfg, "cross"), ctx.cfg.n_heads)
    e = explaining.explanation(ctx, interventions, position, contrast, ig_key=keys.IG_RUN)

    explaining.methods(e, layer, head, "explain_methods")
    df = ve.scores_table(e, layer, head)
    download(_("Scores (CSV)"), lambda: df.to_csv(index=False), "explain-scores.csv", "text/csv")

    st.subheader(_("Do they agree?"))
    st.caption(
        _(
            "Spearman's ρ over the visible source tokens, ranking by size: a word that pushes the probability down matters "
            "as much as one that pushes it up. Hidden tokens are left out (every method gives them 0)."
        )
    )
    c1, c2 = st.columns([3, 2])
    with c1:
        agree = ve.agreement_table(e, layer, head)
        st.dataframe(agree, hide_index=True, height=table_height(agree))
    with c2:
        show(ve.agreement_figure(e, layer, head), "explain_agreement")

    st.subheader(_("Weight × value length, head by head"))
    st.markdown(
        _(
            "Kobayashi et al. (2020) write each head's output as Σ_j α_j f(x_j): token j adds the vector α_j f(x_j), where "
            "f(x_j) = (x_j W^V + b^V) W^O is its value projected by W^O. A weight can be large on a vector that is short: "
            "tokens such as `<eos>` and “.” often get large weights and add little."
        )
    )
    show(ve.heads_figure(e, layer), "explain_heads")

    st.subheader(_("Layer lens: when does the translation appear?"))
    st.markdown(
        _(
            "The **logit lens** puts each decoder layer's output through the final LayerNorm and the output matrix: which "
            "piece would that layer write? **DecoderLens** (Langedijk et al. 2023) lets the decoder read an earlier encoder "
            "layer's output instead of the last one and translates as the sidebar says: at which encoder layer does the "
            "translation appear?"
        )
    )
    # off by default: one translation per encoder layer (its cost: bench/README.md, benchmark 9)
    if not st.toggle(_("Show the layer lens"), key=keys.LENS_ON, help=_("One translation per encoder layer: a moment.")):
        return
    lens = state.run_layer_lens(ctx.path, ctx.text, ctx.settings, interventions)
    show(ve.logit_lens_figure(lens), "explain_logit_lens")
    st.caption(ve.logit_lens_note(ctx.settings, interventions.causal))
    table = ve.decoder_lens_table(lens)
    st.dataframe(table, hide_index=True, height=table_height(table))
    st.caption(ve.decoder_lens_note(ctx.settings))
    if any(not t for t in lens.lens_texts):
        st.caption(_("An empty row: reading that layer, the decoder wrote <eos> at once."))


def page(frame: state.Frame) -> None:
    """Attention vs attribution for the frame's input: what app.py's navigation runs (a hint instead when there is none)."""
    if (ctx := state.page_context(frame)) is not None:
        render(ctx)

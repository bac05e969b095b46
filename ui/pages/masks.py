"""Mask lab (/masks): hide source tokens, causal mask on/off, a local window, an attention temperature, PE
on/off and head ablation; translation and maps before and after, changed tokens marked, and the difference."""

from __future__ import annotations

import streamlit as st

from analysis.records import Analysis, attention_view
from i18n import _
from model.facts import KIND_NAMES, KINDS
from model.settings import Interventions
from ui import keys, state
from ui.widgets import MapCsv, chips, diff_marks, head_label, n_layers_of, pick_layer_head, show, text_box
from viz import attention as va
from viz import tokens as vt


def controls(ctx: state.Ctx) -> Interventions:
    """The mask lab's widgets, read as the interventions they describe."""
    cfg, analysis = ctx.cfg, ctx.analysis
    S = len(analysis.source.tokens)
    src_labels = {i: f"{i}: {t}" for i, t in enumerate(vt.display(analysis.source.tokens))}
    c1, c2, c3 = st.columns(3)
    with c1:
        hide = st.multiselect(
            _("Hide source tokens"),
            list(range(S)),
            format_func=src_labels.get,
            key=keys.HIDE,
            help=_("No query may attend to them (encoder self-attention and cross-attention). They are still encoded."),
        )
        st.caption(_("Acts on: encoder self-attention and cross-attention (hidden tokens are no query's key)."))
        causal = st.toggle(
            _("Causal mask in the decoder"),
            True,
            key=keys.CAUSAL,
            help=_("Off: every decoder position may read later ones too, which the model never saw in training."),
        )
        st.caption(
            _(
                "Acts on: decoder self-attention. Off, each step's pass lets every prefix token read the others; the "
                "maps show each step's own pass, so step t still sees only the tokens written before it."
            )
        )
        use_pe = st.toggle(_("Positional encoding"), True, key=keys.USE_PE)
        st.caption(_("Acts on: the encoder's and the decoder's input (embedding + PE, section 3.5)."))
    with c2:
        window = st.slider(
            _("Local window (self-attention)"),
            0,
            max(S, len(analysis.tgt_in_tokens)),  # a window this wide hides nothing
            0,
            key=keys.WINDOW,
            help=_("0 = off. Otherwise a query sees only keys with |query − key| < window: 1 = only itself."),
        )
        st.caption(_("Acts on: encoder and decoder self-attention, every layer; not cross-attention."))
        temp = st.slider(
            _("Attention temperature τ"),
            0.25,
            4.0,
            1.0,
            0.05,
            key=keys.ATTN_TEMP,
            help=_("softmax(QKᵀ / (√d_head · τ)): τ > 1 flattens, τ < 1 sharpens."),
        )
        st.caption(_("Acts on: all three kinds (encoder self-, decoder self- and cross-attention), every layer and head."))
    with c3:
        ablate = []
        for kind in KINDS:
            opts = [(l, h) for l in range(n_layers_of(cfg, kind)) for h in range(cfg.n_heads)]
            picked = st.multiselect(
                _("Switch off heads: {kind}").format(kind=_(KIND_NAMES[kind])),
                opts,
                format_func=lambda o: f"L{o[0] + 1} H{o[1] + 1}",
                key=keys.ablate(kind),
            )
            ablate += [(kind, l, h) for l, h in picked]
        st.caption(_("Acts on: the chosen heads only; their output becomes 0 before W^O."))
    return Interventions(
        src_hidden=frozenset(hide),
        causal=causal,
        ablate=frozenset(ablate),
        temperature=float(temp),
        window=window or None,
        use_pos_encoding=use_pe,
    )


def render(ctx: state.Ctx) -> None:
    analysis = ctx.analysis
    interventions = controls(ctx)
    st.session_state[keys.MASK_INTERVENTIONS] = (
        interventions  # kept for the pages that follow the Mask lab (Attention vs attribution)
    )
    if len(interventions.src_hidden) == len(analysis.source.tokens):
        st.warning(
            _(
                "Every source token is hidden: queries over the source have nothing to attend to, so their attention "
                "rows are all 0."
            )
        )
    if interventions == state.NO_INTERVENTIONS:
        st.info(_("Change a setting above to see its effect. Before and after are the same for now."))

    after = ctx.under(interventions)
    before_marks, after_marks = diff_marks(analysis.tgt_out_tokens, after.tgt_out_tokens)
    b1, b2 = st.columns(2)
    with b1:
        st.markdown(_("**Before** (the unchanged model)"))
        text_box(analysis.translation)
        chips(analysis.tgt_out_tokens, before_marks)
    with b2:
        st.markdown(_("**After**"))
        text_box(after.translation)
        chips(after.tgt_out_tokens, after_marks)
        if not after.finished:
            st.warning(_("With this change the output ran to the token budget without <eos>: it is cut short here."))
    same = analysis.tgt_in_tokens == after.tgt_in_tokens
    st.caption(
        _("Output unchanged.")
        if same
        else _("Yellow: pieces that changed or are new. Red, struck out: pieces that were dropped.")
    )

    mask_maps(ctx, interventions, after, same)


@st.fragment
def mask_maps(ctx: state.Ctx, interventions: Interventions, after: Analysis, same: bool) -> None:
    """Before / after maps of one kind, layer and head, and their difference."""
    analysis = ctx.analysis
    kind_names = {k: _(KIND_NAMES[k]) for k in KINDS}  # translated in this run (not later, outside the session)
    kind = st.radio(_("Attention kind"), KINDS, format_func=kind_names.get, key=keys.MASK_KIND, horizontal=True, index=2)
    layer, head = pick_layer_head(n_layers_of(ctx.cfg, kind), ctx.cfg.n_heads)
    after_all = after.view(kind)  # every layer and head, with the cells the interventions hid
    before, after_map = analysis.view(kind).map(layer, head), after_all.map(layer, head)
    head_off = head is not None and (layer, head) in after_all.ablated
    label = head_label(layer, head)
    c1, c2 = st.columns(2)
    with c1:
        show(va.attention_heatmap(before, title=_("Before: {label}").format(label=label)), "mask_before", csv=MapCsv.of(before))
    if interventions == state.NO_INTERVENTIONS:
        # nothing changed yet: After would be Before again and the difference all 0. Two charts fewer for a class
        # that opens the page together (bench/README.md, 8i)
        c2.caption(_("After a change, the changed model's map appears here and the difference (after − before) below."))
        return
    with c2:
        show(
            va.attention_heatmap(after_map, title=_("After: {label}").format(label=label)), "mask_after", csv=MapCsv.of(after_map)
        )
    off = sum((layer, h) in after_all.ablated for h in range(ctx.cfg.n_heads))  # heads of this layer switched off
    if head_off:
        st.caption(
            _(
                "This head is switched off: its output is replaced by zeros before W^O, so what it would attend to no "
                "longer matters."
            )
        )
    elif head is None and off == ctx.cfg.n_heads:
        st.info(
            _(
                "Every head of layer {layer} is switched off: the attention output is zero, so there is no map to show "
                "(grey: switched off); the difference below is 0 − before."
            ).format(layer=layer + 1)
        )
    elif head is None and off:
        st.caption(
            _("The mean is over the {on} heads still on: the {off} switched off are left out.").format(
                on=ctx.cfg.n_heads - off, off=off
            )
        )

    st.markdown(_("**Difference** (after − before)"))
    d1, d2 = st.columns(2)
    with d2:
        st.caption(_("Red: the query attends more to this key after the change; blue: less; white: no change."))
        if not same:
            st.info(
                _(
                    "The output changed, so row t is a different query before and after and the two maps cannot be "
                    "subtracted row by row. The difference shown feeds the original output to the changed model instead "
                    "(teacher forcing: step t is given the original tokens before t, in its own pass), so the rows line "
                    "up again."
                )
            )
    with d1:
        if same:
            changed = after_map
            title = _("After − before: {kind}, {label}").format(kind=_(KIND_NAMES[kind]), label=label)
        else:
            tf = state.run_forced_original(ctx.path, ctx.text, ctx.settings, interventions, None)
            forced = attention_view(
                tf, kind, src=analysis.source.tokens, tgt_in=analysis.tgt_in_tokens, tgt_out=analysis.tgt_out_tokens
            )
            changed = forced.map(layer, head)  # the original output's rows, under the changed model
            title = _("Changed model on the original output − before: {label}").format(label=label)
        diff = MapCsv(changed.w - before.w, before.q_tokens, before.k_tokens, before.predicted)
        show(va.difference_heatmap(before, changed, title=title), "mask_diff", csv=diff)

    if st.toggle(_("After: every layer and head of this kind"), key=keys.MASK_MOSAIC_ON):
        show(va.attention_mosaic(after_all, title=_("After: {label}").format(label=_(KIND_NAMES[kind]))), "mask_mosaic")


def page(frame: state.Frame) -> None:
    """the Mask lab for the frame's input: what app.py's navigation runs (a hint instead when there is none)."""
    if (ctx := state.page_context(frame)) is not None:
        render(ctx)

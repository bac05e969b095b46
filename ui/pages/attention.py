"""Attention (/attention): one mosaic of every layer × head of a kind, a zoom on one head (click a cell: that
query's row in every head of the layer) and, on toggles, each layer's mean over heads and the norm-weighted
attention of every head (Kobayashi et al. 2020)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import streamlit as st

from analysis.records import attention_view
from i18n import _
from model.facts import KIND_NAMES
from ui import keys, state
from ui.widgets import MapCsv, clicked_cell, head_label, md_escape, n_layers_of, pick_layer_head, show, url_radio
from viz import attention as va
from viz import steps as vs
from viz import tokens as vt


def attention_panel(ctx: state.Ctx) -> None:
    """Mosaics and zoom of one analysis. Not a fragment of its own: the main area around it is one (app.py's
    ``body``), its mosaics are replayed (``ui.figures``), and a fragment inside a fragment costs every student of a
    class a copy of the page's layout on each run."""
    with st.container(horizontal=True, vertical_alignment="bottom", gap="large"):
        kind = url_radio(_("Attention kind"), KIND_NAMES, key=keys.KIND, default="cross", horizontal=True)
        all_kinds = st.toggle(
            _("All three kinds"), key=keys.EVERY_KIND_MOSAIC, help=_("Draw the mosaics of all three kinds at once.")
        )
    if kind != "enc_self":
        st.caption(_("Decoder rows read “input → predicted”: the query at input token t is the one that predicted token t + 1."))
    norm = st.toggle(
        _("Norm-weighted too"),
        key=keys.NORM_MOSAIC,
        help=_(
            "Kobayashi et al. 2020: each key adds the vector α·f(x) to the head's output, f(x) = (x W^V + b^V) W^O. "
            "The second mosaic shows each key's share of the lengths ‖α f(x)‖ in its row: a large weight on a short value "
            "vector gets a small share."
        ),
    )
    for kd in KIND_NAMES if all_kinds else (kind,):
        title = _("{kind}: every layer (rows) × head (columns)").format(kind=_(KIND_NAMES[kd]))
        show(partial(va.attention_mosaic, ctx.analysis.view(kd), title=title), f"mosaic_{kd}", shared=ctx.key)
        if norm:
            analysis = ctx.analysis
            maps = state.run_norm_maps(ctx.path, ctx.text, ctx.settings)
            view = attention_view(
                maps, kd, src=analysis.source.tokens, tgt_in=analysis.tgt_in_tokens, tgt_out=analysis.tgt_out_tokens
            )
            title = _("{kind}, norm-weighted: each key's share of ‖α f(x)‖ in its row (Kobayashi et al. 2020)").format(
                kind=_(KIND_NAMES[kd])
            )
            show(partial(va.attention_mosaic, replace(view, measure="share"), title=title), f"norm_mosaic_{kd}", shared=ctx.key)
    st.subheader(_("Zoom"))
    c1, c2 = st.columns([3, 2])
    with c1:
        attention_zoom(ctx, kind)
    with c2:
        # off by default: one chart fewer to draw each time the kind changes (the zoom also offers "mean")
        if st.toggle(_("Mean over heads, per layer"), key=keys.LAYER_MEANS, help=_("What each layer as a whole attends to.")):
            st.caption(_("Each layer's mean over its heads: what the layer as a whole attends to."))
            build = partial(va.attention_mosaic, ctx.analysis.view(kind).layer_means(), title=_("Mean over heads, per layer"))
            show(build, "layer_average", shared=(*ctx.key, kind))


@st.fragment
def attention_zoom(ctx: state.Ctx, kind: str) -> None:
    """Zoom on one head (or the mean over heads) of ``kind``: only this reruns when layer or head moves."""
    view = ctx.analysis.view(kind)
    q, k, pred = view.q_tokens, view.k_tokens, view.predicted
    layer, head = pick_layer_head(n_layers_of(ctx.cfg, kind), ctx.cfg.n_heads)
    zoom = view.map(layer, head)
    w = zoom.w
    title = f"{_(KIND_NAMES[kind])}, {head_label(layer, head)}"
    show(
        partial(va.attention_heatmap, zoom, title=title),
        keys.ZOOM_CHART,
        shared=(*ctx.key, kind, layer, head),
        csv=MapCsv.of(zoom),
        on_select="rerun",
    )
    cell = clicked_cell(keys.ZOOM_CHART, *w.shape)
    if cell is None:
        st.caption(_("Click a cell to see what its query attends to in every head of this layer."))
        return
    qi, ki = cell
    query = vt.display([q[qi]])[0] + (f" → {vt.display([pred[qi]])[0]}" if pred is not None else "")
    st.markdown(
        _(
            "Query {qi} **{query}** gives key {ki} **{key}** weight **{w:.3f}** ({where}). Its whole row, in every head "
            "of layer {layer}:"
        ).format(
            qi=qi,
            query=md_escape(query),
            ki=ki,
            key=md_escape(vt.display([k[ki]])[0]),
            w=w[qi, ki],
            where=head_label(layer, head),
            layer=layer + 1,
        )
    )
    row = view.attn[layer, :, qi, :]  # (H, K): this query's weights in each head
    build = partial(
        vs.step_attention,
        row,
        k,
        title=_("Query {qi} ({query}), layer {layer}").format(qi=qi, query=query, layer=layer + 1),
        query=q[qi],
        layer=layer,
    )
    heads = [_("head {head}").format(head=h + 1) for h in range(row.shape[0])]
    show(build, "zoom_row", shared=(*ctx.key, kind, layer, qi), csv=MapCsv(row, heads, k))


def page(frame: state.Frame) -> None:
    """Attention for the frame's input: what app.py's navigation runs (a hint instead when there is none)."""
    if (ctx := state.page_context(frame)) is not None:
        attention_panel(ctx)

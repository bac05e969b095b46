"""Inside one head (/head): one head's computation for one query token, with this input's real numbers.

Pick a kind, layer, head and query; the page walks through eq. (1) of the paper, softmax(QKᵀ/√d_k)V,
stage by stage: the query's input row x, q = x W^Q, the keys K and values V, the scores q·k_j, the
scaling by √d_head (and τ), the mask (−∞, and why), the softmax weights, their weighted sum of the
values, and then the heads concatenated, projected by W^O, added to the residual stream and
LayerNorm'd (sections 3.2.2 and 3.1). Every number comes from ``analysis.trace.head_trace``: one traced
forward pass of the same model over the same translation the other pages show.
"""

from __future__ import annotations

import math

import streamlit as st

from i18n import N_, _
from model.facts import KIND_NAMES
from model.settings import Interventions
from ui import exercises, keys, state
from ui.widgets import clamped_slider, md_escape, n_layers_of, show, table_height, url_radio
from viz import head as vh
from viz import tokens as vt

KIND_WHERE = {  # translated where shown
    "enc_self": N_("q, K and V all come from the encoder's rows of the source sentence: each source token reads the source."),
    "dec_self": N_("q, K and V all come from the decoder's rows of the output so far; the causal mask hides later tokens."),
    "cross": N_(
        "**q comes from the decoder state** (the output token being written), **K and V from the encoder memory** "
        "(the source sentence): this is where the decoder looks up the source."
    ),
}


def what_if(ctx: state.Ctx, kind: str, layer: int, head: int) -> Interventions:
    """The page's interventions: hidden source tokens, a local window, the temperature, this head off."""
    src = vt.display(ctx.analysis.source.tokens)
    with st.expander(_("What if… (interventions: the numbers below follow them)")):
        c1, c2 = st.columns(2)
        hide = c1.multiselect(
            _("Hide source tokens"), list(range(len(src))), format_func=lambda i: f"{i}: {src[i]}", key=keys.TRACE_HIDE
        )
        widest = max(len(src), len(ctx.analysis.tgt_in_tokens))  # a window this wide hides nothing
        window = c1.slider(_("Local window of self-attention (0 = off)"), 0, widest, 0, key=keys.TRACE_WINDOW)
        tau = c2.slider(
            _("Attention temperature τ"), 0.25, 4.0, 1.0, 0.05, key=keys.TRACE_TEMP, help="softmax(QKᵀ / (√d_head · τ))"
        )
        off = c2.toggle(_("Switch this head off"), key=keys.TRACE_OFF, help=_("Its output is replaced by zeros before W^O."))
    interventions = Interventions(
        src_hidden=frozenset(hide),
        window=window or None,
        temperature=float(tau),
        ablate=frozenset({(kind, layer, head)}) if off else frozenset(),
    )
    said = [_("hidden source tokens {tokens}").format(tokens=", ".join(src[i] for i in sorted(hide)))] if hide else []
    if window:
        said += [
            _("window {window}").format(window=window)
            + (" " + _("(self-attention only: not this kind)") if kind == "cross" else "")
        ]
    said += [_("temperature τ = {tau:g}").format(tau=tau)] if tau != 1 else []
    said += [_("this head switched off")] if off else []
    if said:
        st.caption(
            _("What if: {what}. The translation and every number below are computed with it.").format(
                what=md_escape("; ".join(said))
            )
        )
    return interventions


def pick(ctx: state.Ctx) -> tuple[str, int, int, Interventions, int]:
    """Kind, layer, head (0-based), the interventions and the query position picked on the page."""
    cfg = ctx.cfg
    if keys.TRACE_HEAD in st.query_params:  # links made when this page kept its head as ?trace_head=N
        old = st.query_params.pop(keys.TRACE_HEAD)
        if keys.HEAD not in st.query_params:
            st.query_params[keys.HEAD] = old
    kind = url_radio(_("Attention kind"), KIND_NAMES, key=keys.KIND, default="cross", horizontal=True)
    c1, c2 = st.columns(2)
    with c1:
        layer = clamped_slider(_("Layer"), n_layers_of(cfg, kind), key=keys.LAYER, bind="query-params") - 1
    with c2:
        # ?head=N as on every page; the session key differs from the Attention page's head, which can be "mean"
        head = clamped_slider(_("Head"), cfg.n_heads, key=keys.TRACE_HEAD, param=keys.HEAD) - 1
    interventions = what_if(ctx, kind, layer, head)
    analysis = ctx.under(interventions)  # the translation the trace follows
    rows = (
        vt.row_labels(analysis.source.tokens)
        if kind == "enc_self"
        else vt.row_labels(analysis.tgt_in_tokens, analysis.tgt_out_tokens)
    )
    return (
        kind,
        layer,
        head,
        interventions,
        pick_query(rows, "" if kind == "enc_self" else " " + _("(decoder input → the token it predicted)")),
    )


def pick_query(rows: list[str], note: str) -> int:
    """The query position (0-based) on a slider of its token labels; the URL keeps the position (``?query=3``).

    ``bind="query-params"`` would write the label, so the URL is read when the widget has no value yet and
    written back after every run; a position past the end (a shorter input or output) moves to the last one.
    """
    if keys.TRACE_QUERY not in st.session_state:
        param = st.query_params.get(keys.TRACE_QUERY, "0")
        st.session_state[keys.TRACE_QUERY] = int(param) if param.isdigit() else 0
    st.session_state[keys.TRACE_QUERY] = min(st.session_state[keys.TRACE_QUERY], len(rows) - 1)
    if len(rows) == 1:
        st.caption(_("Query token: {token}").format(token=md_escape(rows[0])))
        query = 0
    else:
        query = st.select_slider(
            _("Query token") + note, list(range(len(rows))), format_func=rows.__getitem__, key=keys.TRACE_QUERY
        )
    if query == 0:
        st.query_params.pop(keys.TRACE_QUERY, None)
    elif st.query_params.get(keys.TRACE_QUERY) != str(query):
        st.query_params[keys.TRACE_QUERY] = str(query)
    return query


def render(ctx: state.Ctx) -> None:
    kind, layer, head, interventions, query = pick(ctx)
    t = state.run_head_trace(ctx.path, ctx.text, ctx.settings, interventions, kind, layer, head, query)
    D, Dh, H = t.x.shape[0], t.d_head, t.n_heads
    st.markdown(f"**{vh.where(t)}**, {md_escape(vh.query_name(t))}. {_(KIND_WHERE[kind])}")

    st.subheader(_("1 · The query's input row x"))
    if t.norm_first:
        st.markdown(
            _("The row of the residual stream at the query ({d} numbers), normalised first (pre-LN): x = LayerNorm(row).").format(
                d=D
            )
        )
    else:
        st.markdown(
            _("The row of the residual stream at the query ({d} numbers); post-LN: it goes into attention as it is.").format(d=D)
        )
    show(vh.input_figure(t), "head_input")

    turn = exercises.head_turn(ctx, t, interventions)  # "Your turn": the stage's numbers wait for the answer

    st.subheader(_("2 · q, K and V: three projections"))
    st.markdown(
        _(
            "q = x W^Q, k_j = x_j W^K, v_j = x_j W^V (plus a bias each): this head's {dh} of the {d} columns of each "
            "projection (d_head = d_model / h = {d} / {h}). One q for the query, a k and a v for every key, computed from "
            "{source}"
        ).format(
            dh=Dh,
            d=D,
            h=H,
            source=_("the encoder memory (the source).") if kind == "cross" else _("the same layer's input rows."),
        )
    )
    if turn and turn.at("mask"):  # the key rows below name the masked keys
        return
    c1, c2 = st.columns(2)
    with c1:
        show(vh.kv_figure(t, "k"), "head_keys")
    with c2:
        show(vh.kv_figure(t, "v"), "head_values")

    st.subheader(_("3 · Scores, scaled, masked"))
    scale = f"√{Dh} = {math.sqrt(Dh):.3g}" + (_(", times τ = {tau:g}").format(tau=t.temperature) if t.temperature != 1 else "")
    st.markdown(
        _(
            "One row of QKᵀ: the dot product q·k_j with every key, divided by √d_k ({scale}) so the softmax does not "
            "saturate as d_k grows (eq. 1). Keys the query may not read get −∞, so the softmax gives them weight 0."
        ).format(scale=scale)
    )
    if turn and turn.at("scale"):
        return
    show(vh.scores_figure(t), "head_scores")
    if turn and turn.at("softmax"):
        return
    df = vh.scores_table(t)
    st.dataframe(df, hide_index=True, height=table_height(df))

    st.subheader(_("4 · Softmax: the attention weights"))
    st.markdown(_("softmax(QKᵀ/√d_k) for this query: e^score / Σ e^score over the keys it may read. The weights sum to 1."))
    if t.mask.all():
        st.info(_("Every key is masked: this query reads nothing, its weights are all 0 and the head's output is zero."))
    show(vh.weights_figure(t), "head_weights")

    st.subheader(_("5 · The weighted sum of the values"))
    st.markdown(_("softmax(QKᵀ/√d_k) V: the head's output is Σ_j w_j v_j, a mix of the value rows by weight."))
    if turn and turn.at("weighted_sum"):
        return
    show(vh.weighted_sum_figure(t), "head_sum")

    st.subheader(_("6 · Concatenate, project, add, normalise"))
    layer_norm = (
        _("LayerNorm(x + Sublayer(x)) (post-LN, the paper)") if not t.norm_first else _("x + Sublayer(LayerNorm(x)) (pre-LN)")
    )
    st.markdown(
        _(
            "MultiHead = Concat(head_1, …, head_{h}) W^O (section 3.2.2): the {h} heads' outputs side by side "
            "({h} × {dh} = {d} numbers), times W^O. The residual connection adds the result to the row (section 3.1): "
            "{layer_norm}. Last row: {norm_label}."
        ).format(h=H, dh=Dh, d=D, layer_norm=layer_norm, norm_label=t.norm_label)
    )
    if t.ablated:
        st.caption(_("This head is switched off: its block of the concatenation is zero, whatever it attended to."))
    show(vh.output_figure(t), "head_output")


def page(frame: state.Frame) -> None:
    """Inside one head for the frame's input: what app.py's navigation runs (a hint instead when there is none)."""
    if (ctx := state.page_context(frame)) is not None:
        render(ctx)

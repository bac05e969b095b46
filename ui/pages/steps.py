"""Step through generation (/steps): a step slider with previous / next / play; the output so far, the top
candidates, the new query's cross- and self-attention; force another piece; compare with a reference."""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd
import streamlit as st

from analysis.records import attention_view, trace_view
from i18n import _
from model.facts import InputError
from ui import keys, state
from ui.widgets import (
    PROBABILITY,
    MapCsv,
    chips,
    clicked_point,
    head_label,
    head_slider,
    pick_layer_head,
    show,
    slider_or_fixed,
    start_from_url,
    table_height,
)
from viz import attention as va
from viz import steps as vs
from viz import tokens as vt

PLAY_SECONDS = 0.9  # one decoding step per tick while "Play" runs


def render(ctx: state.Ctx) -> None:
    if ctx.settings.method == "beam":
        st.info(_("Beam search has no single next token, so stepping follows greedy choices here; the beam tree is below."))
    st.session_state[keys.FULL_RUN] = True  # the fragment advances "Play" only on its own timed reruns
    playing = st.session_state.get(keys.PLAYING, False)
    st.fragment(run_every=PLAY_SECONDS if playing else None)(steps_fragment)(ctx)
    st.markdown(_("**Encoder self-attention** (the same at every step: the source is encoded once)"))
    show(va.attention_mosaic(ctx.analysis.view("enc_self"), title=_("Encoder self-attention: layer × head")), "steps_enc")
    if ctx.analysis.beam:
        st.subheader(_("Beam search tree"))
        show(vs.beam_tree(ctx.analysis.beam), "steps_beam_tree")
    reference_section(ctx)


# -- forcing a token and moving the step (widget callbacks) --------------------------------------------------------


def signature(ctx: state.Ctx) -> tuple:
    """What forced tokens belong to: this model, text and settings."""
    return (ctx.path, ctx.text, ctx.settings)


def forced_ids(ctx: state.Ctx) -> tuple[int, ...]:
    f = st.session_state.get(keys.FORCED)
    return f["ids"] if f and f["sig"] == signature(ctx) else ()


def force(ctx: state.Ctx, prefix: tuple[int, ...], token: int) -> None:
    """Continue decoding from ``prefix`` + ``token`` (compact ids) instead of the model's own choice."""
    st.session_state[keys.FORCED] = {"sig": signature(ctx), "ids": (*prefix, int(token))}
    st.session_state[keys.PLAYING] = False


def force_from_pick(ctx: state.Ctx, prefix: tuple[int, ...]) -> None:
    token = st.session_state.get(keys.FORCE_PICK)
    if token is not None:
        force(ctx, prefix, token)
        st.session_state[keys.FORCE_PICK] = None


def force_from_chart(ctx: state.Ctx, prefix: tuple[int, ...], candidates: list) -> None:
    """A click on a candidate bar: the point carries the candidate's compact id in customdata, else its index."""
    p = clicked_point(keys.CANDIDATES_CHART)
    if p is None:
        return
    cd = p.get("customdata")
    token = cd[0] if isinstance(cd, list | tuple) and cd else cd
    if token is None and p.get("point_index") is not None:
        token = candidates[p["point_index"]][1]
    if token is not None:
        force(ctx, prefix, int(token))


def stop_playing() -> None:
    if st.session_state.get(keys.PLAYING):
        st.session_state[keys.PLAYING] = False
        st.session_state[keys.APP_RERUN] = True


def move_step(delta: int, n: int) -> None:
    stop_playing()
    st.session_state[keys.STEP] = min(max(st.session_state.get(keys.STEP, 1) + delta, 1), n)


def toggle_play(n: int) -> None:
    playing = not st.session_state.get(keys.PLAYING, False)
    if playing and st.session_state.get(keys.STEP, 1) >= n:
        st.session_state[keys.STEP] = 1  # play again from the start
    st.session_state[keys.PLAYING] = playing
    st.session_state[keys.APP_RERUN] = True  # a full rerun re-registers the fragment with (or without) its timer


# -- the step fragment ---------------------------------------------------------------------------------------------


def advance_play(n: int) -> None:
    """On a timed rerun while playing, one step further; then keep the step within 1..n."""
    full_run = st.session_state.pop(keys.FULL_RUN, False)
    if st.session_state.get(keys.PLAYING) and not full_run:  # a timed rerun: one step further
        if st.session_state.get(keys.STEP, 1) < n:
            st.session_state[keys.STEP] = st.session_state.get(keys.STEP, 1) + 1
        if st.session_state[keys.STEP] >= n:
            st.session_state[keys.PLAYING] = False
            st.session_state[keys.APP_RERUN] = True
    if keys.STEP in st.session_state:
        st.session_state[keys.STEP] = min(max(int(st.session_state[keys.STEP]), 1), n)


def step_controls(n: int) -> int:
    """Previous / next / play buttons and the step slider; returns the step counted from 0."""
    c = st.columns([1.3, 1.1, 1.1, 6], vertical_alignment="bottom")
    c[0].button(_("Previous"), key=keys.PREV, icon=":material/skip_previous:", on_click=move_step, args=(-1, n), width="stretch")
    c[1].button(_("Next"), key=keys.NEXT, icon=":material/skip_next:", on_click=move_step, args=(1, n), width="stretch")
    playing = st.session_state.get(keys.PLAYING, False)
    c[2].button(
        _("Pause") if playing else _("Play"),
        key=keys.PLAY,
        icon=":material/pause:" if playing else ":material/play_arrow:",
        on_click=toggle_play,
        args=(n,),
        width="stretch",
    )
    start_from_url(keys.STEP, 1, n)  # a link's ?step=99 opens the last step
    with c[3]:
        if n > 1:  # a select_slider keeps its identity (and value) when the number of steps changes; st.slider would not
            return (
                st.select_slider(_("Step"), list(range(1, n + 1)), key=keys.STEP, bind="query-params", on_change=stop_playing) - 1
            )
        st.caption(_("Step 1 of 1: the model ended at once."))
        return 0


def steps_fragment(ctx: state.Ctx) -> None:
    """Step slider, previous / next / play, and everything that depends on the step."""
    forced = forced_ids(ctx)
    trace = ctx.steps(forced)
    n = len(trace)
    advance_play(n)
    t = step_controls(n)
    v = trace[t]
    layer, head = pick_layer_head(ctx.cfg.n_dec_layers, ctx.cfg.n_heads)

    left, right = st.columns([2, 3])
    with left:
        st.markdown(_("**Step {step} of {n}**: output so far, and the piece chosen now").format(step=t + 1, n=n))
        marks = [""] + ["forced" if s.forced else "" for s in trace[:t]] + ["forced" if v.forced else "new"]
        chips(v.prefix_tokens + [v.chosen_token], marks, css="output-so-far")
        if forced:
            st.caption(_("Purple: tokens you forced. Green: the piece chosen at this step."))
        title = _("Top {n} next pieces").format(n=len(v.candidates)) + (" " + _("(you forced another one)") if v.forced else "")
        prefix = tuple(s.chosen for s in trace[:t])
        show(
            vs.candidates_bar(v, title=title),
            keys.CANDIDATES_CHART,
            on_select=partial(force_from_chart, ctx, prefix, v.candidates),
        )
        options = [c[1] for c in v.candidates if c[1] != v.chosen]
        labels = {c[1]: f"{vt.display([c[0]])[0]}  (p = {c[2]:.3f})" for c in v.candidates}
        st.selectbox(
            _("Force another candidate at this step (or click its bar)"),
            options,
            index=None,
            format_func=labels.get,
            placeholder=_("Pick a piece and decoding goes on from there…"),
            key=keys.FORCE_PICK,
            on_change=force_from_pick,
            args=(ctx, prefix),
        )
        if forced:
            st.button(
                _("Back to the model's own choices"), key=keys.UNFORCE, on_click=lambda: st.session_state.pop(keys.FORCED, None)
            )
    with right:
        which = head_label(layer, head)
        row = f"{vt.display([v.prefix_tokens[-1]])[0]} → {vt.display([v.chosen_token])[0]}"
        heads = [_("head {head}").format(head=h + 1) for h in range(ctx.cfg.n_heads)]
        for name, attn, keys_shown, key_title in (
            ("cross", v.cross_attn[layer], ctx.analysis.source.tokens, _("source token")),  # (H, S)
            ("self", v.self_attn[layer], v.prefix_tokens, _("output so far")),  # (H, t + 1)
        ):
            w = attn if head is None else attn[head]  # every head (and their mean) or one head
            what = (
                _("Cross-attention of the new query over the source")
                if name == "cross"
                else _("Causal self-attention of the new query over the output so far")
            )
            fig = vs.step_attention(w, keys_shown, title=f"{what}, {which}", query=row, layer=layer, key_title=key_title)
            show(fig, f"step_{name}", csv=MapCsv(np.atleast_2d(w), heads if head is None else [row], keys_shown))

    if st.toggle(
        _("Every layer and head so far"),
        key=keys.STEPS_ALL_HEADS,
        help=_(
            "Cross-attention and causal self-attention of every layer and head up to this step (the last row is this "
            "step's query). Two more charts: each step move redraws a little slower."
        ),
    ):
        mosaics_so_far(ctx, trace, t)
    if st.session_state.pop(keys.APP_RERUN, False):
        st.rerun()


def mosaics_so_far(ctx: state.Ctx, trace: list, t: int) -> None:
    """Cross- and causal self-attention of every layer and head for the steps up to ``t``."""
    steps, src = trace[: t + 1], ctx.analysis.source.tokens  # row i: the query at step i
    # Full width, one under the other: with few rows so far, half a page is too narrow for the tiles' labels.
    show(va.attention_mosaic(trace_view(steps, "cross", src), title=_("Cross-attention")), "steps_cross_mosaic")
    fig = va.attention_mosaic(trace_view(steps, "dec_self", src), title=_("Decoder causal self-attention"))
    show(fig, "steps_self_mosaic")


# -- compare with a reference --------------------------------------------------------------------------------------


def reference_section(ctx: state.Ctx) -> None:
    st.subheader(_("Compare with a reference"))
    st.caption(
        _(
            "Type a reference translation: it is fed to the decoder whatever the model would have chosen (teacher "
            "forcing, as in training). Compare its cross-attention with the model's own free-running output."
        )
    )
    ref = st.text_input(
        _("Reference translation"), key=keys.REFERENCE, placeholder=_("e.g. Ein Hund springt über einen grünen Zaun.")
    )
    if ref.strip():
        reference_fragment(ctx, ref)


@st.fragment
def reference_fragment(ctx: state.Ctx, ref: str) -> None:
    try:
        maps, tgt_in, tgt_out = state.run_reference(ctx.path, ctx.text, ctx.settings, ref)
    except InputError as e:
        st.error(_(str(e)))  # a fixed message (analysis.analyze), in ui.catalog.SHOWN_ELSEWHERE
        return
    eos = ctx.loaded.tokenizer.piece_text(ctx.cfg.eos_id)
    if len(tgt_out) == ctx.cfg.max_len and tgt_out[-1] != eos:  # shift_right cut it to the decoder's length
        st.warning(
            _("The reference is longer than the decoder reads: only its first {n} pieces are compared.").format(n=len(tgt_out))
        )
    analysis, src = ctx.analysis, ctx.analysis.source.tokens
    c = st.columns(2)
    with c[0]:
        layer = slider_or_fixed(_("Layer") + " ", 1, ctx.cfg.n_dec_layers, key=keys.REF_LAYER, value=ctx.cfg.n_dec_layers) - 1
    with c[1]:
        head = head_slider(_("Head") + " ", ctx.cfg.n_heads, key=keys.REF_HEAD)
    c1, c2 = st.columns(2)
    reference = attention_view(maps, "cross", src=src, tgt_in=tgt_in, tgt_out=tgt_out)
    for col, view, name, key in (
        (c1, analysis.view("cross"), _("Free-running (model's own output)"), "ref_free"),
        (c2, reference, _("Teacher-forced reference"), "ref_forced"),
    ):
        one = view.map(layer, head)
        with col:
            show(va.attention_heatmap(one, title=f"{name}, {head_label(layer, head)}"), key, csv=MapCsv.of(one))
    p = np.asarray(maps.next_probs, dtype=np.float64)  # (T,): one typed column each, so Arrow takes the table as it is
    piece, probability = _("reference piece"), _("model's probability")
    probs = pd.DataFrame({piece: pd.Series(vt.display(tgt_out), dtype="string"), probability: p})
    st.caption(_("How likely the model finds each reference piece (mean {mean:.3f}):").format(mean=float(p.mean())))
    st.dataframe(probs, width="stretch", height=min(table_height(probs), 400), column_config={probability: PROBABILITY})


def page(frame: state.Frame) -> None:
    """Step through generation for the frame's input: what app.py's navigation runs (a hint instead when there is none)."""
    if (ctx := state.page_context(frame)) is not None:
        render(ctx)

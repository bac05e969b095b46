"""Lesson (/lesson): a guided tour in ten steps, in the order of the paper and the tutorials.

Tokens and ids; embeddings and positional encoding; encoder self-attention (eq. 1); many heads and
layers; the causal mask; cross-attention; one decoding step and its next-token distribution; greedy
and beam search; a masking experiment; is attention an explanation (attention beside attribution). Each step is a short paragraph, the paper's equation where
there is one, and the live figure for the sentence in the box above, drawn by the same ``viz``
functions as the other pages. Previous / Next move through the steps; the URL keeps the step
(``?lesson=5``) and presenter mode (``?presenter=1``: big type, no sidebar, for a projector).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import plotly.graph_objects as go
import streamlit as st

import i18n
from i18n import _
from model.facts import KIND_NAMES
from model.settings import DecodeSettings, Interventions
from ui import exercises, explaining, keys, state
from ui.lesson_text import LESSON
from ui.widgets import (
    MapCsv,
    chips,
    clamped_slider,
    diff_marks,
    download,
    head_label,
    md_escape,
    n_layers_of,
    pick_layer_head,
    show,
    table_height,
    text_box,
    token_columns,
    token_table,
)
from viz import attention as va
from viz import positional as vp
from viz import steps as vs
from viz import tokens as vt

# Constant CSS (never user text): big type for a projector, and no sidebar or the button that opens it.
PRESENTER_CSS = """<style>
[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], [data-testid="stExpandSidebarButton"] {
  display: none !important;
}
[data-testid="stMain"] [data-testid="stMarkdownContainer"] p, [data-testid="stMain"] li { font-size: 1.5rem !important; line-height: 1.5; }
[data-testid="stMain"] h1 { font-size: 2.6rem !important; }
[data-testid="stMain"] h2, [data-testid="stMain"] h3 { font-size: 2.2rem !important; }
[data-testid="stMain"] .katex { font-size: min(1.7em, 3.6vw) !important; }
[data-testid="stMain"] .katex-display { overflow: visible !important; }
[data-testid="stMain"] label p, [data-testid="stMain"] button p { font-size: 1.25rem !important; }
[data-testid="stMain"] [data-testid="stSlider"] p:not(label p) { font-size: 1rem !important; }
[data-testid="stMain"] [data-testid="stSlider"] [data-testid="stWidgetLabel"] { margin-bottom: 0.75rem !important; }
</style>"""
BIG_FONT = 17  # figure text in presenter mode (the figures' own default is 12)


def place(fig: go.Figure, key: str, **kw) -> None:
    """``show`` the figure, with larger text in presenter mode (the axes keep automargin, so margins follow)."""
    if st.session_state.get(keys.PRESENTER):
        fig.update_layout(font_size=BIG_FONT, title_font_size=BIG_FONT + 4)
    show(fig, key, **kw)


# -- what each step draws ----------------------------------------------------------------------------------------------


def draw_tokens(ctx: state.Ctx) -> None:
    analysis = ctx.analysis
    c1, c2 = st.columns(2)
    with c1:
        st.markdown(_("**Your sentence as pieces and ids**"))
        df = token_table(ctx.loaded.tokenizer, analysis.source.ids)
        st.dataframe(df, height=min(table_height(df), 600), column_config=token_columns(ctx.loaded.tokenizer))
        download(_("Pieces (CSV)"), partial(df.to_csv, index=False), "lesson-pieces.csv", "text/csv")
    with c2:
        st.markdown(_("**The pieces the decoder wrote, and their text**"))
        chips(analysis.tgt_out_tokens)
        text_box(analysis.translation)


def draw_positions(ctx: state.Ctx) -> None:
    S, cfg = len(ctx.analysis.source.ids), ctx.cfg
    pe = state.positional_matrix(ctx.path, S)
    title = _("The positional encoding added at your sentence's {s} positions (rows) in all {d} dimensions").format(
        s=S, d=cfg.d_model
    )
    place(vp.pe_matrix(pe, title=title, sinusoidal=cfg.pos_encoding == "sinusoidal", layout=cfg.pe_layout), "lesson_pe")


def attention_map(kind: str) -> Callable[[state.Ctx], None]:
    """A step drawing one head (or the mean over heads) of ``kind``, layer and head picked on the page."""

    def draw(ctx: state.Ctx) -> None:
        layer, head = pick_layer_head(n_layers_of(ctx.cfg, kind), ctx.cfg.n_heads)
        view = ctx.analysis.view(kind).map(layer, head)
        fig = va.attention_heatmap(view, title=f"{_(KIND_NAMES[kind])}, {head_label(layer, head)}")
        place(fig, f"lesson_{kind}", csv=MapCsv.of(view))

    return draw


def draw_heads(ctx: state.Ctx) -> None:
    fig = va.attention_mosaic(
        ctx.analysis.view("enc_self"), title=_("Encoder self-attention: every layer (rows) × head (columns)")
    )
    place(fig, "lesson_mosaic")


def draw_next_token(ctx: state.Ctx) -> None:
    trace = ctx.steps()
    t = clamped_slider(_("Decoding step"), len(trace), key=keys.LESSON_DECODE_STEP) - 1
    v = trace[t]
    chips(v.prefix_tokens + [v.chosen_token], [""] * len(v.prefix_tokens) + ["new"], css="lesson-prefix")
    st.caption(_("The decoder's input so far, and (green) the piece chosen at this step."))
    title = _("Step {step}: the most probable next pieces (softmax over {n} pieces)").format(step=t + 1, n=ctx.cfg.n_logits)
    fig = vs.candidates_bar(v, title=title)
    place(fig, "lesson_candidates")


def draw_beam(ctx: state.Ctx) -> None:
    s = ctx.settings
    greedy = state.run_analysis(ctx.path, ctx.text, DecodeSettings(max_new=s.max_new), state.NO_INTERVENTIONS)
    beam_settings = s if s.method == "beam" else DecodeSettings(method="beam", max_new=s.max_new)
    beam = state.run_analysis(ctx.path, ctx.text, beam_settings, state.NO_INTERVENTIONS)
    c1, c2 = st.columns(2)
    with c1:
        st.markdown(_("**Greedy**"))
        text_box(greedy.translation)
    with c2:
        st.markdown(
            _("**Beam search** (beam {size}, α {alpha:g})").format(size=beam_settings.beam_size, alpha=beam_settings.alpha)
        )
        text_box(beam.translation)
    if beam.beam is not None:
        fig = vs.beam_tree(beam.beam, title=_("Every hypothesis the beam kept; the best one highlighted"))
        place(fig, "lesson_beam")


def draw_masking(ctx: state.Ctx) -> None:
    analysis, last = ctx.analysis, ctx.cfg.n_dec_layers - 1
    src = vt.display(analysis.source.tokens)
    if st.session_state.get(keys.LESSON_HIDE, 0) >= len(src):
        st.session_state.pop(keys.LESSON_HIDE)  # a shorter sentence than the one the choice was made on
    # start with the word piece (not <eos>, not punctuation) the last decoder layer reads most: hiding it shows an effect
    read = analysis.view("cross").map(last).w.sum(axis=0)  # (S,) attention each source piece receives
    words = [i for i, t in enumerate(analysis.source.tokens[:-1]) if any(ch.isalnum() for ch in t)] or [0]  # the last is <eos>
    most = max(words, key=lambda i: read[i])
    hide = st.selectbox(
        _("Hide this source token"), range(len(src)), index=most, format_func=lambda i: f"{i}: {src[i]}", key=keys.LESSON_HIDE
    )
    after = state.run_analysis(ctx.path, ctx.text, ctx.settings, Interventions(src_hidden=frozenset({hide})))
    before_marks, after_marks = diff_marks(analysis.tgt_out_tokens, after.tgt_out_tokens)
    c1, c2 = st.columns(2)
    hidden = _("With “{token}” hidden").format(token=src[hide])
    for col, name, r, marks in ((c1, _("Before"), analysis, before_marks), (c2, hidden, after, after_marks)):
        with col:
            st.markdown(f"**{md_escape(name)}**")
            text_box(r.translation)
            chips(r.tgt_out_tokens, marks, css=f"lesson-{'after' if r is after else 'before'}")
    view = after.view("cross").map(last)
    title = _("Cross-attention with “{token}” hidden, {where}").format(token=src[hide], where=head_label(last, None))
    fig = va.attention_heatmap(view, title=title)
    place(fig, "lesson_masked", csv=MapCsv.of(view))


def draw_explain(ctx: state.Ctx) -> None:
    position = explaining.pick_token(explaining.output_rows(ctx, state.NO_INTERVENTIONS), key=keys.LESSON_TOKEN)
    layer, head = pick_layer_head(ctx.cfg.n_dec_layers, ctx.cfg.n_heads)
    e = explaining.explanation(ctx, state.NO_INTERVENTIONS, position, None, ig_key=keys.IG_RUN)
    explaining.methods(e, layer, head, "lesson_explain", place=place)
    st.caption(_("The page Attention vs attribution has more: contrast with another word, every head, the layer lens."))


# -- the steps ---------------------------------------------------------------------------------------------------------


# What each step of ui.lesson_text.LESSON draws, by its key. (A comment: a bare string here would be drawn by magic.)
DRAW: dict[str, Callable[[state.Ctx], None]] = {
    "tokens": draw_tokens,
    "positions": draw_positions,
    "attention": attention_map("enc_self"),
    "heads": draw_heads,
    "causal": attention_map("dec_self"),
    "cross": attention_map("cross"),
    "next_token": draw_next_token,
    "beam": draw_beam,
    "masking": draw_masking,
    "explain": draw_explain,
}


# -- the step and presenter mode, kept in the URL ------------------------------------------------------------------------


def move(delta: int) -> None:
    st.session_state[keys.LESSON] = min(max(st.session_state.get(keys.LESSON, 1) + delta, 1), len(LESSON))


def current_step() -> int:
    """The step, counted from 1: read from the URL (``?lesson=5``, or ``?step=5`` as a teacher may write it) on
    arrival, kept in the session after."""
    if keys.LESSON not in st.session_state:
        param = st.query_params.get(keys.LESSON) or st.query_params.get(keys.STEP) or "1"
        st.session_state[keys.LESSON] = int(param) if param.isdigit() else 1
    k = min(max(int(st.session_state[keys.LESSON]), 1), len(LESSON))
    st.session_state[keys.LESSON] = k
    if k == 1:
        st.query_params.pop(keys.LESSON, None)
    elif st.query_params.get(keys.LESSON) != str(k):
        st.query_params[keys.LESSON] = str(k)
    return k


def presenter_toggle() -> None:
    if keys.PRESENTER not in st.session_state:
        st.session_state[keys.PRESENTER] = st.query_params.get(keys.PRESENTER) == "1"
    on = st.toggle(_("Presenter mode"), key=keys.PRESENTER, help=_("Big type and no sidebar, for a projector."))
    if on:
        st.query_params[keys.PRESENTER] = "1"
        st.html(PRESENTER_CSS)
    else:
        st.query_params.pop(keys.PRESENTER, None)


def render(ctx: state.Ctx) -> None:
    k = current_step()
    step = LESSON[k - 1]
    c = st.columns([1.2, 1.2, 5, 2], vertical_alignment="center")
    c[0].button(_("Previous"), key=keys.LESSON_PREV, icon=":material/arrow_back:", on_click=move, args=(-1,), disabled=k == 1)
    c[1].button(
        _("Next"), key=keys.LESSON_NEXT, icon=":material/arrow_forward:", on_click=move, args=(1,), disabled=k == len(LESSON)
    )
    c[2].progress(k / len(LESSON), text=_("Step {step} of {n}").format(step=k, n=len(LESSON)))
    with c[3]:
        presenter_toggle()
    cfg = ctx.cfg
    numbers = dict(
        V=cfg.vocab_size, VT=cfg.n_logits, D=cfg.d_model, H=cfg.n_heads, Dh=cfg.d_head, LE=cfg.n_enc_layers, LD=cfg.n_dec_layers
    )
    st.subheader(f"{k} · {i18n._(step.title)}")  # the lesson's text is marked N_ in ui/lesson_text.py
    st.markdown(i18n._(step.text).format(**numbers))
    if step.equation:
        st.latex(step.equation)
    DRAW[step.key](ctx)
    exercises.lesson_try(ctx, step.key)  # "Try it" on self-attention, the causal mask and the decoding step


def page(frame: state.Frame) -> None:
    """the Lesson for the frame's input: what app.py's navigation runs (a hint instead when there is none)."""
    if (ctx := state.page_context(frame)) is not None:
        render(ctx)

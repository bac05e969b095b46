"""Lesson (/lesson): a guided tour in nine steps, in the order of the paper and the tutorials.

Tokens and ids; embeddings and positional encoding; encoder self-attention (eq. 1); many heads and
layers; the causal mask; cross-attention; one decoding step and its next-token distribution; greedy
and beam search; a masking experiment. Each step is a short paragraph, the paper's equation where
there is one, and the live figure for the sentence in the box above, drawn by the same ``viz``
functions as the other pages. Previous / Next move through the steps; the URL keeps the step
(``?lesson=5``) and presenter mode (``?presenter=1``: big type, no sidebar, for a projector).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import plotly.graph_objects as go
import streamlit as st

from model.analysis import DecodeSettings
from model.records import KIND_NAMES
from model.transformer import Interventions
from ui import keys, state
from ui.widgets import (
    MapCsv,
    chips,
    clamped_slider,
    diff_marks,
    download,
    head_label,
    n_layers_of,
    pick_layer_head,
    show,
    table_height,
    text_box,
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
[data-testid="stMain"] .katex { font-size: 1.7em !important; }
[data-testid="stMain"] label p, [data-testid="stMain"] button p { font-size: 1.25rem !important; }
</style>"""
BIG_FONT = 17  # figure text in presenter mode (the figures' own default is 12)


def sized(fig: go.Figure, presenter: bool) -> go.Figure:
    """The figure with larger text in presenter mode (margins grow with it: the axes keep automargin)."""
    return fig.update_layout(font_size=BIG_FONT, title_font_size=BIG_FONT + 4) if presenter else fig


# -- what each step draws ----------------------------------------------------------------------------------------------


def draw_tokens(ctx: state.Ctx, presenter: bool) -> None:
    a = ctx.a
    c1, c2 = st.columns(2)
    with c1:
        st.markdown("**Your sentence as pieces and ids**")
        df = token_table(ctx.loaded.tokenizer, a.source.ids)
        st.dataframe(df, height=min(table_height(df), 600))
        download("Pieces (CSV)", partial(df.to_csv, index=False), "lesson-pieces.csv", "text/csv")
    with c2:
        st.markdown("**The pieces the decoder wrote, and their text**")
        chips(a.tgt_out_tokens)
        text_box(a.translation)


def draw_positions(ctx: state.Ctx, presenter: bool) -> None:
    S, cfg = len(ctx.a.source.ids), ctx.cfg
    pe = state.positional_matrix(ctx.path, S)
    title = f"The positional encoding added at your sentence's {S} positions (rows) in all {cfg.d_model} dimensions"
    show(sized(vp.pe_matrix(pe, title=title, sinusoidal=cfg.pos_encoding == "sinusoidal"), presenter), "lesson_pe")


def attention_map(kind: str) -> Callable[[state.Ctx, bool], None]:
    """A step drawing one head (or the mean over heads) of ``kind``, layer and head picked on the page."""

    def draw(ctx: state.Ctx, presenter: bool) -> None:
        layer, head = pick_layer_head(n_layers_of(ctx.cfg, kind), ctx.cfg.n_heads)
        view = ctx.a.view(kind).map(layer, head)
        fig = va.attention_heatmap(view, title=f"{KIND_NAMES[kind]}, {head_label(layer, head)}")
        show(sized(fig, presenter), f"lesson_{kind}", csv=MapCsv.of(view))

    return draw


def draw_heads(ctx: state.Ctx, presenter: bool) -> None:
    fig = va.attention_mosaic(ctx.a.view("enc_self"), title="Encoder self-attention: every layer (rows) × head (columns)")
    show(sized(fig, presenter), "lesson_mosaic")


def draw_next_token(ctx: state.Ctx, presenter: bool) -> None:
    trace = state.run_steps(ctx.path, ctx.text, ctx.settings, ())
    t = clamped_slider("Decoding step", len(trace), key=keys.LESSON_DECODE_STEP) - 1
    v = trace[t]
    chips(v.prefix_tokens + [v.chosen_token], [""] * len(v.prefix_tokens) + ["new"], css="lesson-prefix")
    st.caption("The decoder's input so far, and (green) the piece chosen at this step.")
    fig = vs.candidates_bar(v, title=f"Step {t + 1}: the most probable next pieces (softmax over {ctx.cfg.n_logits} pieces)")
    show(sized(fig, presenter), "lesson_candidates")


def draw_beam(ctx: state.Ctx, presenter: bool) -> None:
    s = ctx.settings
    greedy = state.run_analysis(ctx.path, ctx.text, DecodeSettings(max_new=s.max_new))
    beam_settings = s if s.method == "beam" else DecodeSettings(method="beam", max_new=s.max_new)
    beam = state.run_analysis(ctx.path, ctx.text, beam_settings)
    c1, c2 = st.columns(2)
    with c1:
        st.markdown("**Greedy**")
        text_box(greedy.translation)
    with c2:
        st.markdown(f"**Beam search** (beam {beam_settings.beam_size}, α {beam_settings.alpha:g})")
        text_box(beam.translation)
    if beam.beam is not None:
        fig = vs.beam_tree(beam.beam, title="Every hypothesis the beam kept; the best one highlighted")
        show(sized(fig, presenter), "lesson_beam")


def draw_masking(ctx: state.Ctx, presenter: bool) -> None:
    a, last = ctx.a, ctx.cfg.n_dec_layers - 1
    src = vt.display(a.source.tokens)
    if st.session_state.get(keys.LESSON_HIDE, 0) >= len(src):
        st.session_state.pop(keys.LESSON_HIDE)  # a shorter sentence than the one the choice was made on
    # start with the source piece the last decoder layer reads most (not <eos>): hiding it shows an effect
    most = int(a.view("cross").map(last).w[:, :-1].sum(axis=0).argmax()) if len(src) > 1 else 0
    hide = st.selectbox(
        "Hide this source token", range(len(src)), index=most, format_func=lambda i: f"{i}: {src[i]}", key=keys.LESSON_HIDE
    )
    after = state.run_analysis(ctx.path, ctx.text, ctx.settings, Interventions(src_hidden=frozenset({hide})))
    before_marks, after_marks = diff_marks(a.tgt_out_tokens, after.tgt_out_tokens)
    c1, c2 = st.columns(2)
    for col, name, r, marks in ((c1, "Before", a, before_marks), (c2, f"With “{src[hide]}” hidden", after, after_marks)):
        with col:
            st.markdown(f"**{name}**")
            text_box(r.translation)
            chips(r.tgt_out_tokens, marks, css=f"lesson-{'after' if r is after else 'before'}")
    view = after.view("cross").map(last)
    fig = va.attention_heatmap(view, title=f"Cross-attention with “{src[hide]}” hidden, {head_label(last, None)}")
    show(sized(fig, presenter), "lesson_masked", csv=MapCsv.of(view))


# -- the steps ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One step of the lesson: its title, 2–4 sentences (``{D}``-style fields are this model's numbers), the
    paper's equation (LaTeX) where there is one, and what it draws."""

    title: str
    text: str
    equation: str | None
    draw: Callable[[state.Ctx, bool], None]


STEPS = (
    Step(
        "Tokens and ids",
        "The model never sees letters or words, only numbers. Your text is cut into sub-word pieces (tiktoken's "
        "cl100k pieces, renumbered into this model's vocabulary of {V} ids) and each piece becomes its id; the "
        "encoder's input ends with the special piece `<eos>`. The decoder writes pieces of the same kind, one at a time, "
        "choosing among the {VT} pieces of its output vocabulary.",
        None,
        draw_tokens,
    ),
    Step(
        "Embeddings and positional encoding",
        "Each id picks one row of an embedding matrix: a vector of d_model = {D} numbers learned in training, "
        "multiplied by √d_model (section 3.4). Attention alone does not know in which order the vectors came, so the "
        "paper adds a positional encoding to each one (section 3.5): sines and cosines whose wavelengths grow from 2π "
        "to 10000 · 2π across the dimensions. The figure shows what is added at each position of your sentence; no two "
        "rows are alike, and neighbouring rows are similar.",
        r"PE_{(pos,\,2i)} = \sin\!\left(\frac{pos}{10000^{2i/d_{model}}}\right) \qquad "
        r"PE_{(pos,\,2i+1)} = \cos\!\left(\frac{pos}{10000^{2i/d_{model}}}\right)",
        draw_positions,
    ),
    Step(
        "Self-attention in the encoder",
        "Every token makes a query q, a key k and a value v: its vector times three learned matrices. The query's dot "
        "product with every key, divided by √d_k so that large vectors do not make the softmax too sharp, gives one "
        "score per token; the softmax turns the scores into weights that are positive and sum to 1. The token's new "
        "vector is the weighted mix of the values. In the heatmap a row is one query token and the columns are the "
        "tokens it reads: every row sums to 1.",
        r"\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right) V",
        attention_map("enc_self"),
    ),
    Step(
        "Many heads, many layers",
        "One attention is one way of mixing. The model runs h = {H} heads side by side, each with its own W^Q, W^K and "
        "W^V of d_k = d_model / h = {Dh} columns, joins their outputs and mixes them with W^O (section 3.2.2). A small "
        "feed-forward network then works on every position on its own (eq. 2), and the whole block is repeated: this "
        "encoder has {LE} layers. Each tile is one head of one layer for your sentence; heads often specialise, one "
        "reading the previous word, another the next or the end.",
        r"\mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)\, W^O, \quad "
        r"\mathrm{head}_i = \mathrm{Attention}(QW_i^Q, KW_i^K, VW_i^V)",
        draw_heads,
    ),
    Step(
        "The causal mask",
        "The decoder writes from left to right, so a position may read only itself and the pieces before it, never "
        "the ones it has yet to predict (section 3.2.3). The paper does this inside the softmax: the scores of later "
        "positions are set to −∞, so their weights become exactly 0. In training every position of the correct "
        "translation is computed at once, and the mask keeps each one from reading the answer. The grey triangle is the "
        "masked future; each row reads “decoder input → the piece it predicted”.",
        r"\mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}} + M\right) V, \qquad "
        r"M_{ij} = \begin{cases} 0 & j \le i \\ -\infty & j > i \end{cases}",
        attention_map("dec_self"),
    ),
    Step(
        "Cross-attention",
        "In each of the {LD} decoder layers a second attention looks at the source. Its queries come from the decoder "
        "(the translation so far), its keys and values from the encoder's output, the memory (section 3.2.3): the "
        "same formula with Q from one sentence and K, V from the other. Each row shows where the model looks in the "
        "source while it chooses the next piece; it often resembles a word alignment, but it does not have to.",
        r"\mathrm{softmax}\!\left(\frac{Q_{\text{decoder}}\, K_{\text{encoder}}^\top}{\sqrt{d_k}}\right) V_{\text{encoder}}",
        attention_map("cross"),
    ),
    Step(
        "One decoding step",
        "At each step the decoder's last vector h_t is multiplied by the output matrix, giving one score (a logit) for "
        "each of the {VT} pieces it can write, and a softmax turns the scores into probabilities (section 3.4; here "
        "the output matrix is the embedding matrix itself, shared as in the paper). The bars are the most probable "
        "next pieces at the step you pick. The chosen piece is appended to the decoder's input and the loop runs again, "
        "until the model writes `<eos>`.",
        r"P(y_t = w \mid y_{<t}, x) = \mathrm{softmax}\!\left(h_t W_{\text{out}}\right)_w",
        draw_next_token,
    ),
    Step(
        "Greedy and beam search",
        "Greedy decoding takes the most probable piece at every step: fast, but a piece that looks best now can lead "
        "to a worse sentence. Beam search keeps the k best partial translations at every step and in the end picks "
        "the one with the best total log-probability, divided by a length penalty so that short outputs are not "
        "favoured (the paper used k = 4 and α = 0.6, section 6.1). The tree shows every hypothesis the beam kept.",
        r"\mathrm{score}(Y) = \frac{\log P(Y \mid X)}{\left((5 + |Y|)/6\right)^{\alpha}}",
        draw_beam,
    ),
    Step(
        "Masking experiments",
        "Masks also let you ask the model questions. Hide one source token: no query may attend to it any more (its "
        "score becomes −∞ in the encoder's self-attention and in cross-attention), and nothing is retrained. If the "
        "translation changes, the model needed that token there; the changed pieces are marked. The Mask lab page has "
        "more experiments: the causal mask off, a local window, a temperature, heads switched off.",
        r"\mathrm{score}_{ij} = -\infty \ \text{for the hidden token } j \;\Rightarrow\; \mathrm{weight}_{ij} = 0",
        draw_masking,
    ),
)


# -- the step and presenter mode, kept in the URL ------------------------------------------------------------------------


def move(delta: int) -> None:
    st.session_state[keys.LESSON] = min(max(st.session_state.get(keys.LESSON, 1) + delta, 1), len(STEPS))


def current_step() -> int:
    """The step, counted from 1: read from the URL (``?lesson=5``) on arrival, kept in the session after."""
    if keys.LESSON not in st.session_state:
        param = st.query_params.get(keys.LESSON, "1")
        st.session_state[keys.LESSON] = int(param) if param.isdigit() else 1
    k = min(max(int(st.session_state[keys.LESSON]), 1), len(STEPS))
    st.session_state[keys.LESSON] = k
    if k == 1:
        st.query_params.pop(keys.LESSON, None)
    elif st.query_params.get(keys.LESSON) != str(k):
        st.query_params[keys.LESSON] = str(k)
    return k


def presenter_toggle() -> bool:
    if keys.PRESENTER not in st.session_state:
        st.session_state[keys.PRESENTER] = st.query_params.get(keys.PRESENTER) == "1"
    on = st.toggle("Presenter mode", key=keys.PRESENTER, help="Big type and no sidebar, for a projector.")
    if on:
        st.query_params[keys.PRESENTER] = "1"
        st.html(PRESENTER_CSS)
    else:
        st.query_params.pop(keys.PRESENTER, None)
    return on


def render(ctx: state.Ctx) -> None:
    k = current_step()
    step = STEPS[k - 1]
    c = st.columns([1.2, 1.2, 5, 2], vertical_alignment="center")
    c[0].button("Previous", key=keys.LESSON_PREV, icon=":material/arrow_back:", on_click=move, args=(-1,), disabled=k == 1)
    c[1].button("Next", key=keys.LESSON_NEXT, icon=":material/arrow_forward:", on_click=move, args=(1,), disabled=k == len(STEPS))
    c[2].progress(k / len(STEPS), text=f"Step {k} of {len(STEPS)}")
    with c[3]:
        presenter = presenter_toggle()
    cfg = ctx.cfg
    numbers = dict(
        V=cfg.vocab_size, VT=cfg.n_logits, D=cfg.d_model, H=cfg.n_heads, Dh=cfg.d_head, LE=cfg.n_enc_layers, LD=cfg.n_dec_layers
    )
    st.subheader(f"{k} · {step.title}")
    st.markdown(step.text.format(**numbers))
    if step.equation:
        st.latex(step.equation)
    step.draw(ctx, presenter)


if (ctx := state.page_context()) is not None:
    render(ctx)

"""Attention beside attribution, placed on a page: the output-token and contrast pickers, Integrated Gradients on a
button with a progress bar, and the method figure. Shared by the /explain page and the lesson's tenth step.

Integrated Gradients take ``analysis.attribution.IG_STEPS`` forward and backward passes (seconds for a 15-word
sentence on one core: bench/README.md, benchmark 9), so they run when asked, in ``IG_SEGMENTS`` parts, one step of
the progress bar each; the parts are cached (``state.run_ig_part``), and a token whose gradients this session
computed shows them again at once. Everything else on the page (attention, norm-weighted, rollout, gradient × input)
takes one pass.
"""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from analysis.records import ATTENTION, GRAD_INPUT, IG, IG_SEGMENTS, IG_STEPS, Explanation, IGResult
from i18n import _
from model.settings import Interventions
from ui import keys, state
from ui.widgets import md_escape, show
from viz import explain as ve
from viz import tokens as vt


def output_rows(ctx: state.Ctx, interventions: Interventions) -> list[str]:
    """Labels ``"i: piece"`` of the output tokens that can be explained: every piece written, and <eos> if it was
    (a translation cut by the token budget ends in a piece that was never kept)."""
    analysis = ctx.under(interventions)
    rows = vt.col_labels(analysis.tgt_out_tokens)
    return rows if analysis.finished else rows[:-1] or rows


def pick_token(rows: list[str], *, key: str, param: str | None = None) -> int:
    """The output token (0-based) on a slider of its labels; with ``param`` the URL keeps it (``?token=3``): read when the
    widget has no value yet, written back after every run, dropped at 0. A position past a shorter output moves to its
    last token."""
    if key not in st.session_state:
        value = st.query_params.get(param, "0") if param else "0"
        st.session_state[key] = int(value) if value.isdigit() else 0
    st.session_state[key] = min(st.session_state[key], len(rows) - 1)
    if len(rows) == 1:
        st.caption(_("Output token: {token}").format(token=md_escape(rows[0])))
        position = 0
    else:
        position = st.select_slider(_("Output token to explain"), list(range(len(rows))), format_func=rows.__getitem__, key=key)
    if param and position == 0:
        st.query_params.pop(param, None)
    elif param and st.query_params.get(param) != str(position):
        st.query_params[param] = str(position)
    return position


def pick_contrast(e: Explanation) -> int | None:
    """Contrastive mode: another of the step's candidates y′ (compact id), or None for log p(y) alone."""
    options = [None] + [i for _piece, i, _p in e.candidates if i != e.target_id]
    names = {i: (t, p) for t, i, p in e.candidates}
    no_contrast = _("(no contrast: explain log p(y))")  # translated in this run, not when the widget formats later
    if st.session_state.get(keys.CONTRAST) not in options:  # a choice made for another token
        st.session_state[keys.CONTRAST] = None
    return st.selectbox(
        _("Why ‘{word}’ and not …?").format(word=vt.display([e.target])[0]),
        options,
        format_func=lambda i: no_contrast if i is None else f"‘{vt.display([names[i][0]])[0]}’ (p = {names[i][1]:.3f})",
        key=keys.CONTRAST,
        help=_(
            "Contrastive mode (Yin & Neubig 2022): the gradients then explain log p(y) − log p(y′), which source "
            "words make the model prefer its word over this alternative."
        ),
    )


def integrated_gradients(
    ctx: state.Ctx, interventions: Interventions, position: int, contrast: int | None, *, key: str
) -> IGResult | None:
    """Integrated Gradients of the explained token, computed on the button ``key`` (or at once when this session has
    computed them for this token before), with a progress bar; None until asked."""
    sig = (ctx.path, ctx.text, ctx.settings, interventions, position, contrast)
    done = st.session_state.setdefault(keys.IG_DONE, set())
    if sig not in done and not st.button(
        _("Compute Integrated Gradients ({steps} steps)").format(steps=IG_STEPS),
        key=key,
        icon=":material/calculate:",
        help=_(
            "A few seconds for a 15-word sentence: the model runs forward and backward once per step. Where the "
            "model's output turns sharply along the way, that part of the path gets more steps, so that the attributions "
            "still add up to the change in the objective."
        ),
    ):
        return None
    bar = st.progress(0.0, text=_("Integrated Gradients…"))
    parts = []
    for k in range(IG_SEGMENTS):
        parts.append(state.run_ig_part(ctx.path, ctx.text, ctx.settings, interventions, position, contrast, k))
        done_steps = (k + 1) * IG_STEPS // IG_SEGMENTS
        bar.progress(
            (k + 1) / IG_SEGMENTS,
            text=_("Integrated Gradients: {done} of {steps} steps").format(done=done_steps, steps=IG_STEPS),
        )
    bar.empty()
    done.add(sig)
    return IGResult.total(parts)


def explanation(ctx: state.Ctx, interventions: Interventions, position: int, contrast: int | None, *, ig_key: str) -> Explanation:
    """The explanation of output token ``position`` under ``interventions``, with Integrated Gradients once they are asked for."""
    e = state.run_explanation(ctx.path, ctx.text, ctx.settings, interventions, position, contrast)
    ig = integrated_gradients(ctx, interventions, position, contrast, key=ig_key)
    return e if ig is None else replace(e, ig=ig)


def completeness_note(e: Explanation) -> None:
    """What Integrated Gradients add up to, or that they are not computed yet."""
    if e.ig is None:
        st.caption(_("Integrated Gradients are computed on request (button above); the other rows are ready."))
        return
    g = e.ig
    st.caption(
        _(
            "Integrated Gradients add up to {total:+.3f} nats; the objective {objective} moves by "
            "{moved:+.3f} nats from the baseline (every word's embedding 0, positions kept) to the "
            "sentence: completeness holds to {error:.2%} with {steps} steps."
        ).format(total=g.ig.sum(), objective=e.objective, moved=g.f_input - g.f_baseline, error=g.relative_error, steps=g.steps)
    )


def methods(e: Explanation, layer: int, head: int | None, key: str, *, place=show) -> None:
    """The method figure (placed with ``place``, e.g. the lesson's presenter-mode ``place``), its exports, how complete
    Integrated Gradients are, and the sentence comparing attention with the gradient method shown."""
    place(ve.methods_figure(e, layer, head), key)
    completeness_note(e)
    other = IG if e.ig is not None else GRAD_INPUT
    best = next(p for p in e.agreement(layer, head) if (p.method_a, p.method_b) == (ATTENTION, other))
    st.markdown(f"**{md_escape(best.sentence)}**")

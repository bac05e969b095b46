"""Positional encoding (/positional): the PE matrix, sin/cos curves of chosen dimensions, PE·PEᵀ, and the
word-order demo (with PE off, two orderings of the same words get the same encoder vectors, permuted)."""

from __future__ import annotations

import streamlit as st

from i18n import _
from model.facts import InputError
from ui import catalog, exercises, keys, state
from ui.widgets import show
from viz import positional as vp


def render(path: str, task: str) -> None:
    cfg = state.load_model(path).model.cfg
    if cfg.pos_encoding != "sinusoidal":
        st.info(
            _(
                "This model learned its positional embeddings instead of the sinusoids; the wavelengths in the legend "
                "are those of the formula."
            )
        )
    if (turn := exercises.positional_turn(cfg, path)) and turn.at("positional"):  # the figures would give it away
        word_order(path, task)
        return
    n = st.slider(_("Positions shown"), 2, cfg.max_len, min(64, cfg.max_len), key=keys.PE_N)
    pe = state.positional_matrix(path, n)
    c1, c2 = st.columns(2)
    with c1:
        show(vp.pe_matrix(pe, sinusoidal=cfg.pos_encoding == "sinusoidal", layout=cfg.pe_layout), "pe_matrix")
    with c2:
        show(vp.pe_similarity(pe), "pe_similarity")
    half = cfg.d_model // 2
    if cfg.pe_layout == "halves":  # the same waves as below, the cosines in the second half
        default = [0, half, 4, half // 2]
        where = _("Dimensions 0 .. {last_sine} are sines, {half} .. {last} cosines").format(
            last_sine=half - 1, half=half, last=cfg.d_model - 1
        )
    else:
        default, where = [0, 1, 8, half], _("Even dimensions are sines, odd ones cosines")
    dims = st.multiselect(
        _("Dimensions to plot"),
        list(range(cfg.d_model)),
        default=[d for d in default if d < cfg.d_model],
        key=keys.PE_DIMS,
        help=_("{where}; the wavelength grows with the wave's index.").format(where=where),
    )
    if dims:
        show(vp.pe_curves(pe, sorted(dims), d_model=cfg.d_model, layout=cfg.pe_layout), "pe_curves")
    else:
        st.info(_("Pick at least one dimension to plot its curve."))
    word_order(path, task)


def word_order(path: str, task: str) -> None:
    st.subheader(_("Why order needs positional encoding"))
    default_a, default_b = catalog.WORD_ORDER[task]
    c1, c2 = st.columns(2)
    sentence_a = c1.text_input(_("Sentence A"), default_a, key=keys.WORD_ORDER_A)
    sentence_b = c2.text_input(_("Sentence B (the same words in another order)"), default_b, key=keys.WORD_ORDER_B)
    try:
        demo = state.run_word_order(path, sentence_a, sentence_b)
    except InputError as e:
        st.error(_(str(e)))  # a fixed message (analysis.analyze), in ui.catalog.SHOWN_ELSEWHERE
        return
    m1, m2 = st.columns(2)
    m1.metric(
        _("Largest difference, PE off"),
        f"{demo.pe_off.max_diff:.2e}",
        help=_("max |enc(B)[i] − enc(A)[perm i]|: 0 up to float error"),
    )
    m2.metric(_("Largest difference, PE on"), f"{demo.pe_on.max_diff:.3f}")
    st.caption(
        _(
            "Without positional encoding each word of B gets exactly the vector the same word had in A: the encoder is "
            "permutation-equivariant and cannot tell who bites whom. With it, the vectors differ."
        )
    )
    show(vp.word_order_figure(demo), "word_order")


def page(frame: state.Frame) -> None:
    """Positional encoding for the frame's model: what app.py's navigation runs (it needs no source sentence)."""
    render(frame.path, frame.task)

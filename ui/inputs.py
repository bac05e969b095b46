"""The frame's input widgets, drawn by app.py on every page: the decoding settings in the sidebar and the source
sentence box with its example picker. Each widget is bound to the URL under its own short key (``ui.keys``), so a
shared link reopens the same input and decoding."""

from __future__ import annotations

import streamlit as st

from i18n import _
from model.settings import DecodeSettings
from ui import catalog, keys, state
from ui.widgets import MAX_CHARS, cut_warning, url_radio


def decoding_settings() -> DecodeSettings:
    """The decoding widgets, read as settings; what the chosen method does not use keeps its default. Each is bound
    to the URL under its own name (``?method=beam&beam_size=8&alpha=0``), so a link reopens the same decoding. Drawn
    where it is called (app.py: in the sidebar, under its "Decoding" header)."""
    defaults = DecodeSettings()
    method = url_radio(_("Method"), catalog.METHODS, key=keys.METHOD, default=defaults.method, horizontal=True)
    if method == "beam":
        return DecodeSettings(
            method=method,
            beam_size=st.slider(
                _("Beam size"),
                1,
                8,
                defaults.beam_size,
                key=keys.BEAM_SIZE,
                bind="query-params",
                help=_("Hypotheses kept per step."),
            ),
            alpha=st.slider(
                _("Length penalty α"),
                0.0,
                3.0,
                defaults.alpha,
                0.1,
                key=keys.ALPHA,
                bind="query-params",
                help=_(
                    "Score = log-probability / ((5 + length) / 6)^α (Wu et al. 2016). 0 = no penalty; higher favours "
                    "longer outputs."
                ),
            ),
        )
    if method == "sample":
        return DecodeSettings(
            method=method,
            temperature=st.slider(
                _("Temperature"),
                0.1,
                2.0,
                1.0,
                0.05,
                key=keys.SAMPLE_TEMPERATURE,
                bind="query-params",
                help=_("Divides the logits: < 1 sharper, > 1 flatter."),
            ),
            top_k=st.slider(
                "Top-k",
                0,
                50,
                0,
                key=keys.TOP_K,
                bind="query-params",
                help=_("Keep only the k most probable pieces (0 = all)."),
            ),
            top_p=st.slider(
                _("Top-p (nucleus)"),
                0.05,
                1.0,
                1.0,
                0.05,
                key=keys.TOP_P,
                bind="query-params",
                help=_("Keep the smallest set of pieces whose probability reaches p."),
            ),
            seed=int(
                st.number_input(_("Seed"), 0, 2**31 - 1, 0, key=keys.SEED, bind="query-params", help=_("Same seed, same sample."))
            ),
        )
    return DecodeSettings(method=method)


def source_box(task: str) -> str:
    """The source sentence box and the example picker for a model of ``task`` ("translate" or "reverse"); returns the
    text, cut to ``MAX_CHARS`` characters (with a warning that says so). A reverse model's input that is not single
    letters gets a note, not a refusal."""
    examples = catalog.EXAMPLES[task]
    with st.container(horizontal=True, vertical_alignment="bottom"):  # one block (columns would be three)
        text = st.text_input(
            _("Source sentence") if task == "translate" else _("Source sequence (single letters, each after a space)"),
            examples[0],
            key=keys.SENTENCE,
            bind="query-params",
            max_chars=MAX_CHARS,
            on_change=state.reset_per_input_state,
            placeholder=_("Type a sentence and press Enter"),
        )
        st.selectbox(
            _("Examples"),
            examples,
            index=None,
            key=keys.EXAMPLE,
            on_change=state.use_example,
            placeholder=_("Pick an example…"),
            width=280,
        )
    text = (text or "")[:MAX_CHARS]
    cut_warning(keys.SENTENCE, text)
    if task == "reverse" and any(len(w) != 1 for w in text.split()):
        st.info(_("This toy model learned to reverse single letters, each after a space (“a b c”): other text gives noise."))
    return text

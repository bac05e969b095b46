"""Attention Explorer: see what a small encoder-decoder Transformer attends to, for any sentence you type.

Start it with ``streamlit run app.py``. This script is the frame: page config, the model picker and
decoding settings in the sidebar, the source sentence box (both in ``ui/inputs.py``), and ``st.navigation`` over one page per
view (``ui/pages/*.py``, each at its own URL path: /translate, /attention, /steps, /positional, /masks,
/stats, /shapes, /head, /compare, /explain, /lesson). Each page is a function, ``ui.pages.<page>.page(frame)``, that
``body`` calls with this run's ``ui.state.Frame`` (model, sentence, decoding settings); ``body``, the main area, is a
fragment, so that a class following its teacher reruns it alone (``ui.room``). It computes nothing itself: the pages
call the caches in ``ui.state``.

The URL holds sentence, model, method, kind, layer, head and step (short keys such as ``method=beam``,
``kind=cross``), so a teacher can share a link to exactly what she sees. Links of the single-page app
(``/?view=attention&kind=cross``, or with labels: ``/?view=Attention&kind=Cross-attention``) are
translated once, on arrival, and switched to their page.
"""

from __future__ import annotations

import importlib
import logging
import os
import textwrap

import streamlit as st
from streamlit.errors import StreamlitAPIException

import i18n
from i18n import _
from model.checkpoint import CheckpointError, Loaded
from model.settings import DecodeSettings
from ui import catalog, keys, room, state
from ui.inputs import decoding_settings, source_box
from ui.widgets import cut_url_text, md_escape, url_radio

log = logging.getLogger("attention_explorer")

DEBUG = os.environ.get("ATTENTION_EXPLORER_DEBUG") == "1"  # tests: let exceptions through


def follow_old_link(pages: dict[str, st.Page], current: st.Page) -> None:
    """Switch the root URL (``/``) and single-page links (``?view=...``) to their page, keeping the other params.

    Runs before any widget, so the parameters are still free to set; a session whose widgets already own
    some of them (e.g. the back button to ``/``) stays where it is: the root page is Translate as well.
    """
    params = st.query_params.to_dict()
    if keys.OLD_VIEW not in params and current.url_path != "":
        return
    spec, params = catalog.old_link(params)
    try:
        st.switch_page(pages[(spec or catalog.PAGE_BY_PATH[catalog.DEFAULT_PAGE]).path], query_params=params)
    except StreamlitAPIException:
        log.info("kept the page: the URL parameters %s are bound to widgets already", sorted(params))


def pick_model(names: list[str]) -> tuple[str, Loaded]:
    """The model asked for (the picker's value, else the URL's ``?model=``, else the first), loaded; if its checkpoint
    does not load, the first of ``names`` (``state.MODEL_ORDER`` first) that does, with a note in the sidebar.

    Runs before the picker is drawn, so a fallback can still set its value and the URL (and rerun, so the picker shows
    it). Stops the app if no model loads.
    """
    wanted = st.session_state.get(keys.MODEL) or st.query_params.get(keys.MODEL)
    wanted = wanted if wanted in names else names[0]
    problems = {}
    for name in dict.fromkeys([wanted, *names]):
        try:
            loaded = state.load_model(state.model_path(name))
        except CheckpointError as e:
            log.warning("cannot load %s", e)  # the server log keeps the path; users see the folder's name only
            problems[name] = md_escape(f"{name}: {textwrap.shorten(e.reason, 200, placeholder=' …')}")
            continue
        note = (
            _("Cannot load the model {problem}. Showing {name} instead.").format(problem=problems[wanted], name=md_escape(name))
            if problems
            else None
        )
        if note and st.session_state.get(keys.MODEL_PROBLEM) != note:  # once: no loop if the picker kept its value
            st.session_state[keys.MODEL_PROBLEM] = note
            if keys.MODEL not in st.session_state:  # the picker's first run reads the URL; later it writes it
                st.query_params[keys.MODEL] = name
            st.session_state[keys.MODEL] = name
            st.rerun()  # so the picker, drawn next, shows the model that loads
        return name, loaded
    st.sidebar.error(_("No model could be loaded.") + " " + "; ".join(problems.values()))
    st.stop()


def session_language() -> str:
    """The session's interface language (``i18n``'s source): the sidebar switch's value, else the URL's ``?lang=``."""
    return st.session_state.get(keys.LANG) or st.query_params.get(keys.LANG) or i18n.DEFAULT


def language_switch() -> None:
    """Deutsch / English in the sidebar. ``url_radio`` keeps the choice in the URL (``?lang=de``) and writes it back
    after every run, so it survives a page switch (``st.navigation`` clears the URL; the session keeps the value)."""
    url_radio(
        "Sprache / Language",
        i18n.LANGUAGES,
        key=keys.LANG,
        default=i18n.DEFAULT,
        horizontal=True,
        translate=False,
    )


def sidebar() -> tuple[str, Loaded, state.ModelFacts, DecodeSettings]:
    """Model picker, device, decoding settings; returns (model path, loaded model, its facts, settings)."""
    sb = st.sidebar
    names = state.available_models()
    if not names:
        sb.error(
            _(
                "No checkpoint found in the models folder ({folder}): a checkpoint is a folder with "
                "model.safetensors, config.json, vocab.json."
            ).format(folder=md_escape(state.MODELS_DIR.name))
        )
        st.stop()
    name, loaded = pick_model(names)
    with sb:
        language_switch()
        st.selectbox(
            _("Model"),
            names,
            key=keys.MODEL,
            bind="query-params",
            on_change=state.on_model_change,
            help=_(
                "Checkpoint folders in pretrained/. en-de translates English into German; en-de-captions is the earlier "
                "model trained on picture descriptions only; reverse is a toy model that writes a sequence of letters "
                "backwards (easy to read attention: it should look at the mirror position). Imported OPUS-MT models "
                "(python -m convert.marian) are listed by their folder's name."
            ),
        )
    if problem := st.session_state.get(keys.MODEL_PROBLEM):
        sb.warning(problem)
    path = state.model_path(name)
    facts = state.model_facts(path)
    if facts.limits:
        sb.caption(_(facts.limits))  # a shipped model's card line is in the catalogue (ui.catalog.SHOWN_ELSEWHERE)
    cfg = loaded.model.cfg
    numbers = [
        _("device **{device}**").format(device=loaded.device),
        _("{n:.2f} M parameters").format(n=state.n_params(path) / 1e6),
    ]
    if facts.bleu:  # cached in English (state.model_facts): its two fixed phrases are translated here
        numbers.append(
            facts.bleu.replace("test BLEU (greedy)", _("test BLEU (greedy)")).replace("(dev, greedy)", _("(dev, greedy)"))
        )
    sb.caption(" · ".join(numbers))
    sb.caption(
        _(
            "d_model {d_model} · {n_heads} heads × d_head {d_head} · d_ff {d_ff} · {n_enc}+{n_dec} layers · "
            "vocab {vocab} (decoder {n_logits}) · max {max_len} tokens"
        ).format(
            d_model=cfg.d_model,
            n_heads=cfg.n_heads,
            d_head=cfg.d_head,
            d_ff=cfg.d_ff,
            n_enc=cfg.n_enc_layers,
            n_dec=cfg.n_dec_layers,
            vocab=cfg.vocab_size,
            n_logits=cfg.n_logits,
            max_len=cfg.max_len,
        )
    )

    sb.toggle(
        _("Colour-blind-safe colours"),
        key=keys.SAFE_COLORS,
        help=_(
            "Draw the attention maps in plotly's Viridis scale (light yellow = 0, dark purple = 1), which reads in every "
            "common colour-vision deficiency. Hidden cells are grey and carry a mark (× future, ∅ hidden, …) either way."
        ),
    )
    sb.subheader(_("Decoding"))
    with sb:
        return path, loaded, facts, decoding_settings()


def main() -> None:
    st.set_page_config(page_title="Attention Explorer", page_icon="🔎", layout="wide")
    # A class arriving at once (or following its teacher's change): first come, first drawn. The whole run waits
    # for a slot, one per core; sharing the one GIL among 120 runs would finish them all together, late
    # (bench/README.md, 14). A run waiting for the model worker gives its slot back meanwhile (ui.state).
    with state.PAGE_RUNS:
        draw()


def draw() -> None:
    """One run of the app: navigation, the room's arrival, the sidebar and the room's box, then ``body``."""

    def never_run() -> None:  # the pages are drawn by ``body``, never through ``st.Page.run``
        raise RuntimeError("app.py draws the page in body()")

    i18n.set_language_source(session_language)
    pages = {spec.path: st.Page(never_run, title=_(spec.title), url_path=spec.path) for spec in catalog.PAGES}
    # "/" draws Translate too (hidden), then follow_old_link moves it to /translate: every page has its own path.
    root = st.Page(never_run, title=_("Translate"), url_path="", default=True, visibility="hidden")
    current = st.navigation([root, *pages.values()], position="top")
    cut_url_text(keys.SENTENCE)  # at the door: a link's long text is cut before anything (box, model) reads it
    follow_old_link(pages, current)
    with room.full_run():
        room.arrive(pages, current)  # a class's link; a following student takes the teacher's view
        path, _loaded, facts, settings = sidebar()
        heading(facts.task, facts.summary)
        room.panel()  # the class's box in the sidebar and the question being asked
        spec = catalog.PAGE_BY_PATH.get(current.url_path, catalog.PAGE_BY_PATH[catalog.DEFAULT_PAGE])
        body(spec, path, facts, settings)


def heading(task: str, summary: str | None) -> None:
    """The app's title and what the model is."""
    st.title("Attention Explorer")
    what = summary or (
        _("An English→German Transformer (Vaswani et al. 2017, trained by this project)")
        if task == "translate"
        else _("A toy letter-reversing Transformer (Vaswani et al. 2017, trained by this project)")
    )
    st.caption(
        _(
            "{what}. Type a sentence, then look at every attention map, step through decoding and change masks and "
            "heads to see the effect."
        ).format(what=what)
    )


@st.fragment
def body(spec: catalog.PageSpec, path: str, facts: state.ModelFacts, settings: DecodeSettings) -> None:
    """The main area: the source box and the page ``spec`` (``ui.pages.<page>.page(frame)``, called here: a fragment
    cannot rerun ``st.Page.run``, which runs once per app run). A fragment, so that the teacher's new sentence, kind,
    layer, head or step reaches a following student by rerunning it alone (``ui.room.Watcher``): the sidebar stays as
    it is. Its own runs wait for the app's slot too (``state.PAGE_RUNS``; a full run holds it already)."""
    with state.PAGE_RUNS:
        room.catch_up()  # in this fragment's own run: take the teacher's change
        text = source_box(facts.task)
        if spec.path != "steps":
            st.session_state[keys.PLAYING] = False  # "Play" belongs to the step view
        st.caption(_(spec.teaches))
        frame = state.Frame(path, text, settings, facts=facts)
        st.session_state[keys.FRAME] = frame  # the model it used, for on_model_change; pages get the frame as argument
        try:
            if spec.analysed:
                frame = state.analyse_ahead(frame)  # a class's analyses wait for the model together: one batch
            importlib.import_module(spec.module).page(frame)
        except Exception:
            if DEBUG:
                raise
            log.exception("page %s failed for %r", spec.path, text)
            st.error(
                _(
                    "Something went wrong while drawing this view. Try another input or setting; the details are in the "
                    "server log."
                )
            )
        room.after_page()  # a teacher's view goes to the class once this run has made its analysis and figures


if __name__ == "__main__":  # streamlit runs this file as __main__; tests import its helpers
    main()

"""Compare two sentences (/compare): two inputs side by side, from a preset minimal pair or typed.

Both translations with the output pieces that differ marked; one attention kind, layer and head for
each, and their difference where the two maps have the same shape (or, when only the translations differ in
length, with B's decoder fed A's translation); the per-token distance between the
two inputs' encoder outputs (``analysis.analyze.encoder_distance``). The URL keeps the pair as a preset
key (``?pair=tired-wide``) or as the two texts (``?a=…&b=…``), with kind, layer and head as elsewhere.
"""

from __future__ import annotations

import streamlit as st

from analysis.records import Analysis, attention_view
from i18n import _
from model.facts import KIND_NAMES, InputError
from model.settings import DecodeSettings
from ui import catalog, keys, state
from ui.widgets import (
    MAX_CHARS,
    MapCsv,
    chips,
    cut_url_text,
    cut_warning,
    diff_marks,
    head_label,
    md_escape,
    n_layers_of,
    pick_layer_head,
    show,
    text_box,
    url_radio,
)
from viz import attention as va
from viz import compare as vc
from viz import tokens as vt

# -- the two sentences, from a preset or typed; the URL keeps them -----------------------------------------------------


def init_from_url(presets: dict[str, catalog.Pair]) -> None:
    """On arrival, sentences A and B from the URL (``?pair=tired-wide``, or ``?a=…&b=…``), else the first preset."""
    if keys.COMPARE_A in st.session_state and keys.COMPARE_B in st.session_state:
        return
    for key in (keys.COMPARE_A, keys.COMPARE_B):
        cut_url_text(key)
    params = st.query_params
    pair = presets.get(params.get(keys.COMPARE_PAIR, "")) or next(iter(presets.values()))
    st.session_state[keys.COMPARE_A] = params.get(keys.COMPARE_A, pair.sentence_a)
    st.session_state[keys.COMPARE_B] = params.get(keys.COMPARE_B, pair.sentence_b)


def use_pair(presets: dict[str, catalog.Pair]) -> None:
    """The preset picker fills A and B, then clears itself (like the frame's example picker)."""
    pair = presets.get(st.session_state.get(keys.COMPARE_PICK) or "")
    if pair is not None:
        st.session_state[keys.COMPARE_A], st.session_state[keys.COMPARE_B] = pair.sentence_a, pair.sentence_b
        st.session_state[keys.COMPARE_PICK] = None


def keep_in_url(presets: dict[str, catalog.Pair], sentence_a: str, sentence_b: str) -> str | None:
    """Write the pair to the URL: its preset key if it is one (returned), else both texts."""
    name = next((k for k, p in presets.items() if (p.sentence_a, p.sentence_b) == (sentence_a, sentence_b)), None)
    params = st.query_params
    if name is not None:
        for key in (keys.COMPARE_A, keys.COMPARE_B):
            params.pop(key, None)
        if params.get(keys.COMPARE_PAIR) != name:
            params[keys.COMPARE_PAIR] = name
        return name
    params.pop(keys.COMPARE_PAIR, None)
    for key, text in ((keys.COMPARE_A, sentence_a), (keys.COMPARE_B, sentence_b)):
        if params.get(key) != text:
            params[key] = text
    return None


def pick_sentences(task: str) -> tuple[str, str]:
    presets = catalog.PAIRS[task]
    init_from_url(presets)
    st.selectbox(
        _("Minimal pairs"),
        list(presets),
        index=None,
        format_func={k: _(p.label) for k, p in presets.items()}.get,
        key=keys.COMPARE_PICK,
        on_change=use_pair,
        args=(presets,),
        placeholder=_("Pick a minimal pair…"),
    )
    c1, c2 = st.columns(2)
    sentence_a = c1.text_input(_("Sentence A"), key=keys.COMPARE_A, max_chars=MAX_CHARS)[:MAX_CHARS]
    sentence_b = c2.text_input(_("Sentence B"), key=keys.COMPARE_B, max_chars=MAX_CHARS)[:MAX_CHARS]
    for key, text in ((keys.COMPARE_A, sentence_a), (keys.COMPARE_B, sentence_b)):
        cut_warning(key, text)
    name = keep_in_url(presets, sentence_a, sentence_b)
    st.caption(
        (_(presets[name].asks) + " " if name else "")
        + _("The sentence box at the top is not used on this page: the two sentences here are.")
    )
    return sentence_a, sentence_b


# -- what the page shows --------------------------------------------------------------------------------------------


def translations(ra: Analysis, rb: Analysis) -> None:
    """Both translations, the output pieces that differ marked on both sides (and the source pieces that differ)."""
    out_a, out_b = diff_marks(ra.tgt_out_tokens, rb.tgt_out_tokens, a_mark="changed")
    src_a, src_b = diff_marks(ra.source.tokens, rb.source.tokens, a_mark="changed")
    c1, c2 = st.columns(2)
    for col, name, analysis, src, out in ((c1, "a", ra, src_a, out_a), (c2, "b", rb, src_b, out_b)):
        with col:
            st.markdown(_("**{name}**: source pieces, translation, output pieces").format(name=name.upper()))
            chips(analysis.source.tokens, src, css=f"cmp-src-{name}")
            text_box(analysis.translation)
            chips(analysis.tgt_out_tokens, out, css=f"cmp-out-{name}")
    na, nb = out_a.count("changed"), out_b.count("changed")
    st.caption(
        _("The two translations are the same piece for piece.")
        if ra.tgt_out_tokens == rb.tgt_out_tokens
        else _(
            "Yellow: output pieces that differ between A and B, matched with difflib ({na} of A's {n_a}, "
            "{nb} of B's {n_b}); yellow source pieces are the words you changed."
        ).format(na=na, n_a=len(out_a), nb=nb, n_b=len(out_b))
    )


@st.fragment
def attention(path: str, settings: DecodeSettings, sentence_a: str, sentence_b: str, ra: Analysis, rb: Analysis) -> None:
    """One kind, layer and head for A and for B, and B − A where the two maps have the same shape: as they are, or,
    when only the translations differ in length, with B's decoder fed A's translation."""
    cfg = state.load_model(path).model.cfg
    kind = url_radio(_("Attention kind"), KIND_NAMES, key=keys.KIND, default="cross", horizontal=True)
    layer, head = pick_layer_head(n_layers_of(cfg, kind), cfg.n_heads)
    ma, mb = ra.view(kind).map(layer, head), rb.view(kind).map(layer, head)
    label = f"{_(KIND_NAMES[kind])}, {head_label(layer, head)}"
    c1, c2 = st.columns(2)
    with c1:
        show(va.attention_heatmap(ma, title=f"A: {label}"), "cmp_map_a", csv=MapCsv.of(ma))
    with c2:
        show(va.attention_heatmap(mb, title=f"B: {label}"), "cmp_map_b", csv=MapCsv.of(mb))
    title, note = f"B − A: {label}", ""
    if ma.w.shape != mb.w.shape and kind != "enc_self" and len(ra.source.ids) == len(rb.source.ids):
        # B writing A's output
        maps = state.run_forced_original(path, sentence_b, settings, state.NO_INTERVENTIONS, output_of=sentence_a)
        forced = attention_view(maps, kind, src=rb.source.tokens, tgt_in=ra.tgt_in_tokens, tgt_out=ra.tgt_out_tokens)
        mb = forced.map(layer, head)
        title = _("B − A, both writing A's translation: {label}").format(label=label)
        note = " " + _(
            "The two translations differ in length ({n_a} and {n_b} pieces), so "
            "B's decoder is fed A's translation here (teacher forcing, as in training): both write the same pieces, and "
            "the difference shows how changing the source moves what each output piece looks at."
        ).format(n_a=len(ra.tgt_out_tokens), n_b=len(rb.tgt_out_tokens))
    if ma.w.shape != mb.w.shape:
        what = _("source pieces") if kind == "enc_self" else _("source pieces (and decoder inputs)")
        st.info(
            _(
                "No difference map: A's map is {a_rows} × {a_cols} and B's {b_rows} × {b_cols}. "
                "Subtracting needs the same number of {what} on both sides; compare the two maps by eye instead."
            ).format(a_rows=ma.w.shape[0], a_cols=ma.w.shape[1], b_rows=mb.w.shape[0], b_cols=mb.w.shape[1], what=what)
        )
        return
    diff = MapCsv(mb.w - ma.w, ma.q_tokens, ma.k_tokens, ma.predicted)
    show(va.difference_heatmap(ma, mb, title=title, names=("A", "B")), "cmp_diff", csv=diff)
    st.caption(
        _(
            "Red: B's query gives this key more weight than A's; blue: less. Rows and columns carry A's tokens: "
            "cell (i, j) compares A's token i with B's token i, whatever word stands there."
        )
        + note
    )


def distances(path: str, sentence_a: str, sentence_b: str) -> None:
    st.subheader(_("Which tokens' representations moved"))
    distance = state.run_encoder_distance(path, sentence_a, sentence_b)
    show(vc.distance_figure(distance), "cmp_distance")
    how = (
        _("A and B have the same number of source pieces, so they are paired position by position.")
        if distance.by_position
        else _("A and B have different numbers of source pieces, so pieces are paired where difflib matches them.")
    )
    lone = [f"A: {t}" for t in vt.display([distance.a_tokens[i] for i in distance.unmatched_a])]
    lone += [f"B: {t}" for t in vt.display([distance.b_tokens[j] for j in distance.unmatched_b])]
    st.caption(
        _(
            "Each bar is ||enc(B)[j] − enc(A)[i]||, the L2 distance between the encoder outputs (the memory the decoder "
            "reads) of a pair of tokens. {how}"
        ).format(how=how)
        + (" " + _("Pieces with no partner: {pieces}.").format(pieces=md_escape(", ".join(lone))) if lone else "")
        + " "
        + _("Identical sentences give 0 everywhere.")
    )


def render(path: str, settings: DecodeSettings, task: str) -> None:
    sentence_a, sentence_b = pick_sentences(task)
    try:
        ra, rb = (
            state.run_analysis(path, sentence_a, settings, state.NO_INTERVENTIONS),
            state.run_analysis(path, sentence_b, settings, state.NO_INTERVENTIONS),
        )
    except InputError:
        st.info(_("Type a sentence in both boxes (or pick a minimal pair) to compare them."))
        return
    if ra.source.truncated or rb.source.truncated:
        cut = (ra if ra.source.truncated else rb).source
        st.warning(
            _("A sentence is longer than the model reads: only its first {n} pieces are compared.").format(n=len(cut.ids) - 1)
        )
    translations(ra, rb)
    st.subheader(_("Attention, side by side"))
    attention(path, settings, sentence_a, sentence_b, ra, rb)
    distances(path, sentence_a, sentence_b)


def page(frame: state.Frame) -> None:
    """Compare for the frame's model and decoding settings: what app.py's navigation runs (the two sentences are
    the page's own, not the source box's)."""
    render(frame.path, frame.settings, frame.task)

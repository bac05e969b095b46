"""Translate (/translate): the translation, source and output token tables, beam hypotheses and the beam tree."""

from __future__ import annotations

from functools import partial

import pandas as pd
import streamlit as st

from i18n import _
from ui import state
from ui.widgets import download, show, table_height, text_box, token_columns, token_table
from viz import steps as vs


def render(ctx: state.Ctx) -> None:
    analysis, tok = ctx.analysis, ctx.loaded.tokenizer
    st.subheader(_("Translation") if ctx.task == "translate" else _("Output"))
    text_box(analysis.translation)
    s = analysis.settings
    how = {
        "greedy": _("greedy decoding"),
        "beam": _("beam search (size {size}, α {alpha})").format(size=s["beam_size"], alpha=s["alpha"]),
        "sample": _("sampling (temperature {t}, top-k {k}, top-p {p}, seed {seed})").format(
            t=s["temperature"], k=s["top_k"], p=s["top_p"], seed=s["seed"]
        ),
    }
    out_ids = analysis.out_ids + ([ctx.cfg.eos_id] if analysis.finished else [])  # counted as the source is, with its <eos>
    st.caption(
        _("{how} on {device} · {n_src} source tokens → {n_out} output tokens").format(
            how=how[s["method"]], device=ctx.loaded.device, n_src=len(analysis.source.ids), n_out=len(out_ids)
        )
        + (" " + _("(both counting <eos>)") if analysis.finished else "")
    )
    if not analysis.translation:
        st.caption(_("The output holds no text: only special tokens (see the table below)."))
    if not analysis.finished:
        st.warning(_("The output stopped at the token budget before the model wrote <eos>: it may be cut short."))

    c1, c2 = st.columns(2)
    with c1:
        st.markdown(_("**Source tokens**"))
        src = token_table(tok, analysis.source.ids)
        st.dataframe(src, width="stretch", hide_index=False, height=min(table_height(src), 740), column_config=token_columns(tok))
    with c2:
        st.markdown(_("**Output tokens** (with the probability the model gave each)"))
        out = token_table(tok, out_ids, target=True, probability=analysis.maps.next_probs[: len(out_ids)])
        st.dataframe(
            out,
            width="stretch",
            height=min(table_height(out), 740),
            column_config=token_columns(tok),
        )
    cfg = ctx.cfg
    if cfg.n_logits < cfg.vocab_size:
        seen = _("German pieces seen often in training") if ctx.task == "translate" else _("the pieces of its task")
        writes = _("only pieces of its target vocabulary ({seen}: {n:,} of {total:,})").format(
            seen=seen, n=cfg.n_logits, total=cfg.vocab_size
        )
    else:
        writes = _("pieces of the whole vocabulary ({total:,}), which the encoder reads too").format(total=cfg.vocab_size)
    specials = ", ".join(dict.fromkeys(tok.piece_text(i) for i in (cfg.bos_id, cfg.eos_id)))
    st.caption(
        _("{id_name} −1 marks the model's own specials ({specials}). {unknown_rule} The decoder writes {writes}.").format(
            id_name=_(tok.origin_id_name), specials=specials, unknown_rule=_(tok.unknown_rule), writes=writes
        )
    )

    if analysis.beam:
        st.subheader(_("Beam search"))
        hyp = pd.DataFrame(analysis.beam.hypotheses, columns=["hypothesis", "score (log-prob / length penalty)"])
        labels = {"hypothesis": _("hypothesis"), "score (log-prob / length penalty)": _("score (log-prob / length penalty)")}
        st.dataframe(hyp, width="stretch", column_config={c: st.column_config.Column(label) for c, label in labels.items()})
        show(vs.beam_tree(analysis.beam), "beam_tree")

    download(
        _("Whole analysis (JSON)"),
        partial(state.analysis_json, analysis),
        "attention-analysis.json",
        "application/json",
        kind="secondary",
    )


def page(frame: state.Frame) -> None:
    """Translate for the frame's input: what app.py's navigation runs (a hint instead when there is none)."""
    if (ctx := state.page_context(frame)) is not None:
        render(ctx)

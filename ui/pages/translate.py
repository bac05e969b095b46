"""Translate (/translate): the translation, source and output token tables, beam hypotheses and the beam tree."""

from __future__ import annotations

from functools import partial

import pandas as pd
import streamlit as st

from ui import state
from ui.widgets import PROBABILITY, download, show, table_height, text_box, token_table
from viz import steps as vs


def render(ctx: state.Ctx) -> None:
    analysis, tok = ctx.analysis, ctx.loaded.tokenizer
    st.subheader("Translation" if ctx.task == "translate" else "Output")
    text_box(analysis.translation)
    s = analysis.settings
    how = {
        "greedy": "greedy decoding",
        "beam": f"beam search (size {s['beam_size']}, α {s['alpha']})",
        "sample": f"sampling (temperature {s['temperature']}, top-k {s['top_k']}, top-p {s['top_p']}, seed {s['seed']})",
    }
    out_ids = analysis.out_ids + ([ctx.cfg.eos_id] if analysis.finished else [])  # counted as the source is, with its <eos>
    st.caption(
        f"{how[s['method']]} on {ctx.loaded.device} · {len(analysis.source.ids)} source tokens → {len(out_ids)} output tokens"
        + (" (both counting <eos>)" if analysis.finished else "")
    )
    if not analysis.translation:
        st.caption("The output holds no text: only special tokens (see the table below).")
    if not analysis.finished:
        st.warning("The output stopped at the token budget before the model wrote <eos>: it may be cut short.")

    c1, c2 = st.columns(2)
    with c1:
        st.markdown("**Source tokens**")
        src = token_table(tok, analysis.source.ids)
        st.dataframe(src, width="stretch", hide_index=False, height=min(table_height(src), 740))
    with c2:
        st.markdown("**Output tokens** (with the probability the model gave each)")
        out = token_table(tok, out_ids, target=True, probability=analysis.maps.next_probs[: len(out_ids)])
        st.dataframe(
            out,
            width="stretch",
            height=min(table_height(out), 740),
            column_config={"probability": PROBABILITY},
        )
    cfg = ctx.cfg
    if cfg.n_logits < cfg.vocab_size:
        seen = "German pieces seen often in training" if ctx.task == "translate" else "the pieces of its task"
        writes = f"only pieces of its target vocabulary ({seen}: {cfg.n_logits:,} of {cfg.vocab_size:,})"
    else:
        writes = f"pieces of the whole vocabulary ({cfg.vocab_size:,}), which the encoder reads too"
    specials = ", ".join(dict.fromkeys(tok.piece_text(i) for i in (cfg.bos_id, cfg.eos_id)))
    st.caption(
        f"{tok.origin_id_name} −1 marks the model's own specials ({specials}). {tok.unknown_rule} The decoder writes {writes}."
    )

    if analysis.beam:
        st.subheader("Beam search")
        hyp = pd.DataFrame(analysis.beam.hypotheses, columns=["hypothesis", "score (log-prob / length penalty)"])
        st.dataframe(hyp, width="stretch")
        show(vs.beam_tree(analysis.beam), "beam_tree")

    download(
        "Whole analysis (JSON)",
        partial(state.analysis_json, analysis),
        "attention-analysis.json",
        "application/json",
        kind="secondary",
    )


def page(frame: state.Frame) -> None:
    """Translate for the frame's input: what app.py's navigation runs (a hint instead when there is none)."""
    if (ctx := state.page_context(frame)) is not None:
        render(ctx)

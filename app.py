"""Attention Explorer: see what a small encoder-decoder Transformer attends to, for any sentence you type.

Start it with ``streamlit run app.py``. This script is the thin front end: it reads widgets, calls
``model.analysis`` (through the caches below), hands arrays and tokens to ``viz`` and places the
figures; it computes nothing of its own beyond picking and stacking arrays.

State, as the guide asks:
- the model is loaded once per process (``st.cache_resource``) and never changed: every tweak (hidden
  source tokens, causal mask, window, temperature, ablated heads) is an ``Interventions`` argument;
- results per input are cached (``st.cache_data``, bounded) with every input as an argument;
- per-user state (forced tokens, play/pause) lives in ``st.session_state``;
- the URL holds sentence, view, model, method, kind, layer, head and step (widgets bound with
  ``bind="query-params"``), so a teacher can share a link to exactly what she sees;
- widgets that change one view only (layer/head pickers, the step slider) sit in ``st.fragment``.
"""

from __future__ import annotations

import difflib
import html
import json
import logging
import os
from dataclasses import astuple, dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from model.analysis import (
    Analysis,
    DecodeSettings,
    InputError,
    Maps,
    analyze,
    reference_maps,
    step_trace,
    teacher_forced,
    word_order_demo,
)
from model.checkpoint import PRETRAINED, Loaded, load_checkpoint
from model.transformer import KINDS, Interventions
from viz import attention as va
from viz import export as vx
from viz import positional as vp
from viz import shapes as vsh
from viz import stats as vst
from viz import steps as vs
from viz import tokens as vt

log = logging.getLogger("attention_explorer")

MODELS_DIR = Path(os.environ.get("ATTENTION_EXPLORER_MODELS", PRETRAINED))  # folders holding config.json
DEFAULT_MODEL = "en-de"
DEBUG = os.environ.get("ATTENTION_EXPLORER_DEBUG") == "1"  # tests: let exceptions through
PLAY_SECONDS = 0.9  # one decoding step per tick while "Play" runs
TOP_K = 8  # candidates shown per decoding step
PLOTLY_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}

VIEWS = {
    "translate": "Translate",
    "attention": "Attention",
    "steps": "Step through generation",
    "pe": "Positional encoding",
    "masks": "Mask lab",
    "stats": "Head statistics",
    "shapes": "Shapes",
}
KIND_NAMES = {"enc_self": "Encoder self-attention", "dec_self": "Decoder causal self-attention", "cross": "Cross-attention"}
METHODS = {"greedy": "Greedy", "beam": "Beam search", "sample": "Sampling"}
EXAMPLES = {
    "translate": [
        "A dog jumps over a green fence.",
        "Two young men are playing soccer in the park.",
        "A woman in a red dress is riding a bicycle.",
        "A little girl climbs into a wooden playhouse.",
        "The man with the hat is reading a newspaper.",
    ],
    "reverse": [" a b c d", " h e l l o", " t r a n s f o r m e r", " x y z z y", " q w e r t y u i o p"],
}
WORD_ORDER = {"translate": ("dog bites man", "man bites dog"), "reverse": ("a b c", "c b a")}

TEACHES = {
    "translate": "What the model reads and writes. Text is cut into sub-word pieces (tiktoken cl100k pieces, renumbered "
    "into this model's small vocabulary); the encoder reads the source pieces plus <eos>, and the decoder writes the "
    "output one piece at a time, from the target-language part of the vocabulary, until it emits <eos>. Greedy takes "
    "the most probable piece at each step, beam search keeps several partial outputs and picks the best-scoring one, "
    "sampling draws at random.",
    "attention": "Each tile is one head's attention weights softmax(QKᵀ/√d_head) (paper eq. 1): a row is a query token, "
    "the columns are the keys it reads, and every row sums to 1. Encoder self-attention mixes the source; decoder "
    "self-attention is causal, so a token sees only itself and earlier outputs (the grey triangle is masked); "
    "cross-attention is where each output step looks in the source, often close to a word alignment.",
    "steps": "Decoding is a loop. At step t the decoder has read <bos> and the t pieces written so far; it gives a "
    "probability to every piece it can write (the target vocabulary) and one is appended. Watch the new query's "
    "cross-attention move along the source, and force another candidate to see how the rest of the output follows "
    "from one choice.",
    "pe": "Attention itself ignores word order: without positional information, 'dog bites man' and 'man bites dog' give "
    "the same vectors, only shuffled. The paper adds sine and cosine waves of geometrically growing wavelengths to "
    "the embeddings (section 3.5), so every position gets its own pattern and nearby positions look alike.",
    "masks": "Masks decide which keys a query may read. Hide source tokens, lift the causal mask, restrict self-attention "
    "to a local window, sharpen or flatten the softmax with a temperature, or switch heads off, then compare output "
    "and attention before and after. Nothing is retrained: same weights, a different forward pass.",
    "stats": "Numbers that summarise each head: entropy (low = focused on a few keys, high = spread out), how far it looks, "
    "and how much weight goes to the diagonal, the previous token, the first and the last token. Attention rollout "
    "(Abnar & Zuidema 2020) multiplies the layers' head-averaged maps, with the residual connection, to estimate "
    "which source tokens each encoder output mixes in the end.",
    "shapes": "One forward pass as tensor shapes, with this input's numbers: ids → embeddings × √d_model + positional "
    "encoding → queries, keys and values split into n_heads heads of d_head = d_model / n_heads → attention weights "
    "→ feed-forward → logits, one score per piece of the target vocabulary.",
}


# -- cached loading and analysis ------------------------------------------------------------------------------------


def available_models() -> list[str]:
    """Checkpoint folders under ``MODELS_DIR`` (those with a config.json), the default one first."""
    if not MODELS_DIR.is_dir():
        return []
    names = sorted(p.name for p in MODELS_DIR.iterdir() if (p / "config.json").is_file())
    return sorted(names, key=lambda n: (n != DEFAULT_MODEL, n != "reverse", n))


@st.cache_resource(show_spinner="Loading the model…", max_entries=4)
def load_model(path: str) -> Loaded:
    """The checkpoint at ``path`` in eval mode, shared read-only by every session of this process."""
    return load_checkpoint(path)


@st.cache_data(show_spinner=False, max_entries=16)
def model_info(path: str) -> dict:
    """What metrics.json says about training (task, BLEU), or {} if it is missing or unreadable."""
    try:
        data = json.loads((Path(path) / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def task_of(path: str) -> str:
    """The task the checkpoint was trained on: "reverse" (toy letter reversal) or "translate"."""
    task = model_info(path).get("training", {}).get("task")
    return "reverse" if task == "reverse" or (task is None and "reverse" in Path(path).name) else "translate"


def iv_of(t: tuple) -> Interventions:
    """Interventions from the hashable tuple (src_hidden, causal, ablate, temperature, window, use_pos_encoding)."""
    return Interventions(frozenset(t[0]), t[1], frozenset(t[2]), t[3], t[4], t[5])


NO_IV = ((), True, (), 1.0, None, True)


@st.cache_data(show_spinner="Translating…", max_entries=32)
def run_analysis(path: str, text: str, settings: tuple, iv: tuple = NO_IV) -> Analysis:
    """``model.analysis.analyze`` for one input; ``settings`` is ``astuple(DecodeSettings)``, ``iv`` see ``iv_of``."""
    m = load_model(path)
    return analyze(m.model, m.tokenizer, text, DecodeSettings(*settings), iv_of(iv))


@st.cache_data(show_spinner="Decoding step by step…", max_entries=64)
def run_steps(path: str, text: str, settings: tuple, forced: tuple[int, ...]) -> list:
    """``model.analysis.step_trace`` of one input with a forced output prefix (compact ids)."""
    m = load_model(path)
    a = run_analysis(path, text, settings)
    return step_trace(m.model, m.tokenizer, a.source.ids, settings=DecodeSettings(*settings), forced=forced, k=TOP_K)


@st.cache_data(show_spinner="Teacher-forcing the reference…", max_entries=32)
def run_reference(path: str, text: str, settings: tuple, reference: str):
    """Maps of the reference translation fed to the decoder (teacher forcing): (maps, decoder input, predicted)."""
    m = load_model(path)
    return reference_maps(m.model, m.tokenizer, run_analysis(path, text, settings).source, reference)


@st.cache_data(show_spinner=False, max_entries=32)
def run_forced_original(path: str, text: str, settings: tuple, iv: tuple) -> Maps:
    """Maps of the unchanged model's output, teacher-forced under ``iv``: rows line up with the original maps."""
    m = load_model(path)
    a = run_analysis(path, text, settings)
    eos, n = m.model.cfg.eos_id, m.model.cfg.max_len
    tgt_in, tgt_out = ([m.model.cfg.bos_id] + a.out_ids)[:n], (a.out_ids + [eos])[:n]
    return teacher_forced(m.model, a.source.ids, tgt_in, tgt_out, iv_of(iv))


@st.cache_data(show_spinner=False, max_entries=16)
def run_word_order(path: str, a: str, b: str) -> dict:
    """``model.analysis.word_order_demo``: encoder states of two orderings, with and without positional encoding."""
    m = load_model(path)
    return word_order_demo(m.model, m.tokenizer, a, b)


@st.cache_data(show_spinner=False, max_entries=16)
def positional_matrix(path: str, n: int) -> np.ndarray:
    """The model's positional encoding for positions 0..n-1, ``(n, d_model)`` float32."""
    return load_model(path).model.positional_encoding(n).detach().float().cpu().numpy()


@st.cache_data(show_spinner=False, max_entries=32)
def run_head_stats(path: str, text: str, settings: tuple) -> tuple[pd.DataFrame, np.ndarray]:
    """Per-head statistics table and the encoder's attention rollout ``(L, S, S)`` of one input."""
    m = run_analysis(path, text, settings).maps
    return vst.head_stats(m.enc_self, m.dec_self, m.cross), vst.rollout(m.enc_self)


# -- small helpers for placing things --------------------------------------------------------------------------------


@dataclass(frozen=True)
class MapSet:
    """The three kinds of maps of one teacher-forced pass, with the tokens that label their rows and columns."""

    maps: Maps
    src: list[str]
    tgt_in: list[str]
    tgt_out: list[str]

    @classmethod
    def of(cls, a: Analysis) -> MapSet:
        return cls(a.maps, a.source.tokens, a.tgt_in_tokens, a.tgt_out_tokens)

    def kind(self, kind: str) -> tuple[np.ndarray, list[str], list[str], list[str] | None]:
        """(attn (L, H, Q, K), query tokens, key tokens, predicted tokens or None) of one kind."""
        if kind == "enc_self":
            return self.maps.enc_self, self.src, self.src, None
        if kind == "dec_self":
            return self.maps.dec_self, self.tgt_in, self.tgt_in, self.tgt_out
        return self.maps.cross, self.tgt_in, self.src, self.tgt_out


@dataclass(frozen=True)
class Ctx:
    """Everything a view needs about the current input."""

    path: str
    text: str
    settings: tuple
    a: Analysis
    loaded: Loaded

    @property
    def cfg(self):
        return self.loaded.model.cfg


def pick_map(attn: np.ndarray, layer: int, head: int | None) -> np.ndarray:
    """One head's map ``(Q, K)`` of ``attn (L, H, Q, K)``, or the mean over heads when ``head`` is None."""
    return attn[layer, head] if head is not None else va.head_average(attn, layer)


def head_label(layer: int, head: int | None) -> str:
    return f"layer {layer + 1}, " + ("mean over heads" if head is None else f"head {head + 1}")


def show(fig, key: str, *, csv: tuple | None = None, on_select=None) -> None:
    """Place a figure with its exports: the figure as HTML and, for an attention map, a CSV.

    ``csv`` is ``(w (Q, K), q_tokens, k_tokens)`` or ``(w, q_tokens, k_tokens, predicted)``.
    """
    st.plotly_chart(
        fig,
        key=key,
        theme=None,
        config=PLOTLY_CONFIG,
        on_select=on_select or "ignore",
        selection_mode="points",
    )
    with st.container(horizontal=True, gap="small"):
        download("Figure (HTML)", partial(vx.figure_html, fig), f"{key}.html", "text/html")
        if csv is not None:
            data = partial(vx.attention_csv, *csv[:3], predicted=csv[3] if len(csv) > 3 else None)
            download("Map (CSV)", data, f"{key}.csv", "text/csv")


def download(label: str, data, file_name: str, mime: str, *, kind: str = "tertiary") -> None:
    """A small download link; ``data`` is a callable, so the file is built only when clicked."""
    st.download_button(
        label,
        data=data,
        file_name=file_name,
        mime=mime,
        on_click="ignore",
        key=f"{file_name}__download",
        icon=":material/download:",
        type=kind,
    )


CHIP = "display:inline-block;margin:2px 3px;padding:1px 7px;border-radius:6px;font-family:monospace;font-size:0.95rem;"
CHIP_STYLES = {
    "": "background:#eef1f8;border:1px solid #d5dbea;",
    "changed": "background:#ffe3a3;border:1px solid #e8a800;font-weight:600;",
    "removed": "background:#ffd6d6;border:1px solid #e06666;text-decoration:line-through;",
    "forced": "background:#e3d7ff;border:1px solid #7b5cd6;font-weight:600;",
    "new": "background:#d3f2dc;border:1px solid #37a05a;font-weight:600;",
}


def chips(tokens: list[str], marks: list[str] | None = None, *, css: str = "tokens") -> None:
    """Tokens as little boxes; ``marks[i]`` in CHIP_STYLES colours one. Text is escaped: never raw HTML from input."""
    marks = marks or [""] * len(tokens)
    spans = [
        f'<span style="{CHIP}{CHIP_STYLES[m]}" title="{m or "token"}">{html.escape(t)}</span>'
        for t, m in zip(vt.display(tokens), marks, strict=True)
    ]
    st.html(f'<div class="{css}" style="line-height:2">' + "".join(spans) + "</div>")


def text_box(text: str) -> None:
    """A translation in large type (escaped)."""
    st.html(
        '<div class="translation" style="font-size:1.45rem;padding:0.6rem 0.9rem;border-radius:8px;background:#f3f5fa;'
        f'border-left:4px solid #4c6ef5;white-space:pre-wrap">{html.escape(text) or "&nbsp;"}</div>'
    )


def table_height(df: pd.DataFrame) -> int:
    """Pixel height that shows every row of a dataframe without an inner scroll bar."""
    return 35 * (len(df) + 1) + 3


def slider_or_fixed(label: str, lo: int, hi: int, *, key: str, value: int | None = None, **kw) -> int:
    """``st.slider`` if there is a range, else just the one value (a slider needs min < max)."""
    if hi <= lo:
        st.caption(f"{label}: {lo}")
        return lo
    return st.slider(label, lo, hi, value, key=key, **kw)


def pick_layer_head(n_layers: int, n_heads: int) -> tuple[int, int | None]:
    """Layer and head pickers bound to the URL; returns (layer, head or None for the mean), counted from 0.

    The layer slider spans this kind's ``n_layers``; a layer kept from a deeper kind is moved to the last one.
    """
    clamp = st.session_state.get("layer", 1) > n_layers  # e.g. encoder layer 5 -> a 2-layer decoder
    if clamp:
        st.session_state["layer"] = n_layers
    c1, c2 = st.columns(2)
    with c1:
        layer = slider_or_fixed("Layer", 1, n_layers, key="layer", value=None if clamp else n_layers, bind="query-params")
    with c2:
        head = st.select_slider("Head", ["mean", *map(str, range(1, n_heads + 1))], value="mean", key="head", bind="query-params")
    return layer - 1, None if head == "mean" else int(head) - 1


def n_layers_of(cfg, kind: str) -> int:
    return cfg.n_enc_layers if kind == "enc_self" else cfg.n_dec_layers


def reset_per_input_state() -> None:
    """A new sentence or model: start decoding at step 1, drop forced tokens and hidden source positions."""
    st.session_state["step"] = 1
    st.session_state["playing"] = False
    for key in ("forced", "hide"):
        st.session_state.pop(key, None)


def use_example() -> None:
    ex = st.session_state.get("example")
    if ex:
        st.session_state["sentence"] = ex
        st.session_state["example"] = None
        reset_per_input_state()


def on_model_change() -> None:
    reset_per_input_state()
    st.session_state["sentence"] = EXAMPLES[task_of(str(MODELS_DIR / st.session_state["model"]))][0]
    for kind in KINDS:
        st.session_state.pop(f"ablate_{kind}", None)


# -- sidebar: model and decoding settings ----------------------------------------------------------------------------


def sidebar() -> tuple[str, Loaded, tuple]:
    """Model picker, device, decoding settings; returns (model path, loaded model, settings tuple)."""
    sb = st.sidebar
    names = available_models()
    if not names:
        sb.error(
            f"No checkpoint found in {MODELS_DIR}: a checkpoint is a folder with model.safetensors, config.json, vocab.json."
        )
        st.stop()
    with sb:
        name = st.selectbox(
            "Model",
            names,
            key="model",
            bind="query-params",
            on_change=on_model_change,
            help="Checkpoint folders in pretrained/. en-de translates English into German; reverse is a toy model "
            "that writes a sequence of letters backwards (easy to read attention: it should look at the mirror position).",
        )
    path = str(MODELS_DIR / name)
    try:
        loaded = load_model(path)
    except (OSError, ValueError, TypeError) as e:
        sb.error(f"Cannot load {name}: {e}")
        st.stop()
    cfg = loaded.model.cfg
    info = model_info(path).get("training", {})
    facts = [f"device **{loaded.device}**", f"{loaded.model.n_params() / 1e6:.2f} M parameters"]
    bleu = info.get("test_bleu") or info.get("val_bleu_greedy")
    if isinstance(bleu, int | float):
        facts.append(f"BLEU {bleu:.1f} ({'test' if info.get('test_bleu') else 'validation'}, greedy)")
    sb.caption(" · ".join(facts))
    sb.caption(
        f"d_model {cfg.d_model} · {cfg.n_heads} heads × d_head {cfg.d_head} · d_ff {cfg.d_ff} · "
        f"{cfg.n_enc_layers}+{cfg.n_dec_layers} layers · vocab {cfg.vocab_size} (decoder {cfg.n_logits}) · max {cfg.max_len} tokens"
    )

    sb.subheader("Decoding")
    with sb:
        method = st.radio("Method", list(METHODS), format_func=METHODS.get, key="method", bind="query-params", horizontal=True)
        d = DecodeSettings()
        beam_size, alpha, temperature, top_k, top_p, seed = d.beam_size, d.alpha, d.temperature, d.top_k, d.top_p, d.seed
        if method == "beam":
            beam_size = st.slider("Beam size", 1, 8, d.beam_size, key="beam_size", help="Hypotheses kept at each step.")
            alpha = st.slider(
                "Length penalty α",
                0.0,
                3.0,
                d.alpha,
                0.1,
                key="alpha",
                help="Score = log-probability / ((5 + length) / 6)^α (Wu et al. 2016). 0 = no penalty; higher favours longer outputs.",
            )
        elif method == "sample":
            temperature = st.slider(
                "Temperature", 0.1, 2.0, 1.0, 0.05, key="sample_temperature", help="Divides the logits: < 1 sharper, > 1 flatter."
            )
            top_k = st.slider("Top-k", 0, 50, 0, key="top_k", help="Keep only the k most probable pieces (0 = all).")
            top_p = st.slider(
                "Top-p (nucleus)",
                0.05,
                1.0,
                1.0,
                0.05,
                key="top_p",
                help="Keep the smallest set of pieces whose probability reaches p.",
            )
            seed = st.number_input("Seed", 0, 2**31 - 1, 0, key="seed", help="Same seed, same sample.")
    settings = astuple(DecodeSettings(method, beam_size, alpha, temperature, top_k, top_p, int(seed)))
    return path, loaded, settings


# -- views -----------------------------------------------------------------------------------------------------------


def view_translate(ctx: Ctx) -> None:
    a, tok = ctx.a, ctx.loaded.tokenizer
    st.subheader("Translation" if task_of(ctx.path) == "translate" else "Output")
    text_box(a.translation)
    how = {"greedy": "greedy decoding", "beam": f"beam search (size {a.settings['beam_size']}, α {a.settings['alpha']})"}
    how["sample"] = (
        f"sampling (temperature {a.settings['temperature']}, top-k {a.settings['top_k']}, top-p {a.settings['top_p']}, seed {a.settings['seed']})"
    )
    st.caption(
        f"{how[a.settings['method']]} on {ctx.loaded.device} · {len(a.source.ids)} source tokens → {len(a.out_ids)} output tokens"
    )
    if not a.translation:
        st.caption("The output holds no text: only special tokens (see the table below).")
    if not a.finished:
        st.warning("The output stopped at the token budget before the model wrote <eos>: it may be cut short.")

    c1, c2 = st.columns(2)
    with c1:
        st.markdown("**Source tokens**")
        src = pd.DataFrame(
            [(p.text, p.id, p.cl100k_id) for p in tok.pieces(a.source.ids)], columns=["piece", "compact id", "cl100k id"]
        )
        src["piece"] = vt.display(list(src["piece"]))
        st.dataframe(src, width="stretch", hide_index=False, height=min(table_height(src), 740))
    with c2:
        st.markdown("**Output tokens** (with the probability the model gave each)")
        ids = a.out_ids + ([ctx.cfg.eos_id] if a.finished else [])
        out = pd.DataFrame([(p.text, p.id, p.cl100k_id) for p in tok.pieces(ids)], columns=["piece", "compact id", "cl100k id"])
        out["piece"] = vt.display(list(out["piece"]))
        out["probability"] = a.maps.next_probs[: len(ids)]
        st.dataframe(
            out,
            width="stretch",
            height=min(table_height(out), 740),
            column_config={"probability": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="%.3f")},
        )
    st.caption(
        "cl100k id −1 marks the model's own specials (<bos>, <eos>). Pieces the small vocabulary lacks are spelled byte by "
        "byte (<0x..>); the decoder writes only pieces of its target vocabulary (German pieces seen often in training)."
    )

    if a.beam:
        st.subheader("Beam search")
        hyp = pd.DataFrame(a.beam["hypotheses"], columns=["hypothesis", "score (log-prob / length penalty)"])
        st.dataframe(hyp, width="stretch")
        show(vs.beam_tree(a.beam["nodes"], a.beam["best_path"]), "beam_tree")

    download("Whole analysis (JSON)", partial(analysis_json, a), "attention-analysis.json", "application/json", kind="secondary")


def analysis_json(a: Analysis) -> str:
    return json.dumps(a.to_json_dict(), ensure_ascii=False)


def view_attention(ctx: Ctx) -> None:
    attention_panel(ctx)


@st.fragment
def attention_panel(ctx: Ctx) -> None:
    """Mosaics and zoom of one analysis: the kind radio and the toggle rerun only this panel."""
    ms = MapSet.of(ctx.a)
    c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
    with c1:
        kind = st.radio(
            "Attention kind", KINDS, format_func=KIND_NAMES.get, key="kind", bind="query-params", horizontal=True, index=2
        )
    with c2:
        all_kinds = st.toggle("All three kinds", key="all_kinds", help="Draw the mosaics of all three kinds at once.")
    if kind != "enc_self":
        st.caption("Decoder rows read “input → predicted”: the query at input token t is the one that predicted token t + 1.")
    for kd in KINDS if all_kinds else (kind,):
        attn, q, k, pred = ms.kind(kd)
        fig = va.attention_mosaic(
            attn, q, k, kind=kd, predicted=pred, title=f"{KIND_NAMES[kd]}: every layer (rows) × head (columns)"
        )
        show(fig, f"mosaic_{kd}")
    st.subheader("Zoom")
    c1, c2 = st.columns([3, 2])
    with c1:
        attention_zoom(ctx, kind)
    with c2:
        # off by default: one chart fewer to draw each time the kind changes (the zoom also offers "mean")
        if st.toggle("Mean over heads, per layer", key="layer_means", help="What each layer as a whole attends to."):
            attn, q, k, pred = ms.kind(kind)
            avg = va.layer_average(attn)  # (L, Q, K)
            st.caption("Each layer's mean over its heads: what the layer as a whole attends to.")
            fig = va.attention_mosaic(
                avg[:, None], q, k, kind=kind, predicted=pred, title="Mean over heads, per layer", head_names=["mean"]
            )
            show(fig, "layer_average")


@st.fragment
def attention_zoom(ctx: Ctx, kind: str) -> None:
    """Zoom on one head (or the mean over heads) of ``kind``: only this reruns when layer or head moves."""
    attn, q, k, pred = MapSet.of(ctx.a).kind(kind)
    layer, head = pick_layer_head(n_layers_of(ctx.cfg, kind), ctx.cfg.n_heads)
    w = pick_map(attn, layer, head)
    title = f"{KIND_NAMES[kind]}, {head_label(layer, head)}"
    fig = va.attention_heatmap(w, q, k, title=title, kind=kind, predicted=pred, layer=layer, head=head)
    show(fig, "zoom", csv=(w, q, k, pred), on_select="rerun")
    cell = clicked_cell("zoom", *w.shape)
    if cell is None:
        st.caption("Click a cell to see what its query attends to in every head of this layer.")
        return
    qi, ki = cell
    query = vt.display([q[qi]])[0] + (f" → {vt.display([pred[qi]])[0]}" if pred is not None else "")
    st.markdown(
        f"Query {qi} **{query}** gives key {ki} **{vt.display([k[ki]])[0]}** weight **{w[qi, ki]:.3f}** "
        f"({head_label(layer, head)}). Its whole row, in every head of layer {layer + 1}:"
    )
    row = attn[layer, :, qi, :]  # (H, K): this query's weights in each head
    fig = vs.step_attention(row, k, title=f"Query {qi} ({query}), layer {layer + 1}", query=q[qi], layer=layer)
    show(fig, "zoom_row", csv=(row, [f"head {h + 1}" for h in range(row.shape[0])], k))


def clicked_point(chart_key: str) -> dict | None:
    """The point last clicked in the chart placed with ``chart_key`` (``on_select``), or None."""
    points = st.session_state.get(chart_key, {}).get("selection", {}).get("points", [])
    return points[0] if points else None


def clicked_cell(chart_key: str, n_q: int, n_k: int) -> tuple[int, int] | None:
    """(query, key) of the last heatmap cell clicked in chart ``chart_key``, if it lies inside an ``n_q x n_k`` map."""
    p = clicked_point(chart_key)
    cd = p.get("customdata") if p else None
    if not isinstance(cd, list) or len(cd) != 2:
        return None
    qi, ki = int(cd[0]), int(cd[1])
    return (qi, ki) if 0 <= qi < n_q and 0 <= ki < n_k else None


def view_steps(ctx: Ctx) -> None:
    if ctx.settings[0] == "beam":
        st.info("Beam search has no single next token, so stepping follows greedy choices here; the beam tree is below.")
    st.session_state["_full_run"] = True  # the fragment advances "Play" only on its own timed reruns
    playing = st.session_state.get("playing", False)
    st.fragment(run_every=PLAY_SECONDS if playing else None)(steps_fragment)(ctx)
    st.markdown("**Encoder self-attention** (the same at every step: the source is encoded once)")
    ms = MapSet.of(ctx.a)
    attn, q, k, _ = ms.kind("enc_self")
    show(va.attention_mosaic(attn, q, k, kind="enc_self", title="Encoder self-attention: layer × head"), "steps_enc")
    if ctx.a.beam:
        st.subheader("Beam search tree")
        show(vs.beam_tree(ctx.a.beam["nodes"], ctx.a.beam["best_path"]), "steps_beam_tree")
    reference_section(ctx)


def forced_ids(ctx: Ctx) -> tuple[int, ...]:
    f = st.session_state.get("forced")
    return f["ids"] if f and f["sig"] == (ctx.path, ctx.text, ctx.settings) else ()


def force(ctx: Ctx, prefix: tuple[int, ...], token: int) -> None:
    """Continue decoding from ``prefix`` + ``token`` (compact ids) instead of the model's own choice."""
    st.session_state["forced"] = {"sig": (ctx.path, ctx.text, ctx.settings), "ids": (*prefix, int(token))}
    st.session_state["playing"] = False


def force_from_pick(ctx: Ctx, prefix: tuple[int, ...]) -> None:
    token = st.session_state.get("force_pick")
    if token is not None:
        force(ctx, prefix, token)
        st.session_state["force_pick"] = None


def force_from_chart(ctx: Ctx, prefix: tuple[int, ...], candidates: list) -> None:
    """A click on a candidate bar: the point carries the candidate's compact id in customdata, else its index."""
    p = clicked_point("cand_chart")
    if p is None:
        return
    cd = p.get("customdata")
    token = cd[0] if isinstance(cd, list | tuple) and cd else cd
    if token is None and p.get("point_index") is not None:
        token = candidates[p["point_index"]][1]
    if token is not None:
        force(ctx, prefix, int(token))


def stop_playing() -> None:
    if st.session_state.get("playing"):
        st.session_state["playing"] = False
        st.session_state["_app_rerun"] = True


def move_step(delta: int, n: int) -> None:
    stop_playing()
    st.session_state["step"] = min(max(st.session_state.get("step", 1) + delta, 1), n)


def toggle_play(n: int) -> None:
    playing = not st.session_state.get("playing", False)
    if playing and st.session_state.get("step", 1) >= n:
        st.session_state["step"] = 1  # play again from the start
    st.session_state["playing"] = playing
    st.session_state["_app_rerun"] = True  # a full rerun re-registers the fragment with (or without) its timer


def steps_fragment(ctx: Ctx) -> None:
    """Step slider, previous / next / play, and everything that depends on the step."""
    forced = forced_ids(ctx)
    trace = run_steps(ctx.path, ctx.text, ctx.settings, forced)
    n = len(trace)
    full_run = st.session_state.pop("_full_run", False)
    if st.session_state.get("playing") and not full_run:  # a timed rerun: one step further
        if st.session_state.get("step", 1) < n:
            st.session_state["step"] = st.session_state.get("step", 1) + 1
        if st.session_state["step"] >= n:
            st.session_state["playing"] = False
            st.session_state["_app_rerun"] = True
    if "step" in st.session_state:
        st.session_state["step"] = min(max(int(st.session_state["step"]), 1), n)

    c = st.columns([1.3, 1.1, 1.1, 6], vertical_alignment="bottom")
    c[0].button("Previous", key="prev", icon=":material/skip_previous:", on_click=move_step, args=(-1, n), width="stretch")
    c[1].button("Next", key="next", icon=":material/skip_next:", on_click=move_step, args=(1, n), width="stretch")
    playing = st.session_state.get("playing", False)
    c[2].button(
        "Pause" if playing else "Play",
        key="play",
        icon=":material/pause:" if playing else ":material/play_arrow:",
        on_click=toggle_play,
        args=(n,),
        width="stretch",
    )
    with c[3]:
        if n > 1:  # a select_slider keeps its identity (and value) when the number of steps changes; st.slider would not
            t = st.select_slider("Step", list(range(1, n + 1)), key="step", bind="query-params", on_change=stop_playing) - 1
        else:
            st.caption("Step 1 of 1: the model ended at once.")
            t = 0
    v = trace[t]
    layer, head = pick_layer_head(ctx.cfg.n_dec_layers, ctx.cfg.n_heads)

    left, right = st.columns([2, 3])
    with left:
        st.markdown(f"**Step {t + 1} of {n}**: output so far, and the piece chosen now")
        marks = [""] + ["forced" if s.forced else "" for s in trace[:t]] + ["forced" if v.forced else "new"]
        chips(v.prefix_tokens + [v.chosen_token], marks, css="output-so-far")
        if forced:
            st.caption("Purple: tokens you forced. Green: the piece chosen at this step.")
        title = f"Top {len(v.candidates)} next pieces" + (" (you forced another one)" if v.forced else "")
        prefix = tuple(s.chosen for s in trace[:t])
        show(
            vs.candidates_bar(v.candidates, v.chosen, title=title, forced=v.forced),
            "cand_chart",
            on_select=partial(force_from_chart, ctx, prefix, v.candidates),
        )
        options = [c[1] for c in v.candidates if c[1] != v.chosen]
        labels = {c[1]: f"{vt.display([c[0]])[0]}  (p = {c[2]:.3f})" for c in v.candidates}
        st.selectbox(
            "Force another candidate at this step (or click its bar)",
            options,
            index=None,
            format_func=labels.get,
            placeholder="Pick a piece and decoding goes on from there…",
            key="force_pick",
            on_change=force_from_pick,
            args=(ctx, prefix),
        )
        if forced:
            st.button("Back to the model's own choices", key="unforce", on_click=lambda: st.session_state.pop("forced", None))
    with right:
        which = head_label(layer, head)
        row = f"{vt.display([v.prefix_tokens[-1]])[0]} → {vt.display([v.chosen_token])[0]}"
        heads = [f"head {h + 1}" for h in range(ctx.cfg.n_heads)]
        for name, attn, keys, key_title in (
            ("cross", v.cross_attn[layer], ctx.a.source.tokens, "source token"),  # (H, S)
            ("self", v.self_attn[layer], v.prefix_tokens, "output so far"),  # (H, t + 1)
        ):
            w = attn if head is None else attn[head]  # every head (and their mean) or one head
            what = (
                "Cross-attention of the new query over the source"
                if name == "cross"
                else "Causal self-attention of the new query over the output so far"
            )
            fig = vs.step_attention(w, keys, title=f"{what}, {which}", query=row, layer=layer, key_title=key_title)
            show(fig, f"step_{name}", csv=(np.atleast_2d(w), heads if head is None else [row], keys))

    if st.toggle(
        "Every layer and head so far",
        key="steps_all_heads",
        help="Cross-attention and causal self-attention of every layer and head up to this step (the last row is this "
        "step's query). Two more charts: each step move redraws a little slower.",
    ):
        L, H, S = v.cross_attn.shape
        cross_so_far = np.stack([s.cross_attn for s in trace[: t + 1]], axis=2)  # (L, H, t + 1, S)
        self_so_far = np.zeros((L, H, t + 1, t + 1), dtype=np.float32)
        for i, s in enumerate(trace[: t + 1]):
            self_so_far[:, :, i, : i + 1] = s.self_attn  # row i: the query at step i over the prefix <bos>..y_i
        predicted = [s.chosen_token for s in trace[: t + 1]]
        # Full width, one under the other: with few rows so far, half a page is too narrow for the tiles' labels.
        fig = va.attention_mosaic(
            cross_so_far, v.prefix_tokens, ctx.a.source.tokens, kind="cross", predicted=predicted, title="Cross-attention"
        )
        show(fig, "steps_cross_mosaic")
        title = "Decoder causal self-attention"
        fig = va.attention_mosaic(
            self_so_far, v.prefix_tokens, v.prefix_tokens, kind="dec_self", predicted=predicted, title=title
        )
        show(fig, "steps_self_mosaic")
    if st.session_state.pop("_app_rerun", False):
        st.rerun()


def reference_section(ctx: Ctx) -> None:
    st.subheader("Compare with a reference")
    st.caption(
        "Type a reference translation: it is fed to the decoder whatever the model would have chosen (teacher forcing, "
        "as in training). Compare its cross-attention with the model's own free-running output."
    )
    ref = st.text_input("Reference translation", key="reference", placeholder="e.g. Ein Hund springt über einen grünen Zaun.")
    if not ref.strip():
        return
    reference_fragment(ctx, ref)


@st.fragment
def reference_fragment(ctx: Ctx, ref: str) -> None:
    try:
        maps, tgt_in, tgt_out = run_reference(ctx.path, ctx.text, ctx.settings, ref)
    except InputError as e:
        st.error(str(e))
        return
    c = st.columns(2)
    with c[0]:
        layer = slider_or_fixed("Layer ", 1, ctx.cfg.n_dec_layers, key="ref_layer", value=ctx.cfg.n_dec_layers) - 1
    with c[1]:
        h = st.select_slider("Head ", ["mean", *map(str, range(1, ctx.cfg.n_heads + 1))], value="mean", key="ref_head")
    head = None if h == "mean" else int(h) - 1
    free = pick_map(ctx.a.maps.cross, layer, head)
    forced = pick_map(maps.cross, layer, head)
    c1, c2 = st.columns(2)
    with c1:
        fig = va.attention_heatmap(
            free,
            ctx.a.tgt_in_tokens,
            ctx.a.source.tokens,
            title=f"Free-running (model's own output), {head_label(layer, head)}",
            kind="cross",
            predicted=ctx.a.tgt_out_tokens,
        )
        show(fig, "ref_free", csv=(free, ctx.a.tgt_in_tokens, ctx.a.source.tokens, ctx.a.tgt_out_tokens))
    with c2:
        fig = va.attention_heatmap(
            forced,
            tgt_in,
            ctx.a.source.tokens,
            title=f"Teacher-forced reference, {head_label(layer, head)}",
            kind="cross",
            predicted=tgt_out,
        )
        show(fig, "ref_forced", csv=(forced, tgt_in, ctx.a.source.tokens, tgt_out))
    probs = pd.DataFrame({"reference piece": vt.display(tgt_out), "model's probability": maps.next_probs})
    st.caption(f"How likely the model finds each reference piece (mean {float(maps.next_probs.mean()):.3f}):")
    st.dataframe(probs.T, width="stretch")


def view_pe(path: str, loaded: Loaded) -> None:
    cfg = loaded.model.cfg
    if cfg.pos_encoding != "sinusoidal":
        st.info(
            "This model learned its positional embeddings instead of the sinusoids; the wavelengths in the legend are those of the formula."
        )
    n = st.slider("Positions shown", 2, cfg.max_len, min(64, cfg.max_len), key="pe_n")
    pe = positional_matrix(path, n)
    c1, c2 = st.columns(2)
    with c1:
        show(vp.pe_matrix(pe, sinusoidal=cfg.pos_encoding == "sinusoidal"), "pe_matrix")
    with c2:
        show(vp.pe_similarity(pe), "pe_similarity")
    default = [d for d in (0, 1, 8, cfg.d_model // 2) if d < cfg.d_model]
    dims = st.multiselect(
        "Dimensions to plot",
        list(range(cfg.d_model)),
        default=default,
        key="pe_dims",
        help="Even dimensions are sines, odd ones cosines; the wavelength grows with the dimension.",
    )
    if dims:
        show(vp.pe_curves(pe, sorted(dims), d_model=cfg.d_model), "pe_curves")
    else:
        st.info("Pick at least one dimension to plot its curve.")

    st.subheader("Why order needs positional encoding")
    a0, b0 = WORD_ORDER[task_of(path)]
    c1, c2 = st.columns(2)
    a = c1.text_input("Sentence A", a0, key="wo_a")
    b = c2.text_input("Sentence B (the same words in another order)", b0, key="wo_b")
    try:
        demo = run_word_order(path, a, b)
    except InputError as e:
        st.error(str(e))
        return
    m1, m2 = st.columns(2)
    m1.metric(
        "Largest difference, PE off",
        f"{demo['pe_off']['max_diff']:.2e}",
        help="max |enc(B)[i] − enc(A)[perm i]|: 0 up to float error",
    )
    m2.metric("Largest difference, PE on", f"{demo['pe_on']['max_diff']:.3f}")
    st.caption(
        "Without positional encoding each word of B gets exactly the vector the same word had in A: the encoder is "
        "permutation-equivariant and cannot tell who bites whom. With it, the vectors differ."
    )
    show(vp.word_order_figure(demo), "word_order")


def view_masks(ctx: Ctx) -> None:
    cfg, a = ctx.cfg, ctx.a
    S = len(a.source.tokens)
    src_labels = {i: f"{i}: {t}" for i, t in enumerate(vt.display(a.source.tokens))}
    c1, c2, c3 = st.columns(3)
    with c1:
        hide = st.multiselect(
            "Hide source tokens",
            list(range(S)),
            format_func=src_labels.get,
            key="hide",
            help="No query may attend to them (encoder self-attention and cross-attention). They are still encoded.",
        )
        causal = st.toggle(
            "Causal mask in the decoder",
            True,
            key="causal",
            help="Off: every decoder position may read later ones too, which the model never saw in training.",
        )
        use_pe = st.toggle("Positional encoding", True, key="use_pe")
    with c2:
        window = st.slider(
            "Local window (self-attention)",
            0,
            max(S, len(a.tgt_in_tokens)),  # a window this wide hides nothing
            0,
            key="window",
            help="0 = off. Otherwise a query sees only keys with |query − key| < window: 1 = only itself.",
        )
        temp = st.slider(
            "Attention temperature τ",
            0.25,
            4.0,
            1.0,
            0.05,
            key="attn_temp",
            help="softmax(QKᵀ / (√d_head · τ)): τ > 1 flattens, τ < 1 sharpens.",
        )
    with c3:
        ablate = []
        for kind in KINDS:
            opts = [(l, h) for l in range(n_layers_of(cfg, kind)) for h in range(cfg.n_heads)]
            picked = st.multiselect(
                f"Switch off heads: {KIND_NAMES[kind].lower()}",
                opts,
                format_func=lambda o: f"L{o[0] + 1} H{o[1] + 1}",
                key=f"ablate_{kind}",
            )
            ablate += [(kind, l, h) for l, h in picked]
    iv = (tuple(sorted(hide)), causal, tuple(sorted(ablate)), float(temp), window or None, use_pe)
    if len(hide) == S:
        st.warning(
            "Every source token is hidden: queries over the source have nothing to attend to, so their attention rows are all 0."
        )
    if iv == NO_IV:
        st.info("Change a setting above to see its effect. Before and after are the same for now.")

    after = run_analysis(ctx.path, ctx.text, ctx.settings, iv)
    d = difflib.SequenceMatcher(a=a.tgt_out_tokens, b=after.tgt_out_tokens, autojunk=False)
    before_marks, after_marks = [""] * len(a.tgt_out_tokens), [""] * len(after.tgt_out_tokens)
    for op, i1, i2, j1, j2 in d.get_opcodes():
        if op != "equal":
            before_marks[i1:i2] = ["removed"] * (i2 - i1)
            after_marks[j1:j2] = ["changed"] * (j2 - j1)
    b1, b2 = st.columns(2)
    with b1:
        st.markdown("**Before** (the unchanged model)")
        text_box(a.translation)
        chips(a.tgt_out_tokens, before_marks)
    with b2:
        st.markdown("**After**")
        text_box(after.translation)
        chips(after.tgt_out_tokens, after_marks)
    same = a.tgt_in_tokens == after.tgt_in_tokens
    st.caption(
        "Output unchanged." if same else "Yellow: pieces that changed or are new. Red, struck out: pieces that were dropped."
    )

    mask_maps(ctx, iv, after, same)


@st.fragment
def mask_maps(ctx: Ctx, iv: tuple, after: Analysis, same: bool) -> None:
    """Before / after maps of one kind, layer and head, and their difference."""
    a = ctx.a
    kind = st.radio("Attention kind", KINDS, format_func=KIND_NAMES.get, key="mask_kind", horizontal=True, index=2)
    layer, head = pick_layer_head(n_layers_of(ctx.cfg, kind), ctx.cfg.n_heads)
    w0_all, q0, k0, p0 = MapSet.of(a).kind(kind)
    w1_all, q1, k1, p1 = MapSet.of(after).kind(kind)
    w0, w1 = pick_map(w0_all, layer, head), pick_map(w1_all, layer, head)
    ablated = {(l, h) for k, l, h in iv[2] if k == kind}
    head_off = head is not None and (layer, head) in ablated
    label = head_label(layer, head)
    c1, c2 = st.columns(2)
    with c1:
        fig = va.attention_heatmap(w0, q0, k0, title=f"Before: {label}", kind=kind, predicted=p0, layer=layer, head=head)
        show(fig, "mask_before", csv=(w0, q0, k0, p0))
    with c2:
        fig = va.attention_heatmap(
            w1,
            q1,
            k1,
            title=f"After: {label}",
            kind=kind,
            predicted=p1,
            layer=layer,
            head=head,
            interventions=after.interventions,
            ablated=head_off,
        )
        show(fig, "mask_after", csv=(w1, q1, k1, p1))
    if head_off:
        st.caption(
            "This head is switched off: its output is replaced by zeros before W^O, so what it would attend to no longer matters."
        )

    st.markdown("**Difference** (after − before)")
    d1, d2 = st.columns(2)
    with d2:
        st.caption("Red: the query attends more to this key after the change; blue: less; white: no change.")
        if not same:
            st.info(
                "The output changed, so row t is a different query before and after and the two maps cannot be "
                "subtracted row by row. The difference shown feeds the original output to the changed model instead "
                "(teacher forcing), so the rows line up again."
            )
    with d1:
        if same:
            wt, title = w1, f"After − before: {KIND_NAMES[kind]}, {label}"
        else:
            tf = run_forced_original(ctx.path, ctx.text, ctx.settings, iv)
            wt = pick_map(MapSet(tf, a.source.tokens, a.tgt_in_tokens, a.tgt_out_tokens).kind(kind)[0], layer, head)
            title = f"Changed model on the original output − before: {label}"
        show(va.difference_heatmap(w0, wt, q0, k0, title=title, kind=kind, predicted=p0), "mask_diff", csv=(wt - w0, q0, k0, p0))

    if st.toggle("After: every layer and head of this kind", key="mask_mosaic_on"):
        fig = va.attention_mosaic(
            w1_all, q1, k1, kind=kind, predicted=p1, title=f"After: {KIND_NAMES[kind]}", interventions=after.interventions
        )
        show(fig, "mask_mosaic")


def view_stats(ctx: Ctx) -> None:
    df, roll = run_head_stats(ctx.path, ctx.text, ctx.settings)
    st.caption("Click a column header to sort. Layer and head count from 1.")
    st.dataframe(
        df,
        width="stretch",
        hide_index=True,
        column_config={
            c: st.column_config.NumberColumn(format="%.3f", help=vst.COLUMN_HELP.get(c))
            if df[c].dtype.kind == "f"
            else st.column_config.Column(help=vst.COLUMN_HELP.get(c))
            for c in df.columns
        },
    )
    download("Table (CSV)", partial(df.to_csv, index=False), "head-statistics.csv", "text/csv")
    st.subheader("Attention rollout (encoder)")
    st.caption(
        "Rollout of layer l: Â = ½·I + ½·mean over heads of A, rows renormalised, multiplied from layer 1 to l. Row i: how much each source token contributes to encoder output i, through all layers."
    )
    show(vst.rollout_figure(roll, ctx.a.source.tokens), "rollout")


def view_shapes(ctx: Ctx) -> None:
    cfg = ctx.cfg
    numbers = pd.DataFrame(
        [
            ("d_model", cfg.d_model, "width of every token vector"),
            ("n_heads", cfg.n_heads, "attention heads per layer"),
            ("d_head", cfg.d_head, "d_model / n_heads: width of one head's queries, keys, values"),
            ("d_ff", cfg.d_ff, "hidden width of the feed-forward network"),
            ("encoder layers", cfg.n_enc_layers, "N in the paper (6 there)"),
            ("decoder layers", cfg.n_dec_layers, "N in the paper (6 there); may differ from the encoder's"),
            ("vocab", cfg.vocab_size, "pieces in the shared embedding matrix (source and target)"),
            ("target vocab", cfg.n_logits, "the first pieces of it, those the decoder can write: one logit each"),
            ("max_len", cfg.max_len, "longest sequence, in tokens"),
            ("parameters", ctx.loaded.model.n_params(), "tied embeddings counted once"),
        ],
        columns=["name", "value", "meaning"],
    )
    c1, c2 = st.columns([3, 2])
    with c1:
        st.markdown(
            f"**This input**: B = 1 sentence, S = {len(ctx.a.source.ids)} source tokens, T = {len(ctx.a.tgt_in_tokens)} decoder inputs"
        )
        table = vsh.shapes_table(ctx.a.maps.shapes)
        st.dataframe(table, width="stretch", hide_index=True, height=table_height(table))
    with c2:
        st.markdown("**This model**")
        st.dataframe(numbers, width="stretch", hide_index=True, height=table_height(numbers))
    if hasattr(vsh, "shapes_figure"):
        show(vsh.shapes_figure(ctx.a.maps.shapes), "shapes_figure")


# -- the page --------------------------------------------------------------------------------------------------------


def source_box(path: str) -> str:
    task = task_of(path)
    examples = EXAMPLES[task]
    c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
    with c1:
        text = st.text_input(
            "Source sentence" if task == "translate" else "Source sequence (single letters, each after a space)",
            examples[0],
            key="sentence",
            bind="query-params",
            max_chars=1000,
            on_change=reset_per_input_state,
            placeholder="Type a sentence and press Enter",
        )
    with c2:
        st.selectbox("Examples", examples, index=None, key="example", on_change=use_example, placeholder="Pick an example…")
    return text or ""


def main() -> None:
    st.set_page_config(page_title="Attention Explorer", page_icon="🔎", layout="wide")
    path, loaded, settings = sidebar()
    st.title("Attention Explorer")
    task = task_of(path)
    st.caption(
        ("An English→German" if task == "translate" else "A toy letter-reversing")
        + " Transformer (Vaswani et al. 2017, trained by this project). Type a sentence, then look at every attention map, "
        "step through decoding and change masks and heads to see the effect."
    )
    text = source_box(path)
    view = st.radio(
        "View",
        list(VIEWS),
        format_func=VIEWS.get,
        key="view",
        bind="query-params",
        horizontal=True,
        label_visibility="collapsed",
        on_change=lambda: st.session_state.update(playing=False),  # "Play" belongs to the step view
    )
    st.caption(TEACHES[view])
    try:
        if view == "pe":  # needs no input sentence
            view_pe(path, loaded)
            return
        if not text.strip():
            st.info("Type a sentence in the box above (or pick an example) to see its translation and attention.")
            return
        try:
            a = run_analysis(path, text, settings)
        except InputError as e:
            st.error(str(e))
            return
        if a.source.truncated:
            st.warning(
                f"Your text has {a.source.n_tokens_original} tokens; the model reads at most {loaded.model.cfg.max_len - 1} "
                "(plus <eos>), so the rest was cut off. The model sees only this part:"
            )
            st.text(a.source.text)
        ctx = Ctx(path, text, settings, a, loaded)
        {
            "translate": view_translate,
            "attention": view_attention,
            "steps": view_steps,
            "masks": view_masks,
            "stats": view_stats,
            "shapes": view_shapes,
        }[view](ctx)
    except Exception:
        if DEBUG:
            raise
        log.exception("view %s failed for %r", view, text)
        st.error("Something went wrong while drawing this view. Try another input or setting; the details are in the server log.")


if __name__ == "__main__":  # streamlit runs this file as __main__; tests import its helpers
    main()

"""Cached model and results, and what a page knows about the current input.

- the model is loaded once per process (``st.cache_resource``) and never changed: every tweak
  (hidden source tokens, causal mask, window, temperature, ablated heads) is an ``Interventions``
  argument;
- results per input are cached (``st.cache_data``, bounded) with every input as an argument, the
  decoding settings as the frozen ``DecodeSettings`` and the tweaks as the frozen ``Interventions``;
- per-user state lives in ``st.session_state`` under the names in ``ui.keys``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from analysis.analyze import (
    STEP_CANDIDATES,
    analyze,
    analyze_many,
    decode_time_maps,
    encoder_distance,
    reference_maps,
    step_trace,
    word_order_demo,
)
from analysis.attribution import explain_item, explain_many, ig_part, layer_lens, norm_weighted_maps
from analysis.records import Analysis, EncoderDistance, Explanation, HeadTrace, IGPart, LayerLens, Maps, WordOrder, rollout
from analysis.stats import head_stats
from analysis.trace import head_trace_item, head_trace_many
from i18n import N_, _
from model.checkpoint import PRETRAINED, Loaded, load_checkpoint
from model.facts import KINDS, InputError, shift_right
from model.settings import NO_INTERVENTIONS, DecodeSettings, Interventions
from serving import heap
from serving.limits import CallLimit
from serving.worker import ModelWorker
from ui import catalog, keys

MODELS_DIR = Path(os.environ.get("ATTENTION_EXPLORER_MODELS", PRETRAINED))  # folders holding config.json
MODEL_ORDER = ("en-de", "en-de-captions", "reverse")  # listed first, in this order; the first is the default
TOP_K = STEP_CANDIDATES  # candidates shown per decoding step (analyze keeps as many)
MODEL_CALLS = CallLimit.for_cores()  # every model call below: a class of sessions at once does not oversubscribe the cores
# App runs at once (app.py's whole run): one, since the runs of one process share one GIL. More would take turns on
# it with each other and with the thread that sends their messages, so a class arriving together would finish
# together, late: 120 students joining a room within 3 s, p95 3.8 s with two at once, 1.5 s with one (bench/README.md,
# 14). A run waiting for the model worker (a process of its own) gives its slot back meanwhile.
PAGE_RUNS = CallLimit(1)
# Model calls run in a worker process of its own (a GIL of its own); ATTENTION_EXPLORER_MODEL_PROCESS=0 keeps them in
# this one. A page waiting for the worker gives its page slot back meanwhile: another page draws, and the analyses
# waiting together go to the worker as one batch (bench/README.md, 8c)
MODEL_WORKER = ModelWorker(
    MODEL_CALLS, enabled=os.environ.get("ATTENTION_EXPLORER_MODEL_PROCESS", "1") != "0", waiting=PAGE_RUNS.released
)


def _interventions_hash(interventions: Interventions) -> str:
    """Equal interventions hash alike: the sets are sorted (a frozenset's order can differ between equal sets)."""
    return repr({name: sorted(v) if isinstance(v, frozenset) else v for name, v in vars(interventions).items()})


# Streamlit hashes a dataclass argument field by field through its generic hasher, ~0.3 ms per DecodeSettings; a
# page run makes a dozen cached calls. repr is exact (every field, floats round-trip) and ten times cheaper.
HASH_FUNCS = {Interventions: _interventions_hash, DecodeSettings: repr}


# -- cached loading and analysis ------------------------------------------------------------------------------------


def available_models() -> list[str]:
    """Checkpoint folders under ``MODELS_DIR`` (those with a config.json): ``MODEL_ORDER`` first, then the rest."""
    if not MODELS_DIR.is_dir():
        return []
    names = [p.name for p in MODELS_DIR.iterdir() if (p / "config.json").is_file()]
    rank = {n: i for i, n in enumerate(MODEL_ORDER)}
    return sorted(names, key=lambda n: (rank.get(n, len(rank)), n))


def model_path(name: str) -> str:
    """The path of checkpoint folder ``name`` under ``MODELS_DIR`` (for the caches: never shown to users)."""
    return str(MODELS_DIR / name)


class Shown(str):
    """A spinner's text (``st.cache_data(show_spinner=...)``, fixed when the module is imported), marked for the
    catalogue and translated when shown: Streamlit takes ``str()`` of it in the session's run, when the spinner starts."""

    def __str__(self) -> str:
        return _(str.__str__(self))


@st.cache_resource(show_spinner=Shown(N_("Loading the model…")), max_entries=4)
def load_model(path: str) -> Loaded:
    """The checkpoint at ``path`` in eval mode, shared read-only by every session of this process.

    Raises ``model.checkpoint.CheckpointError`` if it does not load (not cached: the next call tries again).
    """
    loaded = load_checkpoint(path)
    heap.freeze()  # the model and every module loaded so far: out of the cyclic GC's full collections
    MODEL_WORKER.start(path)  # loads it there too, in the background; calls run here until it has
    return loaded


def model_info(path: str) -> dict:
    """What metrics.json says about the checkpoint (training, card), or {} if it is missing or unreadable (read from
    disk: the frame reads it once per run, through ``model_facts``)."""
    try:
        data = json.loads((Path(path) / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


CORPUS_NAMES = {"tatoeba": "Tatoeba", "multi30k": "Multi30k", "bcontrast": "BConTrasT"}


def test_bleu_line(info: dict) -> str | None:
    """Greedy test BLEU per corpus from metrics.json's ``evaluation`` ("corpus/split" keys, as
    ``training.evaluate --all`` writes them), e.g. "test BLEU (greedy): Tatoeba 21.4 · Multi30k 34.6";
    else the greedy dev BLEU of training; None if neither is there."""
    evaluation = info.get("evaluation") if isinstance(info.get("evaluation"), dict) else {}
    scores = {}
    for key, result in evaluation.items():
        corpus, _slash, split = key.partition("/")
        bleu = result.get("greedy", {}).get("bleu") if isinstance(result, dict) else None
        if split and isinstance(bleu, int | float):
            scores[corpus] = f"{CORPUS_NAMES.get(corpus, corpus)} {bleu:.1f}"
    if scores:
        order = [c for c in CORPUS_NAMES if c in scores] + sorted(set(scores) - set(CORPUS_NAMES))
        return "test BLEU (greedy): " + " · ".join(scores[c] for c in order)
    training = info.get("training") if isinstance(info.get("training"), dict) else {}
    bleu = training.get("val_bleu_greedy")
    return f"BLEU {bleu:.1f} (dev, greedy)" if isinstance(bleu, int | float) else None


@st.cache_data(show_spinner=False, max_entries=16)
def n_params(path: str) -> int:
    """The model's parameter count (``Transformer.n_params``: a walk over every parameter, ~1 ms), once per model."""
    return load_model(path).model.n_params()


def card_line(info: dict, field: str) -> str | None:
    """metrics.json ``card.<field>`` of ``info`` (``model_info``), if it is a non-blank string."""
    card = info.get("card")
    line = card.get(field) if isinstance(card, dict) else None
    return line if isinstance(line, str) and line.strip() else None


@dataclass(frozen=True)
class ModelFacts:
    """What the frame and the pages say about a checkpoint, from its metrics.json: read in one cached call per run
    (``model_facts``; the eight small cached calls it replaces were ~4 % of a Translate run under yappi, too little
    to show in a class, bench/README.md 8i)."""

    task: str  # "reverse" (toy letter reversal) or "translate"
    limits: str | None  # card.limits: one line on what the model knows
    summary: str | None  # card.summary: what the model is, in a few words ("An English→French Transformer (OPUS-MT, …)")
    bleu: str | None  # ``test_bleu_line``: test BLEU per corpus, else dev BLEU


@st.cache_data(show_spinner=False, max_entries=16)
def model_facts(path: str) -> ModelFacts:
    """The ``ModelFacts`` of the checkpoint at ``path`` (a missing or unreadable metrics.json gives no limits, summary
    or BLEU, and the task from the folder's name)."""
    info = model_info(path)
    training = info.get("training")
    task = training.get("task") if isinstance(training, dict) else None
    task = "reverse" if task == "reverse" or (task is None and "reverse" in Path(path).name) else "translate"
    return ModelFacts(task, card_line(info, "limits"), card_line(info, "summary"), test_bleu_line(info))


def task_of(path: str) -> str:
    """The task the checkpoint was trained on: "reverse" (toy letter reversal) or "translate"."""
    return model_facts(path).task


# 512 entries (~25 MB pickled): a class of 120 computes its analyses ahead of the page gate (``analyse_ahead``),
# and each must still be cached when its page reads it (with 32 entries, 71 of a batch of 120 were evicted first)
@st.cache_data(show_spinner=Shown(N_("Translating…")), max_entries=512, hash_funcs=HASH_FUNCS)
def run_analysis(path: str, text: str, settings: DecodeSettings, interventions: Interventions) -> Analysis:
    """``analysis.analyze.analyze`` of one input under ``settings`` and ``interventions``; in the model worker, batched with the
    analyses other sessions ask for meanwhile (``analyze_many``: a class arriving at once)."""
    loaded = load_model(path)
    return MODEL_WORKER.call_many(loaded, analyze_many, analyze, text, settings, interventions)


@st.cache_data(show_spinner=Shown(N_("Decoding step by step…")), max_entries=64, hash_funcs=HASH_FUNCS)
def run_steps(path: str, text: str, settings: DecodeSettings, forced: tuple[int, ...]) -> list:
    """``analysis.analyze.step_trace`` of one input with a forced output prefix (compact ids); with none, the analysis's
    own steps (``Analysis.steps``, the same records: greedy and sampling decode once)."""
    analysis = run_analysis(path, text, settings, NO_INTERVENTIONS)
    if not forced and analysis.steps is not None:
        return analysis.steps
    return MODEL_WORKER.call(load_model(path), step_trace, analysis.source.ids, settings=settings, forced=forced, k=TOP_K)


@st.cache_data(show_spinner=Shown(N_("Teacher-forcing the reference…")), max_entries=32, hash_funcs=HASH_FUNCS)
def run_reference(path: str, text: str, settings: DecodeSettings, reference: str):
    """Maps of the reference translation fed to the decoder (teacher forcing): (maps, decoder input, predicted)."""
    loaded = load_model(path)
    source = run_analysis(path, text, settings, NO_INTERVENTIONS).source
    return MODEL_WORKER.call(loaded, reference_maps, source, reference)


@st.cache_data(show_spinner=False, max_entries=32, hash_funcs=HASH_FUNCS)
def run_forced_original(
    path: str, text: str, settings: DecodeSettings, interventions: Interventions, output_of: str | None
) -> Maps:
    """Maps of ``text`` under ``interventions`` with the decoder fed the unchanged model's output for ``output_of`` (None:
    ``text`` itself), teacher-forced: the decoder rows line up with that output's own maps. Row t is step t's
    own pass (``decode_time_maps``), so without the causal mask it still sees no token after t."""
    loaded = load_model(path)
    source = run_analysis(path, text, settings, NO_INTERVENTIONS).source
    out = run_analysis(path, text if output_of is None else output_of, settings, NO_INTERVENTIONS).out_ids
    cfg = loaded.model.cfg
    _tgt_in, tgt_out = shift_right(out, bos_id=cfg.bos_id, eos_id=cfg.eos_id, max_len=cfg.max_len)
    return MODEL_WORKER.call(loaded, decode_time_maps, source.ids, tgt_out, interventions, tokenizer=False)


@st.cache_data(show_spinner=False, max_entries=16)
def run_word_order(path: str, sentence_a: str, sentence_b: str) -> WordOrder:
    """``analysis.analyze.word_order_demo``: encoder states of two orderings, with and without positional encoding."""
    loaded = load_model(path)
    return MODEL_WORKER.call(loaded, word_order_demo, sentence_a, sentence_b)


@st.cache_data(show_spinner=False, max_entries=16)
def positional_matrix(path: str, n: int) -> np.ndarray:
    """The model's positional encoding for positions 0..n-1, ``(n, d_model)`` float32."""
    return load_model(path).model.positional_encoding(n).detach().float().cpu().numpy()


@st.cache_data(show_spinner=False, max_entries=32, hash_funcs=HASH_FUNCS)
def run_head_stats(path: str, text: str, settings: DecodeSettings) -> tuple[pd.DataFrame, np.ndarray]:
    """Per-head statistics table and the encoder's attention rollout ``(L, S, S)`` of one input."""
    maps = run_analysis(path, text, settings, NO_INTERVENTIONS).maps
    return head_stats(maps.enc_self, maps.dec_self, maps.cross), rollout(maps.enc_self)


@st.cache_data(show_spinner=Shown(N_("Weighing the value vectors…")), max_entries=32, hash_funcs=HASH_FUNCS)
def run_norm_maps(path: str, text: str, settings: DecodeSettings) -> Maps:
    """Norm-weighted attention shares of every kind, layer and head of the translation (``norm_weighted_maps``)."""
    loaded = load_model(path)
    analysis = run_analysis(path, text, settings, NO_INTERVENTIONS)
    cfg = loaded.model.cfg
    _tgt_in, tgt_out = shift_right(analysis.out_ids, bos_id=cfg.bos_id, eos_id=cfg.eos_id, max_len=cfg.max_len)
    return MODEL_WORKER.call(loaded, norm_weighted_maps, analysis.source.ids, tgt_out, tokenizer=False)


@st.cache_data(show_spinner=Shown(N_("Explaining the token…")), max_entries=64, hash_funcs=HASH_FUNCS)
def run_explanation(
    path: str, text: str, settings: DecodeSettings, interventions: Interventions, position: int, contrast: int | None
) -> Explanation:
    """``analysis.attribution.explain`` of output token ``position`` of the translation under ``interventions``, without Integrated
    Gradients (``run_ig_part`` computes them in parts); batched with the explanations other sessions ask for meanwhile
    (``explain_many``: a class on the page at once). A batch sums in another order than one explanation alone: its
    gradients differ by float32 rounding (at most 2.2e-5 of their largest value over 40 class sentences, the same
    words and ρ on every agreement line of 121; bench/README.md, 8h)."""
    loaded = load_model(path)
    analysis = run_analysis(path, text, settings, interventions)
    item = (tuple(analysis.source.ids), tuple(analysis.out_ids), position, contrast)
    return MODEL_WORKER.call_many(loaded, explain_many, explain_item, item, interventions)


@st.cache_data(show_spinner=False, max_entries=512, hash_funcs=HASH_FUNCS)
def run_ig_part(
    path: str,
    text: str,
    settings: DecodeSettings,
    interventions: Interventions,
    position: int,
    contrast: int | None,
    segment: int,
) -> IGPart:
    """Segment ``segment`` of the Integrated Gradients of ``run_explanation``'s token (``analysis.attribution.ig_part``)."""
    loaded = load_model(path)
    analysis = run_analysis(path, text, settings, interventions)
    return MODEL_WORKER.call(
        loaded,
        ig_part,
        analysis.source.ids,
        analysis.out_ids,
        position,
        interventions,
        contrast=contrast,
        segment=segment,
        tokenizer=False,
    )


@st.cache_data(show_spinner=Shown(N_("Reading every layer…")), max_entries=32, hash_funcs=HASH_FUNCS)
def run_layer_lens(path: str, text: str, settings: DecodeSettings, interventions: Interventions) -> LayerLens:
    """``analysis.attribution.layer_lens`` of the translation under ``interventions``: logit lens and DecoderLens, the
    latter decoded with ``settings`` (method and budget), as the translation was."""
    loaded = load_model(path)
    analysis = run_analysis(path, text, settings, interventions)
    return MODEL_WORKER.call(loaded, layer_lens, analysis.source.ids, analysis.out_ids, interventions, settings)


@st.cache_data(show_spinner=Shown(N_("Encoding both sentences…")), max_entries=16)
def run_encoder_distance(path: str, sentence_a: str, sentence_b: str) -> EncoderDistance:
    """``analysis.analyze.encoder_distance`` of ``sentence_a`` and ``sentence_b``."""
    loaded = load_model(path)
    return MODEL_WORKER.call(loaded, encoder_distance, sentence_a, sentence_b)


@st.cache_data(show_spinner=Shown(N_("Tracing one head…")), max_entries=64, hash_funcs=HASH_FUNCS)
def run_head_trace(
    path: str, text: str, settings: DecodeSettings, interventions: Interventions, kind: str, layer: int, head: int, query: int
) -> HeadTrace:
    """``analysis.trace.head_trace`` of one input, kind, layer, head and query (0-based) under ``settings`` and ``interventions``; it
    follows ``run_analysis``'s translation (cached: the page has it already), so the worker does not decode again;
    batched with the traces other sessions ask for meanwhile (``head_trace_many``: a class on the page at once)."""
    analysis = run_analysis(path, text, settings, interventions)
    item = (text, tuple(analysis.out_ids), analysis.finished, kind, layer, head, query)
    return MODEL_WORKER.call_many(load_model(path), head_trace_many, head_trace_item, item, interventions)


def mask_interventions() -> Interventions:
    """The Mask lab's interventions (hidden source tokens, causal mask, window, temperature, ablated heads, PE) as it
    last set them for this sentence and model, else none: pages that follow the Mask lab read them."""
    return st.session_state.get(keys.MASK_INTERVENTIONS, NO_INTERVENTIONS)


def analysis_json(analysis: Analysis) -> str:
    """The whole analysis (tokens, every map, shapes, settings) as JSON text."""
    return json.dumps(analysis.to_json_dict(), ensure_ascii=False)


# -- what a page works on --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    """What the frame (app.py) read from the sidebar and the source box: the argument of the page it runs
    (``ui.pages.<page>.page(frame)``). app.py also keeps the last one in ``st.session_state[keys.FRAME]``, where
    ``on_model_change`` reads the model it replaces."""

    path: str  # checkpoint folder
    text: str  # source sentence as typed
    settings: DecodeSettings
    # ``analyse_ahead``'s result, handed to the page: reading it from the cache again unpickles it (~1-3 ms a time
    # with a class running; a page run used to read it three or four times)
    analysis: Analysis | None = field(default=None, compare=False, repr=False)
    facts: ModelFacts | None = field(default=None, compare=False, repr=False)  # the frame's ``model_facts(path)``

    @property
    def task(self) -> str:
        """The checkpoint's task ("translate" or "reverse"): the frame's facts, else ``task_of``."""
        return self.facts.task if self.facts is not None else task_of(self.path)


@dataclass(frozen=True)
class Ctx:
    """Everything a view needs about the current input."""

    path: str
    text: str
    settings: DecodeSettings
    analysis: Analysis
    loaded: Loaded
    task: str  # the checkpoint's task, "translate" or "reverse" (``Frame.task``)

    @property
    def cfg(self):
        return self.loaded.model.cfg

    @property
    def key(self) -> tuple[str, str, str]:
        """What ``analysis`` depends on (model, text, decoding settings), as plain values: the key of the figures
        every session on this input shares (``ui.widgets.show(..., shared=...)``)."""
        return (self.path, self.text, repr(self.settings))

    def under(self, interventions: Interventions) -> Analysis:
        """The analysis of this input under ``interventions``: ``analysis`` itself when ``interventions`` leaves the model unchanged, else
        ``run_analysis`` (cached)."""
        return (
            self.analysis
            if interventions == NO_INTERVENTIONS
            else run_analysis(self.path, self.text, self.settings, interventions)
        )

    def steps(self, forced: tuple[int, ...] = ()) -> list:
        """The decoding steps with ``forced`` output ids (``run_steps``); with none, ``analysis``'s own steps where it has them
        (greedy and sampling), taken as they are: through ``run_steps`` they were pickled into its cache and unpickled
        again on every rerun (the Step page's Play reruns once a second)."""
        if not forced and self.analysis.steps is not None:
            return self.analysis.steps
        return run_steps(self.path, self.text, self.settings, forced)


@st.cache_resource(max_entries=64, show_spinner=False)
def shared_analysis(path: str, text: str, settings_key: str, _settings: DecodeSettings) -> Analysis:
    """``run_analysis`` of the input with no interventions, one object per process for every session on the same
    input (``settings_key``: ``repr`` of ``_settings``, as ``HASH_FUNCS`` keys them). ``st.cache_data`` unpickles a
    copy for every call: a class of 120 on the teacher's sentence paid that on every student's run (~2-3 ms,
    bench/README.md, 14). Shared, so never changed: its attention arrays are read-only, and
    ``tests/test_figures.py`` checks that no page changes it. Raises ``InputError`` as ``run_analysis`` does (not
    cached)."""
    analysis = run_analysis(path, text, _settings, NO_INTERVENTIONS)
    for array in (analysis.maps.enc_self, analysis.maps.dec_self, analysis.maps.cross, analysis.maps.next_probs):
        array.setflags(write=False)
    return analysis


def analyse_ahead(frame: Frame) -> Frame:
    """The frame with its analysis (``shared_analysis``: computed once, the same object for every session on this
    input), made before the page draws. A run waiting for the model worker gives its slot of ``PAGE_RUNS`` (app.py's
    gate) back meanwhile, so the sessions of a class arriving together reach the worker together and go as one batch
    (``analyze_many``). A refused input is left to ``page_context``, which explains it (the frame is returned without
    an analysis)."""
    if frame.text.strip():
        try:
            # by keyword: Streamlit's cache reads the function's signature for every positional argument
            analysis = shared_analysis(
                path=frame.path, text=frame.text, settings_key=repr(frame.settings), _settings=frame.settings
            )
            return replace(frame, analysis=analysis)
        except InputError:
            pass
    return frame


def page_context(frame: Frame) -> Ctx | None:
    """The frame's input analysed, or None after telling the user why not (no text, or text the model refuses).

    Text longer than the model reads is cut, with a warning that shows the part the model sees.
    """
    if not frame.text.strip():
        st.info(_("Type a sentence in the box above (or pick an example) to see its translation and attention."))
        return None
    try:
        analysis = (
            frame.analysis
            if frame.analysis is not None
            else run_analysis(frame.path, frame.text, frame.settings, NO_INTERVENTIONS)
        )
    except InputError as e:
        st.error(_(str(e)))  # a fixed message (analysis.analyze), translated in ui.catalog's list
        return None
    loaded = load_model(frame.path)
    if analysis.source.truncated:
        st.warning(
            _(
                "Your text has {n} tokens; the model reads at most {most} (plus <eos>), so the rest was cut off. The "
                "model sees only this part:"
            ).format(n=analysis.source.n_tokens_original, most=loaded.model.cfg.max_len - 1)
        )
        st.text(analysis.source.text)
    return Ctx(frame.path, frame.text, frame.settings, analysis, loaded, frame.task)


# -- callbacks ------------------------------------------------------------------------------------------------------


def reset_per_input_state() -> None:
    """A new sentence or model: start decoding at step 1, drop forced tokens, hidden source positions, the Mask lab's
    interventions and the contrast picked on Attention vs attribution (they name positions and pieces of the old input)."""
    st.session_state[keys.STEP] = 1
    st.session_state[keys.PLAYING] = False
    for key in (keys.FORCED, keys.HIDE, keys.MASK_INTERVENTIONS, keys.CONTRAST):
        st.session_state.pop(key, None)


def use_example() -> None:
    ex = st.session_state.get(keys.EXAMPLE)
    if ex:
        st.session_state[keys.SENTENCE] = ex
        st.session_state[keys.EXAMPLE] = None
        reset_per_input_state()


def on_model_change() -> None:
    """Another model: the user's sentences stay if it does the same task (en-de ↔ en-de-captions), else the new
    task's first example; per-input state and head ablations (head counts may differ) start again."""
    reset_per_input_state()
    before = st.session_state.get(keys.FRAME)
    task = task_of(model_path(st.session_state[keys.MODEL]))
    if before is None or task_of(before.path) != task:
        st.session_state[keys.SENTENCE] = catalog.EXAMPLES[task][0]
        for key in (keys.COMPARE_A, keys.COMPARE_B):  # Compare starts again from a preset
            st.session_state.pop(key, None)
    st.session_state.pop(keys.MODEL_PROBLEM, None)
    for key in map(keys.ablate, KINDS):
        st.session_state.pop(key, None)

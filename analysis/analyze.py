"""Everything the app shows about one input, as the plain records of ``analysis.records``.

``analyze`` translates a sentence and returns every attention map of the translation it made;
``step_trace`` records token-by-token decoding; ``teacher_forced`` gives the maps for a given
reference; ``word_order_demo`` shows why the model needs positional encoding; ``encoder_distance``
compares the encoder outputs of two inputs token by token. Results hold no
tensors and no model, so they can be cached per input (``st.cache_data``), exported to JSON,
and drawn by ``viz/`` without a model. Every ``Maps`` carries, per kind, the cells its pass hid
and why (``analysis.records.kind_masks`` of the interventions it ran under): figures draw those and
never work a mask out again.

Row/column convention of every decoder map: the decoder is fed ``[<bos>, y_1 .. y_n]`` and
predicts ``[y_1 .. y_n, <eos>]`` (``model.facts.shift_right``); row t is the query at input
token t, which predicted token t + 1 (``tgt_in_tokens[t]`` -> ``tgt_out_tokens[t]``).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict

import numpy as np
import torch

from analysis.records import (
    Analysis,
    BeamTree,
    EncoderDistance,
    EncoderStates,
    KindMask,
    Maps,
    Source,
    Stage,
    StepView,
    WordOrder,
    kind_masks,
)
from i18n import N_
from model.decoding import Step, beam_search, generate_steps, greedy_steps_batch, max_new_tokens, strip
from model.facts import InputError, shift_right
from model.settings import DecodeSettings
from model.tokenizer import PieceTokenizer
from model.transformer import NO_INTERVENTIONS, EncoderResult, Interventions, Transformer, TransformerConfig

STEP_CANDIDATES = 8  # top candidates kept per decoding step (the step view's bar chart)


def prepare_source(tok: PieceTokenizer, text: str, max_len: int) -> Source:
    """Encode ``text`` for the encoder, cutting it to ``max_len - 1`` pieces plus <eos>.

    Raises:
        InputError: if the text is empty or only whitespace.
    """
    if not text or not text.strip():
        raise InputError("Type a sentence to translate (the input is empty).")
    ids = tok.encode(text)
    n = len(ids)
    truncated = n > max_len - 1
    ids = ids[: max_len - 1] + [tok.eos_id]
    used = tok.decode(ids) if truncated else text
    return Source(used, ids, [tok.piece_text(i) for i in ids], truncated, n)


def _np(x: torch.Tensor | None) -> np.ndarray | None:
    """float32 numpy copy with NaN/inf replaced by 0 (none are expected; this keeps plots safe)."""
    if x is None:
        return None
    return np.nan_to_num(x.detach().float().cpu().numpy().astype(np.float32), nan=0.0, posinf=0.0, neginf=0.0)


def intervention_masks(interventions: Interventions, n_src: int, n_tgt: int) -> dict[str, KindMask]:
    """The cells ``interventions`` hides in each kind's maps, for S = ``n_src`` and T = ``n_tgt`` tokens
    (``analysis.records.kind_masks`` of its causal flag, window, hidden source tokens, ablated heads)."""
    return kind_masks(
        n_src,
        n_tgt,
        causal=interventions.causal,
        window=interventions.window,
        src_hidden=sorted(interventions.src_hidden),
        ablate=sorted(interventions.ablate),
    )


@torch.inference_mode()
def teacher_forced(
    model: Transformer,
    src_ids: Sequence[int],
    tgt_in: Sequence[int],
    tgt_out: Sequence[int],
    interventions: Interventions = NO_INTERVENTIONS,
    enc: EncoderResult | None = None,
) -> Maps:
    """Run one teacher-forced pass on ``src_ids`` (S) and decoder input ``tgt_in`` (T) and return its maps.

    ``tgt_out`` (T ids) are the tokens each row predicts; their probabilities go to ``next_probs``;
    ``Maps.masks`` are the cells ``interventions`` hid. ``enc``: ``model.encode`` of the source under ``interventions``
    with weights, if already computed.
    Raises ValueError if either sequence exceeds ``max_len``.
    """
    device = next(model.parameters()).device
    cfg = model.cfg
    src = torch.tensor([list(src_ids)], device=device)  # (1, S)
    tgt = torch.tensor([list(tgt_in)], device=device)  # (1, T)
    res = model(src, tgt, interventions, need_weights=True, enc=enc)
    probs = torch.softmax(res.logits[0].float(), dim=-1)  # (T, V_tgt)
    next_probs = probs[torch.arange(len(tgt_out)), torch.tensor(list(tgt_out), device=device)]
    S, T = src.size(1), tgt.size(1)
    return Maps(
        _np(res.enc_self_attn[:, 0]),
        _np(res.dec_self_attn[:, 0]),
        _np(res.cross_attn[:, 0]),
        _np(next_probs),
        intervention_masks(interventions, S, T),
        data_flow(cfg, S, T),
    )


def data_flow(cfg: TransformerConfig, S: int, T: int) -> list[Stage]:
    """Every ``Stage`` of one forward pass with a source of S and a decoder input of T tokens, batch of
    one, in order: what the app's "Shapes" view lists.

    The shapes follow from the config; tests/test_decoding.py checks them against the tensors of a
    real forward pass.
    """
    D, H = cfg.d_model, cfg.n_heads
    # English data (names are identifiers too); N_ marks them for the catalogue, viz.shapes.stage_text translates them.
    shapes = [
        (N_("source token ids"), (1, S), N_("B x S: compact ids of the source pieces, ending in <eos>")),
        (N_("source embeddings x sqrt(d_model)"), (1, S, D), N_("B x S x d_model (section 3.4)")),
        (N_("positional encoding"), (S, D), N_("S x d_model, added to each row (section 3.5)")),
        (N_("encoder input"), (1, S, D), N_("B x S x d_model")),
        (N_("Q, K, V per head"), (1, H, S, cfg.d_head), N_("B x n_heads x S x d_head, d_head = {} / {}").format(D, H)),
        (
            N_("encoder self-attention weights"),
            (1, H, S, S),
            N_("B x n_heads x S x S per layer: softmax(QK^T / sqrt(d_head))"),
        ),
        (N_("feed-forward hidden"), (1, S, cfg.d_ff), N_("B x S x d_ff, ReLU (eq. 2)")),
    ]
    shapes += [(N_("encoder layer {} output").format(i + 1), (1, S, D), N_("B x S x d_model")) for i in range(cfg.n_enc_layers)]
    shapes += [
        (N_("memory (encoder output)"), (1, S, D), N_("B x S x d_model: keys and values of cross-attention")),
        (N_("target token ids"), (1, T), N_("B x T: <bos> then the output so far")),
        (N_("target embeddings + PE"), (1, T, D), N_("B x T x d_model")),
        (
            N_("decoder causal self-attention weights"),
            (1, H, T, T),
            N_("B x n_heads x T x T per layer, upper triangle masked"),
        ),
        (N_("cross-attention weights"), (1, H, T, S), N_("B x n_heads x T x S per layer: target queries, source keys")),
    ]
    shapes += [(N_("decoder layer {} output").format(i + 1), (1, T, D), N_("B x T x d_model")) for i in range(cfg.n_dec_layers)]
    shapes += [
        (
            N_("logits"),
            (1, T, cfg.n_logits),
            N_("B x T x target vocab ({}): one score per piece the decoder can write").format(cfg.n_logits),
        ),
        (N_("next-token probabilities"), (1, T, cfg.n_logits), N_("softmax over the target vocabulary")),
    ]
    return [Stage(name, shape, meaning) for name, shape, meaning in shapes]


def maps_from_steps(enc: EncoderResult, steps: Sequence[Step], cfg: TransformerConfig, interventions: Interventions) -> Maps:
    """The maps of a decoding, assembled from its steps: row t of each decoder map is the query row of
    step t in the pass of step t (keys 0..t of the prefix; the source for cross-attention), and
    ``next_probs[t]`` the probability step t gave its token. This holds with or without the causal
    mask: a step never sees tokens that were not yet written. Under the causal mask the rows equal
    one teacher-forced pass over the output (tests/test_decoding.py checks both).
    ``enc``: the source's ``model.encode`` with weights; ``steps``: every step, made with
    ``need_weights=True``; ``interventions``: the interventions of both.
    """
    L, H, T, S = cfg.n_dec_layers, cfg.n_heads, len(steps), enc.memory.size(1)
    dec_self = torch.zeros(L, H, T, T)
    for s in steps:
        dec_self[:, :, s.t, : s.t + 1] = s.self_attn  # (L, H, t + 1): the new query over the prefix
    cross = torch.stack([s.cross_attn for s in steps], dim=2)  # T x (L, H, S) -> (L, H, T, S)
    next_probs = torch.tensor([s.chosen_prob for s in steps])  # (T,)
    masks = intervention_masks(interventions, S, T)
    return Maps(_np(enc.enc_self_attn[:, 0]), _np(dec_self), _np(cross), _np(next_probs), masks, data_flow(cfg, S, T))


def decode_time_maps(
    model: Transformer,
    src_ids: Sequence[int],
    tgt_out: Sequence[int],
    interventions: Interventions = NO_INTERVENTIONS,
    *,
    enc=None,
) -> Maps:
    """The maps of decoding ``src_ids`` forced to write ``tgt_out`` (decoder input <bos> + tgt_out[:-1]):
    row t of each decoder map is step t's query in step t's own pass, over keys 0..t, and
    ``next_probs[t]`` the probability that pass gave ``tgt_out[t]``.

    Under the causal mask that is exactly one teacher-forced pass (row t sees keys 0..t only), which is
    what runs. Without it, one pass over the whole output would let row t read tokens t+1.. that did
    not exist when step t ran (up to the token it predicts), so the decoding is replayed instead: each
    step recomputes its prefix, as decoding does, and keeps its last row (``maps_from_steps``).
    ``enc``: this source's ``model.encode`` under ``interventions`` with weights (an ``EncoderResult``), if already computed.
    Raises ValueError if a sequence exceeds ``max_len`` or an id is outside the target vocabulary.
    """
    if interventions.causal:
        return teacher_forced(model, src_ids, [model.cfg.bos_id, *tgt_out[:-1]], tgt_out, interventions, enc=enc)
    if enc is None:
        src = torch.tensor([list(src_ids)], device=next(model.parameters()).device)  # (1, S)
        enc = model.encode(src, interventions, need_weights=True)
    steps = list(
        generate_steps(model, src_ids, interventions=interventions, forced=list(tgt_out), max_new=len(tgt_out), k=1, enc=enc)
    )
    return maps_from_steps(enc, steps, model.cfg, interventions)


def interventions_dict(interventions: Interventions) -> dict:
    """JSON-friendly form of ``Interventions``."""
    return {
        "src_hidden": sorted(interventions.src_hidden),
        "causal": interventions.causal,
        "ablate": sorted([list(a) for a in interventions.ablate]),
        "temperature": interventions.temperature,
        "window": interventions.window,
        "use_pos_encoding": interventions.use_pos_encoding,
    }


def settings_beam_search(
    model: Transformer,
    src_ids: Sequence[int],
    settings: DecodeSettings,
    interventions: Interventions,
    budget: int,
    enc: EncoderResult | None = None,
):
    """``model.decoding.beam_search`` of ``src_ids`` with the beam size, α and stopping rule of ``settings``, at most
    ``budget`` new pieces (``enc``: this source's encoding, if already computed). Returns its ``BeamResult``."""
    return beam_search(
        model,
        src_ids,
        beam_size=settings.beam_size,
        alpha=settings.alpha,
        early_stop=settings.early_stop,
        interventions=interventions,
        max_new=budget,
        enc=enc,
    )


@torch.inference_mode()
def analyze(
    model: Transformer,
    tok: PieceTokenizer,
    text: str,
    settings: DecodeSettings = DecodeSettings(),
    interventions: Interventions = NO_INTERVENTIONS,
) -> Analysis:
    """Translate ``text`` with ``settings`` under ``interventions`` and return the maps of that translation.

    Raises:
        InputError: for empty input (long input is truncated and flagged, not refused).
    """
    cfg = model.cfg
    src = prepare_source(tok, text, cfg.max_len)
    budget = min(settings.max_new or max_new_tokens(model, len(src.ids)), cfg.max_len - 1)
    # Encode once, with the weights the maps need; decoding reuses it.
    src_t = torch.tensor([src.ids], device=next(model.parameters()).device)  # (1, S)
    enc = model.encode(src_t, interventions, need_weights=True)
    beam = None
    if settings.method == "beam":
        res = settings_beam_search(model, src.ids, settings, interventions, budget, enc)
        out = res.hypotheses[0][0]
        end = res.nodes[res.best_path[-1]]
        finished = end.token == cfg.eos_id
        beam = BeamTree(
            nodes=res.nodes,
            texts=[tok.piece_text(n.token) for n in res.nodes],
            best_path=res.best_path,
            hypotheses=[(tok.decode(h), s) for h, s in res.hypotheses],
        )
    else:
        # Each step's rows are those of the pass that chose its token: keep them as the maps, and the steps
        # with their candidates (the step view shows them: no second decoding)
        sampling = settings.sampling()
        steps = list(
            generate_steps(
                model, src.ids, interventions=interventions, sampling=sampling, max_new=budget, k=STEP_CANDIDATES, enc=enc
            )
        )
        chosen = [s.chosen for s in steps]
        out = strip(chosen, cfg.eos_id)
        finished = bool(chosen) and chosen[-1] == cfg.eos_id
    return _analysis(model, tok, src, settings, interventions, enc, out, finished, beam, None if beam is not None else steps)


def only_result(results: Sequence):
    """The one result of a ``*_many`` call over one item, raising it if the call returned an exception for it (the
    ``*_item`` functions that ``serving.worker.ModelWorker.call_many`` runs beside their ``*_many``)."""
    if isinstance(results[0], Exception):
        raise results[0]
    return results[0]


def predicted_tokens(tok: PieceTokenizer, tgt_out: Sequence[int], finished: bool) -> list[str]:
    """``Analysis.tgt_out_tokens``: the piece each decoder row predicts, the last one "…" when the token budget ran out
    (that row predicts a token that was not kept)."""
    out = [tok.piece_text(i) for i in tgt_out]
    if not finished:
        out[-1] = "…"
    return out


def _analysis(
    model: Transformer,
    tok: PieceTokenizer,
    src: Source,
    settings: DecodeSettings,
    interventions: Interventions,
    enc: EncoderResult,
    out: list[int],
    finished: bool,
    beam: BeamTree | None,
    steps: list[Step] | None,
) -> Analysis:
    """The ``Analysis`` of a decoding of ``src`` that wrote ``out`` (ids without <bos>/<eos>): ``enc`` this source's
    ``model.encode`` with weights (batch of one), ``steps`` its greedy/sampling steps (None for beam search)."""
    cfg = model.cfg
    tgt_in, tgt_out = shift_right(out, bos_id=cfg.bos_id, eos_id=cfg.eos_id)  # <= max_len ids: budget <= max_len - 1
    if steps is not None and finished:
        maps = maps_from_steps(enc, steps, cfg, interventions)
    else:
        # Beam search (its steps mix hypotheses) or an output cut by the budget (its last row, which
        # predicts <eos>, was never decoded): the passes that would write this output, step by step.
        maps = decode_time_maps(model, src.ids, tgt_out, interventions, enc=enc)
    out_tokens = predicted_tokens(tok, tgt_out, finished)
    return Analysis(
        source=src,
        out_ids=out,
        translation=tok.decode(out).strip(),
        finished=finished,
        tgt_in_tokens=[tok.piece_text(i) for i in tgt_in],
        tgt_out_tokens=out_tokens,
        maps=maps,
        settings=asdict(settings),
        interventions=interventions_dict(interventions),
        beam=beam,
        steps=None if steps is None else step_views(tok, steps, interventions, len(src.ids)),
    )


BATCH_MAX = 32  # sources decoded in one batch by ``analyze_many`` (more are split into batches of this size)


def padded_batches(order: Sequence[int], length: Callable[[int], int], max_items: int, max_tokens: int) -> list[list[int]]:
    """``order`` (items sorted by ``length``, ascending) cut into batches of at most ``max_items`` items and
    ``max_tokens`` tokens once padded to the batch's longest. A batched pass reads each weight once, but its arithmetic
    grows with the padded size: 32 items of 7-42 tokens padded to 42 ran only 1.3-1.4x faster than one by one
    (``explain_many``, ``head_trace_many``; bench/README.md 9), bounded by tokens about 2x."""
    out: list[list[int]] = []
    for i in order:
        if out and len(out[-1]) < max_items and (len(out[-1]) + 1) * length(i) <= max_tokens:
            out[-1].append(i)
        else:
            out.append([i])
    return out


@torch.inference_mode()
def analyze_many(
    model: Transformer,
    tok: PieceTokenizer,
    texts: Sequence[str],
    settings: DecodeSettings = DecodeSettings(),
    interventions: Interventions = NO_INTERVENTIONS,
) -> list[Analysis | InputError]:
    """``analyze`` of many inputs under one ``settings`` and ``interventions``: for each text its ``Analysis``, or the
    ``InputError`` ``analyze`` would raise for it (returned, not raised, so one empty input spoils no other).

    Greedy decoding runs the inputs together (``model.decoding.greedy_steps_batch``: one padded encoder pass and
    one decoder pass per step for up to ``BATCH_MAX`` sources), which costs little more than one input: a step
    reads every weight once whatever the batch (a step of one sentence is bound by reading the weights). The
    result of each input equals its own ``analyze`` up to float rounding (the same tokens; maps within 1e-5;
    tests/test_batching.py). Sampling and beam search run one input at a time.
    """
    results: list[Analysis | InputError | None] = [None] * len(texts)
    sources: dict[int, Source] = {}
    for i, text in enumerate(texts):
        try:
            sources[i] = prepare_source(tok, text, model.cfg.max_len)
        except InputError as e:
            results[i] = e
    if settings.method != "greedy":
        for i in sources:
            results[i] = analyze(model, tok, texts[i], settings, interventions)
        return results
    order = sorted(sources, key=lambda i: len(sources[i].ids))  # similar lengths together: less padding
    for start in range(0, len(order), BATCH_MAX):
        batch = order[start : start + BATCH_MAX]
        for i, a in zip(batch, _greedy_batch(model, tok, [sources[i] for i in batch], settings, interventions), strict=True):
            results[i] = a
    return results


def _greedy_batch(
    model: Transformer, tok: PieceTokenizer, sources: list[Source], settings: DecodeSettings, interventions: Interventions
) -> list[Analysis]:
    """``analyze`` (greedy) of prepared sources, decoded as one padded batch."""
    cfg = model.cfg
    device = next(model.parameters()).device
    S = max(len(s.ids) for s in sources)
    src_t = torch.full((len(sources), S), cfg.pad_id, dtype=torch.long, device=device)  # (B, S), right-padded
    for b, s in enumerate(sources):
        src_t[b, : len(s.ids)] = torch.tensor(s.ids)
    enc = model.encode(src_t, interventions, need_weights=True)
    budgets = [min(settings.max_new or max_new_tokens(model, len(s.ids)), cfg.max_len - 1) for s in sources]
    all_steps = greedy_steps_batch(
        model, [s.ids for s in sources], interventions=interventions, k=STEP_CANDIDATES, max_new=budgets, enc=enc
    )
    out = []
    for b, (src, steps) in enumerate(zip(sources, all_steps, strict=True)):
        n = len(src.ids)
        own = EncoderResult(  # this source's part of the batch: its rows and keys, as if it were encoded alone
            enc.memory[b : b + 1, :n],  # (1, S_b, D)
            None if enc.src_allowed is None else enc.src_allowed[b : b + 1, :, :, :n],  # (1, 1, 1, S_b)
            enc.enc_self_attn[:, b : b + 1, :, :n, :n],  # (L, 1, H, S_b, S_b)
        )
        if own.src_allowed is not None and bool(own.src_allowed.all()):
            own.src_allowed = None  # as ``encode`` of this source alone: no masked key, no mask
        chosen = [s.chosen for s in steps]
        finished = bool(chosen) and chosen[-1] == cfg.eos_id
        out.append(_analysis(model, tok, src, settings, interventions, own, strip(chosen, cfg.eos_id), finished, None, steps))
    return out


def step_trace(
    model: Transformer,
    tok: PieceTokenizer,
    src_ids: Sequence[int],
    *,
    settings: DecodeSettings = DecodeSettings(),
    interventions: Interventions = NO_INTERVENTIONS,
    forced: Sequence[int] = (),
    k: int = STEP_CANDIDATES,
) -> list[StepView]:
    """Every step of decoding ``src_ids`` (ids ending in <eos>) with an optional forced prefix.

    Beam settings step through greedily (a beam has no single "next token"); its tree is in
    ``Analysis.beam``. Each ``StepView.masks`` holds the cells ``interventions`` hid in its query row.
    """
    budget = min(settings.max_new or max_new_tokens(model, len(src_ids)), model.cfg.max_len - 1)
    steps = generate_steps(
        model, src_ids, interventions=interventions, sampling=settings.sampling(), forced=forced, k=k, max_new=budget
    )
    return step_views(tok, steps, interventions, len(src_ids))


def step_views(tok: PieceTokenizer, steps: Iterable[Step], interventions: Interventions, n_src: int) -> list[StepView]:
    """Decoding steps (``model.decoding.Step``) as plain ``StepView`` records, with the cells ``interventions`` hid in each
    step's query row; ``n_src``: source length S."""
    steps = list(steps)
    # The row of step t is the last row of a (t + 1)-token input: row t of the masks of the longest input, cut to
    # its t + 1 keys (a cell's reason depends on its query and key positions only, ``model.facts.cell_reasons``)
    masks = intervention_masks(interventions, n_src, max((s.t + 1 for s in steps), default=1))
    views = []
    for s in steps:
        views.append(
            StepView(
                t=s.t,
                prefix_tokens=[tok.piece_text(i) for i in s.prefix],
                candidates=[(tok.piece_text(i), i, p) for i, p in s.candidates],
                chosen=s.chosen,
                chosen_token=tok.piece_text(s.chosen),
                chosen_prob=s.chosen_prob,
                forced=s.forced,
                self_attn=_np(s.self_attn),
                cross_attn=_np(s.cross_attn),
                masks={
                    "dec_self": KindMask(masks["dec_self"].reasons[s.t : s.t + 1, : s.t + 1], masks["dec_self"].ablated),
                    "cross": KindMask(masks["cross"].reasons[s.t : s.t + 1], masks["cross"].ablated),
                },
            )
        )
    return views


def reference_maps(
    model: Transformer, tok: PieceTokenizer, src: Source, reference: str, interventions: Interventions = NO_INTERVENTIONS
) -> tuple[Maps, list[str], list[str]]:
    """Teacher-forced maps for a user-typed reference translation: (maps, decoder input tokens, predicted tokens).

    Raises InputError if the reference is empty.
    """
    if not reference.strip():
        raise InputError("Type a reference translation to compare with.")
    cfg = model.cfg
    ref = tok.encode(reference, target=True)
    tgt_in, tgt_out = shift_right(ref, bos_id=cfg.bos_id, eos_id=cfg.eos_id, max_len=cfg.max_len)
    maps = teacher_forced(model, src.ids, tgt_in, tgt_out, interventions)
    return maps, [tok.piece_text(i) for i in tgt_in], [tok.piece_text(i) for i in tgt_out]


@torch.inference_mode()
def encoder_states(model: Transformer, src_ids: Sequence[int], *, use_pos_encoding: bool) -> np.ndarray:
    """Encoder output (memory) ``(S, d_model)`` of one source, with or without positional encoding."""
    device = next(model.parameters()).device
    enc = model.encode(torch.tensor([list(src_ids)], device=device), Interventions(use_pos_encoding=use_pos_encoding))
    return _np(enc.memory[0])


def word_order_demo(model: Transformer, tok: PieceTokenizer, sentence_a: str, sentence_b: str) -> WordOrder:
    """Encode two sentences made of the same pieces in another order (e.g. "John loves Mary" /
    "Mary loves John"), with positional encoding off and on.

    A leading space is added so that every word is the same piece wherever it stands (tiktoken
    spells a sentence-initial word without its space). Returns a ``WordOrder``: tokens of both, the
    permutation ``perm`` with ``b_tokens[i] == a_tokens[perm[i]]``, and for PE off / on the encoder
    outputs ``(S, d_model)`` and the largest difference ``max|enc(b)[i] - enc(a)[perm[i]]|``: 0 (up
    to float error) without PE.

    Raises InputError if either is empty, or the two are not permutations of the same pieces.
    """
    if not sentence_a.strip() or not sentence_b.strip():
        raise InputError("Type a sentence in both boxes: B should use A's words in another order.")
    ids_a, ids_b = tok.encode(" " + sentence_a.strip()) + [tok.eos_id], tok.encode(" " + sentence_b.strip()) + [tok.eos_id]
    if sorted(ids_a) != sorted(ids_b):
        raise InputError("The two sentences must use the same words in another order.")
    used: set[int] = set()
    perm = []
    for piece in ids_b:
        j = next(j for j, other in enumerate(ids_a) if other == piece and j not in used)
        used.add(j)
        perm.append(j)
    states = {}
    for pe in (False, True):
        states_a, states_b = encoder_states(model, ids_a, use_pos_encoding=pe), encoder_states(model, ids_b, use_pos_encoding=pe)
        states[pe] = EncoderStates(states_a, states_b, float(np.abs(states_b - states_a[perm]).max()))
    return WordOrder([tok.piece_text(i) for i in ids_a], [tok.piece_text(i) for i in ids_b], perm, states[False], states[True])


def align_pieces(ids_a: Sequence[int], ids_b: Sequence[int]) -> list[tuple[int, int]]:
    """Pairs ``(i, j)`` of tokens of two id sequences that stand for each other.

    Sequences of the same length pair position by position. Otherwise ``difflib`` matches the pieces:
    equal stretches pair up, and so does a substituted stretch of the same length on both sides
    ("tired" for "wide"), position by position; inserted or deleted pieces get no partner.
    """
    if len(ids_a) == len(ids_b):
        return [(i, i) for i in range(len(ids_a))]
    pairs: list[tuple[int, int]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=list(ids_a), b=list(ids_b), autojunk=False).get_opcodes():
        if op == "equal" or (op == "replace" and i2 - i1 == j2 - j1):
            pairs += zip(range(i1, i2), range(j1, j2), strict=True)
    return pairs


def encoder_distance(model: Transformer, tok: PieceTokenizer, sentence_a: str, sentence_b: str) -> EncoderDistance:
    """Per-token L2 distance between the encoder outputs (memory) of two inputs: which tokens'
    representations moved when A became B.

    Each source is cut and ended with <eos> as ``analyze`` does (``prepare_source``) and encoded with
    positional encoding and no interventions; tokens are paired by ``align_pieces``. Identical inputs
    give distance 0 everywhere; a changed word moves its own vector and, through self-attention, its
    neighbours'. Raises InputError if either text is empty.
    """
    cfg = model.cfg
    source_a, source_b = prepare_source(tok, sentence_a, cfg.max_len), prepare_source(tok, sentence_b, cfg.max_len)
    states_a = encoder_states(model, source_a.ids, use_pos_encoding=True)  # (S_a, D)
    states_b = encoder_states(model, source_b.ids, use_pos_encoding=True)  # (S_b, D)
    pairs = align_pieces(source_a.ids, source_b.ids)
    rows_a = np.array([p[0] for p in pairs], dtype=np.int64)
    rows_b = np.array([p[1] for p in pairs], dtype=np.int64)
    return EncoderDistance(
        a_tokens=source_a.tokens,
        b_tokens=source_b.tokens,
        pairs=pairs,
        distance=np.linalg.norm(states_b[rows_b] - states_a[rows_a], axis=1).astype(np.float32),  # (P,)
        same_piece=np.array(source_a.ids, dtype=np.int64)[rows_a] == np.array(source_b.ids, dtype=np.int64)[rows_b],
        by_position=len(source_a.ids) == len(source_b.ids),
        scale=float(np.linalg.norm(states_a, axis=1).mean()),
    )

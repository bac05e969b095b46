"""Beyond the weights: attribution beside attention for one output token, and a lens on every layer.

A class reads attention weights as "the model looked at this word because it mattered". The literature
answers differently, and this module computes its answers from the same model, translation and interventions
as the attention maps the other pages show:

    value_vectors / attention_terms / norm_weighted_maps
        norm-weighted attention (Kobayashi et al. 2020, "Attention is Not Only a Weight", EMNLP, eq. 5 and
        section 3): a head's output for query i is Σ_j α_ij f(x_j) + b^O with f(x_j) = (x_j W^V + b^V)_h W^O_h, so
        token j adds the vector α_ij f(x_j); its length ‖α_ij f(x_j)‖ can be small where α_ij is large, when
        the value vector is short.
    explain
        for one output token y_t of the shown translation, teacher-forced: the cross-attention row, its
        norm-weighted form, the rollout through the encoder (Abnar & Zuidema 2020), and gradient attribution of
        log p(y_t) (or of log p(y_t) − log p(y′), Yin & Neubig 2022, "Interpreting Language Models with Contrastive
        Explanations", EMNLP) to each source token's embedding: Integrated Gradients (Sundararajan et al. 2017,
        "Axiomatic Attribution for Deep Networks", ICML) and gradient × input (Shrikumar et al. 2016).
    layer_lens
        the logit lens on each decoder layer (nostalgebraist 2020), each column from decoding's own step (the causal
        mask off included), and DecoderLens (Langedijk et al. 2023, "DecoderLens: Layerwise Interpretation of
        Encoder-Decoder Transformers"): the translation from each encoder layer's output, decoded as the shown
        translation was (greedy, beam search or sampling, and its budget).

Gradients come from Captum (``captum.attr.IntegratedGradients`` and ``InputXGradient``, Kokhlikyan et al. 2020,
maintained by Meta's PyTorch team; Inseq builds on it). Its plain ``IntegratedGradients`` is used on a function of
the source embeddings (``encode_embedded``), not ``LayerIntegratedGradients``: that one hooks the embedding module
during the call, and this model's one embedding module serves source, target and generator (tied, section 3.4) and
is shared by every session of the server, so a hook would change other sessions' calls and the target embeddings
too. Captum imports matplotlib (for its own plots, unused here), so it is imported on first use: pages that
attribute nothing never load it.

Records (``analysis.records``): ``Explanation``, ``LayerLens``, ``Maps``. Shape letters: B batch (n interpolation steps
for IG), S source, T decoder input, Q queries, K keys, H heads, Dh d_head, D d_model, L layers, V_tgt the
generator's output size. Nothing is stored on the model; gradients flow to the inputs only (the loaded model's
parameters do not require gradients).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from analysis.analyze import intervention_masks, only_result, padded_batches, settings_beam_search
from analysis.records import IG_SEGMENTS, IG_STEPS, Explanation, IGPart, IGResult, LayerLens, Maps, head_average, rollout
from model.decoding import generate_ids, max_new_tokens
from model.facts import shift_right
from model.settings import DecodeSettings
from model.tokenizer import PieceTokenizer
from model.transformer import (
    NO_INTERVENTIONS,
    EncoderResult,
    ForwardResult,
    Interventions,
    MultiHeadAttention,
    Transformer,
    band,
)

# Integrated Gradients: IG_STEPS Gauss-Legendre nodes in all, IG_SEGMENTS segments of the path with IG_STEPS / IG_SEGMENTS
# each (the page computes one segment per step of its progress bar). The path has kinks (ReLUs, the softmax), so the
# completeness error is not monotone in the nodes and no uniform split settles for every model: a token's objective
# can move half its change within a sliver of the path. So a segment whose own completeness misses by more than
# IG_REFINE_TOL nats is halved, up to IG_REFINE_DEPTH times (``_ig_between``): only the pieces around such a turn pay
# for more nodes. tests/test_attribution.py checks every token of its sentence on the shipped weights; the page prints
# the error it reached. The nodes, splits and errors measured: bench/README.md, benchmark 9.
IG_REFINE_TOL = 1e-3  # nats a segment's attributions may miss f(end) - f(start) by before it is halved
IG_REFINE_DEPTH = 4  # halvings at most: a segment of 1/24 of the path down to 1/384
TOP_K = 8  # the step's candidates offered as the contrast y′
GREEDY_DECODING = DecodeSettings()  # the default of the lens: greedy decoding, the default budget

__all__ = [
    "IG_SEGMENTS",
    "IG_STEPS",
    "attention_terms",
    "decoder_lens_ids",
    "encode_embedded",
    "explain",
    "explain_item",
    "explain_many",
    "ig_part",
    "layer_lens",
    "lens_budget",
    "logit_lens_logprobs",
    "norm_weighted_maps",
    "value_vectors",
]


def _np(x: Tensor) -> np.ndarray:
    """float32 numpy copy, NaN and ±inf as 0 (none are expected: no NaN may reach a figure)."""
    return np.nan_to_num(x.detach().float().cpu().numpy(), nan=0.0, posinf=0.0, neginf=0.0).astype(np.float32)


# -- norm-weighted attention (Kobayashi et al. 2020) ---------------------------------------------------------------


def value_vectors(mha: MultiHeadAttention, kv_x: Tensor) -> Tensor:
    """f^h(x_j) = (x_j W^V + b^V)_h W^O_h: what key j adds to the output through head h at weight 1.

    ``kv_x (B, K, D)``: the rows keys and values come from (the sub-layer's normed input in self-attention, the encoder
    memory in cross-attention). Returns ``(B, H, K, D)``. Kobayashi et al. 2020, eq. 5 (the bias b^O is not a token's).
    """
    B, K, D = kv_x.shape
    v = mha.split_heads(mha.w_v(kv_x))  # (B, H, K, Dh): x_j W^V + b^V, per head
    w_o = mha.w_o.weight.view(D, mha.n_heads, mha.d_head)  # (D_out, H, Dh): W^O's columns, head by head
    return torch.einsum("bhkd,ohd->bhko", v, w_o)  # (B, H, K, D)


def attention_terms(mha: MultiHeadAttention, kv_x: Tensor, weights: Tensor) -> Tensor:
    """Every term α^h_ij f^h(x_j) of a multi-head attention output, ``(B, H, Q, K, D)``.

    ``weights (B, H, Q, K)``: the sub-layer's own post-softmax weights (0 for an ablated head, as the model reports).
    Summed over heads and keys, plus the bias b^O, they give the sub-layer's output ``(B, Q, D)`` (section 3.2.2 written
    out; tests/test_attribution.py checks it to 1e-5). For tests and small inputs: memory grows as Q·K·D per head.
    """
    return weights[..., None] * value_vectors(mha, kv_x)[:, :, None]  # (B, H, Q, K, D)


def _norms(mha: MultiHeadAttention, kv_x: Tensor, weights: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(‖f^h(x_j)‖ (B, H, K), ‖α f‖ per head (B, H, Q, K), ‖Σ_h α^h f^h‖ (B, Q, K))`` of one attention sub-layer.

    Per head the weight is a non-negative scalar, so ‖α_ij f(x_j)‖ = α_ij ‖f(x_j)‖.
    """
    f = value_vectors(mha, kv_x)  # (B, H, K, D)
    f_norm = f.norm(dim=-1)  # (B, H, K)
    per_head = weights * f_norm[:, :, None, :]  # (B, H, Q, K)
    summed = torch.einsum("bhqk,bhkd->bqkd", weights, f).norm(dim=-1)  # (B, Q, K): ‖Σ_h α^h_qk f^h_k‖
    return f_norm, per_head, summed


def _layer_inputs(model: Transformer, inter: dict, kind: str, layer: int) -> Tensor:
    """The rows keys and values of ``kind`` in ``layer`` come from, ``(B, K, D)``, from a pass's intermediates."""
    if kind == "cross":
        return inter["memory"]
    if kind == "enc_self":
        lay, x = model.encoder[layer], inter["enc_in" if layer == 0 else f"enc_layer_{layer - 1}"]
    else:
        lay, x = model.decoder[layer], inter["dec_in" if layer == 0 else f"dec_layer_{layer - 1}"]
    return lay.self_attn_norm.pre(x)  # (B, K, D): what W^K and W^V multiply (pre-LN: the normed rows)


def _mha(model: Transformer, kind: str, layer: int) -> MultiHeadAttention:
    if kind == "enc_self":
        return model.encoder[layer].self_attn
    return model.decoder[layer].self_attn if kind == "dec_self" else model.decoder[layer].cross_attn


def _shares(norms: Tensor) -> Tensor:
    """Each row's norms as shares of the row's total ``(..., K)``: rows sum to 1, or 0 where nothing is read."""
    total = norms.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, norms / torch.where(total > 0, total, torch.ones_like(total)), torch.zeros_like(norms))


@torch.inference_mode()
def norm_weighted_maps(
    model: Transformer, src_ids: Sequence[int], tgt_out: Sequence[int], interventions: Interventions = NO_INTERVENTIONS
) -> Maps:
    """Norm-weighted attention of every kind, layer and head, as shares: the maps of ``Maps`` with
    ‖α_ij f^h(x_j)‖ / Σ_k ‖α_ik f^h(x_k)‖ in place of α_ij (Kobayashi et al. 2020), so they share the weights' 0–1
    scale and each row still sums to 1 over the keys the query reads (0 where it reads none).

    The passes are those of ``analysis.analyze.decode_time_maps``: the decoder fed ``<bos> + tgt_out[:-1]``, one pass
    under the causal mask; without it, decoder row t from step t's own pass over the prefix. ``next_probs`` is the
    probability of each ``tgt_out`` token. Shapes as ``Maps``: enc_self ``(L_enc, H, S, S)``, dec_self ``(L_dec, H, T, T)``,
    cross ``(L_dec, H, T, S)``. Raises ValueError if a sequence exceeds ``max_len``.
    """
    cfg, device = model.cfg, next(model.parameters()).device
    tgt_in = [cfg.bos_id, *tgt_out[:-1]]
    src = torch.tensor([list(src_ids)], device=device)  # (1, S)
    T = len(tgt_in)
    ends = [T] if interventions.causal else list(range(1, T + 1))  # the passes: whole output, or each step's prefix
    dec = {kind: torch.zeros(cfg.n_dec_layers, cfg.n_heads, T, n) for kind, n in (("dec_self", T), ("cross", len(src_ids)))}
    enc = None
    probs = torch.zeros(T)
    for end in ends:
        tgt = torch.tensor([tgt_in[:end]], device=device)  # (1, end)
        res = model(src, tgt, interventions, need_weights=True, need_intermediates=True)
        rows = slice(0, end) if interventions.causal else slice(end - 1, end)  # the rows this pass owns
        for kind, weights in (("dec_self", res.dec_self_attn), ("cross", res.cross_attn)):
            for l in range(cfg.n_dec_layers):
                _, per_head, _ = _norms(_mha(model, kind, l), _layer_inputs(model, res.intermediates, kind, l), weights[l])
                dec[kind][l, :, rows, : per_head.size(-1)] = _shares(per_head[0, :, rows])  # (H, rows, K)
        p = torch.softmax(res.logits[0, rows].float(), dim=-1)  # (rows, V_tgt)
        probs[rows] = p[torch.arange(p.size(0)), torch.tensor(list(tgt_out[rows]), device=device)]
        if enc is None:
            enc = torch.stack(
                [
                    _shares(_norms(_mha(model, "enc_self", l), _layer_inputs(model, res.intermediates, "enc_self", l), w)[1][0])
                    for l, w in enumerate(res.enc_self_attn)
                ]
            )  # (L_enc, H, S, S)
    return Maps(_np(enc), _np(dec["dec_self"]), _np(dec["cross"]), _np(probs), intervention_masks(interventions, len(src_ids), T))


# -- gradients to the source embeddings ----------------------------------------------------------------------------


def encode_embedded(
    model: Transformer, tok_emb: Tensor, src_allowed: Tensor | None, interventions: Interventions
) -> EncoderResult:
    """``model.encode`` from the source token embeddings instead of the ids, so gradients can reach them.

    ``tok_emb (B, S, D)``: the token embeddings as ``model.embed`` makes them (× √d_model, section 3.4, where the config
    scales them), before the positional encoding, which is added here as ``encode`` adds it (unless ``interventions`` drops it); ``src_allowed``: ``model.source_mask(src, interventions)``, the
    keys that are real and not hidden. The layers, masks, temperature and ablated heads are ``encode``'s;
    tests/test_attribution.py checks that both give the same memory. Returns the memory ``(B, S, D)`` with that mask.
    """
    S = tok_emb.size(1)
    self_band = band(S, S, 0, causal=False, window=interventions.window, device=tok_emb.device)  # (S, S) or None
    if src_allowed is None:
        enc_allowed = self_band
    else:
        enc_allowed = src_allowed if self_band is None else src_allowed & self_band  # (1, 1, 1|S, S)
    x = tok_emb + model.positional_encoding(S) if interventions.use_pos_encoding else tok_emb  # (B, S, D)
    for i, layer in enumerate(model.encoder):
        x, _ = layer(
            x,
            enc_allowed,
            temperature=interventions.temperature,
            head_mask=interventions.head_mask("enc_self", i, model.cfg.n_heads),
        )
    return EncoderResult(model.enc_norm(x), src_allowed)


def _objective(
    model: Transformer, src_allowed, prefix: Tensor, interventions: Interventions, target, contrast, last: Tensor | None = None
):
    """f(embeddings) = log p(target) (− log p(contrast)) at the last row of the teacher-forced ``prefix``: a function
    ``(B, S, D) -> (B,)`` in nats, for Captum.

    One problem (``explain``, IG's interpolation steps): ``prefix (1, t + 1)``, ``target`` an id, ``contrast`` an id or
    None. Many (``explain_many``): ``prefix (B, T)`` right-padded, ``last (B,)`` each row's last real position,
    ``target (B,)`` ids, ``contrast (B,)`` ids with -1 for none; each row's value depends on its own row of the input
    only, so the gradient of their sum is each row's own gradient."""

    def f(tok_emb: Tensor) -> Tensor:
        B = tok_emb.size(0)
        enc = encode_embedded(model, tok_emb, src_allowed, interventions)
        at = last if last is not None else torch.full((B,), prefix.size(1) - 1, device=tok_emb.device)  # (B,)
        # (B, V_tgt): the last rows
        logits = model.decoder_forward(prefix.expand(B, -1), enc, interventions, logits_at=at).logits[:, 0]
        logp = torch.log_softmax(logits.float(), dim=-1)
        if last is None:
            return logp[:, target] - (logp[:, contrast] if contrast is not None else 0.0)  # (B,)
        own = logp.gather(1, target[:, None])[:, 0]  # (B,)
        other = logp.gather(1, contrast.clamp(min=0)[:, None])[:, 0]  # (B,)
        return own - torch.where(contrast >= 0, other, torch.zeros_like(other))

    return f


def _captum():
    """``captum.attr``, imported on first use: it imports matplotlib, which no other page needs (module docstring)."""
    import captum.attr  # noqa: PLC0415

    return captum.attr


def _source_embeddings(model: Transformer, src: Tensor) -> Tensor:
    """``src (1, S)`` -> ``(1, S, D)``: the token embeddings that ``encode_embedded`` reads (× √d_model where the model
    scales them, section 3.4), taken from ``model.embed`` itself, without gradient history: the input of the
    attributions."""
    inter: dict = {}
    with torch.no_grad():
        model.embed(src, model.src_emb, 0, NO_INTERVENTIONS, inter, "enc")
    return inter["enc_tok_emb"]


def _ig_segment(f, x: Tensor, k: int, n_segments: int, steps: int, depth: int = IG_REFINE_DEPTH) -> IGPart:
    """Integrated Gradients of ``f`` along segment k of ``n_segments`` of the straight path from the all-zero
    baseline to ``x (1, S, D)``: from (k / n)·x to ((k + 1) / n)·x, with ``steps / n_segments`` Gauss-Legendre nodes
    (Captum's ``IntegratedGradients``), halved up to ``depth`` times where they do not settle (``_ig_between``). The segments' attributions
    add up to the whole path's (composite quadrature): IG is a path integral of the gradient, and the straight path is
    the segments one after another."""
    return _ig_between(f, x, k / n_segments, (k + 1) / n_segments, max(1, steps // n_segments), depth)


def _ig_between(f, x: Tensor, a: float, b: float, n: int, depth: int) -> IGPart:
    """Integrated Gradients of ``f`` from a·x to b·x (``x (1, S, D)``, 0 ≤ a < b ≤ 1) with ``n`` Gauss-Legendre nodes.

    Completeness holds on every piece of the path as on the whole (Sundararajan et al. 2017, proposition 1: the
    attributions add up to f(b·x) − f(a·x)), so a piece whose sum misses by more than ``IG_REFINE_TOL`` nats has not
    settled: it is split in two halves of ``n`` nodes each, up to ``depth`` times, and the halves' sums replace its own.
    Where the objective turns sharply (a softmax that tips over within 0.2 % of the path) only the pieces around
    the turn are split. ``IGPart.steps`` counts the nodes of the pieces kept."""
    start, end = x * a, x * b  # (1, S, D) each
    with torch.enable_grad():
        ig = _captum().IntegratedGradients(f).attribute(end, baselines=start, n_steps=n, method="gausslegendre")  # (1, S, D)
    with torch.inference_mode():
        f_start, f_end = (float(v) for v in f(torch.cat([start, end])))
    part = IGPart(_np(ig[0].sum(dim=-1)), n, f_start, f_end)
    if depth == 0 or abs(part.error) <= IG_REFINE_TOL:
        return part
    left, right = (_ig_between(f, x, lo, hi, n, depth - 1) for lo, hi in ((a, (a + b) / 2), ((a + b) / 2, b)))
    return IGPart(left.ig + right.ig, left.steps + right.steps, left.f_start, right.f_end)


@dataclass(frozen=True)
class _Problem:
    """One output token to explain: the source ``(1, S)``, the teacher-forced prefix ``(1, t + 1)``, the token's id,
    the objective f (``_objective``) and its input x ``(1, S, D)``."""

    src: Tensor
    prefix: Tensor
    target: int
    f: Callable[[Tensor], Tensor]
    x: Tensor


def _checked(model: Transformer, out_ids, position: int, contrast: int | None) -> tuple[list[int], int]:
    """The teacher-forced prefix ``<bos>, out_ids[:position]`` and the id written at ``position``; raises ValueError as
    ``explain`` says."""
    cfg = model.cfg
    tgt_in, tgt_out = shift_right(list(out_ids), bos_id=cfg.bos_id, eos_id=cfg.eos_id, max_len=cfg.max_len)
    if not 0 <= position < len(tgt_out):
        raise ValueError(f"position {position} is out of range: the translation has {len(tgt_out)} output tokens with <eos>")
    target = tgt_out[position]
    if contrast is not None and (not 0 <= contrast < cfg.n_logits or contrast == target):
        raise ValueError(f"contrast {contrast} must be another id of the target vocabulary (0 .. {cfg.n_logits - 1})")
    return tgt_in[: position + 1], target


def _problem(model: Transformer, src_ids, out_ids, position: int, interventions: Interventions, contrast: int | None) -> _Problem:
    """Check the arguments of ``explain`` and set its problem up. Raises ValueError as ``explain`` says."""
    device = next(model.parameters()).device
    prefix_ids, target = _checked(model, out_ids, position, contrast)
    src = torch.tensor([list(src_ids)], device=device)  # (1, S)
    prefix = torch.tensor([prefix_ids], device=device)  # (1, t + 1)
    src_allowed = model.source_mask(src, interventions)  # (1, 1, 1, S) or None: the keys encode lets be read
    f = _objective(model, src_allowed, prefix, interventions, target, contrast)
    return _Problem(src, prefix, target, f, _source_embeddings(model, src))


def ig_part(
    model: Transformer,
    src_ids: Sequence[int],
    out_ids: Sequence[int],
    position: int,
    interventions: Interventions = NO_INTERVENTIONS,
    *,
    contrast: int | None = None,
    segment: int = 0,
    n_segments: int = IG_SEGMENTS,
    steps: int = IG_STEPS,
) -> IGPart:
    """Segment ``segment`` of ``n_segments`` of the Integrated Gradients of ``explain`` (same arguments): the page
    computes them one by one with a progress bar, and ``IGResult.total`` adds them up. ``steps`` in all, shared by the
    segments. Raises ValueError as ``explain`` does, or for a segment out of range."""
    if not 0 <= segment < n_segments:
        raise ValueError(f"segment {segment} is out of range for {n_segments} segments (count from 0)")
    p = _problem(model, src_ids, out_ids, position, interventions, contrast)
    return _ig_segment(p.f, p.x, segment, n_segments, steps)


def explain(
    model: Transformer,
    tok: PieceTokenizer,
    src_ids: Sequence[int],
    out_ids: Sequence[int],
    position: int,
    interventions: Interventions = NO_INTERVENTIONS,
    *,
    contrast: int | None = None,
    ig_steps: int = IG_STEPS,
    ig_segments: int = IG_SEGMENTS,
    ig_refine_depth: int = IG_REFINE_DEPTH,
) -> Explanation:
    """Why the decoder wrote output token ``position`` of the translation ``out_ids``: an ``Explanation``.

    Args:
        model, tok: the model (eval mode, parameters without gradients) and its tokenizer.
        src_ids: the source (S compact ids, ending in <eos>); out_ids: the translation shown (no <bos>/<eos>).
        position: t, 0-based, the output token explained: ``out_ids[t]``, or <eos> at ``t == len(out_ids)``. The
            decoder is fed ``<bos>, out_ids[:t]`` (teacher forcing) and its last row is the one that wrote it: the
            same pass as step t of decoding, with or without the causal mask.
        interventions: the interventions the translation was made under (hidden source tokens, ablated heads, ...).
        contrast: a compact id y′ (another candidate of the step): gradients then explain log p(y) − log p(y′)
            ("why y and not y′", Yin & Neubig 2022); None: log p(y).
        ig_steps: Gauss-Legendre steps of Integrated Gradients (that many forward and backward passes, in
            ``ig_segments`` batches, see ``ig_part``); 0: no Integrated Gradients (``Explanation.ig`` None), for a page
            that computes them in parts with a progress bar.
        ig_refine_depth: how many times a segment whose own completeness misses by more than ``IG_REFINE_TOL`` nats
            is halved (``_ig_between``); 0: every segment keeps its ``ig_steps / ig_segments`` nodes, so that two
            objectives share one set of nodes (the linearity axiom then holds to float rounding).

    Raises:
        ValueError: for a position outside ``0 .. len(out_ids)``, a contrast outside the target vocabulary or equal
            to the token explained, or sequences longer than ``max_len``.
    """
    p = _problem(model, src_ids, out_ids, position, interventions, contrast)
    with torch.inference_mode():
        enc = model.encode(p.src, interventions, need_weights=True, need_intermediates=True)
        dec = model.decoder_forward(
            p.prefix, enc, interventions, need_weights=True, logits_at=torch.tensor([position], device=p.src.device)
        )
        res = ForwardResult(dec.logits, enc.enc_self_attn, None, dec.cross_attn, enc.intermediates)
    ig = (
        None
        if ig_steps == 0
        else IGResult.total([_ig_segment(p.f, p.x, k, ig_segments, ig_steps, ig_refine_depth) for k in range(ig_segments)])
    )
    with torch.enable_grad():
        gxi = _captum().InputXGradient(p.f).attribute(p.x.clone().requires_grad_(True))  # (1, S, D)
    return _explanation(model, tok, src_ids, p.prefix[0].tolist(), position, p.target, interventions, contrast, res, gxi[0], ig)


ExplainItem = tuple[tuple[int, ...], tuple[int, ...], int, "int | None"]  # (src_ids, out_ids, position, contrast)


def explain_item(
    model: Transformer, tok: PieceTokenizer, item: ExplainItem, interventions: Interventions = NO_INTERVENTIONS
) -> Explanation:
    """``explain_many`` of one ``(src_ids, out_ids, position, contrast)``: ``serving.worker.ModelWorker.call_many`` runs
    one or the other. Raises ValueError as ``explain`` does."""
    return only_result(explain_many(model, tok, [item], interventions))


def explain_many(
    model: Transformer, tok: PieceTokenizer, items: Sequence[ExplainItem], interventions: Interventions = NO_INTERVENTIONS
) -> list[Explanation | ValueError]:
    """``explain`` (without Integrated Gradients) of many ``(src_ids, out_ids, position, contrast)`` under one ``interventions``: for each its
    ``Explanation`` (no Integrated Gradients), or the ValueError ``explain`` would raise for it (returned, not raised).

    A class on the Attention vs attribution page asks for one explanation each at once; as one padded batch (sources
    right-padded with <pad>, which the padding mask hides; prefixes right-padded, which the causal mask hides from
    every earlier row) the forward pass and gradient × input's backward pass read each weight once for all of them.
    Each result equals its own ``explain`` up to float rounding (tests/test_attribution.py). Without the causal mask
    (``interventions.causal`` False) a row would read the padding after it, so only prefixes of one length go together.
    """
    device = next(model.parameters()).device
    results: list[Explanation | ValueError | None] = [None] * len(items)
    checked: dict[int, tuple[list[int], int]] = {}
    for i, (src_ids, out_ids, position, contrast) in enumerate(items):
        try:
            if len(src_ids) > model.cfg.max_len:
                raise ValueError(f"the source has {len(src_ids)} tokens; the model reads at most {model.cfg.max_len}")
            checked[i] = _checked(model, out_ids, position, contrast)
        except ValueError as e:
            results[i] = e
    groups: dict[int | None, list[int]] = {}
    for i in sorted(checked, key=lambda i: len(items[i][0])):  # similar lengths together: less padding
        groups.setdefault(None if interventions.causal else len(checked[i][0]), []).append(i)
    for group in groups.values():
        for batch in padded_batches(group, lambda i: len(items[i][0]), EXPLAIN_BATCH_MAX, EXPLAIN_BATCH_TOKENS):
            for i, e in zip(
                batch,
                _explain_batch(model, tok, [items[i] for i in batch], [checked[i] for i in batch], interventions, device),
                strict=True,
            ):
                results[i] = e
    return results


# One padded pass holds at most EXPLAIN_BATCH_MAX explanations and EXPLAIN_BATCH_TOKENS source tokens with the padding
# (``analysis.analyze.padded_batches``): the arithmetic of a backward pass grows with the padded size.
EXPLAIN_BATCH_MAX = 32
EXPLAIN_BATCH_TOKENS = 384


def _explain_batch(model, tok, items, checked, interventions: Interventions, device) -> list[Explanation]:
    """``explain_many`` of checked items (their prefix and target from ``_checked``) as one padded batch."""
    cfg = model.cfg
    B, S, T = len(items), max(len(it[0]) for it in items), max(len(c[0]) for c in checked)
    src = torch.full((B, S), cfg.pad_id, dtype=torch.long, device=device)  # (B, S), right-padded
    prefix = torch.full((B, T), cfg.pad_id, dtype=torch.long, device=device)  # (B, T), right-padded
    for b, (it, (prefix_ids, _)) in enumerate(zip(items, checked, strict=True)):
        src[b, : len(it[0])] = torch.tensor(list(it[0]))
        prefix[b, : len(prefix_ids)] = torch.tensor(prefix_ids)
    last = torch.tensor([len(c[0]) - 1 for c in checked], device=device)  # (B,)
    target = torch.tensor([c[1] for c in checked], device=device)  # (B,)
    contrast = torch.tensor([-1 if it[3] is None else it[3] for it in items], device=device)  # (B,)
    src_allowed = model.source_mask(src, interventions)  # (B, 1, 1, S) or None
    f = _objective(model, src_allowed, prefix, interventions, target, contrast, last)
    with torch.inference_mode():
        enc = model.encode(src, interventions, need_weights=True, need_intermediates=True)
        # logits (B, 1, V_tgt): the last rows
        dec = model.decoder_forward(prefix, enc, interventions, need_weights=True, logits_at=last)
    with torch.enable_grad():
        gxi = _captum().InputXGradient(f).attribute(_source_embeddings(model, src).clone().requires_grad_(True))  # (B, S, D)
    out = []
    for b, (it, (prefix_ids, tgt_id)) in enumerate(zip(items, checked, strict=True)):
        n, t = len(it[0]), len(prefix_ids)
        own = ForwardResult(  # this item's part of the batch: its rows and keys, as if it were explained alone
            dec.logits[b : b + 1],  # (1, 1, V_tgt): row t - 1, the token's step
            enc.enc_self_attn[:, b : b + 1, :, :n, :n],  # (L_enc, 1, H, S_b, S_b)
            None,
            dec.cross_attn[:, b : b + 1, :, :t, :n],  # (L_dec, 1, H, t, S_b)
            {"memory": enc.intermediates["memory"][b : b + 1, :n]},  # (1, S_b, D)
        )
        out.append(_explanation(model, tok, it[0], prefix_ids, it[2], tgt_id, interventions, it[3], own, gxi[b, :n], None))
    return out


def _explanation(
    model: Transformer,
    tok: PieceTokenizer,
    src_ids: Sequence[int],
    prefix_ids: Sequence[int],
    position: int,
    target: int,
    interventions: Interventions,
    contrast: int | None,
    res: ForwardResult,
    gxi: Tensor,
    ig: IGResult | None,
) -> Explanation:
    """The ``Explanation`` record of a teacher-forced pass ``res`` of one item (its last row is the token's step) and
    its gradient × input ``gxi (S, D)``."""
    cfg, name, S = model.cfg, tok.piece_text, len(src_ids)
    with torch.inference_mode():
        logp = torch.log_softmax(res.logits[0, -1].float(), dim=-1)  # (V_tgt,)
        top = torch.topk(logp, min(TOP_K, logp.numel()))
        attn = res.cross_attn[:, 0, :, -1]  # (L, H, S): row t of every layer and head
        value_norm, norm_heads, norm_sum = [], [], []
        for l in range(cfg.n_dec_layers):
            f_norm, per_head, summed = _norms(
                model.decoder[l].cross_attn, res.intermediates["memory"], res.cross_attn[l, :, :, -1:]
            )
            value_norm.append(f_norm[0])  # (H, S)
            norm_heads.append(per_head[0, :, 0])  # (H, S)
            norm_sum.append(summed[0, 0])  # (S,)
        enc_roll = rollout(_np(res.enc_self_attn[:, 0]))[-1]  # (S, S): each encoder output's share of each input token
        mean_rows = np.stack([head_average(_np(attn)[:, :, None, :], l)[0] for l in range(cfg.n_dec_layers)])  # (L, S)
    return Explanation(
        src_tokens=[name(i) for i in src_ids],
        hidden=np.array([i in interventions.src_hidden for i in range(S)]),
        position=position,
        prefix_tokens=[name(int(i)) for i in prefix_ids],
        candidates=[(name(int(i)), int(i), float(math.exp(p))) for p, i in zip(top.values, top.indices, strict=True)],
        target=name(target),
        target_id=target,
        target_logprob=float(logp[target]),
        contrast=None if contrast is None else name(contrast),
        contrast_id=contrast,
        contrast_logprob=None if contrast is None else float(logp[contrast]),
        attn=_np(attn),
        value_norm=_np(torch.stack(value_norm)),
        norm_heads=_np(torch.stack(norm_heads)),
        norm_sum=_np(torch.stack(norm_sum)),
        rollout=(mean_rows @ enc_roll).astype(np.float32),  # (L, S): a layer's cross row, through the encoder
        objective="log p(y)" if contrast is None else "log p(y) − log p(y′)",
        ig=ig,
        grad_input=_np(gxi.sum(dim=-1)),
        ablated=frozenset((l, h) for k, l, h in interventions.ablate if k == "cross"),
    )


# -- a lens on every layer -----------------------------------------------------------------------------------------


@torch.inference_mode()
def logit_lens_logprobs(
    model: Transformer, src_ids: Sequence[int], tgt_in: Sequence[int], interventions: Interventions = NO_INTERVENTIONS
) -> Tensor:
    """The logit lens on the decoder (nostalgebraist 2020): ``(L_dec + 1, T, V_tgt)`` log-probabilities (natural log),
    row 0 from the decoder's input (embeddings + PE), row l from layer l's output, each through the final LayerNorm and
    the generator (section 3.4).

    Column t is decoding's step t: the decoder fed ``tgt_in[:t + 1]`` (T ids, starting with <bos>) under
    ``interventions``, so the last row is the distribution decoding computed before it wrote token t (the softmax at
    temperature 1, before any sampling filter), whatever the decoding method. Under the causal mask that is one
    teacher-forced pass (row t reads keys 0..t only). Without it (``interventions.causal`` False) one pass would let
    row t read the tokens after it, the one it predicts included, so each step is replayed as decoding ran it: one
    pass over each prefix, its last row kept (as ``analysis.analyze.decode_time_maps``). Raises ValueError if a
    sequence exceeds ``max_len``.
    """
    device = next(model.parameters()).device
    src = torch.tensor([list(src_ids)], device=device)  # (1, S)
    tgt = torch.tensor([list(tgt_in)], device=device)  # (1, T)
    enc = model.encode(src, interventions)
    T, n_layers = tgt.size(1), model.cfg.n_dec_layers
    ends = [T] if interventions.causal else list(range(1, T + 1))  # the passes: the whole input, or each step's prefix
    rows = []  # per pass (L_dec + 1, rows it owns, D)
    for end in ends:
        inter = model.decoder_forward(tgt[:, :end], enc, interventions, need_intermediates=True).intermediates
        owned = slice(0, end) if interventions.causal else slice(end - 1, end)
        states = [inter["dec_in"], *(inter[f"dec_layer_{l}"] for l in range(n_layers))]  # (1, end, D) each
        rows.append(torch.cat([h[:, owned] for h in states]))  # (L_dec + 1, rows, D)
    states = torch.cat(rows, dim=1)  # (L_dec + 1, T, D)
    return torch.log_softmax(model.logits(model.dec_norm(states)).float(), dim=-1)  # (L_dec + 1, T, V_tgt)


def _translate(
    model: Transformer,
    src_ids: Sequence[int],
    enc: EncoderResult,
    interventions: Interventions,
    settings: DecodeSettings,
    budget: int,
) -> list[int]:
    """The output ids (no <bos>/<eos>) that ``settings`` decodes from ``enc`` within ``budget`` pieces, as
    ``analysis.analyze.analyze`` decodes: beam search with its size, α and stopping rule, or greedy / sampling
    (temperature, top-k, top-p, seed) through ``generate_steps``."""
    if settings.method == "beam":
        return settings_beam_search(model, src_ids, settings, interventions, budget, enc).hypotheses[0][0]
    return generate_ids(
        model, src_ids, interventions=interventions, sampling=settings.sampling(), max_new=budget, need_weights=False, enc=enc
    )


def lens_budget(model: Transformer, src_len: int, settings: DecodeSettings = GREEDY_DECODING) -> int:
    """The output budget in pieces that ``analysis.analyze.analyze`` gives a source of ``src_len`` ids under
    ``settings``: ``settings.max_new``, else ``model.decoding.max_new_tokens``, at most ``max_len - 1``."""
    return min(settings.max_new or max_new_tokens(model, src_len), model.cfg.max_len - 1)


@torch.inference_mode()
def decoder_lens_ids(
    model: Transformer,
    src_ids: Sequence[int],
    interventions: Interventions = NO_INTERVENTIONS,
    *,
    max_new: int | None = None,
    settings: DecodeSettings = GREEDY_DECODING,
) -> list[list[int]]:
    """DecoderLens (Langedijk et al. 2023): the translation (ids without <bos>/<eos>) when the decoder's cross-attention
    reads encoder layer k's output instead of the last one, for k = 0 (the embeddings + PE) .. L_enc.

    Each is put through the encoder's final LayerNorm, as the last layer's output is, and decoded as ``settings``
    decode (greedy, beam search, or sampling with its seed, so every layer draws from the same random stream), so
    the last one is exactly the translation ``analysis.analyze.analyze`` makes with these settings.
    ``interventions`` applies to the encoder and the decoder; ``max_new`` caps each output (default: the budget
    ``analyze`` uses, ``lens_budget``). Returns ``L_enc + 1`` lists of ids.
    """
    device = next(model.parameters()).device
    src = torch.tensor([list(src_ids)], device=device)  # (1, S)
    # with the weights, as analyze encodes: the same arithmetic, so the last layer's memory is analyze's to the bit
    enc = model.encode(src, interventions, need_weights=True, need_intermediates=True)
    states = [enc.intermediates["enc_in"], *(enc.intermediates[f"enc_layer_{k}"] for k in range(model.cfg.n_enc_layers))]
    budget = max_new or lens_budget(model, len(src_ids), settings)
    return [
        _translate(model, src_ids, EncoderResult(model.enc_norm(h), enc.src_allowed), interventions, settings, budget)
        for h in states
    ]


def layer_lens(
    model: Transformer,
    tok: PieceTokenizer,
    src_ids: Sequence[int],
    out_ids: Sequence[int],
    interventions: Interventions = NO_INTERVENTIONS,
    settings: DecodeSettings = GREEDY_DECODING,
) -> LayerLens:
    """The logit lens on every decoder layer, each column from decoding's own step over the translation ``out_ids``
    (``logit_lens_logprobs``), and DecoderLens from every encoder layer, decoded as ``settings`` decode
    (``decoder_lens_ids``), under ``interventions``: a ``LayerLens``. ``src_ids`` end in <eos>; ``out_ids`` have no
    <bos>/<eos>; ``settings``: the decoding that made ``out_ids`` (the sidebar's). Raises ValueError if a sequence
    exceeds ``max_len``."""
    cfg = model.cfg
    tgt_in, tgt_out = shift_right(list(out_ids), bos_id=cfg.bos_id, eos_id=cfg.eos_id, max_len=cfg.max_len)
    logp = logit_lens_logprobs(model, src_ids, tgt_in, interventions)  # (L_dec + 1, T, V_tgt)
    best = logp.max(dim=-1)  # (L_dec + 1, T) each
    want = logp[:, torch.arange(len(tgt_out)), torch.tensor(tgt_out)]  # (L_dec + 1, T)
    budget = lens_budget(model, len(src_ids), settings)
    lens = decoder_lens_ids(model, src_ids, interventions, max_new=budget, settings=settings)
    finished = [len(ids) < budget for ids in lens]  # stopped by <eos> before the budget ran out
    names = ["embeddings"] + [f"layer {l + 1}" for l in range(max(cfg.n_dec_layers, cfg.n_enc_layers))]
    return LayerLens(
        tgt_in_tokens=[tok.piece_text(i) for i in tgt_in],
        tgt_out_tokens=[tok.piece_text(i) for i in tgt_out],
        dec_names=names[: cfg.n_dec_layers + 1],
        top_tokens=[[tok.piece_text(int(i)) for i in row] for row in best.indices],
        top_probs=_np(best.values.exp()),
        target_probs=_np(want.exp()),
        enc_names=names[: cfg.n_enc_layers + 1],
        lens_tokens=[[tok.piece_text(i) for i in ids] for ids in lens],
        lens_texts=[tok.decode(ids).strip() for ids in lens],
        lens_finished=finished,
    )

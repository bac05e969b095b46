"""Inside one head: every number of one attention sub-layer for one query, from one forward pass.

``head_trace`` translates a sentence as ``analysis.analyze.analyze`` does (the same translation the app
shows), runs ONE teacher-forced pass over the source and the shifted output (``shift_right``) under the
same interventions (with the causal mask off, a decoder query's pass is its own step's: the prefix up to
the query, as decoding ran it), and then works the chosen attention sub-layer out by hand from the module's own
weights, for one query token:

    resid                      the query's row of the residual stream before the sub-layer
    x      = LN(resid)         pre-LN (post-LN: x = resid), what W^Q multiplies     section 3.1
    q      = x W^Q + b^Q       this head's slice of the projection (d_head wide)     section 3.2.2
    K, V   = X_kv W^K, X_kv W^V   one row per key: the layer's own input rows in self-attention,
                               the encoder memory in cross-attention                section 3.2.3
    scores = q · k_j           raw dot products
    scaled = scores / (sqrt(d_head) * tau)                                          eq. (1)
    mask                       keys the query may not read (causal, hidden token, window): -inf
    weights = softmax(scaled over the allowed keys)                                 eq. (1)
    head_out = sum_j w_j v_j                                                        eq. (1)
    concat = [head_1 .. head_H] (ablated heads zeroed, as the model does)           section 3.2.2
    attn_out = concat W^O + b^O  (taken from the module's own call)                 section 3.2.2
    added  = resid + attn_out  the residual connection                              section 3.1
    normed = LayerNorm(added)  post-LN: this sub-layer's "Add & Norm"; pre-LN: the next sub-layer's norm

``nn.Linear`` layers carry a bias (the paper writes the projections without one), so ``q``, ``k``,
``v`` and ``attn_out`` include it. Everything is returned as float32 numpy in a ``HeadTrace``: no
tensor, no model (the record lives in ``analysis.records``), so the app can cache it and ``viz.head`` can draw it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from analysis.analyze import analyze, intervention_masks, only_result, padded_batches, predicted_tokens, prepare_source
from analysis.records import Analysis, HeadTrace, KindMask
from model.facts import KINDS, VISIBLE, InputError, shift_right
from model.settings import DecodeSettings
from model.tokenizer import PieceTokenizer
from model.transformer import (
    NO_INTERVENTIONS,
    DecoderLayer,
    EncoderLayer,
    Interventions,
    MultiHeadAttention,
    Transformer,
    band,
)

__all__ = ["HeadTrace", "head_trace", "head_trace_item", "head_trace_many"]


def _np(t: Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy().astype(np.float32)


def _check(kind: str, layer: int, head: int, model: Transformer) -> None:
    """Raise ValueError for a kind, layer or head the model does not have."""
    cfg = model.cfg
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    n_layers = cfg.n_enc_layers if kind == "enc_self" else cfg.n_dec_layers
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer {layer} is out of range: {kind} has {n_layers} layers (count from 0)")
    if not 0 <= head < cfg.n_heads:
        raise ValueError(f"head {head} is out of range: the model has {cfg.n_heads} heads (count from 0)")


def _by_hand(mha: MultiHeadAttention, x: Tensor, kv_x: Tensor, mask: Tensor, tau: float, head_mask: list[float] | None):
    """Eq. (1) for every head of one query row, from the module's weights.

    ``x (D,)``, ``kv_x (K, D)``, ``mask (K,)`` True = hidden. Returns q ``(H, Dh)``, k, v ``(K, H, Dh)``,
    scores, scaled, weights ``(H, K)``, heads ``(H, Dh)`` and concat ``(D,)``.
    """
    H, Dh = mha.n_heads, mha.d_head
    q = (x @ mha.w_q.weight.T + mha.w_q.bias).view(H, Dh)  # (H, Dh)
    k = (kv_x @ mha.w_k.weight.T + mha.w_k.bias).view(-1, H, Dh)  # (K, H, Dh)
    v = (kv_x @ mha.w_v.weight.T + mha.w_v.bias).view(-1, H, Dh)  # (K, H, Dh)
    scores = torch.einsum("hd,khd->hk", q, k)  # (H, K): q . k_j
    scaled = scores / (math.sqrt(Dh) * tau)  # (H, K)
    if bool(mask.all()):  # no key to read: zero weights, zero output (the model's rule, never NaN)
        weights = torch.zeros_like(scaled)
    else:
        weights = torch.softmax(scaled.masked_fill(mask, float("-inf")), dim=-1)  # (H, K)
    heads = torch.einsum("hk,khd->hd", weights, v)  # (H, Dh): sum_j w_j v_j per head
    keep = torch.tensor(head_mask if head_mask is not None else [1.0] * H, dtype=heads.dtype, device=heads.device)  # (H,)
    concat = (heads * keep[:, None]).reshape(H * Dh)  # (D,): Concat(head_1 .. head_H), ablated heads zeroed
    return q, k, v, scores, scaled, weights, heads, concat


@torch.inference_mode()
def head_trace(
    model: Transformer,
    tok: PieceTokenizer,
    text: str,
    *,
    kind: str,
    layer: int,
    head: int,
    query: int,
    settings: DecodeSettings | None = None,
    interventions: Interventions = NO_INTERVENTIONS,
    analysis: Analysis | None = None,
) -> HeadTrace:
    """Trace head ``head`` of ``kind`` in ``layer`` for query row ``query`` of the translation of ``text``.

    Args:
        model, tok: the model (eval mode) and its tokenizer.
        text: the source sentence; it is translated with ``settings`` under ``interventions`` exactly as
            ``analysis.analyze.analyze`` does, and the trace follows that translation.
        kind: "enc_self", "dec_self" or "cross". layer, head, query: 0-based, as in the arrays of
            ``Maps`` (query: a source position for enc_self, a decoder input position otherwise).
        settings: ``model.settings.DecodeSettings`` (None: ``DecodeSettings()``, greedy).
        interventions: interventions (hidden source tokens, causal mask, window, temperature, ablated heads, PE).
        analysis: ``analyze(model, tok, text, settings, interventions)`` where the caller has it already (the app's pages
            do): the translation is then not decoded a second time. It must be that call's result.

    Returns:
        A ``HeadTrace``; its ``weights`` equal row ``query`` of the map ``analyze`` returns (all 0 there
        for an ablated head), and its ``attn_out`` is the module's own output for this query.

    Raises:
        InputError: (``analysis.analyze``) for empty text.
        ValueError: for an unknown kind, or a layer, head or query out of range.
    """
    _check(kind, layer, head, model)
    translated = (
        analysis
        if analysis is not None
        else analyze(model, tok, text, DecodeSettings() if settings is None else settings, interventions)
    )
    t = _Translation.of(model, translated, kind)
    T = _pass_length(t, kind, query, interventions)
    device = next(model.parameters()).device
    src_t = torch.tensor([t.src_ids], device=device)  # (1, S)
    tgt_t = torch.tensor([t.tgt_in[:T]], device=device)  # (1, T)
    inter = _intermediates(model, src_t, tgt_t, interventions)  # the one pass: every layer's input rows
    return _trace(model, t, kind, layer, head, query, interventions, _rows_of(inter, 0, len(t.src_ids), T))


def _intermediates(model: Transformer, src: Tensor, tgt: Tensor, interventions: Interventions) -> dict[str, Tensor]:
    """The intermediates of the teacher-forced pass over ``src (B, S)`` and ``tgt (B, T)``: every layer's input rows.
    The generator runs on one row only (``logits_at``): a trace reads no logits, and over every row they cost a
    quarter of the pass."""
    enc = model.encode(src, interventions, need_intermediates=True)
    at = torch.zeros(src.size(0), dtype=torch.long, device=src.device)  # (B,)
    return {
        **enc.intermediates,
        **model.decoder_forward(tgt, enc, interventions, need_intermediates=True, logits_at=at).intermediates,
    }


def _rows_of(inter: dict[str, Tensor], b: int, S: int, T: int) -> dict[str, Tensor]:
    """Item ``b``'s real rows of a (padded) pass's intermediates: the encoder's and the memory ``(S, D)``, the decoder's
    ``(T, D)`` (``enc_*``, ``memory``, ``dec_*``; the positional encodings, which have no batch axis, are left out)."""
    return {k: v[b, : (T if k.startswith("dec") else S)] for k, v in inter.items() if v.dim() == 3 and k != "logits"}


TraceItem = tuple[str, tuple[int, ...], bool, str, int, int, int]  # (text, out_ids, finished, kind, layer, head, query)


def head_trace_item(
    model: Transformer, tok: PieceTokenizer, item: TraceItem, interventions: Interventions = NO_INTERVENTIONS
) -> HeadTrace:
    """``head_trace_many`` of one item: ``serving.worker.ModelWorker.call_many`` runs one or the other."""
    return only_result(head_trace_many(model, tok, [item], interventions))


@torch.inference_mode()
def head_trace_many(
    model: Transformer, tok: PieceTokenizer, items: Sequence[TraceItem], interventions: Interventions = NO_INTERVENTIONS
) -> list[HeadTrace | ValueError | InputError]:
    """``head_trace`` of many ``(text, out_ids, finished, kind, layer, head, query)`` under one ``interventions``, each following the
    translation ``out_ids`` (``Analysis.out_ids`` and ``.finished`` of the page's analysis: nothing is decoded here),
    the intermediates of every item from one padded pass (sources and decoder inputs right-padded: the padding mask
    and the causal mask hide the padding from every real row). For each item its ``HeadTrace``, equal to its own
    ``head_trace`` up to float rounding (tests/test_head_trace.py), or the error ``head_trace`` would raise (returned).
    Without the causal mask a decoder row would read the padding after it, so only passes of one length go together.
    """
    cfg, device = model.cfg, next(model.parameters()).device
    results: list = [None] * len(items)
    ready: dict[int, tuple[_Translation, int]] = {}
    for i, (text, out_ids, finished, kind, layer, head, query) in enumerate(items):
        try:
            _check(kind, layer, head, model)
            source = prepare_source(tok, text, cfg.max_len)
            tgt_in, tgt_out = shift_right(list(out_ids), bos_id=cfg.bos_id, eos_id=cfg.eos_id, max_len=cfg.max_len)
            out_tokens = predicted_tokens(tok, tgt_out, finished)
            masks = intervention_masks(interventions, len(source.ids), len(tgt_in))[kind]
            t = _Translation(source.ids, source.tokens, tgt_in, [tok.piece_text(j) for j in tgt_in], out_tokens, masks)
            ready[i] = (t, _pass_length(t, kind, query, interventions))
        except (ValueError, InputError) as e:
            results[i] = e
    groups: dict[int | None, list[int]] = {}
    for i in sorted(ready, key=lambda i: len(ready[i][0].src_ids)):  # similar lengths together: less padding
        kind = items[i][3]
        groups.setdefault(None if interventions.causal or kind == "enc_self" else ready[i][1], []).append(i)
    for group in groups.values():
        for batch in padded_batches(group, lambda i: len(ready[i][0].src_ids), TRACE_BATCH_MAX, TRACE_BATCH_TOKENS):
            S = max(len(ready[i][0].src_ids) for i in batch)
            T = max(ready[i][1] for i in batch)
            src = torch.full((len(batch), S), cfg.pad_id, dtype=torch.long, device=device)  # (B, S), right-padded
            tgt = torch.full((len(batch), T), cfg.pad_id, dtype=torch.long, device=device)  # (B, T), right-padded
            for b, i in enumerate(batch):
                t, n = ready[i]
                src[b, : len(t.src_ids)] = torch.tensor(t.src_ids)
                tgt[b, :n] = torch.tensor(t.tgt_in[:n])
            inter = _intermediates(model, src, tgt, interventions)
            for b, i in enumerate(batch):
                t, n = ready[i]
                _, _, _, kind, layer, head, query = items[i]
                results[i] = _trace(model, t, kind, layer, head, query, interventions, _rows_of(inter, b, len(t.src_ids), n))
    return results


TRACE_BATCH_MAX, TRACE_BATCH_TOKENS = 32, 384  # traces in one padded pass, and its source tokens with the padding


@dataclass(frozen=True)
class _Translation:
    """What a trace reads of the translation it follows (``Analysis``'s fields of the same names; ``masks``: the kind's
    ``KindMask``)."""

    src_ids: list[int]
    src_tokens: list[str]
    tgt_in: list[int]  # <bos> + the output ids (``shift_right``)
    tgt_in_tokens: list[str]
    tgt_out_tokens: list[str]
    masks: KindMask

    @staticmethod
    def of(model: Transformer, analysis: Analysis, kind: str) -> _Translation:
        tgt_in, _ = shift_right(analysis.out_ids, bos_id=model.cfg.bos_id, eos_id=model.cfg.eos_id, max_len=model.cfg.max_len)
        return _Translation(
            analysis.source.ids,
            analysis.source.tokens,
            tgt_in,
            analysis.tgt_in_tokens,
            analysis.tgt_out_tokens,
            analysis.maps.masks[kind],
        )


def _pass_length(t: _Translation, kind: str, query: int, interventions: Interventions) -> int:
    """Decoder rows of the pass that computed row ``query`` (analysis.analyze.decode_time_maps): under the causal mask
    one pass over the whole output; without it, decoder row ``query`` is step ``query``'s own pass over the prefix.
    Raises ValueError for a query out of range."""
    n_q = len(t.src_tokens if kind == "enc_self" else t.tgt_in_tokens)
    if not 0 <= query < n_q:
        raise ValueError(f"query {query} is out of range: {kind} has {n_q} query tokens (count from 0)")
    return query + 1 if kind != "enc_self" and not interventions.causal else len(t.tgt_in_tokens)


def _trace(
    model: Transformer,
    t: _Translation,
    kind: str,
    layer: int,
    head: int,
    query: int,
    interventions: Interventions,
    inter: dict[str, Tensor],
) -> HeadTrace:
    """The ``HeadTrace`` from the pass's intermediates of this one item, each ``(rows, D)`` (S rows for the encoder's and
    the memory, T for the decoder's)."""
    cfg, device = model.cfg, next(model.parameters()).device
    T = inter["dec_in"].size(0)

    src, tgt = t.src_tokens, t.tgt_in_tokens[:T]
    q_tokens, k_tokens = {"enc_self": (src, src), "dec_self": (tgt, tgt), "cross": (tgt, src)}[kind]
    reasons = t.masks.reasons[: len(q_tokens), : len(k_tokens)]  # (Q, K) int8 (model.facts.cell_reasons)
    mask = torch.from_numpy(reasons != VISIBLE).to(device)  # (Q, K) True = hidden
    opts = {"temperature": interventions.temperature, "need_weights": True}

    if kind == "enc_self":
        lay: EncoderLayer = model.encoder[layer]
        resid_all = inter["enc_in" if layer == 0 else f"enc_layer_{layer - 1}"]  # (S, D)
        mha, norm, next_norm, label = lay.self_attn, lay.self_attn_norm, lay.ff_norm, "feed-forward"
        kv_x = norm.pre(resid_all)  # (S, D)
    else:
        dl: DecoderLayer = model.decoder[layer]
        y = inter["dec_in" if layer == 0 else f"dec_layer_{layer - 1}"]  # (T, D): the decoder layer's input
        if kind == "dec_self":
            resid_all, mha, norm, next_norm, label = y, dl.self_attn, dl.self_attn_norm, dl.cross_attn_norm, "cross-attention"
            kv_x = norm.pre(resid_all)  # (T, D)
        else:
            # the decoder state after the self-attention sub-layer: y = post(y + SelfAttn(pre(y))), every row
            h = dl.self_attn_norm.pre(y)[None]  # (1, T, D)
            allowed = band(
                T, T, 0, causal=interventions.causal, window=interventions.window, device=device
            )  # (T, T) the pass's own mask, or None
            hm_self = interventions.head_mask("dec_self", layer, cfg.n_heads)
            a_self, _, _ = dl.self_attn(h, h, None if allowed is None else allowed[None, None], head_mask=hm_self, **opts)
            resid_all = dl.self_attn_norm.post(y + a_self[0])  # (T, D)
            mha, norm, next_norm, label = dl.cross_attn, dl.cross_attn_norm, dl.ff_norm, "feed-forward"
            kv_x = inter["memory"]  # (S, D): keys and values come from the encoder memory
    hm = interventions.head_mask(kind, layer, cfg.n_heads)
    resid = resid_all[query]  # (D,)
    x = norm.pre(resid[None])[0]  # (D,)
    q, k, v, scores, scaled, weights, heads, concat = _by_hand(mha, x, kv_x, mask[query], interventions.temperature, hm)
    out, _, _ = mha(x[None, None], kv_x[None], ~mask[query][None, None, None], head_mask=hm, **opts)  # the module's own call
    attn_out = out[0, 0]  # (D,)
    added = resid + attn_out  # (D,)
    if cfg.norm_first:
        normed, norm_label = next_norm(added), f"pre-LN: the LayerNorm that opens the next sub-layer ({label})"
    else:
        normed, norm_label = norm(added), "post-LN: this sub-layer's LayerNorm (Add & Norm); its output is the layer's new state"
    return HeadTrace(
        kind=kind,
        layer=layer,
        head=head,
        query=query,
        d_head=cfg.d_head,
        temperature=float(interventions.temperature),
        norm_first=cfg.norm_first,
        q_tokens=list(q_tokens),
        k_tokens=list(k_tokens),
        predicted=None if kind == "enc_self" else list(t.tgt_out_tokens[:T]),
        resid=_np(resid),
        x=_np(x),
        kv_x=_np(kv_x),
        q=_np(q[head]),
        k=_np(k[:, head]),
        v=_np(v[:, head]),
        scores=_np(scores[head]),
        scaled=_np(scaled[head]),
        mask=reasons[query] != VISIBLE,
        reasons=reasons[query].astype(np.int8),
        weights=_np(weights[head]),
        head_out=_np(heads[head]),
        heads=_np(heads),
        ablated_heads=frozenset(h for l, h in t.masks.ablated if l == layer),
        concat=_np(concat),
        attn_out=_np(attn_out),
        added=_np(added),
        normed=_np(normed),
        norm_label=norm_label,
    )

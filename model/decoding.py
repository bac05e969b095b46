"""Decoding with an incremental key/value cache: greedy, beam search, sampling, and a step API.

Each step feeds only the newest target token; the decoder's self-attention keys and values of
earlier positions come from the cache returned by ``Transformer.decoder_forward`` (nothing is stored on
the model). Cross-attention keys and values of the memory are computed once per source.

With the causal mask off (``Interventions(causal=False)``) earlier positions would see later
ones, so their self-attention keys change every step and cannot be cached: the whole prefix is
then recomputed each step (the memory's keys and values are still reused).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from model.facts import BeamNode
from model.settings import GREEDY, SamplingSettings
from model.transformer import NO_INTERVENTIONS, EncoderResult, Interventions, LayerCache, Transformer


def max_new_tokens(model: Transformer, src_len: int) -> int:
    """Default output budget: 2 x source length + 10, capped so the target fits ``max_len``."""
    return max(1, min(model.cfg.max_len - 1, 2 * src_len + 10))


def strip(ids: list[int], eos_id: int) -> list[int]:
    """Ids before the first <eos> (the <bos> is not part of decoder outputs)."""
    return ids[: ids.index(eos_id)] if eos_id in ids else ids


class Decoder:
    """One source sentence (or batch) being decoded: encoder result and the key/value cache.

    ``step(new_ids)`` feeds new target tokens and returns their ``DecoderResult``; the cache is
    kept here, on this per-call object, never on the shared model.
    """

    def __init__(
        self,
        model: Transformer,
        src: Tensor | None,
        interventions: Interventions = NO_INTERVENTIONS,
        enc: EncoderResult | None = None,
    ):
        """``src (B, S)`` is encoded here unless ``enc`` (its ``model.encode``) is given; then it may be None."""
        self.model, self.interventions = model, interventions
        self.enc = enc if enc is not None else model.encode(src, interventions)
        self.cache: list[LayerCache] | None = None  # per decoder layer; the memory's K/V from the first step on
        self.ys: Tensor | None = None  # (B, t) every target token fed so far

    def step(self, new_ids: Tensor, *, need_weights: bool = False):
        """Feed ``new_ids (B, n)``; returns the ``DecoderResult`` for those n positions.

        Attention maps, if asked, cover the new queries only: self ``(L, B, H, n, t)``,
        cross ``(L, B, H, n, S)``.
        """
        self.ys = new_ids if self.ys is None else torch.cat([self.ys, new_ids], dim=1)  # (B, t)
        if self.interventions.causal:
            out = self.model.decoder_forward(new_ids, self.enc, self.interventions, cache=self.cache, need_weights=need_weights)
            self.cache = out.cache
            return out
        # no causal mask: earlier positions see the new ones, so the whole prefix is recomputed; only the
        # memory's cross-attention K/V are kept (self_kv None)
        out = self.model.decoder_forward(self.ys, self.enc, self.interventions, cache=self.cache, need_weights=need_weights)
        self.cache = [LayerCache(None, c.cross_kv) for c in out.cache]
        n = new_ids.size(1)
        out.logits = out.logits[:, -n:]
        if need_weights:
            out.dec_self_attn, out.cross_attn = out.dec_self_attn[:, :, :, -n:], out.cross_attn[:, :, :, -n:]
        return out

    def reorder(self, index: Tensor) -> None:
        """Keep rows ``index`` (beam search): reindex cache (self and cross K/V), prefixes and memory along batch."""
        if self.cache is not None:
            self.cache = [c.index_select(index) for c in self.cache]
        if self.ys is not None:
            self.ys = self.ys.index_select(0, index)
        allowed = self.enc.src_allowed
        self.enc = EncoderResult(
            self.enc.memory.index_select(0, index), None if allowed is None else allowed.index_select(0, index)
        )


@torch.inference_mode()
def greedy_batch(
    model: Transformer,
    src: Tensor,
    interventions: Interventions = NO_INTERVENTIONS,
    max_new: int | None = None,
) -> list[list[int]]:
    """Greedy decoding of a padded batch ``src (B, S)``; returns each output's ids without <bos>/<eos>."""
    cfg = model.cfg
    B = src.size(0)
    max_new = max_new or max_new_tokens(model, src.size(1))
    dec = Decoder(model, src, interventions)
    nxt = torch.full((B, 1), cfg.bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    outs = []
    for _ in range(max_new):
        logits = dec.step(nxt).logits[:, -1]  # (B, V)
        tok = logits.argmax(-1)  # (B,)
        tok = torch.where(done, torch.full_like(tok, cfg.pad_id), tok)
        outs.append(tok)
        done |= tok == cfg.eos_id
        if bool(done.all()):
            break
        nxt = tok[:, None]  # (B, 1)
    rows = torch.stack(outs, dim=1).tolist()  # (B, n)
    return [strip([i for i in row if i != cfg.pad_id], cfg.eos_id) for row in rows]


# -- the step API ---------------------------------------------------------------------------


def filtered_probs(logits: Tensor, s: SamplingSettings) -> Tensor:
    """Next-token distribution ``(V,)`` after temperature, top-k and top-p filtering (sums to 1).

    Top-k keeps exactly k tokens, those of ``torch.topk`` (the step API's candidates): a tie at
    the k-th probability does not let more in.
    """
    probs = torch.softmax(logits.float() / s.temperature, dim=-1)
    if s.top_k:
        top = torch.topk(probs, min(s.top_k, probs.numel())).indices
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(0, top, True)
        probs = torch.where(keep, probs, torch.zeros_like(probs))
        probs = probs / probs.sum()  # top-p then works on the top-k distribution
    if s.top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        keep_sorted = torch.cumsum(sorted_p, 0) - sorted_p < s.top_p  # always keeps the first
        keep = torch.zeros_like(keep_sorted).scatter(0, order, keep_sorted)
        probs = torch.where(keep, probs, torch.zeros_like(probs))
    return probs / probs.sum()


@dataclass(frozen=True)
class Step:
    """One decoding step t: what the model saw, what it proposed and what was chosen.

    prefix:       target ids fed to the decoder so far, ``[<bos>, y_1 .. y_t]`` (length t + 1).
    candidates:   the top-k next tokens as (compact id, probability), most probable first;
                  probabilities are the model's softmax at temperature 1, before any filtering.
    chosen:       the token appended at this step (y_{t+1}); <eos> ends decoding.
    forced:       True if ``chosen`` came from the forced prefix rather than the strategy.
    self_attn:    ``(n_dec_layers, H, t + 1)`` the new query's causal self-attention over the prefix
                  (None if decoding ran without weights).
    cross_attn:   ``(n_dec_layers, H, S)`` the new query's cross-attention over the source (or None).
    """

    t: int
    prefix: list[int]
    candidates: list[tuple[int, float]]
    chosen: int
    forced: bool
    chosen_prob: float
    self_attn: Tensor | None
    cross_attn: Tensor | None


@torch.inference_mode()
def generate_steps(
    model: Transformer,
    src_ids: Sequence[int],
    *,
    interventions: Interventions = NO_INTERVENTIONS,
    sampling: SamplingSettings = GREEDY,
    forced: Sequence[int] = (),
    k: int = 5,
    max_new: int | None = None,
    need_weights: bool = True,
    enc: EncoderResult | None = None,
) -> Iterator[Step]:
    """Decode one source ``src_ids`` (compact ids, ending in <eos>) token by token, yielding a ``Step`` each.

    ``forced`` is a target prefix (without <bos>) that is taken as given: at steps t < len(forced)
    the chosen token is forced[t] whatever the model prefers, and decoding continues freely from
    there. That is how a user picks another candidate at step t. Ends after <eos> or ``max_new``.
    Raises ValueError if a forced id is not in the target vocabulary (``0 .. cfg.n_logits - 1``).
    With ``need_weights=False`` the fused attention path runs and ``Step.self_attn`` /
    ``Step.cross_attn`` are None (same tokens and probabilities). ``enc``: this source's
    ``model.encode`` result, if already computed.
    """
    cfg = model.cfg
    bad = [i for i in forced if not 0 <= int(i) < cfg.n_logits]
    if bad:
        raise ValueError(f"forced token {bad[0]} is outside the target vocabulary (0 .. {cfg.n_logits - 1})")
    device = next(model.parameters()).device
    src = torch.tensor([list(src_ids)], dtype=torch.long, device=device)  # (1, S)
    max_new = max_new or max_new_tokens(model, src.size(1))
    dec = Decoder(model, src, interventions, enc=enc)
    gen = torch.Generator(device="cpu").manual_seed(sampling.seed)
    prefix = [cfg.bos_id]
    nxt = prefix[:]
    for t in range(max_new):
        out = dec.step(torch.tensor([nxt], dtype=torch.long, device=device), need_weights=need_weights)
        logits = out.logits[0, -1]  # (V,)
        probs = torch.softmax(logits.float(), dim=-1)
        top = torch.topk(probs, min(k, probs.numel()))
        candidates = list(zip(top.indices.tolist(), top.values.tolist(), strict=True))  # (id, probability), best first
        if t < len(forced):
            chosen, was_forced = int(forced[t]), True
        elif sampling.strategy == "greedy":
            chosen, was_forced = candidates[0][0], False
        else:
            chosen = int(torch.multinomial(filtered_probs(logits, sampling).cpu(), 1, generator=gen))
            was_forced = False
        yield Step(
            t=t,
            prefix=prefix[:],
            candidates=candidates,
            chosen=chosen,
            forced=was_forced,
            chosen_prob=float(probs[chosen]),
            self_attn=out.dec_self_attn[:, 0, :, -1].cpu() if need_weights else None,  # (L, H, t + 1)
            cross_attn=out.cross_attn[:, 0, :, -1].cpu() if need_weights else None,  # (L, H, S)
        )
        if chosen == cfg.eos_id:
            return
        prefix.append(chosen)
        nxt = [chosen]


@torch.inference_mode()
def greedy_steps_batch(
    model: Transformer,
    srcs: Sequence[Sequence[int]],
    *,
    interventions: Interventions = NO_INTERVENTIONS,
    k: int = 5,
    max_new: Sequence[int],
    enc: EncoderResult,
) -> list[list[Step]]:
    """Greedy ``generate_steps`` of several sources at once: one decoder pass per step for all of them.

    ``srcs``: B sources (compact ids, each ending in <eos>), already encoded together as ``enc`` (their
    ``model.encode`` of the batch right-padded with ``pad_id``, ``need_weights`` not needed here);
    ``max_new[b]``: source b's output budget. Returns, per source, the steps ``generate_steps(model,
    srcs[b], interventions=interventions, k=k, max_new=max_new[b])`` yields, with each step's attention rows cut to that source's
    length (self ``(L, H, t + 1)``, cross ``(L, H, S_b)``). A source that has finished (``<eos>`` or its budget)
    is fed ``<eos>`` again while the others go on; its later rows are dropped (padded keys get weight 0 and a
    row of a batch never reads another row, so the others are unchanged). The same numbers as one source at a
    time up to float rounding (the matrix products of a batch sum in another order); tests/test_batching.py
    checks tokens and maps against ``generate_steps``. Use it for many users' analyses at once (a class).
    """
    cfg = model.cfg
    B = len(srcs)
    device = enc.memory.device
    dec = Decoder(model, None, interventions, enc=enc)  # the batch is encoded already
    lengths = [len(s) for s in srcs]
    steps: list[list[Step]] = [[] for _ in range(B)]
    prefixes = [[cfg.bos_id] for _ in range(B)]
    live = [max_new[b] > 0 for b in range(B)]
    nxt = torch.full((B, 1), cfg.bos_id, dtype=torch.long, device=device)  # (B, 1)
    t = 0
    while any(live):
        out = dec.step(nxt, need_weights=True)
        probs = torch.softmax(out.logits[:, -1].float(), dim=-1)  # (B, V)
        top = torch.topk(probs, min(k, probs.size(-1)))  # values, indices (B, k)
        top_p, top_i = top.values.tolist(), top.indices.tolist()
        self_rows = out.dec_self_attn[:, :, :, -1].cpu()  # (L, B, H, t + 1)
        cross_rows = out.cross_attn[:, :, :, -1].cpu()  # (L, B, H, S_max)
        chosen = [cfg.eos_id] * B
        for b in range(B):
            if not live[b]:
                continue
            c = top_i[b][0]
            steps[b].append(
                Step(
                    t=t,
                    prefix=prefixes[b][:],
                    candidates=list(zip(top_i[b], top_p[b], strict=True)),
                    chosen=c,
                    forced=False,
                    chosen_prob=top_p[b][0],
                    self_attn=self_rows[:, b].clone(),  # (L, H, t + 1)
                    cross_attn=cross_rows[:, b, :, : lengths[b]].clone(),  # (L, H, S_b)
                )
            )
            chosen[b] = c
            prefixes[b].append(c)
            live[b] = c != cfg.eos_id and t + 1 < max_new[b]
        t += 1
        nxt = torch.tensor(chosen, dtype=torch.long, device=device)[:, None]  # (B, 1)
    return steps


def generate_ids(model: Transformer, src_ids: Sequence[int], **kw) -> list[int]:
    """The output ids (compact, no <bos>/<eos>) that greedy decoding or sampling (``sampling``) writes for ``src_ids``:
    ``generate_steps`` run to the end with the same keyword arguments, its chosen tokens kept. Raises as it does."""
    steps = list(generate_steps(model, src_ids, **kw))
    return strip([s.chosen for s in steps], model.cfg.eos_id)


# -- beam search ----------------------------------------------------------------------------


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016, eq. 14); alpha=0 turns it off."""
    return ((5 + length) / 6) ** alpha


@dataclass
class BeamResult:
    """Finished hypotheses, best first, as (ids without <bos>/<eos>, score), and the whole tree."""

    hypotheses: list[tuple[list[int], float]]
    nodes: list[BeamNode] = field(default_factory=list)
    best_path: list[int] = field(default_factory=list)  # node ids from root to the best hypothesis's <eos>


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src_ids: Sequence[int],
    *,
    beam_size: int = 4,
    alpha: float = 0.6,
    interventions: Interventions = NO_INTERVENTIONS,
    max_new: int | None = None,
    early_stop: bool = True,
    enc: EncoderResult | None = None,
) -> BeamResult:
    """Beam search for one source (compact ids ending in <eos>), with the GNMT length penalty.

    Keeps ``beam_size`` live hypotheses; each step expands them with the 2 x beam_size best
    next tokens and moves hypotheses ending in <eos> to the finished list (scored
    logprob / lp(length incl. <eos>)). With ``early_stop`` it stops once ``beam_size`` have
    finished; without, it goes on while the best live hypothesis, scored as if it ended now,
    still beats the worst of the ``beam_size`` best finished ones (Hugging Face's
    ``early_stopping=False`` rule), which lets longer hypotheses finish. Either way it stops when
    the budget is spent (live ones are then finished as they are). With beam_size 1 this is
    greedy decoding exactly (it always stops at the first <eos>). ``enc``: this source's
    ``model.encode`` result, if already computed. Raises ValueError if beam_size < 1.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    cfg = model.cfg
    device = next(model.parameters()).device
    src = torch.tensor([list(src_ids)], dtype=torch.long, device=device)  # (1, S)
    max_new = max_new or max_new_tokens(model, src.size(1))
    dec = Decoder(model, src, interventions, enc=enc)
    stop_when_full = early_stop or beam_size == 1  # beam size 1 is greedy: it ends at the first <eos>
    nodes = [BeamNode(0, -1, cfg.bos_id, -1, 0.0)]
    live = [0]  # node ids of live hypotheses, one per decoder row
    live_logp = torch.zeros(1, device=device)  # (n_live,)
    finished: list[int] = []
    nxt = torch.full((1, 1), cfg.bos_id, dtype=torch.long, device=device)
    for t in range(max_new):
        logp = torch.log_softmax(dec.step(nxt).logits[:, -1].float(), dim=-1)  # (n_live, V)
        total = (live_logp[:, None] + logp).flatten()  # (n_live * V,)
        top = torch.topk(total, min(2 * beam_size, total.numel()))
        V = logp.size(1)
        new_live, new_rows, new_tokens, new_logp = [], [], [], []
        for score, flat in zip(top.values.tolist(), top.indices.tolist(), strict=True):
            row, token = divmod(flat, V)
            node = BeamNode(len(nodes), live[row], token, t, score)
            nodes.append(node)
            if token == cfg.eos_id:
                node.finished, node.score = True, score / length_penalty(t + 1, alpha)
                finished.append(node.id)
            else:
                new_live.append(node.id)
                new_rows.append(row)
                new_tokens.append(token)
                new_logp.append(score)
            if len(new_live) == beam_size or (stop_when_full and len(finished) >= beam_size):
                break
        if not new_live or (stop_when_full and len(finished) >= beam_size):
            break
        if len(finished) >= beam_size:
            worst_kept = sorted((nodes[i].score for i in finished), reverse=True)[beam_size - 1]
            if max(new_logp) / length_penalty(t + 1, alpha) <= worst_kept:
                break  # no live hypothesis can still enter the best beam_size
        live = new_live
        live_logp = torch.tensor(new_logp, device=device)
        dec.reorder(torch.tensor(new_rows, dtype=torch.long, device=device))
        nxt = torch.tensor(new_tokens, dtype=torch.long, device=device)[:, None]  # (n_live, 1)
    else:
        for nid in live:  # budget spent: finish the live hypotheses as they are
            n = nodes[nid]
            n.finished, n.score = True, n.logprob / length_penalty(n.step + 1, alpha)
            finished.append(nid)

    def path(nid: int) -> list[int]:
        out = []
        while nid != -1:
            out.append(nid)
            nid = nodes[nid].parent
        return out[::-1]

    ranked = sorted(finished, key=lambda nid: -nodes[nid].score)
    hyps = [(strip([nodes[i].token for i in path(nid)[1:]], cfg.eos_id), nodes[nid].score) for nid in ranked]
    return BeamResult(hyps, nodes, path(ranked[0]) if ranked else [0])

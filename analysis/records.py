"""The facts that model/, viz/ and ui/ share, defined once, and the records they pass, free of torch.

Facts:

- ``KINDS`` and ``KIND_NAMES``: the three kinds of attention and their display names.
- ``key_allowed`` / ``cell_reasons``: which (query, key) cells a mask hides, and why. The rule is
  written with array operators only, so ``model.transformer`` applies it to torch tensors and
  ``analysis.analyze`` to numpy arrays: one definition, two array libraries. ``kind_masks`` applies
  it to all three kinds of one translation.
- ``shift_right``: the decoder reads ``[<bos>, y_1 .. y_n]`` and predicts ``[y_1 .. y_n, <eos>]``
  (section 3.1 of the paper: "the output embeddings are offset by one position").
- ``layer_average`` / ``head_average``: the mean over heads, leaving out ablated (all-zero) heads.

Records (``analysis.analyze`` builds them; ``viz/`` draws them; none holds a tensor or a model):

- ``Source``, ``Maps`` (with the ``KindMask`` of each kind and the ``Stage`` list of the data flow),
  ``Analysis``: one translated input;
- ``StepView``: one decoding step; ``BeamNode`` and ``BeamTree``: a beam search;
- ``HeadTrace``: every number of one head's attention for one query (``analysis.trace.head_trace``);
- ``EncoderStates`` / ``WordOrder``: the word-order demo of section 3.5;
- ``EncoderDistance``: how far each source token's encoder output moved between two inputs;
- ``AttentionView`` (every layer and head of one kind) and ``MapView`` (one map): what an attention
  figure draws, maps with their tokens and the reason each hidden cell is hidden. Build them with
  ``Analysis.view``, ``attention_view``, ``trace_view``, ``AttentionView.map``.

Shape letters: L layers, H heads, S source tokens, T decoder inputs, Q queries, K keys.
Importing this module never imports torch (tests/test_records.py checks it), so ``viz/`` can draw
records without a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from i18n import _
from model.facts import ABLATED, FUTURE, KINDS, REASON_NAMES, REASONS, UNWRITTEN, VISIBLE, BeamNode, cell_reasons


# -- masks of one translation -----------------------------------------------------------------------
@dataclass(frozen=True)
class KindMask:
    """What the forward pass hid in the maps of one kind.

    reasons: ``(Q, K)`` int8 reason code per cell (``VISIBLE`` = the query read the key), the same
    for every layer and head; ablated: (layer, head) pairs, 0-based, whose output was zeroed.
    """

    reasons: np.ndarray
    ablated: frozenset[tuple[int, int]] = frozenset()


def kind_masks(
    n_src: int,
    n_tgt: int,
    *,
    causal: bool = True,
    window: int | None = None,
    src_hidden: Sequence[int] = (),
    ablate: Sequence[tuple[str, int, int]] = (),
) -> dict[str, KindMask]:
    """The ``KindMask`` of each kind for a source of ``n_src`` and a decoder input of ``n_tgt`` tokens.

    The arguments are the fields of ``model.transformer.Interventions`` that hide cells: the causal
    flag, the window, hidden source positions and ablated ``(kind, layer, head)`` triples. Cells:
    ``cell_reasons``; enc_self ``(S, S)``, dec_self ``(T, T)``, cross ``(T, S)``.
    """
    shapes = {"enc_self": (n_src, n_src), "dec_self": (n_tgt, n_tgt), "cross": (n_tgt, n_src)}
    return {
        kind: KindMask(
            cell_reasons(kind, *shapes[kind], causal=causal, window=window, src_hidden=src_hidden),
            frozenset((int(l), int(h)) for k, l, h in ablate if k == kind),
        )
        for kind in KINDS
    }


# -- means over heads -------------------------------------------------------------------------------
def layer_average(attn) -> np.ndarray:
    """Mean over heads for each layer: ``(L, H, Q, K) -> (L, Q, K)`` float32.

    Heads whose map is all zero (ablated heads: ``model.transformer`` reports zeros for them) are
    left out, so each row of the average still sums to 1 over the allowed keys; a layer with every
    head ablated averages to zeros.

    Raises:
        ValueError: if ``attn`` is not 4-D.
    """
    attn = np.asarray(attn, dtype=np.float32)  # (L, H, Q, K)
    if attn.ndim != 4:
        raise ValueError(f"attn must be 4-D (layers, heads, queries, keys), got shape {attn.shape}")
    live = np.abs(attn).reshape(attn.shape[0], attn.shape[1], -1).max(axis=2) > 0  # (L, H)
    n = np.maximum(live.sum(axis=1), 1).astype(np.float32)  # (L,)
    return (attn * live[:, :, None, None]).sum(axis=1) / n[:, None, None]  # (L, Q, K)


def head_average(attn, layer: int | None = None) -> np.ndarray:
    """Mean over heads: ``(H, Q, K) -> (Q, K)``; for ``(L, H, Q, K)`` the heads of ``layer``
    (0-based), or of every layer when ``layer`` is None. All-zero (ablated) heads are left out.

    Raises:
        ValueError: for other shapes or a layer out of range.
    """
    attn = np.asarray(attn, dtype=np.float32)
    if attn.ndim == 3:
        if layer is not None:
            raise ValueError("layer is only for a (L, H, Q, K) array; this one is (H, Q, K)")
        return layer_average(attn[None])[0]
    if attn.ndim != 4:
        raise ValueError(f"attn must be 3-D (heads, queries, keys) or 4-D (layers, ...), got shape {attn.shape}")
    if layer is None:
        return layer_average(attn.reshape(1, -1, *attn.shape[2:]))[0]  # (L, H, Q, K) -> (1, L*H, Q, K)
    if not 0 <= layer < attn.shape[0]:
        raise ValueError(f"layer {layer} is out of range: the array has {attn.shape[0]} layers (count from 0)")
    return layer_average(attn[layer : layer + 1])[0]


# -- what an attention figure draws -----------------------------------------------------------------
@dataclass(frozen=True)
class MapView:
    """One attention map with its tokens: what ``viz.attention_heatmap`` draws.

    w ``(Q, K)`` weights; reasons ``(Q, K)`` int8 reason codes (``ABLATED`` everywhere for an
    ablated head); predicted: the token each decoder row predicted (None for enc_self); layer,
    head: 0-based, ``head`` None for the mean over heads.
    """

    kind: str
    w: np.ndarray
    q_tokens: list[str]
    k_tokens: list[str]
    predicted: list[str] | None
    reasons: np.ndarray
    layer: int | None = None
    head: int | None = None


@dataclass(frozen=True)
class AttentionView:
    """Every layer and head of one kind with its tokens: what ``viz.attention_mosaic`` draws.

    attn ``(L, H, Q, K)`` post-softmax weights; q_tokens (Q; decoder inputs for the decoder kinds),
    k_tokens (K); predicted: the Q tokens each decoder row predicted (None for enc_self); reasons
    ``(Q, K)`` int8 reason codes, the same for every head; ablated: (layer, head), 0-based;
    head_names: names of the H columns (None: "head 1" ..); measure: what ``attn`` holds, for the colour bar and hover
    ("weight"; "share", for the norm-weighted shares of ``analysis.attribution.norm_weighted_maps``, also on a 0–1 scale).
    """

    kind: str
    attn: np.ndarray
    q_tokens: list[str]
    k_tokens: list[str]
    predicted: list[str] | None
    reasons: np.ndarray
    ablated: frozenset[tuple[int, int]] = frozenset()
    head_names: tuple[str, ...] | None = None
    measure: str = "weight"

    def map(self, layer: int, head: int | None = None) -> MapView:
        """Head ``head`` of ``layer`` (0-based), or the mean over the layer's heads when ``head`` is None.

        An ablated head (or a mean over a layer whose every head is ablated) is all ``ABLATED``.
        Raises ValueError for a layer or head out of range.
        """
        L, H = self.attn.shape[:2]
        if not 0 <= layer < L or not (head is None or 0 <= head < H):
            raise ValueError(f"(layer {layer}, head {head}) is out of range for {L} layers x {H} heads (count from 0)")
        w = head_average(self.attn, layer) if head is None else np.asarray(self.attn[layer, head], dtype=np.float32)
        heads = range(H) if head is None else (head,)
        off = all((layer, h) in self.ablated for h in heads)
        reasons = np.full_like(self.reasons, ABLATED) if off else self.reasons
        return MapView(self.kind, w, self.q_tokens, self.k_tokens, self.predicted, reasons, layer, head)

    def layer_means(self) -> AttentionView:
        """Each layer's mean over its heads as one column ``(L, 1, Q, K)`` named "mean"."""
        return replace(self, attn=layer_average(self.attn)[:, None], ablated=frozenset(), head_names=("mean",))


def attention_view(maps: Maps, kind: str, *, src: list[str], tgt_in: list[str], tgt_out: list[str]) -> AttentionView:
    """The ``AttentionView`` of ``kind`` in ``maps``, labelled with the source tokens ``src`` (S),
    the decoder inputs ``tgt_in`` (T) and the tokens they predicted ``tgt_out`` (T).

    Raises ValueError for an unknown kind.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    q, k, pred = {"enc_self": (src, src, None), "dec_self": (tgt_in, tgt_in, tgt_out), "cross": (tgt_in, src, tgt_out)}[kind]
    m = maps.masks[kind]
    return AttentionView(kind, getattr(maps, kind), q, k, pred, m.reasons, m.ablated)


# -- one translation --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Source:
    """A source sentence ready for the encoder: ids end in <eos>; ``truncated`` if it was cut to fit."""

    text: str
    ids: list[int]
    tokens: list[str]
    truncated: bool
    n_tokens_original: int


@dataclass(frozen=True)
class Stage:
    """One stage of a forward pass: its name, its tensor shape (this input's numbers) and what the
    shape's letters mean (B batch, S source, T decoder input, ...)."""

    name: str
    shape: tuple[int, ...]
    meaning: str


@dataclass
class Maps:
    """The attention maps of one translation (batch of one), as one teacher-forced pass over it gives them.

    enc_self ``(L_enc, H, S, S)``, dec_self ``(L_dec, H, T, T)``, cross ``(L_dec, H, T, S)``, float32;
    ``next_probs (T,)`` the probability the model gave each predicted token; ``masks`` the
    ``KindMask`` of each kind (from the interventions the pass ran under); ``shapes`` lists every
    ``Stage`` of the data flow, in order.
    """

    enc_self: np.ndarray
    dec_self: np.ndarray
    cross: np.ndarray
    next_probs: np.ndarray
    masks: dict[str, KindMask]
    shapes: list[Stage] = field(default_factory=list)


@dataclass(frozen=True)
class BeamTree:
    """A beam search: every node of its tree (``BeamNode``: id, parent, token, step,
    logprob, finished, score; a node's id is its index), ``texts[i]`` the piece text of node i, the
    node ids from the root to the best hypothesis's end, and the finished hypotheses, best first,
    as (text, score)."""

    nodes: list[BeamNode]
    texts: list[str]
    best_path: list[int]
    hypotheses: list[tuple[str, float]]


@dataclass
class Analysis:
    """One translated input and every attention map of its translation (``analysis.analyze.analyze``).

    Decoder maps: row t is the query at ``tgt_in_tokens[t]``, which predicted ``tgt_out_tokens[t]``
    (``shift_right``). settings: ``asdict(DecodeSettings)``; interventions: ``interventions_dict(interventions)``; beam:
    the tree when the method was beam search; steps: the decoding steps with their top candidates when it
    was greedy or sampling (what ``analysis.analyze.step_trace`` returns for this input with no forced prefix).
    """

    source: Source
    out_ids: list[int]
    translation: str
    finished: bool  # the output ended with <eos> (not cut by the token budget)
    tgt_in_tokens: list[str]
    tgt_out_tokens: list[str]
    maps: Maps
    settings: dict
    interventions: dict
    beam: BeamTree | None = None
    steps: list[StepView] | None = None

    def view(self, kind: str) -> AttentionView:
        """Every layer and head of ``kind`` with this input's tokens and hidden cells."""
        return attention_view(self.maps, kind, src=self.source.tokens, tgt_in=self.tgt_in_tokens, tgt_out=self.tgt_out_tokens)

    def to_json_dict(self) -> dict:
        """Everything, with arrays as nested lists: for the JSON export."""
        m = self.maps
        return {
            "source": asdict(self.source),
            "translation": self.translation,
            "out_ids": self.out_ids,
            "finished": self.finished,
            "tgt_in_tokens": self.tgt_in_tokens,
            "tgt_out_tokens": self.tgt_out_tokens,
            "attention": {
                "enc_self": m.enc_self.round(5).tolist(),
                "dec_self": m.dec_self.round(5).tolist(),
                "cross": m.cross.round(5).tolist(),
                "layout": "[layer][head][query][key]",
            },
            "hidden_cells": {
                kind: {"reasons": mk.reasons.tolist(), "codes": REASON_NAMES, "ablated": sorted(map(list, mk.ablated))}
                for kind, mk in m.masks.items()
            },
            "next_token_probs": m.next_probs.round(5).tolist(),
            "shapes": [{"stage": s.name, "shape": list(s.shape), "meaning": s.meaning} for s in m.shapes],
            "settings": self.settings,
            "interventions": self.interventions,
            "beam": asdict(self.beam) if self.beam is not None else None,
        }


# -- decoding step by step --------------------------------------------------------------------------
@dataclass(frozen=True)
class StepView:
    """One decoding step as plain data (see ``model.decoding.Step``).

    prefix_tokens: the decoder input so far ``[<bos>, y_1 .. y_t]``; candidates: (piece text,
    compact id, probability), best first; self_attn ``(L, H, t + 1)``; cross_attn ``(L, H, S)``;
    masks: for "dec_self" and "cross", the ``KindMask`` of this step's query row (reasons
    ``(1, t + 1)`` and ``(1, S)``).
    """

    t: int
    prefix_tokens: list[str]
    candidates: list[tuple[str, int, float]]
    chosen: int
    chosen_token: str
    chosen_prob: float
    forced: bool
    self_attn: np.ndarray
    cross_attn: np.ndarray
    masks: dict[str, KindMask]


def trace_view(steps: Sequence[StepView], kind: str, src_tokens: list[str], *, causal: bool = True) -> AttentionView:
    """Every layer and head of the decoder ``kind`` over ``steps`` (steps 0 .. t, in order): row i is
    step i's query, which predicted ``steps[i].chosen_token``.

    dec_self keys are the last step's prefix; a key after step i's prefix did not exist when its
    query ran: ``FUTURE`` where the steps ran under the causal mask (``causal``, as the mask would hide
    it), else ``UNWRITTEN``. Cross keys are the source tokens ``src_tokens``.
    Raises ValueError for no steps or kind "enc_self".
    """
    if not steps or kind not in ("dec_self", "cross"):
        raise ValueError(f"trace_view needs at least one step and kind 'dec_self' or 'cross', got {len(steps)} steps, {kind!r}")
    last, T = steps[-1], len(steps)
    predicted = [s.chosen_token for s in steps]
    if kind == "cross":
        attn = np.stack([s.cross_attn for s in steps], axis=2)  # T x (L, H, S) -> (L, H, T, S)
        reasons = np.concatenate([s.masks["cross"].reasons for s in steps])  # (T, S)
        return AttentionView(kind, attn, last.prefix_tokens, src_tokens, predicted, reasons, last.masks[kind].ablated)
    L, H = last.self_attn.shape[:2]
    attn = np.zeros((L, H, T, T), dtype=np.float32)
    reasons = np.full((T, T), FUTURE if causal else UNWRITTEN, dtype=np.int8)
    for i, s in enumerate(steps):
        attn[:, :, i, : i + 1] = s.self_attn  # row i: the query at step i over the prefix <bos> .. y_i
        reasons[i, : i + 1] = s.masks["dec_self"].reasons[0]
    return AttentionView(kind, attn, last.prefix_tokens, last.prefix_tokens, predicted, reasons, last.masks[kind].ablated)


# -- inside one head -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class HeadTrace:
    """One head's computation for one query token (``analysis.trace.head_trace``). Arrays are float32 numpy.

    D = d_model, Dh = d_head, H = n_heads, K = number of keys (S for enc_self and cross, T for dec_self).

    What was traced:
        kind: "enc_self", "dec_self" or "cross"; layer, head, query: 0-based, as in the arrays of ``Maps``.
        d_head: Dh. temperature: tau of the interventions (1.0: the paper). norm_first: pre-LN (True) or
        post-LN (False).
        q_tokens: the tokens of every query row of this kind (source tokens, or decoder inputs
        ``[<bos>, y_1 ..]``); ``q_tokens[query]`` is the traced one. predicted: for the decoder kinds the
        token each row predicted (``shift_right``), else None. k_tokens: the K key tokens.

    The numbers (section 3.1, 3.2.2, eq. 1):
        resid ``(D,)``: the query's residual-stream row before the sub-layer (encoder/decoder layer input;
            for cross-attention the decoder state after the self-attention sub-layer).
        x ``(D,)``: the query's input row, what W^Q multiplies: LayerNorm(resid) in pre-LN, resid in post-LN.
        kv_x ``(K, D)``: the rows keys and values are computed from (the layer's own inputs in
            self-attention, the encoder memory in cross-attention).
        q ``(Dh,)`` = x W^Q + b^Q, this head's slice; k, v ``(K, Dh)``: this head's keys and values.
        scores ``(K,)`` = q · k_j; scaled ``(K,)`` = scores / (sqrt(Dh) * tau), finite everywhere.
        mask ``(K,)`` bool: True where the key is hidden from this query; reasons ``(K,)`` int8: why
            (``analysis.records`` codes VISIBLE, FUTURE, HIDDEN, WINDOW).
        weights ``(K,)``: softmax of the unmasked scaled scores (0 on masked keys; all 0 when every key is
            masked). For an ablated head these are what the head computed; the model reports them as 0.
        head_out ``(Dh,)`` = weights @ v.
        heads ``(H, Dh)``: every head's output for this query (head ``head`` is ``head_out``).
        ablated_heads: heads of this layer and kind whose output is zeroed before W^O (interventions).
        concat ``(D,)``: the heads side by side, ablated ones zeroed: what W^O multiplies.
        attn_out ``(D,)`` = concat W^O + b^O: the sub-layer's output for this query, from the module's own call.
        added ``(D,)`` = resid + attn_out: the residual connection.
        normed ``(D,)``: LayerNorm(added). Post-LN: this sub-layer's own norm, whose output is the residual
            stream after the sub-layer. Pre-LN: the residual stream stays ``added``, and ``normed`` is the
            next sub-layer's norm of it (``norm_label`` names it).
        norm_label: which LayerNorm gave ``normed``.
    """

    kind: str
    layer: int
    head: int
    query: int
    d_head: int
    temperature: float
    norm_first: bool
    q_tokens: list[str]
    k_tokens: list[str]
    predicted: list[str] | None
    resid: np.ndarray
    x: np.ndarray
    kv_x: np.ndarray
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scores: np.ndarray
    scaled: np.ndarray
    mask: np.ndarray
    reasons: np.ndarray
    weights: np.ndarray
    head_out: np.ndarray
    heads: np.ndarray
    ablated_heads: frozenset[int]
    concat: np.ndarray
    attn_out: np.ndarray
    added: np.ndarray
    normed: np.ndarray
    norm_label: str

    @property
    def ablated(self) -> bool:
        """Whether this head's output is zeroed before W^O (it still computes its weights)."""
        return self.head in self.ablated_heads

    @property
    def n_heads(self) -> int:
        return self.heads.shape[0]

    @property
    def masked(self) -> np.ndarray:
        """``(K,)`` the input of the softmax: ``scaled`` with -inf on the masked keys."""
        return np.where(self.mask, np.float32(-np.inf), self.scaled).astype(np.float32)

    @property
    def query_token(self) -> str:
        return self.q_tokens[self.query]

    @property
    def why(self) -> list[str | None]:
        """Per key: the hover text of its mask reason (``model.facts.REASONS``), None for a visible key."""
        return [None if r == VISIBLE else REASONS[int(r)] for r in self.reasons]


# -- the word-order demo ----------------------------------------------------------------------------
@dataclass(frozen=True)
class EncoderStates:
    """Encoder outputs ``(S, d_model)`` of sentences A and B, and ``max|b[i] - a[perm[i]]|``."""

    a: np.ndarray
    b: np.ndarray
    max_diff: float


@dataclass(frozen=True)
class WordOrder:
    """Two sentences of the same pieces in another order (``b_tokens[i] == a_tokens[perm[i]]``) and
    their encoder outputs with positional encoding off and on (section 3.5)."""

    a_tokens: list[str]
    b_tokens: list[str]
    perm: list[int]
    pe_off: EncoderStates
    pe_on: EncoderStates


# -- two inputs compared ----------------------------------------------------------------------------
@dataclass(frozen=True)
class EncoderDistance:
    """How far each source token's encoder output (the memory) moved between inputs A and B.

    pairs: the aligned tokens ``(i, j)``, token i of A with token j of B; distance ``(len(pairs),)``
    float32: the L2 distance ``||enc(B)[j] - enc(A)[i]||`` of their d_model-vectors; same_piece
    ``(len(pairs),)`` bool: the two are the same piece (False: a substituted piece at the same place);
    by_position: A and B have the same number of tokens and are paired position by position (else by
    ``difflib`` matching of the pieces: tokens of an inserted or deleted stretch have no partner);
    scale: the mean L2 norm of A's encoder outputs, to read a distance against.
    """

    a_tokens: list[str]
    b_tokens: list[str]
    pairs: list[tuple[int, int]]
    distance: np.ndarray
    same_piece: np.ndarray
    by_position: bool
    scale: float

    @property
    def unmatched_a(self) -> list[int]:
        """Tokens of A with no partner in B."""
        return sorted(set(range(len(self.a_tokens))) - {i for i, _ in self.pairs})

    @property
    def unmatched_b(self) -> list[int]:
        """Tokens of B with no partner in A."""
        return sorted(set(range(len(self.b_tokens))) - {j for _, j in self.pairs})


# -- attention rollout ------------------------------------------------------------------------------
def rollout(enc_self, *, residual: float = 0.5) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020, eq. in section 3): how much each position's state
    after layer l draws on each input token, through every layer below.

    Per layer, ``Â_l = r·I + (1 − r)·mean_h A_l`` (the residual connection as identity), rows
    renormalised to sum to 1; then ``R_1 = Â_1`` and ``R_l = Â_l · R_{l−1}``. Returns every
    ``R_l``: rows sum to 1. The mean is over the heads still on (``layer_average``, as ``head_average``
    and the cross-attention row): a switched-off head, all zero, would otherwise count as a head that
    reads nothing and inflate the residual's share. A row with no weight at all (every key hidden, or
    every head of the layer off) keeps its own token.

    Args:
        enc_self: ``(L, H, S, S)`` self-attention (the decoder's ``(L, H, T, T)`` works too).
        residual: r in [0, 1], the share kept by the residual stream (0.5 in the paper).

    Returns:
        ``(L, S, S)`` float32.

    Raises:
        ValueError: if the maps are not square ``(L, H, S, S)`` or r is outside [0, 1].
    """
    enc_self = np.asarray(enc_self, dtype=np.float64)  # (L, H, S, S)
    if enc_self.ndim != 4 or enc_self.shape[2] != enc_self.shape[3] or 0 in enc_self.shape:
        raise ValueError(f"rollout needs square self-attention maps (L, H, S, S), got {enc_self.shape}")
    if not 0.0 <= residual <= 1.0:
        raise ValueError(f"residual must be in [0, 1], got {residual}")
    L, S = enc_self.shape[0], enc_self.shape[2]
    eye = np.eye(S)
    out = np.empty((L, S, S))
    acc = eye
    mean = layer_average(enc_self).astype(np.float64)  # (L, S, S): the mean over each layer's heads still on
    for l in range(L):
        hat = residual * eye + (1 - residual) * mean[l]  # (S, S)
        s = hat.sum(axis=-1, keepdims=True)  # (S, 1)
        hat = np.where(s > 0, hat / np.where(s > 0, s, 1.0), eye)
        acc = hat @ acc  # (S, S): layer l composed with everything below
        out[l] = acc
    return out.astype(np.float32)


# -- attention beside attribution (the /explain page) -----------------------------------------------
ATTENTION, NORM, ROLLOUT, IG, GRAD_INPUT = "attention", "norm-weighted", "rollout", "integrated gradients", "gradient × input"
METHODS = (ATTENTION, NORM, ROLLOUT, IG, GRAD_INPUT)
IG_STEPS = 1536  # Integrated Gradients: nodes of the path from the baseline, in IG_SEGMENTS segments (analysis.attribution)
IG_SEGMENTS = 24
"""The five ways ``Explanation.scores`` scores the source tokens for one output token, in the order they are drawn."""


def spearman(a, b) -> float | None:
    """Spearman's rank correlation ρ of two score vectors ``(n,)``: Pearson's r of their ranks, ties given their mean rank.

    None when it is not defined: fewer than two scores, or a vector whose scores are all equal (nothing to rank).
    """
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"spearman needs two 1-D vectors of one length, got {x.shape} and {y.shape}")
    if x.size < 2:
        return None
    rx, ry = _ranks(x), _ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = float(np.sqrt((rx**2).sum() * (ry**2).sum()))
    return None if den == 0 else float((rx * ry).sum() / den)


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 0 .. n-1 of ``x (n,)``, equal values sharing their mean rank."""
    ranks = np.empty(x.size)
    ranks[np.argsort(x, kind="mergesort")] = np.arange(x.size)
    _, group = np.unique(x, return_inverse=True)  # (n,) which distinct value each is
    return (np.bincount(group, ranks) / np.bincount(group))[group]


def _strength(rho: float) -> str:
    """How alike Spearman's ρ says two rankings are, in words (the current interface language)."""
    if rho >= 0.7:
        return _("rank the source words much alike")
    if rho >= 0.3:
        return _("rank them somewhat alike")
    if rho > -0.3:
        return _("hardly rank them alike")
    return _("rank them in nearly opposite order")


@dataclass(frozen=True)
class Agreement:
    """How two methods of ``METHODS`` rank the visible source tokens for one output token.

    method_a, method_b: the two methods' names; rho: Spearman's ρ over the visible source tokens (None: not defined,
    see ``sentence``); top_a, top_b: the position each method scores highest; sentence: the comparison in plain words.
    """

    method_a: str
    method_b: str
    rho: float | None
    top_a: int | None
    top_b: int | None
    top_words: tuple[str, str] = ("", "")  # the two top positions' tokens in quotes (‘dog’)
    why_undefined: str = ""  # rho None: "few" (fewer than two visible tokens) or "flat" (, with flat_methods)
    flat_methods: tuple[str, ...] = ()

    @property
    def sentence(self) -> str:
        """The comparison in plain words, in the current interface language (``i18n``): built when read, so that a
        cached record speaks each reader's language."""
        pair = _("{method_a} and {method_b}").format(
            method_a=self.method_a[:1].upper() + self.method_a[1:], method_b=self.method_b
        )
        if self.rho is None:
            if self.why_undefined == "few":
                return _("{pair}: nothing to rank, fewer than two source tokens are visible.").format(pair=pair)
            return _("{pair}: {methods} gives every visible token the same score.").format(
                pair=pair, methods=_(" and ").join(self.flat_methods)
            )
        if self.top_a == self.top_b:
            top = _("agree on the top word, {word},").format(word=self.top_words[0])
        else:
            top = _("disagree on the top word ({method_a}: {word_a}, {method_b}: {word_b}),").format(
                method_a=self.method_a, word_a=self.top_words[0], method_b=self.method_b, word_b=self.top_words[1]
            )
        return _("{pair} {top} and {strength} (ρ = {rho}).").format(
            pair=pair, top=top, strength=_strength(self.rho), rho=f"{self.rho:+.2f}"
        )


@dataclass(frozen=True)
class IGPart:
    """Integrated Gradients along one segment of the path (``analysis.attribution.ig_part``): ig ``(S,)`` per source token
    (nats), the Gauss-Legendre steps it took, and the objective at the segment's two ends."""

    ig: np.ndarray
    steps: int
    f_start: float
    f_end: float

    @property
    def error(self) -> float:
        """``ig.sum() − (f_end − f_start)``, nats: what the quadrature leaves of completeness on this segment."""
        return float(self.ig.sum(dtype=np.float64)) - (self.f_end - self.f_start)


@dataclass(frozen=True)
class IGResult:
    """Integrated Gradients (Sundararajan et al. 2017) of one objective with respect to each source token's embedding,
    summed over its d_model dimensions: ig ``(S,)`` in nats, from ``steps`` Gauss-Legendre steps.

    f_input, f_baseline: the objective at the input and at the all-zero embedding baseline. Completeness (the paper's
    proposition 1) says ``ig.sum() == f_input - f_baseline``; ``error`` is the difference the quadrature leaves.
    """

    ig: np.ndarray
    steps: int
    f_input: float
    f_baseline: float

    @property
    def error(self) -> float:
        """``ig.sum() − (f_input − f_baseline)``, nats."""
        return float(self.ig.sum(dtype=np.float64)) - (self.f_input - self.f_baseline)

    @property
    def relative_error(self) -> float:
        """``|error| / |f_input − f_baseline|`` (0 when both are 0, e.g. with every source token hidden)."""
        gap = abs(self.f_input - self.f_baseline)
        return abs(self.error) / gap if gap > 0 else (0.0 if abs(self.error) < 1e-6 else float("inf"))

    @classmethod
    def total(cls, parts: Sequence[IGPart]) -> IGResult:
        """The whole path from its segments in order (baseline first): attributions add up, the ends are the first
        segment's start and the last one's end. Raises ValueError for no parts."""
        if not parts:
            raise ValueError("IGResult.total needs at least one IGPart")
        ig = np.sum([p.ig for p in parts], axis=0, dtype=np.float64).astype(np.float32)  # (S,)
        return cls(ig, sum(p.steps for p in parts), parts[-1].f_end, parts[0].f_start)


@dataclass(frozen=True)
class Explanation:
    """Why the decoder wrote one output token: five views of the source tokens from the same translation and interventions.

    The token is ``target``, written at decoder row ``position`` (the query at ``prefix_tokens[-1]``, teacher-forced on
    the shown translation; ``analysis.attribution.explain``). L decoder layers, H heads, S source tokens. Arrays float32.

    src_tokens (S); hidden ``(S,)`` bool: source tokens the interventions hide (no query reads them).
    candidates: the step's most probable tokens as (piece, compact id, probability), best first.
    target, target_id, target_logprob: the explained token and log p(target) (nats); contrast, contrast_id,
    contrast_logprob: the alternative y′ of contrastive mode, or None.
    attn ``(L, H, S)``: the cross-attention weights α of row ``position`` (Vaswani et al. 2017, eq. 1); 0 for ablated heads.
    value_norm ``(L, H, S)``: ‖f^h(x_j)‖ = ‖(x_j W^V + b^V)_h W^O_h‖, the length of what token j would add through head h
        at weight 1 (Kobayashi et al. 2020, eq. 5), in the units of the d_model-vectors of the residual stream.
    norm_heads ``(L, H, S)``: ‖α_j f^h(x_j)‖ = α_j · ‖f^h(x_j)‖, head by head; norm_sum ``(L, S)``: ‖Σ_h α^h_j f^h(x_j)‖,
        the length of token j's share of the sub-layer's output (Kobayashi et al. 2020, section 3).
    rollout ``(L, S)``: the layer's mean cross-attention row times the encoder's attention rollout (Abnar & Zuidema
        2020): through the encoder's self-attention back to the input tokens. Rows sum to 1 (0 with every token hidden).
    objective: what the gradients explain, "log p(y)" or "log p(y) − log p(y′)" (nats).
    ig: ``IGResult``, Integrated Gradients of the objective with respect to each source token's embedding (× √d_model,
        before the positional encoding) from an all-zero embedding baseline (the word removed, its position kept);
        None until computed (the page computes them on request).
    grad_input ``(S,)``: gradient × input (Shrikumar et al. 2016) of the objective, summed over dimensions; nats.
    ablated: cross-attention (layer, head) pairs switched off, 0-based.
    """

    src_tokens: list[str]
    hidden: np.ndarray
    position: int
    prefix_tokens: list[str]
    candidates: list[tuple[str, int, float]]
    target: str
    target_id: int
    target_logprob: float
    contrast: str | None
    contrast_id: int | None
    contrast_logprob: float | None
    attn: np.ndarray
    value_norm: np.ndarray
    norm_heads: np.ndarray
    norm_sum: np.ndarray
    rollout: np.ndarray
    objective: str
    ig: IGResult | None
    grad_input: np.ndarray
    ablated: frozenset[tuple[int, int]] = frozenset()

    @property
    def methods(self) -> tuple[str, ...]:
        """The ``METHODS`` this explanation has scores for (all but Integrated Gradients until they are computed)."""
        return METHODS if self.ig is not None else tuple(m for m in METHODS if m != IG)

    def scores(self, layer: int, head: int | None = None) -> dict[str, np.ndarray]:
        """Each method's ``(S,)`` scores, by the names of ``self.methods``, for the cross-attention of ``layer`` and ``head``
        (0-based; head None: the mean over the heads still on for attention, the sum over heads for norm-weighted).

        Rollout is the layer's head mean through the encoder, whatever the head; the gradients do not depend on either.
        Raises ValueError for a layer or head out of range.
        """
        L, H = self.attn.shape[:2]
        if not 0 <= layer < L or not (head is None or 0 <= head < H):
            raise ValueError(f"(layer {layer}, head {head}) is out of range for {L} layers x {H} heads (count from 0)")
        if head is None:
            attn, norm = head_average(self.attn[:, :, None, :], layer)[0], self.norm_sum[layer]  # (S,) each
        else:
            attn, norm = self.attn[layer, head], self.norm_heads[layer, head]
        out = {ATTENTION: attn, NORM: norm, ROLLOUT: self.rollout[layer], GRAD_INPUT: self.grad_input}
        if self.ig is not None:
            out[IG] = self.ig.ig
        return {m: out[m] for m in METHODS if m in out}

    def agreement(self, layer: int, head: int | None = None) -> list[Agreement]:
        """Every pair of ``self.methods`` (10 pairs; 6 before Integrated Gradients are computed), compared over the visible source tokens by magnitude: a token that pushes
        the objective down matters as much as one that pushes it up, so gradient scores are ranked by |score|."""
        magnitudes = {name: np.abs(v) for name, v in self.scores(layer, head).items()}
        seen = np.flatnonzero(~self.hidden)  # (S_visible,)
        out = []
        for i, method_a in enumerate(self.methods):
            for method_b in self.methods[i + 1 :]:
                out.append(self._agree(method_a, method_b, magnitudes[method_a][seen], magnitudes[method_b][seen], seen))
        return out

    def word(self, j: int) -> str:
        """Source token j in quotes, its leading space dropped: ‘dog’."""
        return f"‘{self.src_tokens[j].strip() or self.src_tokens[j]}’"

    def _agree(self, method_a: str, method_b: str, scores_a: np.ndarray, scores_b: np.ndarray, seen: np.ndarray) -> Agreement:
        if seen.size < 2:
            return Agreement(method_a, method_b, None, None, None, why_undefined="few")
        rho = spearman(scores_a, scores_b)
        if rho is None:
            flat = tuple(name for name, v in ((method_a, scores_a), (method_b, scores_b)) if np.ptp(v) == 0)
            return Agreement(method_a, method_b, None, None, None, why_undefined="flat", flat_methods=flat)
        ta, tb = int(seen[np.argmax(scores_a)]), int(seen[np.argmax(scores_b)])
        return Agreement(method_a, method_b, rho, ta, tb, top_words=(self.word(ta), self.word(tb)))


@dataclass(frozen=True)
class LayerLens:
    """Which words each layer would write (``analysis.attribution.layer_lens``), for one translation under its interventions.

    Logit lens (nostalgebraist 2020) on the decoder, each column from decoding's own step over the shown translation
    (the causal mask off included): row ``i`` of the arrays is
    ``dec_names[i]`` ("embeddings", "layer 1" .. "layer L_dec"), that state put through the final LayerNorm (where the
    model has one) and the generator. Column t is decoder row t (``tgt_in_tokens[t]`` → ``tgt_out_tokens[t]``).
        top_tokens ``[L_dec + 1][T]``: the most probable piece; top_probs ``(L_dec + 1, T)`` its probability;
        target_probs ``(L_dec + 1, T)``: the probability of the piece the model wrote there. The last row is the
        distribution decoding used at each step (before any sampling filter).
    DecoderLens (Langedijk et al. 2023): ``enc_names[k]`` ("embeddings", "layer 1" .. "layer L_enc"); the decoder reads
    encoder layer k's output (through the encoder's final LayerNorm) instead of the last, and decodes as the shown
    translation was (method and budget):
        lens_tokens ``[L_enc + 1][n_k]``: the pieces written (without <eos>); lens_texts: their text; lens_finished:
        whether each ended with <eos>. The last is the shown translation.
    """

    tgt_in_tokens: list[str]
    tgt_out_tokens: list[str]
    dec_names: list[str]
    top_tokens: list[list[str]]
    top_probs: np.ndarray
    target_probs: np.ndarray
    enc_names: list[str]
    lens_tokens: list[list[str]]
    lens_texts: list[str]
    lens_finished: list[bool]

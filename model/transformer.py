"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

Written from scratch in torch to be read by a student, one module per idea of the paper:

    TransformerConfig      the hyper-parameters (Table 3 of the paper names them), and the few choices where
                           other implementations differ from the paper (feed-forward activation, embedding
                           scale, sinusoid layout, generator bias), so that their weights run here unchanged
    Interventions          mask / head / temperature tweaks, passed to ``forward`` as arguments (defined in the
                           torch-free ``model.settings``, so that pages name it without torch)
    sinusoidal_encoding    section 3.5, the positional-encoding formula
    MultiHeadAttention     section 3.2.2, eq. (1) scaled dot-product attention, h heads
    FeedForward            section 3.3, eq. (2) FFN(x) = max(0, x W1 + b1) W2 + b2 (or GELU / swish in place of max)
    SubLayerNorm           section 3.1, the LayerNorm of "Add & Norm", before (pre-LN) or after (post-LN)
    EncoderLayer / DecoderLayer   section 3.1, Figure 1: sub-layers, each with residual + LayerNorm
    LayerCache             the keys/values a decoder layer hands from one decoding step to the next
    Transformer            embeddings x sqrt(d_model) + PE, N encoder and N decoder layers, and
                           the linear + softmax generator (section 3.4)

Two sources of weights run in this one implementation: checkpoints trained by ``training.train`` (the defaults
of ``TransformerConfig``) and OPUS-MT / MarianMT checkpoints converted by ``convert.marian``, whose config
sets ``activation="swish"``, ``pe_layout="halves"``, ``generator_bias=True`` and ``norm_first=False`` (see
``TransformerConfig`` for where each comes from in Hugging Face's ``modeling_marian.py``).

The model is stateless at inference: attention weights and intermediates are *returned* from
``forward`` (in ``EncoderResult`` / ``DecoderResult`` / ``ForwardResult``), never stored on a
module, so one cached model can serve every browser session at once. Incremental decoding uses
a key/value cache that is passed in and returned, never kept on the model either.

Shape letters: B batch, S source length, T target length, D d_model, H n_heads,
Dh d_head = D / H, F d_ff, V vocab_size, V_tgt the generator's output size, L number of layers.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.facts import key_allowed
from model.settings import NO_INTERVENTIONS, Interventions

ACTIVATIONS = ("relu", "gelu", "swish")
"""Feed-forward nonlinearities ``TransformerConfig.activation`` may name (``FeedForward`` says what each computes)."""
PE_LAYOUTS = ("interleaved", "halves")
"""Column layouts of the sinusoidal encoding ``TransformerConfig.pe_layout`` may name (``sinusoidal_encoding``)."""


@dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of one encoder-decoder model (saved as ``config.json``).

    Defaults are the "base" names of the paper's Table 3 scaled down for a 2-core CPU. The last four fields
    (``activation``, ``scale_embedding``, ``pe_layout``, ``generator_bias``) default to this project's own
    models, the paper's choices; a checkpoint written before they existed loads unchanged. Their other values
    are what an OPUS-MT model needs (``convert.marian``), each checked against Hugging Face transformers'
    ``models/marian/modeling_marian.py`` (version 5.23):

    - ``activation="swish"`` (or ``"gelu"``): ``MarianEncoderLayer`` / ``MarianDecoderLayer`` compute
      ``fc2(ACT2FN[config.activation_function](fc1(x)))``; OPUS-MT models say ``"swish"`` (``nn.SiLU``).
    - ``scale_embedding``: ``MarianEncoder`` / ``MarianDecoder`` multiply token embeddings by
      ``embed_scale = sqrt(d_model) if config.scale_embedding else 1.0`` (True in every OPUS-MT config).
    - ``pe_layout="halves"``: ``MarianSinusoidalPositionalEmbedding.create_weight`` puts the sines in the first
      half of the dimensions and the cosines in the second ("features are not interleaved").
    - ``generator_bias``: ``MarianMTModel.forward`` returns ``lm_head(h) + final_logits_bias``.
    - ``norm_first=False``: Marian's layers are post-LN (``residual + sublayer``, then the LayerNorm) and
      neither stack has a final LayerNorm, which is what post-LN means here too (``Transformer``).
    - ``bos_id = pad_id``: Marian starts the decoder with ``decoder_start_token_id``, which is the pad id.
    """

    vocab_size: int  # V: shared source/target vocabulary (compact ids of model.tokenizer)
    d_model: int = 256  # D: width of every residual-stream vector
    n_heads: int = 4  # H: attention heads per layer; d_head = d_model / n_heads
    d_ff: int = 1024  # F: hidden width of the position-wise feed-forward network
    n_enc_layers: int = 3  # N for the encoder stack
    n_dec_layers: int = 3  # N for the decoder stack
    dropout: float = 0.1  # P_drop, on sub-layer outputs, embeddings and attention weights
    max_len: int = 128  # longest source or target sequence, in tokens (incl. <bos>/<eos>)
    norm_first: bool = True  # True: pre-LN  x + f(LN(x));  False: the paper's post-LN LN(x + f(x))
    tie_embeddings: bool = True  # share source, target and generator weights (section 3.4)
    pos_encoding: str = "sinusoidal"  # "sinusoidal" (section 3.5) or "learned"
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    tgt_vocab_size: int | None = None  # V_tgt: the generator scores compact ids 0 .. V_tgt - 1 (None: all V)
    activation: str = "relu"  # feed-forward nonlinearity, one of ACTIVATIONS: "relu" is eq. (2)'s max(0, .)
    scale_embedding: bool = True  # token embeddings x sqrt(d_model) (section 3.4); False: as they are
    pe_layout: str = "interleaved"  # sinusoid columns, one of PE_LAYOUTS: "interleaved" is section 3.5
    generator_bias: bool = False  # a learned (V_tgt,) bias added to the logits (Marian's final_logits_bias)

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.pos_encoding not in ("sinusoidal", "learned"):
            raise ValueError(f"pos_encoding must be 'sinusoidal' or 'learned', got {self.pos_encoding!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.pe_layout not in PE_LAYOUTS:
            raise ValueError(f"pe_layout must be one of {PE_LAYOUTS}, got {self.pe_layout!r}")
        if self.pe_layout == "halves" and self.d_model % 2:
            raise ValueError(f"pe_layout 'halves' needs an even d_model, got {self.d_model}")
        v_tgt = self.tgt_vocab_size
        if v_tgt is not None and not max(self.pad_id, self.bos_id, self.eos_id) < v_tgt <= self.vocab_size:
            raise ValueError(f"tgt_vocab_size={v_tgt} must hold the specials and be at most vocab_size={self.vocab_size}")

    @property
    def n_logits(self) -> int:
        """V_tgt, the size of the generator's output: the target vocabulary (the first V_tgt compact ids)."""
        return self.vocab_size if self.tgt_vocab_size is None else self.tgt_vocab_size

    @property
    def d_head(self) -> int:
        """Dh = d_model / n_heads, the width of one head's queries, keys and values."""
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TransformerConfig:
        """Build from a JSON dict; unknown keys raise ``TypeError`` naming them."""
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise TypeError(f"unknown config keys: {sorted(unknown)}")
        return cls(**d)


def sinusoidal_encoding(max_len: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """Positional encoding of section 3.5, shape ``(max_len, d_model)`` float32.

    ``layout="interleaved"`` (the paper, and this project's models):
        PE[pos, 2i] = sin(pos / 10000^(2i / d_model)),  PE[pos, 2i+1] = cos(pos / 10000^(2i / d_model)).
    ``layout="halves"`` (Hugging Face ``MarianSinusoidalPositionalEmbedding.create_weight``, OPUS-MT models):
        PE[pos, i] = sin(pos / 10000^(2i / d_model)),  PE[pos, D/2 + i] = cos(pos / 10000^(2i / d_model)),
        i = 0 .. D/2 - 1; the same waves, the cosines moved after the sines. Computed in float64 and rounded to
        float32, as Marian's numpy code does, so the imported model adds exactly the vectors the original adds.
    The wavelength of wave i is 2*pi * 10000^(2i / d_model) positions.

    Raises:
        ValueError: for another ``layout``, or "halves" with an odd ``d_model``.
    """
    if layout == "halves":
        if d_model % 2:
            raise ValueError(f"layout 'halves' needs an even d_model, got {d_model}")
        pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
        two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,)
        angle = pos / torch.pow(10000.0, two_i / d_model)  # (max_len, D/2)
        return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1).float()  # (max_len, D/2 + D/2)
    if layout != "interleaved":
        raise ValueError(f"layout must be one of {PE_LAYOUTS}, got {layout!r}")
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)  # (D/2,)
    angle = pos / torch.pow(10000.0, two_i / d_model)  # (max_len, D/2)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    allowed: Tensor | None,
    *,
    temperature: float = 1.0,
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Scaled dot-product attention, eq. (1): softmax(Q K^T / sqrt(d_head)) V.

    Args:
        q: ``(B, H, T_q, Dh)``; k, v: ``(B, H, T_k, Dh)``.
        allowed: bool, broadcastable to ``(B, H, T_q, T_k)``; True where the query may see the
            key. None means every key is allowed.
        temperature: tau, divides the scaled scores (1.0 is the paper).
        need_weights: if True, compute softmax explicitly and return the weights; otherwise use
            the fused ``F.scaled_dot_product_attention`` and return None. Both give the same
            output (tests/test_transformer.py checks it).

    Returns:
        ``(out, weights)``: out ``(B, H, T_q, Dh)``; weights ``(B, H, T_q, T_k)`` or None.
        A query row with no allowed key gets all-zero weights and a zero output.
    """
    scale = 1.0 / (math.sqrt(q.size(-1)) * temperature)
    dead = None
    if allowed is not None:
        # Rows with no allowed key get every key, and are zeroed below: no NaN. Applied whether or not a row is dead:
        # asking first would make the host wait for a GPU at every attention call (9 times a training step).
        dead = ~allowed.any(dim=-1, keepdim=True)  # (B|1, H|1, T_q, 1)
        allowed = allowed | dead
    if need_weights:
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (B, H, T_q, T_k)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        if dead is not None:
            weights = weights.masked_fill(dead, 0.0)
        dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
        out = torch.matmul(dropped, v)  # (B, H, T_q, Dh)
    else:
        weights = None
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=dropout_p, scale=scale)
    if dead is not None:
        out = out.masked_fill(dead, 0.0)
    return out, weights


class MultiHeadAttention(nn.Module):
    """Multi-head attention, section 3.2.2: Concat(head_1..head_h) W^O, head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i).

    The module owns its four projections: ``forward`` takes the inputs the queries are computed
    from and the inputs the keys and values are computed from (the same tensor for
    self-attention; the encoder memory for cross-attention, section 3.2.3).

    cross: True for cross-attention. Its keys and values come from the encoder memory, which does
        not change while decoding, so a ``past_kv`` handed back is reused as it is. For
        self-attention a ``past_kv`` holds the earlier positions, and the new ones are appended.

    Stateless: ``forward`` returns the post-softmax weights (when asked) and the keys/values, and
    stores nothing; the caller keeps the keys/values between decoding steps.
    """

    def __init__(self, cfg: TransformerConfig, *, cross: bool = False):
        super().__init__()
        self.n_heads, self.d_head, self.cross = cfg.n_heads, cfg.d_head, cross
        self.w_q = nn.Linear(cfg.d_model, cfg.d_model)
        self.w_k = nn.Linear(cfg.d_model, cfg.d_model)
        self.w_v = nn.Linear(cfg.d_model, cfg.d_model)
        self.w_o = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = cfg.dropout

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, H, T, Dh): head i reads dimensions i*Dh .. (i+1)*Dh - 1."""
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, T, H, Dh) -> (B, H, T, Dh)

    def forward(
        self,
        x_q: Tensor,
        x_kv: Tensor,
        allowed: Tensor | None,
        *,
        past_kv: tuple[Tensor, Tensor] | None = None,
        temperature: float = 1.0,
        head_mask: list[float] | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None, tuple[Tensor, Tensor]]:
        """Attend from the queries of ``x_q`` to the keys and values of ``x_kv``.

        Args:
            x_q: ``(B, T_q, D)`` the inputs of the queries.
            x_kv: ``(B, T_kv, D)`` the inputs of the keys and values (``x_q`` itself in self-attention,
                the encoder memory ``(B, S, D)`` in cross-attention).
            allowed: bool mask broadcastable to ``(B, H, T_q, T_k)``, True = may attend; None = every key.
            past_kv: ``(K, V)`` returned by an earlier call, each ``(B, H, T_past, Dh)``, or None.
                Self-attention appends the keys/values of ``x_kv`` after them (T_k = T_past + T_kv);
                cross-attention uses them instead of projecting ``x_kv`` again (T_k = S).
            temperature: tau of eq. (1) softmax(Q K^T / (sqrt(d_head) * tau)); 1.0 is the paper.
            head_mask: per-head factors (0.0 ablates a head's output), or None.
            need_weights: compute the weights explicitly (else the fused path; same output).

        Returns:
            ``(out (B, T_q, D), weights (B, H, T_q, T_k) or None, (K, V) each (B, H, T_k, Dh))``.
            Ablated heads report all-zero weights, since they contribute nothing. Hand ``(K, V)``
            back as ``past_kv`` to continue decoding.
        """
        B, T_q, D = x_q.shape
        q = self.split_heads(self.w_q(x_q))  # (B, H, T_q, Dh)
        if self.cross and past_kv is not None:
            k, v = past_kv  # (B, H, S, Dh) each: the memory's keys and values, computed once per source
        else:
            k, v = self.split_heads(self.w_k(x_kv)), self.split_heads(self.w_v(x_kv))  # (B, H, T_kv, Dh) each
            if past_kv is not None:  # decoding with a cache: earlier positions' keys and values come first
                k = torch.cat([past_kv[0], k], dim=2)  # (B, H, T_past + T_kv, Dh)
                v = torch.cat([past_kv[1], v], dim=2)
        p = self.dropout if self.training else 0.0
        out, weights = attention(q, k, v, allowed, temperature=temperature, dropout_p=p, need_weights=need_weights)
        if head_mask is not None:
            hm = torch.tensor(head_mask, dtype=out.dtype, device=out.device).view(1, -1, 1, 1)  # (1, H, 1, 1)
            out = out * hm
            if weights is not None:
                weights = weights * hm
        out = out.transpose(1, 2).reshape(B, T_q, D)  # (B, H, T_q, Dh) -> (B, T_q, H, Dh) -> (B, T_q, D): concat heads
        return self.w_o(out), weights, (k, v)


class FeedForward(nn.Module):
    """Position-wise feed-forward network, eq. (2): FFN(x) = act(x W1 + b1) W2 + b2.

    ``cfg.activation`` picks act: "relu" max(0, z) (eq. 2); "gelu" z * Phi(z) with the exact normal CDF
    (Hendrycks & Gimpel 2016; ``torch.nn.functional.gelu``, Hugging Face's ``ACT2FN["gelu"]``); "swish"
    z * sigmoid(z) (Ramachandran et al. 2017; ``F.silu``, ``ACT2FN["swish"]``, what OPUS-MT models use).
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.w_1 = nn.Linear(cfg.d_model, cfg.d_ff)
        self.w_2 = nn.Linear(cfg.d_ff, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)
        self.activation = cfg.activation

    def forward(self, x: Tensor) -> Tensor:
        """``(B, T, D) -> (B, T, D)``."""
        # (B, T, F). Without autograd, the activation runs in place: no second (B, T, F) buffer to allocate and fill
        # (6 % of a batched forward). With autograd, in place on linear's output view would cost more than it saves.
        inplace = not torch.is_grad_enabled()
        z = self.w_1(x)
        if self.activation == "relu":
            h = F.relu(z, inplace=inplace)
        elif self.activation == "swish":
            h = F.silu(z, inplace=inplace)
        else:  # "gelu": torch has no in-place GELU
            h = F.gelu(z)
        return self.w_2(self.dropout(h))


class SubLayerNorm(nn.LayerNorm):
    """The LayerNorm of one sub-layer's "Add & Norm" (section 3.1), placed before or after it.

    A sub-layer f (attention or feed-forward) with its residual connection and dropout (section 5.4) reads

        x = norm.post(x + Dropout(f(norm.pre(x))))

    post-LN (``norm_first=False``, the paper):  x = LayerNorm(x + Dropout(f(x)))    ``pre`` is the identity
    pre-LN  (``norm_first=True``, the default): x = x + Dropout(f(LayerNorm(x)))    ``post`` is the identity
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg.d_model)
        self.norm_first = cfg.norm_first

    def pre(self, x: Tensor) -> Tensor:
        """``(B, T, D)``: the sub-layer's input, LayerNorm(x) in pre-LN, else x."""
        return self(x) if self.norm_first else x

    def post(self, x: Tensor) -> Tensor:
        """``(B, T, D)``: the residual sum, LayerNorm'd in post-LN, else as it is."""
        return x if self.norm_first else self(x)


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each with residual + LayerNorm (section 3.1, Figure 1 left)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg)
        self.self_attn_norm = SubLayerNorm(cfg)
        self.ff = FeedForward(cfg)
        self.ff_norm = SubLayerNorm(cfg)
        self.dropout = nn.Dropout(cfg.dropout)  # residual dropout (section 5.4)

    def forward(
        self,
        x: Tensor,
        allowed: Tensor | None,
        *,
        temperature: float = 1.0,
        head_mask: list[float] | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """``x (B, S, D)`` -> ``(B, S, D)``, self-attention weights ``(B, H, S, S)`` or None.

        ``allowed``: which keys each query may see, broadcastable to ``(B, H, S, S)``, or None.
        """
        # multi-head self-attention: every source position reads every (allowed) source position
        h = self.self_attn_norm.pre(x)
        attn_out, w, _ = self.self_attn(h, h, allowed, temperature=temperature, head_mask=head_mask, need_weights=need_weights)
        x = self.self_attn_norm.post(x + self.dropout(attn_out))
        # position-wise feed-forward
        h = self.ff_norm.pre(x)
        x = self.ff_norm.post(x + self.dropout(self.ff(h)))
        return x, w


@dataclass(frozen=True)
class LayerCache:
    """What one decoder layer keeps from one decoding step to the next (kept by the caller, never on the model).

    self_kv:  self-attention ``(K, V)`` of every target position fed so far, each ``(B, H, T_total, Dh)``;
        None if they are not kept (without the causal mask, earlier positions change every step).
    cross_kv: cross-attention ``(K, V)`` of the encoder memory, each ``(B, H, S, Dh)``: computed at the
        first step and reused after, since the memory does not change.
    """

    self_kv: tuple[Tensor, Tensor] | None
    cross_kv: tuple[Tensor, Tensor]

    def index_select(self, index: Tensor) -> LayerCache:
        """Keep batch rows ``index`` ``(B',)`` (beam search reorders its hypotheses); each tensor ``(B', H, T, Dh)``."""

        def pick(kv: tuple[Tensor, Tensor] | None) -> tuple[Tensor, Tensor] | None:
            return None if kv is None else (kv[0].index_select(0, index), kv[1].index_select(0, index))

        return LayerCache(pick(self.self_kv), pick(self.cross_kv))


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention over the encoder memory, feed-forward (Figure 1 right).

    Each of the three sub-layers has its residual connection and LayerNorm (section 3.1).
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.dropout = nn.Dropout(cfg.dropout)  # residual dropout (section 5.4), after each of the three sub-layers
        self.self_attn = MultiHeadAttention(cfg)
        self.self_attn_norm = SubLayerNorm(cfg)
        self.cross_attn = MultiHeadAttention(cfg, cross=True)
        self.cross_attn_norm = SubLayerNorm(cfg)
        self.ff = FeedForward(cfg)
        self.ff_norm = SubLayerNorm(cfg)

    def forward(
        self,
        y: Tensor,
        memory: Tensor,
        self_allowed: Tensor | None,
        cross_allowed: Tensor | None,
        *,
        cache: LayerCache | None = None,
        temperature: float = 1.0,
        self_head_mask: list[float] | None = None,
        cross_head_mask: list[float] | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, LayerCache, Tensor | None, Tensor | None]:
        """One decoder layer.

        Args:
            y: ``(B, T_new, D)`` the target positions being computed (all of them, or only the
                newest ones when decoding with a cache).
            memory: ``(B, S, D)`` the encoder's output.
            self_allowed: broadcastable to ``(B, H, T_new, T_past + T_new)`` (the causal mask), or None.
            cross_allowed: broadcastable to ``(B, H, T_new, S)`` (the source padding mask), or None.
            cache: this layer's ``LayerCache`` from the previous step, or None.

        Returns:
            ``(y (B, T_new, D), LayerCache over T_past + T_new positions,
            self weights (B, H, T_new, T_past + T_new) | None, cross weights (B, H, T_new, S) | None)``.
        """
        past_self, past_cross = (None, None) if cache is None else (cache.self_kv, cache.cross_kv)
        opts = {"temperature": temperature, "need_weights": need_weights}
        # masked multi-head self-attention: each target position reads itself and the earlier ones
        h = self.self_attn_norm.pre(y)
        attn_out, w_self, self_kv = self.self_attn(h, h, self_allowed, past_kv=past_self, head_mask=self_head_mask, **opts)
        y = self.self_attn_norm.post(y + self.dropout(attn_out))
        # cross-attention: queries from the decoder, keys and values from the encoder memory
        h = self.cross_attn_norm.pre(y)
        attn_out, w_cross, cross_kv = self.cross_attn(
            h, memory, cross_allowed, past_kv=past_cross, head_mask=cross_head_mask, **opts
        )
        y = self.cross_attn_norm.post(y + self.dropout(attn_out))
        # position-wise feed-forward
        h = self.ff_norm.pre(y)
        y = self.ff_norm.post(y + self.dropout(self.ff(h)))
        return y, LayerCache(self_kv, cross_kv), w_self, w_cross


@dataclass
class EncoderResult:
    """What ``Transformer.encode`` returns.

    memory:   ``(B, S, D)`` final encoder states (the decoder's keys and values come from it).
    src_allowed: bool ``(B, 1, 1, S)``: True for keys that are real (not padding, not hidden);
        None when every key is real, so encoder self- and cross-attention run unmasked (checked once per source).
    enc_self_attn: ``(n_enc_layers, B, H, S, S)`` post-softmax weights, if asked.
    intermediates: name -> tensor (``tok_emb (B, S, D)``, ``pos_enc (S, D)``, ``enc_in``,
        ``enc_layer_{i}`` ``(B, S, D)``), if asked.
    """

    memory: Tensor
    src_allowed: Tensor | None
    enc_self_attn: Tensor | None = None
    intermediates: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class DecoderResult:
    """What ``Transformer.decoder_forward`` returns.

    logits: ``(B, T_new, V_tgt)`` unnormalised next-token scores (softmax gives probabilities).
    cache:  per decoder layer a ``LayerCache``: self-attention ``(K, V)`` each ``(B, H, T_total, Dh)``
        and the memory's cross-attention ``(K, V)`` each ``(B, H, S, Dh)``; hand it back to
        ``decoder_forward`` to continue incrementally.
    dec_self_attn: ``(n_dec_layers, B, H, T_new, T_total)`` if asked (``T_total = T_new`` without cache).
    cross_attn: ``(n_dec_layers, B, H, T_new, S)`` if asked.
    intermediates: ``dec_in``, ``dec_layer_{i}`` ``(B, T_new, D)``, ``dec_out``, if asked.
    """

    logits: Tensor
    cache: list[LayerCache]
    dec_self_attn: Tensor | None = None
    cross_attn: Tensor | None = None
    intermediates: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class ForwardResult:
    """What ``Transformer.forward`` returns: logits ``(B, T, V_tgt)`` and, if asked, every map.

    enc_self_attn ``(n_enc_layers, B, H, S, S)``, dec_self_attn ``(n_dec_layers, B, H, T, T)``,
    cross_attn ``(n_dec_layers, B, H, T, S)``; intermediates from encoder and decoder.
    """

    logits: Tensor
    enc_self_attn: Tensor | None = None
    dec_self_attn: Tensor | None = None
    cross_attn: Tensor | None = None
    intermediates: dict[str, Tensor] = field(default_factory=dict)


def band(n_q: int, n_k: int, offset: int, *, causal: bool, window: int | None, device=None) -> Tensor | None:
    """Self-attention mask ``(n_q, n_k)``: True where query i (at position offset + i) may see key j.

    The rule is ``model.facts.key_allowed`` (causal: keys j <= position, section 3.2.3; window:
    |position - j| < window), the one the app's mask pictures use too. None if every query may see
    every key (e.g. one new query with a cache and no window), so attention skips the mask.
    """
    if window is None and (not causal or (n_q == 1 and offset + 1 >= n_k)):
        return None
    q_pos = torch.arange(offset, offset + n_q, device=device)[:, None]  # (n_q, 1)
    k_pos = torch.arange(n_k, device=device)[None, :]  # (1, n_k)
    return key_allowed(q_pos, k_pos, causal=causal, window=window)  # (n_q, n_k)


class Transformer(nn.Module):
    """The encoder-decoder Transformer (section 3, Figure 1).

    ``encode(src)`` -> memory, ``decoder_forward(tgt, enc)`` -> logits, ``forward(src, tgt)`` both.
    Token ids are compact ids of ``model.tokenizer.TiktokenTokenizer``; ``src (B, S)`` and
    ``tgt (B, T)`` are padded with ``cfg.pad_id``; ``tgt`` starts with ``<bos>``.
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.src_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.tgt_emb = self.src_emb if cfg.tie_embeddings else nn.Embedding(cfg.vocab_size, cfg.d_model)
        if cfg.pos_encoding == "sinusoidal":
            self.register_buffer("pe", sinusoidal_encoding(cfg.max_len, cfg.d_model, cfg.pe_layout), persistent=False)
        else:
            self.pos_emb = nn.Embedding(cfg.max_len, cfg.d_model)
        self.emb_dropout = nn.Dropout(cfg.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_enc_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_dec_layers))
        # pre-LN leaves the residual stream un-normalised, so each stack ends in a LayerNorm; post-LN stacks already end in
        # one (each sub-layer's own), and add none: the paper, and Marian (no layer_norm after its encoder or decoder)
        self.enc_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()
        self.dec_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()
        self.generator = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.n_logits, bias=False)
        # Marian's final_logits_bias (a buffer there, trained by Marian C++); zeros until a checkpoint fills it
        self.generator_bias = nn.Parameter(torch.zeros(cfg.n_logits)) if cfg.generator_bias else None
        self._generator_t_cache: tuple | None = None  # eval()'s inference layout of the output projection
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=m.embedding_dim**-0.5)

    # -- pieces -------------------------------------------------------------------------
    def positional_encoding(self, n: int, offset: int = 0) -> Tensor:
        """PE rows for positions ``offset .. offset + n - 1``: ``(n, D)``. Raises ValueError past max_len."""
        if offset + n > self.cfg.max_len:
            raise ValueError(f"sequence of {offset + n} tokens is longer than max_len={self.cfg.max_len}")
        if self.cfg.pos_encoding == "sinusoidal":
            return self.pe[offset : offset + n]
        return self.pos_emb.weight[offset : offset + n]

    def embed(self, ids: Tensor, emb: nn.Embedding, offset: int, interventions: Interventions, inter: dict | None, prefix: str):
        """Token embedding x sqrt(d_model) plus positional encoding (section 3.4, 3.5): ``(B, T) -> (B, T, D)``.

        Without ``cfg.scale_embedding`` the embedding is added as it is (Marian's ``embed_scale = 1.0``).
        """
        tok = emb(ids) * math.sqrt(self.cfg.d_model) if self.cfg.scale_embedding else emb(ids)  # (B, T, D)
        pe = self.positional_encoding(ids.size(1), offset)  # (T, D)
        x = tok + pe if interventions.use_pos_encoding else tok
        if inter is not None:
            inter[f"{prefix}_tok_emb"], inter[f"{prefix}_pos_enc"], inter[f"{prefix}_in"] = tok, pe, x
        return self.emb_dropout(x)

    def logits(self, h: Tensor) -> Tensor:
        """Generator (section 3.4): ``(B, T, D) -> (B, T, V_tgt)`` via the (tied) output projection.

        Tied, it is the target embedding matrix's first V_tgt rows (``cfg.n_logits``): logit ``i``
        scores compact id ``i``, and ids past the target vocabulary are never produced. With
        ``cfg.generator_bias`` a ``(V_tgt,)`` bias is added (``MarianMTModel``: ``lm_head(h) + final_logits_bias``).
        """
        w = self.generator_weight  # (V_tgt, D)
        out = h @ (w.T if torch.is_grad_enabled() else self._generator_weight_t(w))  # (B, T, D) @ (D, V_tgt)
        return out if self.generator_bias is None else out + self.generator_bias

    def train(self, mode: bool = True) -> Transformer:
        """``nn.Module.train``; ``eval()`` (mode False) also makes the inference layout of the output projection
        (``_generator_weight_t``) for the weights as they are, so that serving never stores anything on the model."""
        super().train(mode)
        if mode:
            self._generator_t_cache = None  # training changes the weights: no copy to keep
        else:
            with torch.no_grad():
                self._generator_weight_t(self.generator_weight)
        return self

    def _generator_weight_t(self, w: Tensor) -> Tensor:
        """``w.T`` as a contiguous ``(D, V_tgt)`` copy, for inference on the CPU (made by ``eval()``).

        The same numbers in another memory layout, not state of a call: torch's CPU BLAS (MKL, on the AMD CPUs
        measured) multiplies a decoding step's ``(1, D)`` row by ``w.T`` slower than by the contiguous copy, and a greedy
        step's largest product is this one (10,245 x 256, bench/README 1b: 0.32 against 0.23 ms alone on an idle core,
        1.18 against 0.41 ms between a step's other products, ~1.1 against 0.3-0.5 ms with the other core busy, as
        in a class). Made once per version of the weights (``Tensor._version`` counts in-place updates, such as an
        optimizer's), so training or editing the weights never reads a stale copy; used only where no gradient flows.
        Weights created under ``torch.inference_mode`` have no version counter: their copy follows only a change of
        storage, shape or dtype.
        """
        if w.device.type != "cpu":
            return w.T
        version = None if w.is_inference() else w._version  # weights made under inference_mode count no versions
        key = (w.data_ptr(), version, w.dtype, tuple(w.shape))
        cached = self._generator_t_cache
        if cached is None or cached[0] != key:
            cached = (key, w.detach().T.contiguous())  # (D, V_tgt)
            self._generator_t_cache = cached  # one tuple, replaced whole: safe when sessions call at once
        return cached[1]

    @property
    def generator_weight(self) -> Tensor:
        """The output projection ``(V_tgt, D)``: the target embedding's first V_tgt rows when tied."""
        return self.tgt_emb.weight[: self.cfg.n_logits] if self.generator is None else self.generator.weight

    def source_mask(self, src: Tensor, interventions: Interventions = NO_INTERVENTIONS) -> Tensor | None:
        """The keys of ``src (B, S)`` that attention may read: the padding mask, and the source tokens ``interventions`` hides.

        Returns ``(B, 1, 1, S)`` booleans (True: may be read), or None when every key may be read (attention then
        skips the mask). What ``encode`` uses for the encoder's self-attention and the decoder's cross-attention.
        On a GPU the mask is returned even when it hides nothing: checking would make the host wait for the device.
        """
        S = src.size(1)
        src_allowed = (src != self.cfg.pad_id)[:, None, None, :]  # (B, 1, 1, S)
        if interventions.src_hidden:
            hidden = torch.zeros(S, dtype=torch.bool, device=src.device)
            hidden[[i for i in interventions.src_hidden if 0 <= i < S]] = True
            src_allowed = src_allowed & ~hidden  # (B, 1, 1, S)
        return None if src.device.type == "cpu" and bool(src_allowed.all()) else src_allowed

    # -- the three entry points -----------------------------------------------------------
    def encode(
        self,
        src: Tensor,
        interventions: Interventions = NO_INTERVENTIONS,
        *,
        need_weights: bool = False,
        need_intermediates: bool = False,
    ) -> EncoderResult:
        """Run the encoder stack on ``src (B, S)``.

        Raises:
            ValueError: if S exceeds ``cfg.max_len``.
        """
        B, S = src.shape
        inter = {} if need_intermediates else None
        src_allowed = self.source_mask(src, interventions)
        self_band = band(S, S, 0, causal=False, window=interventions.window, device=src.device)
        if src_allowed is None:
            enc_allowed = self_band  # (S, S) or None
        elif self_band is None:
            enc_allowed = src_allowed  # (B, 1, 1, S)
        else:
            enc_allowed = src_allowed & self_band  # (B, 1, S, S)
        x = self.embed(src, self.src_emb, 0, interventions, inter, "enc")
        maps = []
        for i, layer in enumerate(self.encoder):
            x, w = layer(
                x,
                enc_allowed,
                temperature=interventions.temperature,
                head_mask=interventions.head_mask("enc_self", i, self.cfg.n_heads),
                need_weights=need_weights,
            )
            maps.append(w)
            if inter is not None:
                inter[f"enc_layer_{i}"] = x
        memory = self.enc_norm(x)
        if inter is not None:
            inter["memory"] = memory
        stacked = torch.stack(maps) if need_weights else None  # (L, B, H, S, S)
        return EncoderResult(memory, src_allowed, stacked, inter or {})

    def decoder_forward(
        self,
        tgt: Tensor,
        enc: EncoderResult,
        interventions: Interventions = NO_INTERVENTIONS,
        *,
        cache: list[LayerCache] | None = None,
        need_weights: bool = False,
        need_intermediates: bool = False,
        logits_at: Tensor | None = None,
    ) -> DecoderResult:
        """Run the decoder on ``tgt (B, T_new)``, attending to ``enc.memory``.

        ``logits_at (B,)``: compute the logits of one row per batch item only, row ``logits_at[b]`` of item b, so
        ``logits`` is ``(B, 1, V_tgt)`` (and ``dec_out`` those rows): the generator over every row costs the most of
        a teacher-forced pass whose last row alone is read (nanoGPT does the same for its last position).

        Without ``cache`` the whole target is computed (teacher forcing). With ``cache`` (from a
        previous call's result), ``tgt`` holds only the new tokens, at positions after the cached
        ones; the result equals full recomputation (tests check it) when ``interventions.causal`` is True.
        The cache also holds the memory's cross-attention keys and values: computed by the first
        call, reused by every later one (so a cache belongs to the ``enc`` it was made with). A
        cache whose ``self_kv`` are None reuses only those and computes ``tgt`` from position 0.

        Raises:
            ValueError: if the target grows past ``cfg.max_len``.
        """
        B, T_new = tgt.shape
        past = 0 if cache is None or cache[0].self_kv is None else cache[0].self_kv[0].size(2)
        inter = {} if need_intermediates else None
        y = self.embed(tgt, self.tgt_emb, past, interventions, inter, "dec")
        self_allowed = band(
            T_new, past + T_new, past, causal=interventions.causal, window=interventions.window, device=tgt.device
        )
        new_cache, self_maps, cross_maps = [], [], []
        for i, layer in enumerate(self.decoder):
            y, layer_cache, w_self, w_cross = layer(
                y,
                enc.memory,
                self_allowed,
                enc.src_allowed,
                cache=None if cache is None else cache[i],
                temperature=interventions.temperature,
                self_head_mask=interventions.head_mask("dec_self", i, self.cfg.n_heads),
                cross_head_mask=interventions.head_mask("cross", i, self.cfg.n_heads),
                need_weights=need_weights,
            )
            new_cache.append(layer_cache)
            self_maps.append(w_self)
            cross_maps.append(w_cross)
            if inter is not None:
                inter[f"dec_layer_{i}"] = y
        y = self.dec_norm(y)
        if logits_at is not None:
            y = y[torch.arange(B, device=y.device), logits_at][:, None]  # (B, D) -> (B, 1, D)
        logits = self.logits(y)
        if inter is not None:
            inter["dec_out"], inter["logits"] = y, logits
        return DecoderResult(
            logits,
            new_cache,
            torch.stack(self_maps) if need_weights else None,  # (L, B, H, T_new, T_total)
            torch.stack(cross_maps) if need_weights else None,  # (L, B, H, T_new, S)
            inter or {},
        )

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        interventions: Interventions = NO_INTERVENTIONS,
        *,
        need_weights: bool = False,
        need_intermediates: bool = False,
        enc: EncoderResult | None = None,
    ) -> ForwardResult:
        """Teacher-forced pass: ``src (B, S)``, ``tgt (B, T)`` -> logits ``(B, T, V_tgt)`` (+ maps if asked).

        ``logits[:, t]`` scores the token that follows ``tgt[:, :t+1]``. ``enc`` may pass
        ``self.encode(src, interventions, ...)`` already computed (with the weights and intermediates asked
        for here), so that a source decoded and then analysed is encoded once.
        """
        if enc is None:
            enc = self.encode(src, interventions, need_weights=need_weights, need_intermediates=need_intermediates)
        dec = self.decoder_forward(tgt, enc, interventions, need_weights=need_weights, need_intermediates=need_intermediates)
        return ForwardResult(
            dec.logits,
            enc.enc_self_attn,
            dec.dec_self_attn,
            dec.cross_attn,
            {**enc.intermediates, **dec.intermediates},
        )

    def n_params(self) -> int:
        """Number of distinct trainable parameters (tied weights counted once)."""
        return sum(p.numel() for p in self.parameters())

"""Invariants of model/transformer.py, checked on tiny random models (fast, CPU, float32).

Every test states a property the paper (or our docstrings) promise and would fail if the code broke it:
attention rows are distributions, the explicit-softmax and fused paths agree, our multi-head attention
is torch's, the decoder is causal, padding is invisible, the positional encoding is eq. 3.5, the cache
is exact, interventions do what ``Interventions`` documents, and the model keeps no state.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from model.facts import KINDS
from model.transformer import (
    EncoderResult,
    Interventions,
    LayerCache,
    MultiHeadAttention,
    Transformer,
    TransformerConfig,
    attention,
    band,
    sinusoidal_encoding,
)

V, PAD, BOS, EOS = 23, 0, 1, 2

# The config variants every structural property must hold for.
VARIANTS = {
    "pre-LN": {},
    "post-LN": {"norm_first": False},
    "learned-PE": {"pos_encoding": "learned"},
    "untied": {"tie_embeddings": False},
    "post-LN-learned-untied": {"norm_first": False, "pos_encoding": "learned", "tie_embeddings": False},
    "target-vocab": {"tgt_vocab_size": 15},  # the generator scores only ids 0 .. 14
}


def make_model(seed: int = 0, **overrides) -> Transformer:
    """A tiny eval-mode model with random weights (dropout 0 so eval and train agree on paths)."""
    cfg = dict(vocab_size=V, d_model=16, n_heads=4, d_ff=32, n_enc_layers=2, n_dec_layers=2, dropout=0.0, max_len=16)
    cfg.update(overrides)
    torch.manual_seed(seed)
    model = Transformer(TransformerConfig(**cfg)).eval()
    return model


def rand_ids(B: int, T: int, seed: int) -> torch.Tensor:
    """Random non-special token ids ``(B, T)``."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, V, (B, T), generator=g)


def batch(seed: int = 1):
    """A padded batch: src (2, 7) with row 1 holding 4 real tokens, tgt (2, 6) with row 1 holding 3."""
    src = rand_ids(2, 7, seed)
    src[:, -1] = EOS
    src[1, 3] = EOS
    src[1, 4:] = PAD
    tgt = rand_ids(2, 6, seed + 100)
    tgt[:, 0] = BOS
    tgt[1, 3:] = PAD
    return src, tgt


def run(model, src, tgt, interventions=Interventions(), need_weights=True):
    with torch.no_grad():
        return model(src, tgt, interventions, need_weights=need_weights)


def entropy(w: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of each attention row: ``(..., T_k) -> (...)``."""
    return -(w * torch.log(w.clamp_min(1e-30))).sum(-1)


# -- attention weights are distributions -----------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_attention_rows_sum_to_one_and_ignore_padding(variant):
    model = make_model(**VARIANTS[variant])
    src, tgt = batch()
    r = run(model, src, tgt)
    for name in ("enc_self_attn", "dec_self_attn", "cross_attn"):
        w = getattr(r, name)
        assert (w >= 0).all(), name
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-5, rtol=0, msg=name)
    # padded source keys (row 1, positions 4..6) get exactly zero weight from every query
    assert r.enc_self_attn[:, 1, :, :, 4:].abs().max() == 0
    assert r.cross_attn[:, 1, :, :, 4:].abs().max() == 0
    # and real keys share all the mass
    assert r.cross_attn[:, 1, :, :, :4].sum(-1).min() > 1 - 1e-5


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize(
    "interventions",
    [
        Interventions(),
        Interventions(temperature=0.5),
        Interventions(window=2),
        Interventions(causal=False),
        Interventions(src_hidden={0, 2}),
        Interventions(src_hidden=set(range(7))),
        Interventions(ablate={("enc_self", 0, 1), ("cross", 1, 0), ("dec_self", 0, 3)}),
        Interventions(use_pos_encoding=False),
    ],
    ids=["none", "tau0.5", "window2", "noncausal", "hide02", "hideall", "ablate3", "noPE"],
)
def test_weights_path_equals_fused_sdpa_path(variant, interventions):
    model = make_model(**VARIANTS[variant])
    src, tgt = batch()
    fused = run(model, src, tgt, interventions, need_weights=False)
    explicit = run(model, src, tgt, interventions, need_weights=True)
    assert fused.cross_attn is None and fused.enc_self_attn is None and fused.dec_self_attn is None
    assert torch.isfinite(fused.logits).all()
    torch.testing.assert_close(explicit.logits, fused.logits, atol=1e-5, rtol=0)


def test_attention_function_paths_agree_with_dead_rows():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 4, 5, generator=g) for _ in range(3))  # (B, H, T, Dh)
    allowed = torch.rand(2, 1, 4, 4, generator=g) > 0.5
    allowed[0, 0, 1] = False  # a query with no key at all
    out_w, w = attention(q, k, v, allowed, need_weights=True)
    out_f, none = attention(q, k, v, allowed, need_weights=False)
    assert none is None
    torch.testing.assert_close(out_w, out_f, atol=1e-5, rtol=0)
    assert w[0, :, 1].abs().max() == 0 and out_w[0, :, 1].abs().max() == 0  # documented: zero weights, zero output
    assert out_f[0, :, 1].abs().max() == 0
    live = allowed.expand(2, 3, 4, 4).any(-1)
    torch.testing.assert_close(w.sum(-1)[live], torch.ones(int(live.sum())), atol=1e-6, rtol=0)
    assert w[~allowed.expand(2, 3, 4, 4)].abs().max() == 0


# -- our multi-head attention is torch's --------------------------------------------------------------


@pytest.mark.parametrize("mask", ["none", "key_padding", "causal"])
def test_multi_head_attention_equals_torch(mask):
    cfg = TransformerConfig(vocab_size=V, d_model=16, n_heads=4, dropout=0.0)
    torch.manual_seed(0)
    ours = MultiHeadAttention(cfg).eval()
    for lin in (ours.w_q, ours.w_k, ours.w_v, ours.w_o):  # non-zero biases, so a missing bias would show
        torch.nn.init.normal_(lin.bias, std=0.5)
    ref = torch.nn.MultiheadAttention(16, 4, batch_first=True, bias=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
        ref.out_proj.weight.copy_(ours.w_o.weight)
        ref.out_proj.bias.copy_(ours.w_o.bias)
    g = torch.Generator().manual_seed(1)
    x_q, x_kv = torch.randn(3, 5, 16, generator=g), torch.randn(3, 6, 16, generator=g)
    kpm = attn_mask = allowed = None
    if mask == "key_padding":
        kpm = torch.zeros(3, 6, dtype=torch.bool)
        kpm[1, 4:] = True
        kpm[2, 1:] = True
        allowed = ~kpm[:, None, None, :]  # (B, 1, 1, T_k)
    elif mask == "causal":
        x_kv = x_q
        attn_mask = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)  # True = not allowed
        allowed = ~attn_mask
    with torch.no_grad():
        out, w, _ = ours(x_q, x_kv, allowed, need_weights=True)
        out_fused, _, _ = ours(x_q, x_kv, allowed, need_weights=False)
        out_ref, w_ref = ref(
            x_q, x_kv, x_kv, key_padding_mask=kpm, attn_mask=attn_mask, need_weights=True, average_attn_weights=False
        )
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_fused, out_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w, w_ref, atol=1e-6, rtol=1e-5)


# -- causality and padding -------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("need_weights", [False, True])
def test_decoder_is_causal(variant, need_weights):
    model = make_model(**VARIANTS[variant])
    src = rand_ids(2, 6, 3)
    tgt = rand_ids(2, 7, 4)
    tgt[:, 0] = BOS
    base = run(model, src, tgt, need_weights=need_weights).logits
    for j in range(1, tgt.size(1)):
        changed = tgt.clone()
        changed[:, j] = 3 + (changed[:, j] - 3 + 5) % (V - 3)  # a different real token
        logits = run(model, src, changed, need_weights=need_weights).logits
        torch.testing.assert_close(logits[:, :j], base[:, :j], atol=1e-6, rtol=0, msg=f"position < {j} saw token {j}")
        assert (logits[:, j:] - base[:, j:]).abs().max() > 1e-4, f"changing token {j} changed nothing at >= {j}"


def test_noncausal_decoder_lets_the_past_see_the_future():
    model = make_model()
    src, tgt = rand_ids(1, 5, 3), rand_ids(1, 6, 4)
    r = run(model, src, tgt, Interventions(causal=False))
    assert (r.dec_self_attn[:, :, :, 0, 1:] > 0).all()  # position 0 attends to every later position
    changed = tgt.clone()
    changed[0, 5] = 3 + (changed[0, 5] - 3 + 1) % (V - 3)
    assert (run(model, src, changed, Interventions(causal=False)).logits[:, 0] - r.logits[:, 0]).abs().max() > 1e-4
    causal = run(model, src, tgt)
    assert torch.triu(causal.dec_self_attn, diagonal=1).abs().max() == 0  # above the diagonal: exactly 0


@pytest.mark.parametrize("variant", VARIANTS)
def test_source_padding_changes_nothing_for_real_tokens(variant):
    model = make_model(**VARIANTS[variant])
    src = rand_ids(1, 5, 7)
    src[0, -1] = EOS
    tgt = rand_ids(1, 4, 8)
    tgt[0, 0] = BOS
    padded = torch.cat([src, torch.full((1, 6), PAD)], dim=1)  # (1, 11)
    longer = rand_ids(1, 11, 9)  # a batch-mate that forces the padding
    with torch.no_grad():
        alone_enc = model.encode(src, need_weights=True)
        batch_enc = model.encode(torch.cat([padded, longer]), need_weights=True)
        alone = model.decoder_forward(tgt, alone_enc, need_weights=True)
        both = model.decoder_forward(torch.cat([tgt, rand_ids(1, 4, 10)]), batch_enc, need_weights=True)
    torch.testing.assert_close(batch_enc.memory[0, :5], alone_enc.memory[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(batch_enc.enc_self_attn[:, 0, :, :5, :5], alone_enc.enc_self_attn[:, 0], atol=1e-6, rtol=0)
    torch.testing.assert_close(both.logits[0], alone.logits[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(both.cross_attn[:, 0, :, :, :5], alone.cross_attn[:, 0], atol=1e-6, rtol=0)
    assert both.cross_attn[:, 0, :, :, 5:].abs().max() == 0


# -- positional encoding ---------------------------------------------------------------------------------


@pytest.mark.parametrize("max_len,d_model", [(1, 2), (10, 4), (50, 16), (128, 64), (7, 9)])
def test_sinusoidal_encoding_is_the_papers_formula(max_len, d_model):
    expected = np.zeros((max_len, d_model))
    for pos in range(max_len):
        for dim in range(d_model):
            i = dim // 2  # dimensions 2i and 2i+1 share the wavelength 10000^(2i / d_model)
            angle = pos / 10000 ** (2 * i / d_model)
            expected[pos, dim] = math.sin(angle) if dim % 2 == 0 else math.cos(angle)
    got = sinusoidal_encoding(max_len, d_model)
    assert got.shape == (max_len, d_model)
    np.testing.assert_allclose(got.numpy(), expected, atol=2e-5, rtol=0)  # float32 sin of angles up to 127


@pytest.mark.parametrize("variant", ["pre-LN", "learned-PE"])
def test_embedding_is_scaled_token_embedding_plus_pe(variant):
    model = make_model(**VARIANTS[variant])
    src, tgt = batch()
    with torch.no_grad():
        r = model(src, tgt, need_intermediates=True)
    pe_table = sinusoidal_encoding(16, 16) if variant == "pre-LN" else model.pos_emb.weight
    torch.testing.assert_close(r.intermediates["enc_pos_enc"], pe_table[: src.size(1)])
    torch.testing.assert_close(r.intermediates["dec_pos_enc"], pe_table[: tgt.size(1)])
    torch.testing.assert_close(r.intermediates["enc_tok_emb"], model.src_emb(src) * 4.0)  # sqrt(d_model = 16)
    torch.testing.assert_close(r.intermediates["enc_in"], model.src_emb(src) * 4.0 + pe_table[: src.size(1)])


@pytest.mark.parametrize("variant", VARIANTS)
def test_without_pe_the_encoder_is_permutation_equivariant(variant):
    model = make_model(**VARIANTS[variant])
    src = rand_ids(2, 8, 11)
    src[1, 6:] = PAD  # padding permutes along with its mask
    perm = torch.tensor([5, 2, 7, 0, 3, 6, 1, 4])
    no_pe = Interventions(use_pos_encoding=False)
    with torch.no_grad():
        a = model.encode(src, no_pe, need_weights=True)
        b = model.encode(src[:, perm], no_pe, need_weights=True)
        a_pe = model.encode(src)
        b_pe = model.encode(src[:, perm])
    torch.testing.assert_close(b.memory, a.memory[:, perm], atol=1e-5, rtol=0)
    torch.testing.assert_close(b.enc_self_attn, a.enc_self_attn[..., perm, :][..., perm], atol=1e-6, rtol=0)
    assert (b_pe.memory - a_pe.memory[:, perm]).abs().max() > 1e-2  # with PE, order matters


# -- interventions ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("need_weights", [False, True])
def test_hiding_every_source_token_is_finite_with_zero_cross_attention(need_weights):
    model = make_model()
    src, tgt = batch()
    interventions = Interventions(src_hidden=set(range(src.size(1))))
    r = run(model, src, tgt, interventions, need_weights=need_weights)
    assert torch.isfinite(r.logits).all()
    if need_weights:
        assert r.cross_attn.abs().max() == 0
        assert r.enc_self_attn.abs().max() == 0
        torch.testing.assert_close(r.dec_self_attn.sum(-1), torch.ones(r.dec_self_attn.shape[:-1]))
    # zero attention output: the memory then has no way into the decoder, so the source cannot matter
    other = run(model, rand_ids(2, 7, 99), tgt, interventions, need_weights=need_weights)
    torch.testing.assert_close(other.logits, r.logits, atol=1e-5, rtol=0)


def test_hiding_some_source_tokens_zeroes_their_columns():
    model = make_model()
    src, tgt = batch()
    r = run(model, src, tgt, Interventions(src_hidden={1, 2}))
    assert r.cross_attn[..., [1, 2]].abs().max() == 0 and r.enc_self_attn[..., [1, 2]].abs().max() == 0
    torch.testing.assert_close(r.cross_attn.sum(-1), torch.ones(r.cross_attn.shape[:-1]))
    assert (run(model, src, tgt).logits - r.logits).abs().max() > 1e-4


@pytest.mark.parametrize("variant", VARIANTS)
def test_ablating_every_head_gives_finite_logits_and_zero_maps(variant):
    model = make_model(**VARIANTS[variant])
    cfg = model.cfg
    every = {(k, l, h) for k in KINDS for l in range(2) for h in range(cfg.n_heads)}
    src, tgt = batch()
    r = run(model, src, tgt, Interventions(ablate=every))
    assert torch.isfinite(r.logits).all()
    for w in (r.enc_self_attn, r.dec_self_attn, r.cross_attn):
        assert w.abs().max() == 0
    # with every head's output zeroed, no position sees another: the source cannot matter
    other = run(model, rand_ids(2, 7, 98), tgt, Interventions(ablate=every))
    torch.testing.assert_close(other.logits, r.logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_ablating_one_head_changes_logits_but_not_the_other_heads_maps(kind):
    model = make_model()
    src, tgt = batch()
    base = run(model, src, tgt)
    r = run(model, src, tgt, Interventions(ablate={(kind, 0, 1)}))
    name = {"enc_self": "enc_self_attn", "dec_self": "dec_self_attn", "cross": "cross_attn"}[kind]
    w, w0 = getattr(r, name), getattr(base, name)
    assert w[0, :, 1].abs().max() == 0
    torch.testing.assert_close(w[0, :, [0, 2, 3]], w0[0, :, [0, 2, 3]], atol=0, rtol=0)  # same layer, other heads
    assert (r.logits - base.logits).abs().max() > 1e-4
    # a later layer does see the change
    assert (w[1] - w0[1]).abs().max() > 1e-6


def test_temperature_above_one_raises_row_entropy():
    model = make_model()
    src, tgt = batch()
    base = run(model, src, tgt)
    hot = run(model, src, tgt, Interventions(temperature=2.0))
    cold = run(model, src, tgt, Interventions(temperature=0.5))
    # first encoder layer: same inputs, so every row with >1 allowed key gets strictly flatter
    multi = (base.enc_self_attn[0] > 0).sum(-1) > 1
    assert (entropy(hot.enc_self_attn[0])[multi] > entropy(base.enc_self_attn[0])[multi]).all()
    assert (entropy(cold.enc_self_attn[0])[multi] < entropy(base.enc_self_attn[0])[multi]).all()
    for name in ("enc_self_attn", "dec_self_attn", "cross_attn"):
        assert entropy(getattr(hot, name)).mean() > entropy(getattr(base, name)).mean(), name


def test_temperature_matches_scaled_softmax():
    model = make_model()
    src, tgt = batch()
    with torch.no_grad():
        enc = model.encode(src, Interventions(temperature=3.0), need_weights=True, need_intermediates=True)
        layer = model.encoder[0]
        h = layer.self_attn_norm(enc.intermediates["enc_in"])  # pre-LN: the sub-layer reads LN(x)
        B, S, _ = h.shape
        q = layer.self_attn.w_q(h).view(B, S, 4, 4).transpose(1, 2)  # (B, S, D) -> (B, H, S, Dh)
        k = layer.self_attn.w_k(h).view(B, S, 4, 4).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / (math.sqrt(4) * 3.0)
        scores = scores.masked_fill(src[:, None, None, :] == PAD, float("-inf"))
    torch.testing.assert_close(enc.enc_self_attn[0], torch.softmax(scores, -1), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("w", [1, 2, 3])
def test_window_zeroes_weights_outside_the_band(w):
    model = make_model()
    src, tgt = rand_ids(2, 8, 5), rand_ids(2, 7, 6)
    r = run(model, src, tgt, Interventions(window=w))
    for name, T in (("enc_self_attn", 8), ("dec_self_attn", 7)):
        pos = torch.arange(T)
        outside = (pos[:, None] - pos[None, :]).abs() >= w  # (T, T)
        maps = getattr(r, name)
        assert maps[..., outside].abs().max() == 0, name
        torch.testing.assert_close(maps.sum(-1), torch.ones(maps.shape[:-1]))
    if w == 1:  # only itself: every self-attention row is one-hot on the diagonal
        assert (torch.diagonal(r.enc_self_attn, dim1=-2, dim2=-1) == 1).all()
    assert (r.cross_attn[..., :, -1] > 0).all()  # cross-attention is unaffected by the window


def test_interventions_validate():
    with pytest.raises(ValueError, match="temperature"):
        Interventions(temperature=0)
    with pytest.raises(ValueError, match="window"):
        Interventions(window=0)
    with pytest.raises(ValueError, match="kind"):
        Interventions(ablate={("encoder", 0, 0)})


# -- shapes, limits, config --------------------------------------------------------------------------------


@pytest.mark.parametrize("n_enc,n_dec,H", [(1, 3, 2), (3, 1, 4), (2, 2, 1)])
def test_return_shapes(n_enc, n_dec, H):
    model = make_model(n_enc_layers=n_enc, n_dec_layers=n_dec, n_heads=H)
    B, S, T = 3, 5, 4
    r = run(model, rand_ids(B, S, 0), rand_ids(B, T, 1))
    assert r.logits.shape == (B, T, V)
    assert r.enc_self_attn.shape == (n_enc, B, H, S, S)
    assert r.dec_self_attn.shape == (n_dec, B, H, T, T)
    assert r.cross_attn.shape == (n_dec, B, H, T, S)


def test_logits_at_one_row_per_item_are_those_rows_of_the_full_logits():
    model = make_model()
    src, tgt = batch()
    at = torch.tensor([5, 2])  # item 1's last real row (its target holds 3 tokens)
    with torch.no_grad():
        enc = model.encode(src)
        full, one = model.decoder_forward(tgt, enc).logits, model.decoder_forward(tgt, enc, logits_at=at).logits
    assert one.shape == (2, 1, V)
    torch.testing.assert_close(one[:, 0], full[torch.arange(2), at])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize(
    "interventions",
    [Interventions(), Interventions(window=2, temperature=1.5), Interventions(src_hidden={1}, ablate={("dec_self", 1, 2)})],
)
@pytest.mark.parametrize("chunk", [1, 2])
def test_kv_cached_decoding_equals_full_recomputation(variant, interventions, chunk):
    model = make_model(**VARIANTS[variant])
    src, tgt = batch()
    T = tgt.size(1)
    with torch.no_grad():
        enc = model.encode(src, interventions)
        full = model.decoder_forward(tgt, enc, interventions, need_weights=True)
        cache, first_cross_kv = None, None
        for t in range(0, T, chunk):
            step = model.decoder_forward(tgt[:, t : t + chunk], enc, interventions, cache=cache, need_weights=True)
            cache = step.cache
            n = step.logits.size(1)
            assert step.dec_self_attn.shape[-2:] == (n, t + n)
            assert cache[0].self_kv[0].shape[2] == t + n  # (B, H, T_total, Dh)
            # the memory's keys and values are computed by the first step and reused (the same tensors) after
            first_cross_kv = first_cross_kv or [c.cross_kv for c in cache]
            assert all(c.cross_kv[0] is kv[0] and c.cross_kv[1] is kv[1] for c, kv in zip(cache, first_cross_kv, strict=True))
            torch.testing.assert_close(step.logits, full.logits[:, t : t + n], atol=1e-5, rtol=0)
            torch.testing.assert_close(step.dec_self_attn, full.dec_self_attn[..., t : t + n, : t + n], atol=1e-6, rtol=0)
            torch.testing.assert_close(step.cross_attn, full.cross_attn[..., t : t + n, :], atol=1e-6, rtol=0)


def test_max_len_exceeded_raises_value_error():
    model = make_model(max_len=8)
    with pytest.raises(ValueError, match="max_len"):
        model.encode(rand_ids(1, 9, 0))
    enc = model.encode(rand_ids(1, 8, 0))  # exactly max_len is fine
    with pytest.raises(ValueError, match="max_len"):
        model.decoder_forward(rand_ids(1, 9, 1), enc)
    cache = model.decoder_forward(rand_ids(1, 8, 1), enc).cache
    with pytest.raises(ValueError, match="max_len"):  # one more token past a full cache
        model.decoder_forward(rand_ids(1, 1, 2), enc, cache=cache)


def test_config_validates_and_round_trips():
    with pytest.raises(ValueError, match="divisible"):
        TransformerConfig(vocab_size=10, d_model=10, n_heads=3)
    with pytest.raises(ValueError, match="pos_encoding"):
        TransformerConfig(vocab_size=10, pos_encoding="rotary")
    cfg = TransformerConfig(vocab_size=10, d_model=12, n_heads=3, norm_first=False)
    assert cfg.d_head == 4
    assert TransformerConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(TypeError, match="n_layer"):
        TransformerConfig.from_dict({**cfg.to_dict(), "n_layer": 2})
    with pytest.raises(AttributeError):
        cfg.d_model = 16  # frozen
    assert cfg.n_logits == 10 and TransformerConfig(vocab_size=10, tgt_vocab_size=4).n_logits == 4
    for bad in (2, 11, 0):  # must hold <pad> <bos> <eos> and fit in the vocabulary
        with pytest.raises(ValueError, match="tgt_vocab_size"):
            TransformerConfig(vocab_size=10, tgt_vocab_size=bad)


# -- statelessness -----------------------------------------------------------------------------------------


def snapshot(model: torch.nn.Module) -> dict:
    """Every module's attributes: identity of objects, value of plain data, a copy of each tensor."""
    snap = {}
    for name, m in model.named_modules():
        for k, v in m.__dict__.items():
            if isinstance(v, torch.Tensor):
                snap[(name, k)] = ("tensor", id(v), v.detach().clone())
            elif isinstance(v, dict):
                snap[(name, k)] = ("dict", id(v), {kk: id(vv) for kk, vv in v.items()})
            else:
                snap[(name, k)] = ("obj", id(v), repr(v) if isinstance(v, int | float | str | bool | tuple) else None)
        for k, t in list(m.named_parameters(recurse=False)) + list(m.named_buffers(recurse=False)):
            snap[(name, "value:" + k)] = ("tensor", id(t), t.detach().clone())
    return snap


def assert_same_snapshot(a: dict, b: dict) -> None:
    assert a.keys() == b.keys(), f"attributes added/removed: {set(a) ^ set(b)}"
    for key in a:
        (ka, ia, va), (kb, ib, vb) = a[key], b[key]
        assert (ka, ia) == (kb, ib), f"{key} was replaced"
        if ka == "tensor":
            assert torch.equal(va, vb), f"{key} changed"
        else:
            assert va == vb, f"{key} changed"


def test_eval_model_is_stateless():
    model = make_model()
    src_a, tgt_a = batch(1)
    src_b, tgt_b = batch(50)
    before = snapshot(model)
    ra1 = run(model, src_a, tgt_a)
    rb1 = run(model, src_b, tgt_b, Interventions(temperature=2.0, ablate={("cross", 0, 0)}))
    ra2 = run(model, src_a, tgt_a)
    with torch.no_grad():
        model.decoder_forward(tgt_b[:, :2], model.encode(src_b), need_weights=True, need_intermediates=True)
    rb2 = run(model, src_b, tgt_b, Interventions(temperature=2.0, ablate={("cross", 0, 0)}))
    assert_same_snapshot(before, snapshot(model))
    for x, y in ((ra1, ra2), (rb1, rb2)):
        for name in ("logits", "enc_self_attn", "dec_self_attn", "cross_attn"):
            assert torch.equal(getattr(x, name), getattr(y, name)), name
    assert not torch.equal(ra1.logits, rb1.logits)


def test_snapshot_detects_a_stored_attribute():
    """The statelessness check itself can fail: storing a map on a module is caught."""
    model = make_model()
    before = snapshot(model)
    model.encoder[0].self_attn.last_weights = torch.zeros(1)
    with pytest.raises(AssertionError, match="added"):
        assert_same_snapshot(before, snapshot(model))


# -- variants: normalisation, PE, tying ------------------------------------------------------------------


def test_post_ln_normalises_each_layer_output_and_pre_ln_the_memory():
    src, tgt = batch()

    def is_normalised(x):  # LayerNorm at init (weight 1, bias 0): zero mean, unit variance per position
        return torch.allclose(x.mean(-1), torch.zeros(x.shape[:-1]), atol=1e-5) and torch.allclose(
            x.var(-1, unbiased=False), torch.ones(x.shape[:-1]), atol=1e-3
        )

    with torch.no_grad():
        post = make_model(norm_first=False)(src, tgt, need_intermediates=True).intermediates
        pre = make_model(norm_first=True)(src, tgt, need_intermediates=True).intermediates
    assert is_normalised(post["enc_layer_0"]) and is_normalised(post["dec_layer_1"])
    assert not is_normalised(pre["enc_layer_0"])  # pre-LN: the residual stream itself is not normalised
    assert is_normalised(pre["memory"]) and is_normalised(pre["dec_out"])


@pytest.mark.parametrize("v_tgt", [None, 9])
@pytest.mark.parametrize("tie", [True, False])
def test_tied_and_untied_embeddings(tie, v_tgt):
    model = make_model(tie_embeddings=tie, tgt_vocab_size=v_tgt)
    n_out = v_tgt or V
    src, tgt = batch()
    with torch.no_grad():
        r = model(src, tgt, need_intermediates=True)
    assert r.logits.shape == (*tgt.shape, n_out)
    if tie:  # the generator is the embedding matrix's first n_out rows
        assert model.tgt_emb.weight is model.src_emb.weight and model.generator is None
        torch.testing.assert_close(r.logits, r.intermediates["dec_out"] @ model.src_emb.weight[:n_out].T)
    else:
        assert model.tgt_emb.weight is not model.src_emb.weight
        torch.testing.assert_close(r.logits, r.intermediates["dec_out"] @ model.generator.weight.T)
    n_untied_extra = V * 16 + n_out * 16  # a target embedding and a generator
    untied, tied = make_model(tie_embeddings=False, tgt_vocab_size=v_tgt), make_model(tie_embeddings=True, tgt_vocab_size=v_tgt)
    assert untied.n_params() - tied.n_params() == n_untied_extra


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_trains_one_step(variant):
    model = make_model(**VARIANTS[variant]).train()
    src, tgt = batch()
    tgt = tgt.clamp(max=model.cfg.n_logits - 1)  # labels must be ids the generator scores
    logits = model(src, tgt[:, :-1]).logits
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD)
    loss.backward()
    assert torch.isfinite(loss)
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values()), [n for n, g in grads.items() if g is None]
    if variant == "learned-PE":
        assert grads["pos_emb.weight"][: src.size(1)].abs().sum() > 0
        assert grads["pos_emb.weight"][src.size(1) :].abs().sum() == 0  # unused positions get no gradient


# -- the sub-layer formulas and the mask rule --------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [True, False])
def test_layers_are_the_sublayer_formulas(norm_first):
    """Section 3.1: post-LN LN(x + f(x)) (the paper), pre-LN x + f(LN(x)), for every sub-layer."""
    model = make_model(norm_first=norm_first)
    g = torch.Generator().manual_seed(5)
    x, memory = torch.randn(2, 5, 16, generator=g), torch.randn(2, 7, 16, generator=g)

    def sub(x, norm, f):  # one sub-layer with its residual connection and LayerNorm
        return x + f(norm(x)) if norm_first else norm(x + f(x))

    with torch.no_grad():
        enc = model.encoder[0]
        want = sub(x, enc.self_attn_norm, lambda h: enc.self_attn(h, h, None)[0])
        want = sub(want, enc.ff_norm, enc.ff)
        got, _ = enc(x, None)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)

        dec = model.decoder[0]
        causal = torch.tril(torch.ones(5, 5, dtype=torch.bool))  # (T, T)
        want = sub(x, dec.self_attn_norm, lambda h: dec.self_attn(h, h, causal)[0])
        want = sub(want, dec.cross_attn_norm, lambda h: dec.cross_attn(h, memory, None)[0])
        want = sub(want, dec.ff_norm, dec.ff)
        got, cache, _, _ = dec(x, memory, causal, None)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    assert cache.self_kv[0].shape == (2, 4, 5, 4) and cache.cross_kv[0].shape == (2, 4, 7, 4)  # (B, H, T | S, Dh)


def test_cross_attention_reuses_its_past_kv_and_self_attention_appends():
    model = make_model()
    g = torch.Generator().manual_seed(6)
    x, memory = torch.randn(1, 3, 16, generator=g), torch.randn(1, 4, 16, generator=g)
    with torch.no_grad():
        cross, self_attn = model.decoder[0].cross_attn, model.decoder[0].self_attn
        _, _, memory_kv = cross(x, memory, None)
        out, _, kv = cross(x[:, 2:], torch.zeros_like(memory), None, past_kv=memory_kv)  # memory not read again
        assert kv[0] is memory_kv[0] and kv[1] is memory_kv[1]
        torch.testing.assert_close(out, cross(x, memory, None)[0][:, 2:], atol=1e-6, rtol=0)
        _, _, past = self_attn(x[:, :2], x[:, :2], None)
        out, _, kv = self_attn(x[:, 2:], x[:, 2:], None, past_kv=past)  # (B, H, 2 + 1, Dh)
        assert kv[0].shape == (1, 4, 3, 4)
        torch.testing.assert_close(out, self_attn(x, x, None)[0][:, 2:], atol=1e-6, rtol=0)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [None, 1, 2, 4])
@pytest.mark.parametrize("n_q,n_k,offset", [(5, 5, 0), (1, 6, 5), (2, 6, 4), (3, 3, 0)])
def test_band_is_the_mask_rule(causal, window, n_q, n_k, offset):
    got = band(n_q, n_k, offset, causal=causal, window=window)
    want = torch.tensor(
        [
            [(not causal or j <= offset + i) and (window is None or abs(offset + i - j) < window) for j in range(n_k)]
            for i in range(n_q)
        ]
    )
    if got is None:  # the fast path: only when every query may see every key
        assert bool(want.all())
        assert window is None and (not causal or n_q == 1)
    else:
        assert got.dtype == torch.bool and got.shape == (n_q, n_k)
        assert torch.equal(got, want)


def test_a_memory_only_cache_recomputes_the_target_and_reuses_the_memory_kv():
    """What decoding without the causal mask does each step: self-attention from scratch, memory K/V reused."""
    model = make_model()
    src, tgt = batch()
    interventions = Interventions(causal=False)
    with torch.no_grad():
        enc = model.encode(src, interventions)
        memory_only = [LayerCache(None, c.cross_kv) for c in model.decoder_forward(tgt[:, :2], enc, interventions).cache]
        full = model.decoder_forward(tgt, enc, interventions, need_weights=True)
        blank = EncoderResult(torch.zeros_like(enc.memory), enc.src_allowed)  # the memory itself is not read again
        again = model.decoder_forward(tgt, blank, interventions, cache=memory_only, need_weights=True)
    for name in ("logits", "dec_self_attn", "cross_attn"):
        torch.testing.assert_close(getattr(again, name), getattr(full, name), atol=1e-6, rtol=0, msg=name)
    assert all(
        c.cross_kv[0] is m.cross_kv[0] and c.cross_kv[1] is m.cross_kv[1] for c, m in zip(again.cache, memory_only, strict=True)
    )
    assert again.cache[0].self_kv[0].shape[2] == tgt.size(1)  # (B, H, T, Dh): the whole target


# -- the output projection's inference layout ------------------------------------------------------------


@pytest.mark.parametrize("variant", ["pre-LN", "untied", "target-vocab"])
def test_inference_logits_equal_training_logits_and_follow_edited_weights(variant):
    """``logits`` without gradients reads eval()'s contiguous copy of the output projection: the same numbers as
    with gradients, and a copy that follows the weights when they change in place (an optimizer step, an edit)."""
    model = make_model(**VARIANTS[variant])
    src, tgt = batch(3)
    h = torch.randn(2, 5, model.cfg.d_model)
    with torch.enable_grad():
        want = model.logits(h)
    with torch.no_grad():
        got = model.logits(h)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        before = model(src, tgt).logits
        model.generator_weight.mul_(-1.0)  # in place: the tied embedding rows or the generator
        after = model(src, tgt).logits
    with torch.enable_grad():
        want = model.logits(h)
    with torch.inference_mode():
        torch.testing.assert_close(model.logits(h), want, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(before, after)


def test_eval_makes_the_inference_layout_and_train_drops_it():
    model = make_model()
    assert model._generator_t_cache is not None and model._generator_t_cache[1].is_contiguous()
    assert torch.equal(model._generator_t_cache[1], model.generator_weight.T)
    model.train()
    assert model._generator_t_cache is None


def test_a_model_made_under_inference_mode_has_the_inference_layout_too():
    """``training.evaluate`` loads its checkpoint inside ``torch.inference_mode``: weights without a version counter."""
    with torch.inference_mode():
        model = make_model()  # eval() runs on inference tensors
        h = torch.randn(1, 3, model.cfg.d_model)
        got = model.logits(h)
    torch.testing.assert_close(got, h @ model.generator_weight.T, rtol=1e-5, atol=1e-6)

"""Attention beside attribution (analysis/attribution.py, viz/explain.py, the /explain page): tests that can fail.

- Norm-weighted attention (Kobayashi et al. 2020): the terms α_ij f^h(x_j), summed over keys and heads plus b^O, are
  the attention sub-layer's own output to 1e-5; a token whose value vector is zeroed gets norm 0 while α stays.
- Integrated Gradients are complete: they sum to f(x) − f(baseline) within 1 % with the page's steps, for every
  output token, plain and contrastive; the page's parts add up to the one-call result.
- A hidden source token gets zero attention, zero norm-weighted attention, zero rollout and exactly zero gradient.
- The logit lens at the last decoder layer is, at every position, the distribution decoding used at that step (the
  key/value-cached steps of ``generate_steps``, the beam's own log-probabilities), for every decoding method and every
  Mask lab intervention, the causal mask off included; DecoderLens at the last encoder layer is the translation on
  screen under every decoding setting; the embeddings path of the encoder is ``encode``.
- Norm-weighted terms, checked with forward hooks on the real attention sub-layers, add up to each sub-layer's
  output for every kind and layer; rollout averages the heads still on.
- The page renders for every output token of the example, with no NaN in any figure, and follows the Mask lab.
On the small ``reverse`` checkpoint and a tiny random model; tests on ``pretrained/en-de`` are marked slow.
"""

from __future__ import annotations

import copy
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from analysis.analyze import analyze
from analysis.attribution import (
    IG_REFINE_DEPTH,
    IG_REFINE_TOL,
    IG_SEGMENTS,
    IG_STEPS,
    _ig_between,
    _layer_inputs,
    attention_terms,
    decoder_lens_ids,
    encode_embedded,
    explain,
    explain_item,
    explain_many,
    ig_part,
    layer_lens,
    logit_lens_logprobs,
    norm_weighted_maps,
    value_vectors,
)
from analysis.records import IG, METHODS, IGResult, rollout, spearman
from model.decoding import generate_steps
from model.facts import VISIBLE, shift_right
from model.settings import DecodeSettings
from model.transformer import Interventions, Transformer, TransformerConfig, band
from viz import explain as ve

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("ATTENTION_EXPLORER_MODELS", ROOT / "pretrained"))
REVERSE, EN_DE = MODELS / "reverse", MODELS / "en-de"
SENTENCE = " a b c d e"
TIMEOUT = 180

INTERVENTION_CASES = {
    "none": Interventions(),
    "hidden": Interventions(src_hidden=frozenset({1})),
    "ablated": Interventions(ablate=frozenset({("cross", 1, 0), ("enc_self", 0, 1), ("dec_self", 0, 0)})),
    "temperature": Interventions(temperature=2.0),
    "window": Interventions(window=2),
    "causal_off": Interventions(causal=False),
    "no_pe": Interventions(use_pos_encoding=False),
}


def _loaded(path: Path):
    from model.checkpoint import load_checkpoint

    if not (path / "config.json").exists():
        pytest.skip(f"no checkpoint at {path}")
    return load_checkpoint(path, device="cpu")


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread, as the app's model calls run (``serving.limits.CallLimit``): with two OpenMP threads on a
    machine whose cores are busy, Integrated Gradients' many small batches ran 30-40x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def rev():
    return _loaded(REVERSE)


@pytest.fixture(scope="module")
def tiny() -> Transformer:
    """A 2 + 2-layer model with every weight and bias random (biases are 0 after init; b^V and b^O matter here)."""
    torch.manual_seed(0)
    cfg = TransformerConfig(
        vocab_size=40, d_model=16, n_heads=4, d_ff=32, n_enc_layers=2, n_dec_layers=2, dropout=0.0, max_len=32
    )
    model = Transformer(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
            p.requires_grad_(False)
    return model


def translated(rev, interventions: Interventions):
    """(model, tokenizer, analyze's Analysis, decoder input, the tokens it predicts) of SENTENCE under ``interventions``."""
    m, tok = rev.model, rev.tokenizer
    a = analyze(m, tok, SENTENCE, interventions=interventions)
    return (m, tok, a, *shift_right(a.out_ids, bos_id=m.cfg.bos_id, eos_id=m.cfg.eos_id))


def finite(a) -> bool:
    return bool(np.isfinite(np.asarray(a, dtype=np.float64)).all())


# -- norm-weighted attention -------------------------------------------------------------------------------------------


def _module(model: Transformer, which: str):
    return {"enc": model.encoder[1].self_attn, "dec": model.decoder[0].self_attn, "cross": model.decoder[1].cross_attn}[which]


@pytest.mark.parametrize("which", ["enc", "dec", "cross"])
@pytest.mark.parametrize("case", ["plain", "masked", "ablated", "temperature", "dead_row"])
def test_terms_add_up_to_the_sublayers_own_output(tiny, which, case):
    """Σ_j Σ_h α^h_ij f^h(x_j) + b^O is the attention sub-layer's output (section 3.2.2 written out), to 1e-5."""
    torch.manual_seed(1)
    mha, Q, K = _module(tiny, which), 5, 6 if which == "cross" else 5
    x_q, kv_x = torch.randn(1, Q, 16), torch.randn(1, K, 16)
    if which != "cross":
        kv_x = x_q
    allowed = None
    if case == "masked":
        allowed = torch.ones(1, 1, 1, K, dtype=torch.bool)
        allowed[..., 2] = False  # a hidden key
        if which == "dec":
            allowed = allowed & band(Q, K, 0, causal=True, window=None)
    if case == "dead_row":
        allowed = torch.zeros(1, 1, 1, K, dtype=torch.bool)  # every key hidden: zero weights, zero output
    head_mask = [1.0, 0.0, 1.0, 1.0] if case == "ablated" else None
    tau = 2.0 if case == "temperature" else 1.0
    out, w, _ = mha(x_q, kv_x, allowed, head_mask=head_mask, temperature=tau, need_weights=True)
    terms = attention_terms(mha, kv_x, w)  # (1, H, Q, K, D)
    assert terms.shape == (1, 4, Q, K, 16)
    rebuilt = terms.sum(dim=(1, 3)) + mha.w_o.bias  # (1, Q, D)
    torch.testing.assert_close(rebuilt, out, atol=1e-5, rtol=0)
    if case == "ablated":
        assert (terms[:, 1] == 0).all(), "a switched-off head adds nothing"


def test_zeroing_one_value_vector_zeroes_its_share_and_leaves_the_weights(tiny):
    """With b^V chosen so that token j's value vector is 0 (W^Q and W^K untouched), α is the same and ‖α_ij f(x_j)‖ = 0."""
    torch.manual_seed(2)
    mha, j = tiny.decoder[0].cross_attn, 3
    x_q, kv_x = torch.randn(1, 4, 16), torch.randn(1, 6, 16)
    zeroed = copy.deepcopy(mha)
    with torch.no_grad():
        zeroed.w_v.bias.copy_(-(kv_x[0, j] @ zeroed.w_v.weight.T))  # v_j = x_j W^V + b^V = 0
    _, w, _ = mha(x_q, kv_x, None, need_weights=True)
    _, w0, _ = zeroed(x_q, kv_x, None, need_weights=True)
    torch.testing.assert_close(w0, w, atol=0, rtol=0)
    assert (w[..., j] > 0.01).any(), "the token keeps a real weight"
    assert value_vectors(zeroed, kv_x)[:, :, j].abs().max() < 1e-5
    norms = attention_terms(zeroed, kv_x, w0).norm(dim=-1)  # (1, H, Q, K)
    assert norms[..., j].max() < 1e-5 and norms[..., [0, 1, 2, 4, 5]].min() > 0
    summed = attention_terms(zeroed, kv_x, w0).sum(dim=1).norm(dim=-1)  # (1, Q, K): ‖Σ_h α f‖
    assert summed[..., j].max() < 1e-5


def hooked_terms(m: Transformer, src_ids, tgt_out, interventions: Interventions) -> dict[str, torch.Tensor]:
    """The terms α^h_ij f^h(x_j) of every attention sub-layer, kind and layer, in the passes decoding ran (one
    teacher-forced pass under the causal mask; without it step t's own pass over its prefix, row t kept), each checked
    against the real sub-layer: torch forward hooks on every ``MultiHeadAttention`` of the model record what it read
    (x_kv) and what it returned; the terms, from ``attention_terms`` of the weights the model reports, must add up
    (over heads and keys, plus b^O) to that output, and the keys and values ``norm_weighted_maps`` reads
    (``_layer_inputs``) must be the rows the sub-layer read. Returns kind -> ``(L, H, Q, K, D)``."""
    cfg = m.cfg
    modules = [("enc_self", l, lay.self_attn) for l, lay in enumerate(m.encoder)]
    modules += [
        (kind, l, getattr(lay, attr))
        for l, lay in enumerate(m.decoder)
        for kind, attr in (("dec_self", "self_attn"), ("cross", "cross_attn"))
    ]
    seen: dict = {}
    handles = [
        mha.register_forward_hook(lambda _mod, args, out, key=(kind, l): seen.__setitem__(key, (args[1].clone(), out[0].clone())))
        for kind, l, mha in modules
    ]
    tgt_in = [cfg.bos_id, *tgt_out[:-1]]
    T, S = len(tgt_in), len(src_ids)
    out = {
        "enc_self": torch.zeros(cfg.n_enc_layers, cfg.n_heads, S, S, cfg.d_model),
        "dec_self": torch.zeros(cfg.n_dec_layers, cfg.n_heads, T, T, cfg.d_model),
        "cross": torch.zeros(cfg.n_dec_layers, cfg.n_heads, T, S, cfg.d_model),
    }
    try:
        for end in [T] if interventions.causal else range(1, T + 1):
            seen.clear()
            with torch.inference_mode():
                res = m(
                    torch.tensor([list(src_ids)]),
                    torch.tensor([tgt_in[:end]]),
                    interventions,
                    need_weights=True,
                    need_intermediates=True,
                )
            rows = slice(0, end) if interventions.causal else slice(end - 1, end)
            weights = {"enc_self": res.enc_self_attn, "dec_self": res.dec_self_attn, "cross": res.cross_attn}
            assert len(seen) == len(modules), "every attention sub-layer ran once"
            for kind, l, mha in modules:
                kv_x, real = seen[(kind, l)]  # (1, K, D), (1, Q, D): what the sub-layer read and returned
                torch.testing.assert_close(_layer_inputs(m, res.intermediates, kind, l), kv_x, atol=1e-6, rtol=0)
                terms = attention_terms(mha, kv_x, weights[kind][l])  # (1, H, Q, K, D)
                torch.testing.assert_close(terms.sum(dim=(1, 3)) + mha.w_o.bias, real, atol=1e-5, rtol=0, msg=f"{kind} {l}")
                if kind == "enc_self":
                    out[kind][l] = terms[0]
                else:
                    out[kind][l, :, rows, : terms.size(3)] = terms[0, :, rows]
    finally:
        for h in handles:
            h.remove()
    return out


@pytest.mark.parametrize("interventions", list(INTERVENTION_CASES.values()), ids=list(INTERVENTION_CASES))
def test_norm_weighted_shares_are_the_normalised_products_and_rows_sum_to_one(rev, interventions):
    m, tok, a, _, tgt_out = translated(rev, interventions)
    maps = norm_weighted_maps(m, a.source.ids, tgt_out, interventions)
    for kind in ("enc_self", "dec_self", "cross"):
        s = getattr(maps, kind)
        assert s.shape == getattr(a.maps, kind).shape and finite(s)
        sums = s.sum(axis=-1)  # (L, H, Q)
        reads = getattr(a.maps, kind).sum(axis=-1) > 0  # rows whose weights read something
        np.testing.assert_allclose(sums[reads], 1, atol=1e-5)
        assert (sums[~reads] == 0).all()
        hidden = maps.masks[kind].reasons != VISIBLE
        assert (s[:, :, hidden] == 0).all(), f"{kind}: a masked cell has a norm-weighted share"
    hooked = hooked_terms(m, a.source.ids, tgt_out, interventions)  # the terms of the real sub-layers' outputs
    for kind in ("enc_self", "dec_self", "cross"):  # each share is ‖α_ij f(x_j)‖ of those terms over its row's total
        norms = hooked[kind].norm(dim=-1).numpy()  # (L, H, Q, K)
        tot = norms.sum(axis=-1, keepdims=True)
        want = np.where(tot > 0, norms / np.where(tot > 0, tot, 1), 0)
        np.testing.assert_allclose(getattr(maps, kind), want, atol=1e-5, err_msg=kind)


# -- rollout over the heads still on -------------------------------------------------------------------------------------


def test_rollout_averages_the_heads_still_on_as_the_cross_attention_row_does():
    """A switched-off head (all-zero weights, as the model reports it) is left out of rollout's mean over heads, as
    ``head_average`` leaves it out of the cross-attention row: adding a head equal to the mean of the others changes
    nothing, so the rollout with the zero head must equal the rollout with that head replaced by the others' mean.
    Counted as a head of weight 0, it would shrink the attention's share and inflate the residual's."""
    rng = np.random.default_rng(0)
    a = rng.dirichlet(np.ones(5), size=(3, 4, 5)).astype(np.float32)  # (L, H, S, S), rows sum to 1
    off = a.copy()
    off[0, 1] = 0  # head 1 of layer 0 switched off
    filled = off.copy()
    filled[0, 1] = off[0, [0, 2, 3]].mean(axis=0)
    np.testing.assert_allclose(rollout(off), rollout(filled), atol=1e-6)
    assert not np.allclose(rollout(off), rollout(a), atol=1e-3), "the switched-off head's own weights are gone"
    dead = a.copy()
    dead[1] = 0  # every head of layer 1 off: that layer passes the residual stream on unchanged
    np.testing.assert_allclose(rollout(dead)[1], rollout(a)[0], atol=1e-6)
    np.testing.assert_allclose(rollout(dead)[2], rollout(np.delete(a, 1, axis=0))[1], atol=1e-6)


def test_explanations_rollout_leaves_a_switched_off_encoder_head_out(rev):
    m, tok = rev.model, rev.tokenizer
    interventions = Interventions(ablate=frozenset({("enc_self", 0, 1), ("cross", 1, 0)}))
    a = analyze(m, tok, SENTENCE, interventions=interventions)
    enc = a.maps.enc_self.copy()  # (L_enc, H, S, S): head 1 of layer 0 is all zero
    assert (enc[0, 1] == 0).all() and (enc[0, 0] > 0).any()
    live = [h for h in range(m.cfg.n_heads) if h != 1]
    enc[0, 1] = enc[0, live].mean(axis=0)
    cross = a.maps.cross.copy()  # (L_dec, H, T, S): head 0 of layer 1 is all zero
    cross[1, 0] = cross[1, 1:].mean(axis=0)
    through = rollout(enc)[-1]  # (S, S)
    for t in range(len(a.out_ids) + 1):
        e = explain(m, tok, a.source.ids, a.out_ids, t, interventions, ig_steps=0)
        np.testing.assert_allclose(e.rollout, cross[:, :, t].mean(axis=1) @ through, atol=1e-5)


# -- one output token explained ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("interventions", list(INTERVENTION_CASES.values()), ids=list(INTERVENTION_CASES))
def test_explanation_attention_is_the_pages_map_row(rev, interventions):
    """The weights explained are those the other pages show: row t of analyze's cross-attention, every layer and head."""
    m, tok = rev.model, rev.tokenizer
    a = analyze(m, tok, SENTENCE, interventions=interventions)
    for t in range(len(a.out_ids) + 1):
        e = explain(m, tok, a.source.ids, a.out_ids, t, interventions, ig_steps=0)
        np.testing.assert_allclose(e.attn, a.maps.cross[:, :, t], atol=1e-5)
        np.testing.assert_allclose(math.exp(e.target_logprob), a.maps.next_probs[t], atol=1e-5)
        assert e.target == a.tgt_out_tokens[t] and e.prefix_tokens == a.tgt_in_tokens[: t + 1]
        np.testing.assert_allclose(e.rollout.sum(axis=-1), 1, atol=1e-5)
    hooked = hooked_terms(m, a.source.ids, shift_right(a.out_ids, bos_id=m.cfg.bos_id, eos_id=m.cfg.eos_id)[1], interventions)
    for t in range(len(a.out_ids) + 1):  # the norms explain reports are those of the real sub-layers' terms
        e = explain(m, tok, a.source.ids, a.out_ids, t, interventions, ig_steps=0)
        terms = hooked["cross"][:, :, t]  # (L, H, S, D): α^h_tj f^h(x_j), rebuilt from the real sub-layer's output
        np.testing.assert_allclose(e.norm_heads, terms.norm(dim=-1).numpy(), atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(e.norm_sum, terms.sum(dim=1).norm(dim=-1).numpy(), atol=1e-5, rtol=1e-5)
        reads = e.attn > 1e-3  # where α is not tiny, ‖f(x_j)‖ = ‖α f(x_j)‖ / α
        np.testing.assert_allclose(e.value_norm[reads], (terms.norm(dim=-1).numpy() / np.maximum(e.attn, 1e-3))[reads], rtol=1e-3)


@pytest.mark.parametrize("interventions", list(INTERVENTION_CASES.values()), ids=list(INTERVENTION_CASES))
def test_the_embeddings_path_of_the_encoder_is_encode(rev, interventions):
    m = rev.model
    src = torch.tensor([analyze(m, rev.tokenizer, SENTENCE).source.ids])
    enc = m.encode(src, interventions, need_intermediates=True)
    x = enc.intermediates["enc_tok_emb"]  # what embed made: x sqrt(d_model) where the config says so
    torch.testing.assert_close(encode_embedded(m, x, enc.src_allowed, interventions).memory, enc.memory, atol=1e-5, rtol=0)


ENOUGH = dict(ig_steps=512, ig_segments=32)  # the toy model's peaked softmax needs more than the page's 256 nodes


def _complete(e, what: str, steps: int = ENOUGH["ig_steps"], *, of_sizes: bool = False) -> None:
    """Σ IG within 1 % of f(x) − f(baseline); ``of_sizes``: within 1 % of Σ_i |IG_i| instead (see below)."""
    g = e.ig
    assert g is not None and g.steps >= steps  # more where a segment was halved (analysis.attribution._ig_between)
    scale = float(np.abs(g.ig).sum()) if of_sizes else abs(g.f_input - g.f_baseline)
    assert abs(g.error) <= 0.01 * scale + 1e-6, (
        f"{what}: IG sums to {g.ig.sum():.5f}, f(x) - f(baseline) = {g.f_input - g.f_baseline:.5f}"
    )
    np.testing.assert_allclose(g.f_input, e.target_logprob - (e.contrast_logprob or 0.0), atol=1e-4)


# Under every intervention but INTERVENTION_CASES["no_pe"]. With three heads off (INTERVENTION_CASES["ablated"]) the toy model's near one-hot attention
# turns so sharply along the path that evenly spread Gauss-Legendre nodes did not settle (token 0: 1.7 % with 512 nodes,
# 0.6 % with 2048); halving the segments that miss (analysis.attribution._ig_between) settles it. Without positional
# encodings the baseline's tokens are all alike and token 1's runner-up still misses by 0.12 nats after four halvings:
# a limit of the quadrature on a toy model, which the page states by printing the error it reached.
@pytest.mark.parametrize(
    "interventions",
    [v for k, v in INTERVENTION_CASES.items() if k != "no_pe"],
    ids=[k for k in INTERVENTION_CASES if k != "no_pe"],
)
def test_integrated_gradients_are_complete_for_every_output_token(rev, interventions):
    """Completeness (Sundararajan et al. 2017, proposition 1): Σ IG = f(x) − f(baseline), here within 1 % with enough
    steps, for log p(y) of every output token. Contrastive mode explains log p(y) − log p(y′) (y′: the step's best
    other candidate): by the linearity axiom its attributions are those of log p(y) minus those of log p(y′). Where
    f(x) − f(baseline) is small while the attributions are large and cancel (log p(y′) of the toy model can move by
    0.2 nats with attributions of ±4), 1 % of it is below what 512 nodes resolve: log p(y′) and the contrast are held
    to 1 % of the attributions' total size Σ|IG_i| instead."""
    m, tok = rev.model, rev.tokenizer
    a = analyze(m, tok, SENTENCE, interventions=interventions)
    eos = m.cfg.eos_id
    for t in range(len(a.out_ids) + 1):
        e = explain(m, tok, a.source.ids, a.out_ids, t, interventions, **ENOUGH)
        _complete(e, f"token {t}")
        y2 = next(i for _, i, _ in e.candidates if i != e.target_id)
        alt = explain(m, tok, a.source.ids, a.out_ids[:t] + ([] if y2 == eos else [y2]), t, interventions, **ENOUGH)  # log p(y′)
        assert alt.target_id == y2
        _complete(alt, f"token {t}: y′ = {y2}", of_sizes=True)
        c = explain(m, tok, a.source.ids, a.out_ids, t, interventions, contrast=y2, **ENOUGH)
        assert c.contrast_id == y2 and c.objective != e.objective
        _complete(c, f"token {t} against {y2}", of_sizes=True)
        # linearity on one set of nodes: without halving, the three objectives share every Gauss-Legendre node
        e0, alt0, c0 = (
            explain(m, tok, a.source.ids, out, t, interventions, contrast=y, ig_refine_depth=0, **ENOUGH)
            for out, y in ((a.out_ids, None), (a.out_ids[:t] + ([] if y2 == eos else [y2]), None), (a.out_ids, y2))
        )
        np.testing.assert_allclose(c0.ig.ig, e0.ig.ig - alt0.ig.ig, atol=2e-4)
        np.testing.assert_allclose(
            [c0.ig.f_input, c0.ig.f_baseline], [e0.ig.f_input - alt0.ig.f_input, e0.ig.f_baseline - alt0.ig.f_baseline], atol=1e-4
        )
        assert not np.allclose(c.ig.ig, e.ig.ig), "the contrast changes the question, and the answer"


def test_a_segment_that_has_not_settled_is_halved_until_it_has():
    """An objective that turns within 0.2 % of the path (a steep sigmoid at alpha 0.3, as the stage-20 weights' token 8
    against its runner-up turns at alpha 0.295): 64 Gauss-Legendre nodes over a segment around it miss completeness;
    halving the pieces that miss it (``_ig_between``) brings the sum within ``IG_REFINE_TOL`` of f(b·x) − f(a·x)."""
    x = torch.ones(1, 2, 3)  # (1, S, D)

    def f(e: torch.Tensor) -> torch.Tensor:  # (B, S, D) -> (B,)
        return torch.sigmoid(1000 * (e.mean(dim=(1, 2)) - 0.3))

    coarse = _ig_between(f, x, 0.25, 0.5, 64, depth=0)
    refined = _ig_between(f, x, 0.25, 0.5, 64, depth=IG_REFINE_DEPTH)
    assert abs(coarse.error) > 10 * IG_REFINE_TOL and coarse.steps == 64
    assert abs(refined.error) <= IG_REFINE_TOL and refined.steps > 64
    assert (refined.f_start, refined.f_end) == (coarse.f_start, coarse.f_end)
    smooth = _ig_between(lambda e: e.mean(dim=(1, 2)) ** 2, x, 0.0, 1.0, 64, depth=IG_REFINE_DEPTH)
    assert smooth.steps == 64, "a segment that settles is not split"


def test_the_pages_parts_add_up_to_the_one_call_result(rev):
    m, tok = rev.model, rev.tokenizer
    a = analyze(m, tok, SENTENCE)
    e = explain(m, tok, a.source.ids, a.out_ids, 2, ig_segments=IG_SEGMENTS)
    parts = [ig_part(m, a.source.ids, a.out_ids, 2, segment=k) for k in range(IG_SEGMENTS)]
    total = IGResult.total(parts)
    np.testing.assert_allclose(total.ig, e.ig.ig, atol=1e-6)
    assert (total.f_input, total.f_baseline, total.steps) == (e.ig.f_input, e.ig.f_baseline, e.ig.steps)
    one = explain(m, tok, a.source.ids, a.out_ids, 2, ig_steps=512, ig_segments=1)  # one Gauss-Legendre rule, whole path
    assert one.ig.relative_error < 0.01
    with pytest.raises(ValueError, match=f"segment {IG_SEGMENTS} is out of range"):
        ig_part(m, a.source.ids, a.out_ids, 2, segment=IG_SEGMENTS)


@pytest.mark.slow
def test_the_pages_steps_are_enough_on_the_shipped_model():
    """The page's IG_STEPS in IG_SEGMENTS keep completeness within 1 % on pretrained/en-de, plain and contrastive."""
    loaded = _loaded(EN_DE)
    m, tok = loaded.model, loaded.tokenizer
    a = analyze(m, tok, "A dog jumps over a green fence.")
    for t in range(len(a.out_ids) + 1):
        e = explain(m, tok, a.source.ids, a.out_ids, t, ig_segments=IG_SEGMENTS)
        _complete(e, f"en-de token {t}", IG_STEPS)
        y2 = next(i for _, i, _ in e.candidates if i != e.target_id)
        _complete(
            explain(m, tok, a.source.ids, a.out_ids, t, contrast=y2, ig_segments=IG_SEGMENTS), f"token {t} vs {y2}", IG_STEPS
        )


@pytest.mark.parametrize("hidden", [frozenset({1}), frozenset({0, 3})])
def test_a_hidden_source_token_gets_nothing_from_any_method(rev, hidden):
    m, tok = rev.model, rev.tokenizer
    interventions = Interventions(src_hidden=hidden)
    a = analyze(m, tok, SENTENCE, interventions=interventions)
    cols = sorted(hidden)
    for t in range(len(a.out_ids) + 1):
        e = explain(m, tok, a.source.ids, a.out_ids, t, interventions, ig_steps=32, ig_segments=4)
        assert list(np.flatnonzero(e.hidden)) == cols
        for name in ("attn", "norm_heads", "norm_sum", "rollout"):
            assert (getattr(e, name)[..., cols] == 0).all(), f"{name} of a hidden token"
        assert (e.ig.ig[cols] == 0).all() and (e.grad_input[cols] == 0).all(), "exactly zero gradient"
        assert (np.delete(e.grad_input, cols) != 0).any()


def test_every_source_token_hidden_gives_zeros_and_no_nan(rev):
    m, tok = rev.model, rev.tokenizer
    S = len(analyze(m, tok, SENTENCE).source.ids)
    interventions = Interventions(src_hidden=frozenset(range(S)))
    a = analyze(m, tok, SENTENCE, interventions=interventions)
    e = explain(m, tok, a.source.ids, a.out_ids, 0, interventions, ig_steps=16, ig_segments=2)
    for v in e.scores(0).values():
        assert finite(v) and (v == 0).all()
    assert e.ig.relative_error == 0 and finite(e.ig.ig)
    pairs = e.agreement(0)
    assert len(pairs) == 10 and all(p.rho is None and "nothing to rank" in p.sentence for p in pairs)
    for fig in (ve.methods_figure(e, 0), ve.heads_figure(e, 0), ve.agreement_figure(e, 0)):
        assert not _nan_in(fig.to_plotly_json())


@pytest.mark.parametrize("out_ids", [[], "one"], ids=["empty", "one token"])
def test_an_empty_or_one_token_translation_can_be_explained(rev, out_ids):
    m, tok = rev.model, rev.tokenizer
    src = analyze(m, tok, SENTENCE).source.ids
    out = [] if out_ids == [] else [tok.encode(" e", target=True)[0]]
    for t in range(len(out) + 1):
        e = explain(m, tok, src, out, t, ig_steps=16, ig_segments=2)
        assert e.target == (tok.piece_text(out[t]) if t < len(out) else "<eos>")
        assert all(finite(v) for v in e.scores(1).values())
        assert not _nan_in(ve.methods_figure(e, 1).to_plotly_json())
    lens = layer_lens(m, tok, src, out)
    assert lens.top_probs.shape == (m.cfg.n_dec_layers + 1, len(out) + 1) and finite(lens.target_probs)


def test_bad_arguments_say_what_is_wrong(rev):
    m, tok = rev.model, rev.tokenizer
    a = analyze(m, tok, SENTENCE)
    with pytest.raises(ValueError, match="position 99 is out of range"):
        explain(m, tok, a.source.ids, a.out_ids, 99, ig_steps=0)
    target = shift_right(a.out_ids, bos_id=m.cfg.bos_id, eos_id=m.cfg.eos_id)[1][0]
    with pytest.raises(ValueError, match="must be another id"):
        explain(m, tok, a.source.ids, a.out_ids, 0, contrast=target, ig_steps=0)


@pytest.mark.parametrize("interventions", list(INTERVENTION_CASES.values()), ids=list(INTERVENTION_CASES))
def test_a_batch_of_explanations_is_each_ones_own(rev, interventions):
    """``explain_many`` (a class at once, one padded pass) gives each item its own ``explain``: sources and prefixes of
    different lengths, plain and contrastive, and a bad item refused without spoiling the others."""
    m, tok = rev.model, rev.tokenizer
    items, refused = [], []
    for text in (SENTENCE, " a b", " e d c b a a b"):
        a = analyze(m, tok, text, interventions=interventions)
        src, out = tuple(a.source.ids), tuple(a.out_ids)
        for t in range(len(out) + 1):
            items.append((src, out, t, None))
        target = shift_right(a.out_ids, bos_id=m.cfg.bos_id, eos_id=m.cfg.eos_id)[1][0]
        items.append((src, out, 0, (target + 1) % m.cfg.n_logits))  # why this token and not another
        refused += [len(items), len(items) + 1]
        items += [(src, out, len(out) + 1, None), (src, out, 0, target)]  # out of range; contrast = the token itself
    got = explain_many(m, tok, items, interventions)
    assert len(got) == len(items)
    for k, (item, e) in enumerate(zip(items, got, strict=True)):
        src, out, t, contrast = item
        if k in refused:
            assert isinstance(e, ValueError)
            continue
        one = explain(m, tok, src, out, t, interventions, contrast=contrast, ig_steps=0)
        assert (e.target, e.prefix_tokens, e.src_tokens, e.contrast) == (
            one.target,
            one.prefix_tokens,
            one.src_tokens,
            one.contrast,
        )
        assert [c[1] for c in e.candidates] == [c[1] for c in one.candidates]
        for field in ("attn", "value_norm", "norm_heads", "norm_sum", "rollout", "grad_input"):
            # float32 sums in another order: a gradient of -14.09 differed by 1.1e-4 (7.7e-6 of it) on an AVX-512 host
            np.testing.assert_allclose(getattr(e, field), getattr(one, field), atol=1e-4, rtol=1e-5, err_msg=field)
        assert e.target_logprob == pytest.approx(one.target_logprob, abs=1e-4)
        assert (e.hidden == one.hidden).all() and e.ablated == one.ablated
    # the one-item form (what a lone user gets) is a batch of one, and raises what the batch returns
    alone = explain_item(m, tok, items[0], interventions)
    np.testing.assert_allclose(alone.grad_input, got[0].grad_input, atol=1e-4)
    with pytest.raises(ValueError, match="out of range"):
        explain_item(m, tok, items[refused[0]], interventions)


# -- agreement in numbers and words -----------------------------------------------------------------------------------


def test_spearman_matches_the_textbook_formula_and_is_none_where_undefined():
    x, y = np.array([1.0, 2.0, 3.0, 4.0, 5.0]), np.array([5.0, 6.0, 7.0, 8.0, 7.0])
    d = np.array([0, 1, 2, 3, 4]) - np.array([0, 1, 2.5, 4, 2.5])  # rank differences, the tie at 7 shares rank 2.5
    r_ties = spearman(x, y)
    assert r_ties == pytest.approx(0.8207826816681233, abs=1e-12)  # Pearson of the ranks (with the tie)
    assert r_ties == pytest.approx(np.corrcoef([0, 1, 2, 3, 4], [0, 1, 2.5, 4, 2.5])[0, 1], abs=1e-12)
    shortcut = 1 - 6 * (d**2).sum() / (5 * 24)  # 0.825: the no-tie formula, which a tie makes wrong
    assert abs(r_ties - shortcut) > 1e-3, "ties share their mean rank: spearman is not the no-tie shortcut"
    assert spearman(np.exp(x), y**3) == pytest.approx(r_ties, abs=1e-12), "ranks only: any increasing map keeps ρ"
    assert spearman(x[::-1], y[::-1]) == pytest.approx(r_ties, abs=1e-12), "pairs, not positions"
    assert spearman(x, -x) == pytest.approx(-1) and spearman(x, x**3) == pytest.approx(1)
    assert spearman([1.0], [2.0]) is None and spearman([1, 1, 1], [1, 2, 3]) is None
    with pytest.raises(ValueError, match="1-D vectors of one length"):
        spearman([1, 2], [1, 2, 3])


def test_agreement_covers_every_pair_and_its_sentence_says_what_the_numbers_say(rev):
    m, tok = rev.model, rev.tokenizer
    a = analyze(m, tok, SENTENCE)
    e = explain(m, tok, a.source.ids, a.out_ids, 1, ig_steps=32, ig_segments=4)
    pairs = e.agreement(1, 0)
    assert len(pairs) == 10 and {p.method_a for p in pairs} | {p.method_b for p in pairs} == set(METHODS)
    scores = e.scores(1, 0)
    for p in pairs:
        ta, tb = int(np.argmax(np.abs(scores[p.method_a]))), int(np.argmax(np.abs(scores[p.method_b])))
        assert (p.top_a, p.top_b) == (ta, tb)
        assert p.rho == pytest.approx(spearman(np.abs(scores[p.method_a]), np.abs(scores[p.method_b])))
        assert (" agree on the top word" in p.sentence) == (ta == tb) != ("disagree on the top word" in p.sentence)
        assert f"{p.rho:+.2f}" in p.sentence
    no_ig = explain(m, tok, a.source.ids, a.out_ids, 1, ig_steps=0)
    assert IG not in no_ig.methods and len(no_ig.agreement(1)) == 6


# -- the layer lens -----------------------------------------------------------------------------------------------------


DECODINGS = {  # the sidebar's three methods, each with settings that are not its defaults
    "greedy": DecodeSettings(),
    "beam": DecodeSettings("beam", beam_size=3, alpha=0.6),
    "sample": DecodeSettings("sample", temperature=1.5, top_k=5, seed=3),
}


def decoding_distributions(m, src_ids, tgt_out, interventions) -> torch.Tensor:
    """``(T, V_tgt)``: the next-token distribution of each step of decoding forced to write ``tgt_out``, from
    ``model.decoding.generate_steps`` itself (its key/value cache under the causal mask, the prefix recomputed without
    it): the candidates of every step, all V_tgt of them, as a vector."""
    V = m.cfg.n_logits
    steps = list(
        generate_steps(
            m, src_ids, interventions=interventions, forced=list(tgt_out), max_new=len(tgt_out), k=V, need_weights=False
        )
    )
    assert [s.chosen for s in steps] == list(tgt_out)
    out = torch.zeros(len(steps), V)
    for s in steps:
        ids, probs = zip(*s.candidates, strict=True)
        out[s.t, list(ids)] = torch.tensor(probs)
    return out


@pytest.mark.parametrize("method", list(DECODINGS))
@pytest.mark.parametrize("interventions", list(INTERVENTION_CASES.values()), ids=list(INTERVENTION_CASES))
def test_the_lens_last_row_is_the_distribution_decoding_used_at_each_step(rev, interventions, method):
    """Row t of the lens's last layer is step t's own distribution: what decoding computed before it wrote token t,
    from the tokens written before it only, under every intervention (the causal mask off included) and every
    decoding method. A single teacher-forced pass without the causal mask would let row t read token t itself."""
    m, tok = rev.model, rev.tokenizer
    a = analyze(m, tok, SENTENCE, DECODINGS[method], interventions)
    tgt_in, tgt_out = shift_right(a.out_ids, bos_id=m.cfg.bos_id, eos_id=m.cfg.eos_id)
    lp = logit_lens_logprobs(m, a.source.ids, tgt_in, interventions)
    assert lp.shape == (m.cfg.n_dec_layers + 1, len(tgt_in), m.cfg.n_logits)
    torch.testing.assert_close(lp[-1].exp(), decoding_distributions(m, a.source.ids, tgt_out, interventions), atol=1e-5, rtol=0)
    lens = layer_lens(m, tok, a.source.ids, a.out_ids, interventions, DECODINGS[method])
    np.testing.assert_allclose(lens.target_probs[-1], a.maps.next_probs, atol=1e-5)  # what the other pages show
    if method == "beam":  # the beam's own numbers: each node's log-probability less its parent's
        nodes = [a.beam.nodes[i] for i in a.beam.best_path]
        beam_p = [math.exp(n.logprob - p.logprob) for p, n in zip(nodes, nodes[1:], strict=False)]
        np.testing.assert_allclose(lens.target_probs[-1][: len(beam_p)], beam_p, atol=1e-5)
    if method == "greedy":  # greedy wrote the most probable piece at every step: the lens's top piece
        written = len(tgt_out) if a.finished else len(tgt_out) - 1
        assert lens.top_tokens[-1][:written] == a.tgt_out_tokens[:written]


@pytest.mark.parametrize("interventions", list(INTERVENTION_CASES.values()), ids=list(INTERVENTION_CASES))
def test_decoder_lens_at_the_last_encoder_layer_is_normal_decoding(rev, interventions):
    m, tok = rev.model, rev.tokenizer
    a = analyze(m, tok, SENTENCE, DecodeSettings(), interventions)
    lens = decoder_lens_ids(m, a.source.ids, interventions)
    assert len(lens) == m.cfg.n_enc_layers + 1 and lens[-1] == a.out_ids
    ll = layer_lens(m, tok, a.source.ids, a.out_ids, interventions)
    assert ll.lens_texts[-1] == a.translation and ll.lens_finished[-1] == a.finished


LENS_DECODINGS = {  # settings whose translation differs from greedy decoding's on some sentence of the reverse model
    **DECODINGS,
    "sample, seed 7": DecodeSettings("sample", temperature=2.0, seed=7),
    "beam 5, α 1.5": DecodeSettings("beam", beam_size=5, alpha=1.5, early_stop=False),
    "budget 3": DecodeSettings(max_new=3),
}


@pytest.mark.parametrize("settings", list(LENS_DECODINGS.values()), ids=list(LENS_DECODINGS))
@pytest.mark.parametrize(
    "interventions", [INTERVENTION_CASES[k] for k in ("none", "causal_off", "ablated")], ids=["none", "causal_off", "ablated"]
)
def test_decoder_lens_follows_the_decoding_settings(rev, interventions, settings):
    """DecoderLens decodes as the sidebar says (method, beam size, α, sampling seed and filters, budget): its "= final"
    row is the translation on screen under every setting, and the budget cuts every layer's output alike."""
    m, tok = rev.model, rev.tokenizer
    for text in (SENTENCE, " e d c b a a b", " m n o p"):
        a = analyze(m, tok, text, settings, interventions)
        ll = layer_lens(m, tok, a.source.ids, a.out_ids, interventions, settings)
        assert (ll.lens_texts[-1], ll.lens_finished[-1]) == (a.translation, a.finished), text
        assert ll.lens_tokens[-1] == [tok.piece_text(i) for i in a.out_ids]
        assert ve.decoder_lens_table(ll)["= final"].iloc[-1]
        if settings.max_new is not None:
            assert all(len(t) <= settings.max_new for t in ll.lens_tokens)


def test_decoder_lens_is_not_greedy_under_other_settings(rev):
    """The settings reach DecoderLens: on a sentence where sampling (or a budget) writes another translation than
    greedy decoding, the lens's last row is that one, not greedy's (this fails if the settings were ignored)."""
    m, tok = rev.model, rev.tokenizer
    greedy = analyze(m, tok, SENTENCE)
    differ = 0
    for settings in (DecodeSettings("sample", temperature=2.0, seed=s) for s in range(6)):
        a = analyze(m, tok, SENTENCE, settings)
        ll = layer_lens(m, tok, a.source.ids, a.out_ids, settings=settings)
        assert ll.lens_texts[-1] == a.translation
        differ += a.translation != greedy.translation
    assert differ > 0, "some seed samples another translation than greedy decoding"
    short = layer_lens(m, tok, greedy.source.ids, greedy.out_ids[:2], settings=DecodeSettings(max_new=2))
    assert max(len(t) for t in short.lens_tokens) <= 2 and not short.lens_finished[-1]


def test_the_lens_notes_say_what_each_setting_shows():
    """The captions under the lenses change with what the lenses are: the passes (one, or each step replayed without
    the causal mask), and what the last row is to the piece written under greedy, beam and sampling."""
    greedy, beam, sample = DECODINGS["greedy"], DECODINGS["beam"], DECODINGS["sample"]
    assert "replayed" in ve.logit_lens_note(greedy, False) and "replayed" not in ve.logit_lens_note(greedy, True)
    assert "its top piece is the piece written" in ve.logit_lens_note(greedy, True)
    assert "beam search (beam 3, α = 0.6)" in ve.logit_lens_note(beam, True) and "need not" in ve.logit_lens_note(beam, True)
    s = ve.logit_lens_note(sample, False)
    assert "before sampling (temperature 1.5, top-k 5, seed 3)" in s and "need not" in s and "replayed" in s
    assert "greedy decoding" in ve.decoder_lens_note(greedy) and "2 × the source's length + 10" in ve.decoder_lens_note(greedy)
    assert "same seed" in ve.decoder_lens_note(sample) and "at most 3 pieces" in ve.decoder_lens_note(DecodeSettings(max_new=3))


@pytest.mark.slow
def test_the_lenses_on_the_shipped_model():
    loaded = _loaded(EN_DE)
    m, tok = loaded.model, loaded.tokenizer
    a = analyze(m, tok, "The animal didn't cross the street because it was too tired.")
    ll = layer_lens(m, tok, a.source.ids, a.out_ids)
    assert ll.lens_texts[-1] == a.translation
    np.testing.assert_allclose(ll.target_probs[-1], a.maps.next_probs, atol=1e-5)
    assert ll.lens_texts[0] != a.translation, "reading the embeddings alone does not translate"


@pytest.mark.slow
@pytest.mark.parametrize("settings", [DecodeSettings(), DecodeSettings("beam")], ids=["greedy", "beam"])
def test_the_lens_under_the_causal_mask_off_on_the_shipped_model(settings):
    """The review's case: "A dog jumps over a green fence." on pretrained/en-de with the causal mask off. One pass
    over the whole output gave the written token a probability up to 0.889 away from decoding's (0.095 against 0.985
    at position 4 on the shipped weights) and another top token at 2 of 13 positions; the lens now replays each step
    (the difference is 2e-7)."""
    loaded = _loaded(EN_DE)
    m, tok = loaded.model, loaded.tokenizer
    interventions = Interventions(causal=False)
    a = analyze(m, tok, "A dog jumps over a green fence.", settings, interventions)
    ll = layer_lens(m, tok, a.source.ids, a.out_ids, interventions, settings)
    np.testing.assert_allclose(ll.target_probs[-1], a.maps.next_probs, atol=1e-5)
    if settings.method == "greedy":
        assert ll.top_tokens[-1] == a.tgt_out_tokens
    assert ll.lens_texts[-1] == a.translation


# -- figures -----------------------------------------------------------------------------------------------------------


def _nan_in(obj) -> bool:
    """Whether a figure's JSON holds a NaN anywhere (plotly writes NaN as null inside number arrays)."""
    if isinstance(obj, dict):
        return any(_nan_in(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return any(_nan_in(v) for v in obj)
    if isinstance(obj, np.ndarray):
        return obj.dtype.kind == "f" and bool(np.isnan(obj).any())
    return isinstance(obj, float) and math.isnan(obj)


def test_figures_draw_the_records_numbers(rev):
    m, tok = rev.model, rev.tokenizer
    interventions = Interventions(src_hidden=frozenset({2}))
    a = analyze(m, tok, SENTENCE, interventions=interventions)
    e = explain(m, tok, a.source.ids, a.out_ids, 1, interventions, ig_steps=32, ig_segments=4)
    fig = ve.methods_figure(e, 0, 1)
    z = np.asarray(fig.data[0].z, dtype=float)
    assert fig.layout.meta["methods"] == list(METHODS) and z.shape == (5, len(e.src_tokens))
    raw = np.stack([e.scores(0, 1)[k] for k in METHODS])
    np.testing.assert_allclose(z * np.array(fig.layout.meta["scale"])[:, None], raw, atol=1e-6)
    assert np.abs(z).max() <= 1 + 1e-6 and (z[:, 2] == 0).all()
    assert fig.data[1].name == "hidden" and set(fig.data[1].x) == {2}
    heads = ve.heads_figure(e, 0)
    np.testing.assert_allclose(np.asarray(heads.data[2].z), e.norm_heads[0], atol=1e-6)
    agree = ve.agreement_figure(e, 0, 1)
    rho = np.asarray(agree.data[0].z, dtype=float)
    np.testing.assert_allclose(rho, rho.T)  # two statements: `a and b` of two asserts never ran the second
    np.testing.assert_allclose(np.diag(rho), 1)
    names = agree.layout.meta["methods"]
    for p in e.agreement(0, 1):  # each cell is the pair's own ρ, both ways round
        i, j = names.index(p.method_a), names.index(p.method_b)
        assert rho[i, j] == rho[j, i] == pytest.approx(0.0 if p.rho is None else p.rho, abs=1e-6), (p.method_a, p.method_b)
    lens = layer_lens(m, tok, a.source.ids, a.out_ids, interventions)
    lf = ve.logit_lens_figure(lens)
    np.testing.assert_allclose(np.asarray(lf.data[0].z), lens.top_probs, atol=1e-6)
    assert ve.decoder_lens_table(lens)["= final"].iloc[-1]
    for f in (fig, heads, agree, lf):
        assert not _nan_in(f.to_plotly_json())
    with pytest.raises(ValueError, match="pass an Explanation"):
        ve.methods_figure(lens, 0)
    with pytest.raises(ValueError, match="out of range"):
        ve.methods_figure(e, 5)


# -- the page ----------------------------------------------------------------------------------------------------------


def _page_nan(at) -> list[str]:
    """Titles of the charts whose JSON holds a NaN (null in a number array, or a typed array with NaN)."""
    from app_charts import chart_array, charts

    bad = []
    for fig in charts(at):
        for tr in fig["data"]:
            for k in ("x", "y", "z"):
                v = tr.get(k)
                if v is None:
                    continue
                arr = chart_array(v) if isinstance(v, dict) else np.array(v, dtype=object)
                nums = (
                    arr.astype(float)
                    if arr.dtype != object
                    else np.array([x for x in arr.ravel() if not isinstance(x, str)], dtype=float)
                )
                if np.isnan(nums).any():
                    bad.append(fig["layout"]["title"]["text"][:40])
    return bad


def _app(monkeypatch, model: str, sentence: str):
    if not ((MODELS / model) / "config.json").exists():
        pytest.skip(f"no checkpoint {model}")
    from app_charts import ok
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("ATTENTION_EXPLORER_DEBUG", "1")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params["model"], at.query_params["sentence"] = model, sentence
    ok(at.run())
    return at


def _every_token(at, n_expected: int) -> None:
    from app_charts import chart, ok, switch_to

    ok(switch_to(at, "explain").run())
    rows = at.select_slider(key="token").options
    assert len(rows) == n_expected
    for t in range(len(rows)):
        at.select_slider(key="token").set_value(t).run()
        ok(at)
        assert chart(at, "Why ")["layout"]["meta"]["methods"] == [m for m in METHODS if m != IG]
        at.button(key="ig_run").click().run()
        ok(at)
        fig = chart(at, "Why ")
        assert fig["layout"]["meta"]["methods"] == list(METHODS), f"token {t}: Integrated Gradients were not drawn"
        assert not _page_nan(at), f"token {t}: NaN in {_page_nan(at)}"
        assert any("completeness holds to" in c.value for c in at.caption)
        assert at.query_params.get("token", "0") == str(t)


def test_the_page_renders_every_output_token_with_no_nan(monkeypatch, rev):
    at = _app(monkeypatch, "reverse", SENTENCE)
    a = analyze(rev.model, rev.tokenizer, SENTENCE)
    _every_token(at, len(a.out_ids) + 1)
    from app_charts import chart, chart_array, ok, titles

    assert not any("Logit lens" in t for t in titles(at)) and len(at.dataframe) == 1, "the lens waits for its toggle"
    at.toggle(key="layer_lens").set_value(True).run()
    ok(at)
    lens = layer_lens(rev.model, rev.tokenizer, a.source.ids, a.out_ids)
    np.testing.assert_allclose(chart_array(chart(at, "Logit lens")["data"][0]["z"]), lens.top_probs, atol=1e-6)
    assert len(at.dataframe) == 2 and list(at.dataframe[1].value["translation"]) == lens.lens_texts
    captions = [c.value for c in at.caption]
    assert ve.logit_lens_note(DecodeSettings(), True) in captions and ve.decoder_lens_note(DecodeSettings()) in captions
    assert not _page_nan(at)


@pytest.mark.slow
def test_the_page_renders_every_output_token_of_the_example_on_the_shipped_model(monkeypatch):
    from ui import catalog

    sentence = catalog.EXAMPLES["translate"][0]
    at = _app(monkeypatch, "en-de", sentence)
    loaded = _loaded(EN_DE)
    _every_token(at, len(analyze(loaded.model, loaded.tokenizer, sentence).out_ids) + 1)


def test_the_page_follows_the_mask_labs_interventions_and_the_contrast(monkeypatch, rev):
    from app_charts import chart, chart_array, ok, switch_to

    at = _app(monkeypatch, "reverse", SENTENCE)
    ok(switch_to(at, "masks").run())
    at.multiselect(key="hide").set_value([1]).run()
    ok(switch_to(at, "explain").run())
    assert any("Following the Mask lab" in i.value for i in at.info)
    fig = chart(at, "Why ")
    z = chart_array(fig["data"][0]["z"]).astype(float)
    assert (z[:, 1] == 0).all() and fig["data"][1]["name"] == "hidden"
    interventions = Interventions(src_hidden=frozenset({1}))
    a = analyze(rev.model, rev.tokenizer, SENTENCE, interventions=interventions)
    e = explain(rev.model, rev.tokenizer, a.source.ids, a.out_ids, 0, interventions, ig_steps=0)
    np.testing.assert_allclose(z[0] * fig["layout"]["meta"]["scale"][0], e.scores(1)[METHODS[0]], atol=1e-6)
    y2 = next(i for _, i, _ in e.candidates if i != e.target_id)
    at.selectbox(key="contrast").set_value(y2).run()
    ok(at)
    assert "rather than" in chart(at, "Why ")["layout"]["title"]["text"]
    at.button(key="ig_run").click().run()
    ok(at)
    c = explain(rev.model, rev.tokenizer, a.source.ids, a.out_ids, 0, interventions, contrast=y2, ig_segments=IG_SEGMENTS)
    z = chart_array(chart(at, "Why ")["data"][0]["z"]).astype(float)
    scale = chart(at, "Why ")["layout"]["meta"]["scale"][METHODS.index(IG)]
    np.testing.assert_allclose(z[METHODS.index(IG)] * scale, c.ig.ig, atol=1e-5)


def test_the_attention_page_draws_norm_weighted_shares_of_every_head(monkeypatch, rev):
    from app_charts import chart, ok, switch_to

    at = _app(monkeypatch, "reverse", SENTENCE)
    ok(switch_to(at, "attention").run())
    at.toggle(key="norm_weighted").set_value(True).run()
    ok(at)
    fig = chart(at, "norm-weighted")
    a = analyze(rev.model, rev.tokenizer, SENTENCE)
    _, tgt_out = shift_right(a.out_ids, bos_id=rev.model.cfg.bos_id, eos_id=rev.model.cfg.eos_id)
    maps = norm_weighted_maps(rev.model, a.source.ids, tgt_out)
    from app_charts import chart_array

    meta, z = fig["layout"]["meta"], chart_array(fig["data"][0]["z"]).astype(float)
    Q, K, gap = meta["Q"], meta["K"], meta["gap"]
    for l in range(meta["L"]):
        for h in range(meta["H"]):
            tile = z[l * (Q + gap) : l * (Q + gap) + Q, h * (K + gap) : h * (K + gap) + K]
            np.testing.assert_allclose(tile, maps.cross[l, h], atol=1e-5)
    assert fig["layout"]["coloraxis"]["colorbar"]["title"]["text"] == "share"

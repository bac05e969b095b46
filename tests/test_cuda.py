"""The GPU path: on a CUDA device the shipped model gives what it gives on the CPU.

The app loads its model on the GPU where torch sees one (``model.checkpoint.pick_device``), so a
teacher on a GPU machine must see the same translation, the same maps, the same explanation and the
same head trace as on a laptop. Each test runs one thing on both devices (float32 on both: no TF32) and
compares; the maps must also keep their own properties there (rows sum to 1, KV-cached decoding equals
a full pass, the future never changes the past). Skipped where torch sees no CUDA device (CI); on a GPU
machine: ``pytest tests/test_cuda.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from analysis.analyze import analyze
from model.checkpoint import PRETRAINED, load_checkpoint
from model.settings import DecodeSettings
from model.transformer import Interventions

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

TEXTS = ["My friend Jakob lives in Stuttgart.", "Two dogs are playing in the snow.", "Where is the train station?"]
INTERVENTION_CASES = [Interventions(), Interventions(src_hidden={1}, ablate={("cross", 0, 1)}, temperature=1.5)]


@pytest.fixture(scope="module")
def pair():
    """The shipped model on the CPU and on the GPU (both float32, eval mode)."""
    return load_checkpoint(PRETRAINED / "en-de", "cpu"), load_checkpoint(PRETRAINED / "en-de", "cuda")


def test_the_model_and_its_default_device_are_the_gpu(pair):
    cpu, gpu = pair
    assert gpu.device.type == "cuda" and load_checkpoint(PRETRAINED / "en-de").device.type == "cuda"
    assert all(p.is_cuda and p.dtype == torch.float32 for p in gpu.model.parameters())
    assert not torch.backends.cuda.matmul.allow_tf32  # TF32 would round the maps to ~1e-3


@pytest.mark.parametrize("method", ["greedy", "beam"])
@pytest.mark.parametrize("interventions", INTERVENTION_CASES, ids=["plain", "interventions"])
@pytest.mark.parametrize("text", TEXTS)
def test_analysis_on_the_gpu_is_the_cpu_analysis(pair, text, method, interventions):
    cpu, gpu = pair
    s = DecodeSettings(method=method)
    a, b = analyze(cpu.model, cpu.tokenizer, text, s, interventions), analyze(gpu.model, gpu.tokenizer, text, s, interventions)
    assert b.out_ids == a.out_ids and b.translation == a.translation
    for name in ("enc_self", "dec_self", "cross", "next_probs"):
        x, y = getattr(a.maps, name), getattr(b.maps, name)
        assert isinstance(y, np.ndarray) and np.isfinite(y).all(), name
        np.testing.assert_allclose(y, x, atol=1e-4, rtol=0, err_msg=name)
    rows = b.maps.cross.sum(-1)  # (L, H, T): 1, or 0 for an ablated head
    assert np.all(np.isclose(rows, 1, atol=1e-5) | np.isclose(rows, 0, atol=1e-6))


def test_kv_cached_decoding_on_the_gpu_equals_full_recomputation(pair):
    _, gpu = pair
    m, tok = gpu.model, gpu.tokenizer
    src = torch.tensor([tok.encode(TEXTS[0]) + [tok.eos_id]], device="cuda")  # (1, S)
    tgt = torch.tensor([[tok.bos_id] + tok.encode("Mein Freund Jakob wohnt in Stuttgart.", target=True)], device="cuda")
    with torch.no_grad():
        enc = m.encode(src)
        full = m.decoder_forward(tgt, enc, need_weights=True)
        cache = None
        for t in range(tgt.size(1)):
            step = m.decoder_forward(tgt[:, t : t + 1], enc, cache=cache, need_weights=True)
            cache = step.cache
            torch.testing.assert_close(step.logits, full.logits[:, t : t + 1], atol=1e-4, rtol=0)
            torch.testing.assert_close(step.cross_attn, full.cross_attn[..., t : t + 1, :], atol=1e-5, rtol=0)
        # the future never changes the past: a different last token leaves every earlier row as it was
        other = tgt.clone()
        other[0, -1] = tok.eos_id
        changed = m.decoder_forward(other, enc, need_weights=True)
        torch.testing.assert_close(changed.logits[:, :-1], full.logits[:, :-1], atol=1e-5, rtol=0)


def test_explanations_and_head_traces_on_the_gpu_are_the_cpu_ones(pair):
    pytest.importorskip("captum")
    from analysis.attribution import explain
    from analysis.trace import head_trace

    cpu, gpu = pair
    a = analyze(cpu.model, cpu.tokenizer, TEXTS[0])
    src = a.source.ids
    e_cpu = explain(cpu.model, cpu.tokenizer, src, a.out_ids, 1, ig_steps=8)
    e_gpu = explain(gpu.model, gpu.tokenizer, src, a.out_ids, 1, ig_steps=8)
    assert e_gpu.target_id == e_cpu.target_id
    for name in ("attn", "value_norm", "norm_sum", "rollout", "grad_input"):
        np.testing.assert_allclose(getattr(e_gpu, name), getattr(e_cpu, name), atol=1e-3, rtol=1e-3, err_msg=name)
    np.testing.assert_allclose(e_gpu.ig.ig, e_cpu.ig.ig, atol=1e-3, rtol=1e-3)
    kw = dict(kind="cross", layer=1, head=2, query=1)
    h_cpu = head_trace(cpu.model, cpu.tokenizer, TEXTS[0], **kw)
    h_gpu = head_trace(gpu.model, gpu.tokenizer, TEXTS[0], **kw)
    np.testing.assert_allclose(h_gpu.weights, h_cpu.weights, atol=1e-5, rtol=0)
    np.testing.assert_allclose(h_gpu.scores, h_cpu.scores, atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_attention_on_the_gpu_equals_eq_1_whichever_kernel_runs_it(dtype):
    """Training takes ``F.scaled_dot_product_attention``; on a GPU that is cuDNN's kernel or the memory-efficient one
    (training.train turns cuDNN off). Each must give eq. (1) as written out, padding and causal masks and a row with no
    allowed key included (its output 0)."""
    from model.transformer import attention

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(3, 4, 7, 16, device="cuda", generator=g).to(dtype) for _ in range(3))  # (B, H, T, Dh)
    causal = torch.ones(7, 7, dtype=torch.bool, device="cuda").tril()  # (T_q, T_k)
    keep = torch.ones(3, 1, 1, 7, dtype=torch.bool, device="cuda")  # (B, 1, 1, T_k): the padding mask
    keep[1, ..., 5:] = False
    keep[2] = False  # every key masked: each row dead
    allowed = causal & keep  # (B, 1, T_q, T_k)
    want, _ = attention(q.float(), k.float(), v.float(), allowed, need_weights=True)
    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        for cudnn in (True, False):
            torch.backends.cuda.enable_cudnn_sdp(cudnn)
            got, _ = attention(q, k, v, allowed)
            tol = 1e-5 if dtype == torch.float32 else 2e-2
            torch.testing.assert_close(got.float(), want, atol=tol, rtol=0, msg=f"cudnn={cudnn}")
            assert torch.all(got[2] == 0)
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)


def test_training_on_the_gpu_turns_cudnn_attention_off_unless_asked(tmp_path):
    """cuDNN's attention built a plan for each new batch shape: 22 ms of host time a call, 512 ms a training step
    against 73 ms without it (stage 15's profile, model card). training.train turns it off on a GPU;
    ``--cudnn-attention`` keeps it."""
    from test_train import TINY

    from training.train import main

    tiny = [*TINY, "--epochs", "1", "--device", "cuda"]
    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        main([*tiny, "--out", str(tmp_path / "off")])
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        main([*tiny, "--out", str(tmp_path / "on"), "--cudnn-attention"])
        assert torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)

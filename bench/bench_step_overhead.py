"""Benchmark 12: what a greedy decoding step costs besides its matrix products.

    python bench/bench_step_overhead.py [--ckpt DIR] [--quick] [--threads N]

The decoding steps of benchmark 1's 15-word sentence (the tokens ``analyze`` chose), with the encoder's result
computed once, timed three ways, interleaved call by call (``benchlib.measure_many``):

- **model**: ``Decoder.step`` with the attention weights, then softmax and top-5 over the vocabulary, as
  ``generate_steps`` does: the model's ``nn.Module`` calls, its dropout (a no-op in eval), masks and caches as records;
- **by hand**: the same arithmetic as one loop of torch functions over the model's own weights: no module calls, no
  dropout, the self-attention's W_q, W_k and W_v as one product, nothing kept but the keys and values. It gives the
  same logits (asserted, to 1e-5);
- **floor**: only the step's matrix-vector products (``bench_analysis.matrix_floor``) times the number of steps.

"by hand" is a measuring stick, not a second model: the difference to "model" is what the readable module
structure and the records cost at batch 1 (per-call overhead of PyTorch's eager mode), the difference to "floor"
what attention, LayerNorm and the rest cost at all. Pre-LN, ReLU, sinusoidal, tied models only (``pretrained/en-de``).
"""

from __future__ import annotations

import math

import benchlib as bl
import torch
import torch.nn.functional as F
from bench_analysis import matrix_floor

from analysis.analyze import analyze, prepare_source
from model.decoding import Decoder


def hand_written_steps(model, enc, ids: list[int]) -> torch.Tensor:
    """Feed ``ids`` (``<bos>`` first) one at a time through the decoder with plain torch functions; returns the last
    step's logits ``(1, V)``. Section 3: pre-LN sub-layers, eq. (1) attention, eq. (2) feed-forward, tied generator."""
    cfg = model.cfg
    H, Dh, D = cfg.n_heads, cfg.d_head, cfg.d_model
    scale = 1.0 / math.sqrt(Dh)
    w_out = model._generator_weight_t(model.generator_weight)  # (D, V)
    layers = []
    for layer in model.decoder:
        sa, ca = layer.self_attn, layer.cross_attn
        w_qkv = torch.cat([sa.w_q.weight, sa.w_k.weight, sa.w_v.weight])  # (3D, D)
        b_qkv = torch.cat([sa.w_q.bias, sa.w_k.bias, sa.w_v.bias])  # (3D,)
        mem = enc.memory  # (1, S, D)
        k_mem = F.linear(mem, ca.w_k.weight, ca.w_k.bias).view(1, -1, H, Dh).transpose(1, 2)  # (1, H, S, Dh)
        v_mem = F.linear(mem, ca.w_v.weight, ca.w_v.bias).view(1, -1, H, Dh).transpose(1, 2)
        layers.append([layer, w_qkv, b_qkv, k_mem, v_mem, None, None])
    for t, tok in enumerate(ids):
        y = (model.tgt_emb.weight[tok] * math.sqrt(D) + model.pe[t]).view(1, 1, D)  # (1, 1, D)
        for entry in layers:
            layer, w_qkv, b_qkv, k_mem, v_mem, k_past, v_past = entry
            h = F.layer_norm(y, (D,), layer.self_attn_norm.weight, layer.self_attn_norm.bias)
            qkv = F.linear(h, w_qkv, b_qkv).view(1, 1, 3, H, Dh)  # (1, 1, 3D) -> (1, 1, 3, H, Dh)
            q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (1, H, 1, Dh) each
            if k_past is not None:
                k, v = torch.cat([k_past, k], 2), torch.cat([v_past, v], 2)  # (1, H, t + 1, Dh)
            entry[5], entry[6] = k, v
            w = torch.softmax((q @ k.transpose(-1, -2)) * scale, -1)  # (1, H, 1, t + 1)
            a = (w @ v).transpose(1, 2).reshape(1, 1, D)  # (1, H, 1, Dh) -> (1, 1, D)
            y = y + F.linear(a, layer.self_attn.w_o.weight, layer.self_attn.w_o.bias)
            h = F.layer_norm(y, (D,), layer.cross_attn_norm.weight, layer.cross_attn_norm.bias)
            q = F.linear(h, layer.cross_attn.w_q.weight, layer.cross_attn.w_q.bias).view(1, 1, H, Dh).transpose(1, 2)
            w = torch.softmax((q @ k_mem.transpose(-1, -2)) * scale, -1)  # (1, H, 1, S)
            a = (w @ v_mem).transpose(1, 2).reshape(1, 1, D)
            y = y + F.linear(a, layer.cross_attn.w_o.weight, layer.cross_attn.w_o.bias)
            h = F.layer_norm(y, (D,), layer.ff_norm.weight, layer.ff_norm.bias)
            y = y + F.linear(F.relu(F.linear(h, layer.ff.w_1.weight, layer.ff.w_1.bias)), layer.ff.w_2.weight, layer.ff.w_2.bias)
        logits = F.layer_norm(y, (D,), model.dec_norm.weight, model.dec_norm.bias)[:, -1] @ w_out  # (1, V)
        torch.topk(torch.softmax(logits[0], -1), 5)
    return logits


def model_steps(model, enc, ids: list[int]) -> torch.Tensor:
    """The same steps through ``Decoder.step`` with the attention weights, softmax and top-5: ``generate_steps``'s work."""
    dec = Decoder(model, None, enc=enc)
    for tok in ids:
        out = dec.step(torch.tensor([[tok]]), need_weights=True)
        torch.topk(torch.softmax(out.logits[0, -1].float(), -1), 5)
    return out.logits[:, -1]


@torch.inference_mode()
def run(loaded, *, repeats: int = 40, warmup: int = 5) -> dict:
    model, tok = loaded.model, loaded.tokenizer
    cfg = model.cfg
    assert cfg.norm_first and cfg.activation == "relu" and cfg.pos_encoding == "sinusoidal" and model.generator is None
    text = bl.SENTENCES[15]
    ref = analyze(model, tok, text)
    ids = [cfg.bos_id, *ref.out_ids]  # every step's input: the step after the last predicts <eos>
    src = prepare_source(tok, text, cfg.max_len)
    enc = model.encode(torch.tensor([src.ids]))
    diff = (hand_written_steps(model, enc, ids) - model_steps(model, enc, ids)).abs().max().item()
    assert diff < 1e-5, f"the hand-written step differs from the model's: {diff}"
    t = bl.measure_many(
        {"model": lambda: model_steps(model, enc, ids), "by_hand": lambda: hand_written_steps(model, enc, ids)},
        repeats=repeats,
        warmup=warmup,
    )
    floor = matrix_floor(model, repeats=repeats * 5, warmup=warmup)
    return {
        "steps": len(ids),
        "src_tokens": len(src.ids),
        "model": t["model"],
        "by_hand": t["by_hand"],
        "floor_ms": floor["step"].median_ms * len(ids),
        "max_logit_diff": diff,
        "threads": torch.get_num_threads(),
    }


def table(res: dict) -> str:
    n, m, h, f = res["steps"], res["model"].median_ms, res["by_hand"].median_ms, res["floor_ms"]
    rows = [
        ["model (Decoder.step, weights, top-5)", f"{m:.1f}", f"{m / n:.2f}"],
        ["by hand (plain torch functions, same logits)", f"{h:.1f}", f"{h / n:.2f}"],
        ["floor (the matrix-vector products only)", f"{f:.1f}", f"{f / n:.2f}"],
    ]
    head = f"{n} decoding steps of the 15-word sentence ({res['src_tokens']} source tokens), {res['threads']} thread(s):\n\n"
    tail = f"\n\nThe module structure and records cost {m - h:.1f} ms ({(m - h) / m:.0%} of the steps); logits equal to {res['max_logit_diff']:.1e}."
    return head + bl.md_table(["steps timed", "ms", "ms a step"], rows) + tail


def main() -> None:
    ap = bl.base_args(__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, one per core)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    bl.run_script("step_overhead", args, run, table, (40, 5))


if __name__ == "__main__":
    main()

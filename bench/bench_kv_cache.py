"""Benchmark 2: incremental decoding with the key/value cache against full recomputation per step.

    python bench/bench_kv_cache.py [--ckpt DIR] [--quick]

One source (the 15-word sentence) is encoded once; then 10, 30 and 60 output tokens are decoded
greedily with <eos> (and <pad>, <bos>) forbidden, so every run makes exactly that many steps.

cached: ``model.decoding.Decoder.step`` feeds only the newest token; the decoder's self-attention
keys/values of earlier positions come from the cache (the path greedy decoding and the app use).
full:   every step runs ``Transformer.decoder_forward`` on the whole prefix ``[<bos>, y_1 .. y_t]`` and keeps
the last row, what a decoder without a cache does.

Both get the encoder memory and the cross-attention keys/values precomputed, so the ratio is the
effect of the self-attention cache alone. The outputs must be identical: the same tokens, and
logits equal up to float rounding (``torch.allclose``, atol 1e-4): asserted, with the largest
difference recorded. Attention weights are not requested (fused attention).
"""

from __future__ import annotations

import benchlib as bl
import torch

from analysis.analyze import prepare_source
from model.decoding import Decoder
from model.transformer import LayerCache


def forbid(cfg, logits):
    """Logits ``(B, V)`` with <pad>, <bos>, <eos> made impossible: decoding runs its full length."""
    logits = logits.clone()
    logits[:, [cfg.pad_id, cfg.bos_id, cfg.eos_id]] = float("-inf")
    return logits


@torch.inference_mode()
def decode_cached(model, src, enc, n: int):
    """n greedy steps with the cache: (ids (n,), logits (n, V))."""
    cfg = model.cfg
    dec = Decoder(model, src, enc=enc)
    nxt = torch.full((1, 1), cfg.bos_id, dtype=torch.long)
    ids, logits = [], []
    for _ in range(n):
        lg = dec.step(nxt).logits[:, -1]  # (1, V)
        logits.append(lg[0])
        nxt = forbid(cfg, lg).argmax(-1, keepdim=True)  # (1, 1)
        ids.append(int(nxt))
    return ids, torch.stack(logits)


@torch.inference_mode()
def decode_full(model, enc, memory_kv, n: int):
    """n greedy steps, each recomputing the decoder over the whole prefix: (ids (n,), logits (n, V)).

    ``memory_kv``: per decoder layer a ``LayerCache`` holding only the memory's keys/values (computed
    once per source, as the cached decoding does), so the two differ only in the self-attention cache.
    """
    cfg = model.cfg
    ys = torch.full((1, 1), cfg.bos_id, dtype=torch.long)  # (1, t)
    ids, logits = [], []
    for _ in range(n):
        lg = model.decoder_forward(ys, enc, cache=memory_kv).logits[:, -1]  # (1, V): last position only
        logits.append(lg[0])
        nxt = forbid(cfg, lg).argmax(-1, keepdim=True)
        ids.append(int(nxt))
        ys = torch.cat([ys, nxt], dim=1)
    return ids, torch.stack(logits)


def run(loaded, *, repeats: int = 10, warmup: int = 2, lengths=(10, 30, 60)) -> dict:
    model, tok = loaded.model, loaded.tokenizer
    src_ids = prepare_source(tok, bl.SENTENCES[15], model.cfg.max_len).ids
    src = torch.tensor([src_ids])  # (1, S)
    with torch.inference_mode():
        enc = model.encode(src)
        first = model.decoder_forward(torch.full((1, 1), model.cfg.bos_id, dtype=torch.long), enc)
        memory_kv = [LayerCache(None, c.cross_kv) for c in first.cache]  # the memory's K/V, no prefix
    rows = []
    for n in lengths:
        if n + 1 > model.cfg.max_len:
            continue
        ids_c, lg_c = decode_cached(model, src, enc, n)
        ids_f, lg_f = decode_full(model, enc, memory_kv, n)
        max_diff = float((lg_c - lg_f).abs().max())
        assert ids_c == ids_f, f"{n} tokens: cached and full decoding chose different tokens"
        assert torch.allclose(lg_c, lg_f, atol=1e-4, rtol=1e-4), f"{n} tokens: logits differ by {max_diff}"
        t = bl.measure_many(
            {"cached": lambda n=n: decode_cached(model, src, enc, n), "full": lambda n=n: decode_full(model, enc, memory_kv, n)},
            repeats=repeats,
            warmup=warmup,
        )
        rows.append(
            {
                "out_tokens": n,
                "cached": t["cached"],
                "full": t["full"],
                "speedup": t["full"].median_ms / t["cached"].median_ms,
                "identical_tokens": ids_c == ids_f,
                "max_abs_logit_diff": max_diff,
            }
        )
    return {"src_tokens": len(src_ids), "rows": rows}


def table(res: dict) -> str:
    columns = {
        "out tokens": "out_tokens",
        "KV cache (ms)": "cached",
        "full recompute (ms)": "full",
        "speed-up": ("speedup", "{:.2f}x"),
        "ms/token cached": lambda r: f"{r['cached'].median_ms / r['out_tokens']:.2f}",
        "ms/token full": lambda r: f"{r['full'].median_ms / r['out_tokens']:.2f}",
        "outputs": ("max_abs_logit_diff", "same tokens, max logit diff {:.1e}"),
    }
    return (
        bl.results_table(res["rows"], columns)
        + f"\n\nSource: the 15-word sentence ({res['src_tokens']} tokens); encoder and cross K/V computed once for both."
    )


def main() -> None:
    args = bl.base_args(__doc__.splitlines()[0]).parse_args()
    bl.run_script("kv_cache", args, run, table, (10, 2), lengths=(10, 30) if args.quick else (10, 30, 60))


if __name__ == "__main__":
    main()

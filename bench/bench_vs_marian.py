"""Benchmark 4: our analysis against Hugging Face ``MarianMTModel`` doing the same analysis.

    pip install -r bench/requirements.txt      # transformers, for this script only
    python bench/bench_vs_marian.py [--ckpt DIR] [--quick]

``MarianMTModel`` is built locally from a ``MarianConfig`` with our dimensions (d_model, heads,
d_ff, encoder/decoder layers, source and target vocabularies, max_len, ReLU, sqrt(d_model) embedding scale, tied
embeddings); its weights are random and nothing is downloaded. It runs with eager attention, the
implementation that can return attention weights.

ours:   ``analysis.analyze.analyze`` (benchmark 1): tokenize, greedy decode returning each step's
        attention rows, the maps assembled from them as float32 numpy ``(L, H, T_q, T_k)``, and
        next-token probabilities.
Marian: tokenize (our tokenizer), ``generate(num_beams=1, do_sample=False, output_attentions=True,
        output_scores=True, return_dict_in_generate=True)`` forced to make exactly as many tokens
        as our translation has rows (``min_new_tokens = max_new_tokens``: its random weights
        would stop anywhere), then the same numpy maps assembled from the per-step attentions
        (encoder ``(L, H, S, S)``, decoder self ``(L, H, T, T)`` lower triangle, cross
        ``(L, H, T, S)``) and the chosen tokens' probabilities.

Both see the same source ids and produce maps of the same shapes (asserted). Differences that
remain: Marian is post-LN (ours pre-LN here, 2 LayerNorms fewer per model) and adds a final
logits bias; neither changes the cost noticeably. Target: ours >= 1.5x faster.
"""

from __future__ import annotations

import warnings

import benchlib as bl
import numpy as np
import torch

from analysis.analyze import analyze, prepare_source

TARGET = 1.5


def build_marian(cfg):
    """An eval-mode ``MarianMTModel`` with the dimensions of ``cfg`` (random weights, eager attention)."""
    from transformers import MarianConfig, MarianMTModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    mc = MarianConfig(
        vocab_size=cfg.vocab_size,
        decoder_vocab_size=cfg.n_logits,
        d_model=cfg.d_model,
        encoder_layers=cfg.n_enc_layers,
        decoder_layers=cfg.n_dec_layers,
        encoder_attention_heads=cfg.n_heads,
        decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff,
        decoder_ffn_dim=cfg.d_ff,
        activation_function="relu",
        dropout=cfg.dropout,
        max_position_embeddings=cfg.max_len,
        scale_embedding=True,
        pad_token_id=cfg.pad_id,
        eos_token_id=cfg.eos_id,
        decoder_start_token_id=cfg.bos_id,
        forced_eos_token_id=None,
        share_encoder_decoder_embeddings=cfg.n_logits == cfg.vocab_size,  # else: a decoder embedding of V_tgt rows
        tie_word_embeddings=cfg.tie_embeddings,
    )
    torch.manual_seed(0)
    m = MarianMTModel(mc)
    m.set_attn_implementation("eager")
    m.eval()
    return m


def marian_analysis(m, tok, text: str, max_len: int, n_rows: int) -> dict:
    """The Marian counterpart of ``analyze``: maps as float32 numpy, T = ``n_rows`` decoder rows."""
    src = prepare_source(tok, text, max_len)
    ids = torch.tensor([src.ids])  # (1, S)
    with torch.inference_mode():
        g = m.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=n_rows,
            min_new_tokens=n_rows,
            num_beams=1,
            do_sample=False,
            output_attentions=True,
            output_scores=True,
            return_dict_in_generate=True,
        )
    S, T = ids.size(1), len(g.decoder_attentions)
    enc = torch.stack([a[0] for a in g.encoder_attentions])  # (L, H, S, S)
    L, H = len(g.decoder_attentions[0]), enc.size(1)
    dec = torch.zeros(L, H, T, T)
    for t, per_layer in enumerate(g.decoder_attentions):  # step t: each layer (1, H, 1, t + 1) with the cache
        for layer, a in enumerate(per_layer):
            dec[layer, :, t, : a.size(-1)] = a[0, :, -1]
    cross = torch.stack(
        [torch.cat([step[layer][0, :, -1:] for step in g.cross_attentions], dim=1) for layer in range(L)]
    )  # (L, H, T, S)
    out = g.sequences[0, 1:]  # (T,) without the decoder start token
    probs = torch.stack([torch.softmax(s[0].float(), -1)[i] for s, i in zip(g.scores, out.tolist(), strict=True)])
    assert cross.shape == (L, H, T, S)
    return {
        "enc_self": enc.float().numpy().astype(np.float32),
        "dec_self": dec.numpy().astype(np.float32),
        "cross": cross.float().numpy().astype(np.float32),
        "next_probs": probs.numpy().astype(np.float32),
        "tokens": [tok.piece_text(i) for i in out.tolist()],
    }


def run(loaded, *, repeats: int = 20, warmup: int = 3, lengths=(5, 15, 40)) -> dict:
    model, tok = loaded.model, loaded.tokenizer
    cfg = model.cfg
    marian = build_marian(cfg)
    n_marian = sum(p.numel() for p in marian.parameters())
    rows = []
    for n_words in lengths:
        text = bl.SENTENCES[n_words]
        ours = analyze(model, tok, text)
        n_rows = len(ours.tgt_in_tokens)
        theirs = marian_analysis(marian, tok, text, cfg.max_len, n_rows)
        for k in ("enc_self", "dec_self", "cross"):
            assert getattr(ours.maps, k).shape == theirs[k].shape, (k, getattr(ours.maps, k).shape, theirs[k].shape)
        t = bl.measure_many(
            {
                "ours": lambda text=text: analyze(model, tok, text),
                "marian": lambda text=text, n=n_rows: marian_analysis(marian, tok, text, cfg.max_len, n),
            },
            repeats=repeats,
            warmup=warmup,
        )
        rows.append(
            {
                "words": n_words,
                "src_tokens": len(ours.source.ids),
                "decoder_rows": n_rows,
                "ours": t["ours"],
                "marian": t["marian"],
                "speedup": t["marian"].median_ms / t["ours"].median_ms,
            }
        )
    return {
        "params": {"ours": model.n_params(), "marian": n_marian},
        "rows": rows,
        "target": {
            "what": "Marian time / our time, every length",
            "limit": TARGET,
            "met": all(r["speedup"] >= TARGET for r in rows),
        },
    }


def table(res: dict) -> str:
    columns = {
        "words": "words",
        "src tokens": "src_tokens",
        "decoder rows": "decoder_rows",
        "ours: analyze (ms)": "ours",
        "MarianMTModel generate + maps (ms)": "marian",
        "ours faster by": ("speedup", "{:.2f}x"),
    }
    p = res["params"]
    return (
        bl.results_table(res["rows"], columns)
        + f"\n\nParameters: ours {p['ours'] / 1e6:.2f} M, Marian {p['marian'] / 1e6:.2f} M (adds a final logits bias; learned nothing else)."
        + "\n"
        + bl.target_line(f"ours >= {TARGET}x faster", res["target"]["met"])
    )


def run_quietly(loaded, **kwargs) -> dict:
    """``run`` with Python warnings silenced, as the script runs it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run(loaded, **kwargs)


def main() -> None:
    args = bl.base_args(__doc__.splitlines()[0]).parse_args()
    bl.run_script("vs_marian", args, run_quietly, table, (20, 3), lengths=(5, 15) if args.quick else (5, 15, 40))


if __name__ == "__main__":
    main()

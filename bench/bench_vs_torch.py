"""Benchmark 3: our from-scratch Transformer against ``torch.nn.Transformer`` with the same dimensions.

    python bench/bench_vs_torch.py [--ckpt DIR] [--quick] [--profile]

The reference wraps ``nn.Transformer(d_model, nhead, num_encoder_layers, num_decoder_layers,
dim_feedforward, dropout, activation="relu", batch_first=True, norm_first)`` in the same
embedding x sqrt(d_model) + sinusoidal encoding + dropout and the same tied generator, so both do
the same work. Our weights are copied into it and the logits are checked equal (eval mode), which
proves the two compute the same function.

The batch is realistic: the validation batch of Multi30k closest to the median batch that
training's ``token_batches(max_tokens=4096)`` makes (random ids of caption length if the data is
missing). Tokens counted as in training: non-pad source tokens + non-pad target labels.

inference step: one teacher-forced forward ``logits = f(src, tgt[:, :-1])`` in eval mode under
``torch.inference_mode`` (ours without attention weights: the fused path).
training step:  forward, label-smoothed cross-entropy (0.1), backward, gradient clipping (1.0),
AdamW step, in train mode (dropout on), float32.
greedy translation: the whole batch translated greedily, generated tokens/s: ours with its key/value
cache (``model.decoding.greedy_batch``), nn.Transformer the way it is used without one (the decoder
re-run over the prefix at each step); the outputs are compared.

Target: ours / theirs >= 1.0 tokens/s in the forward and the training step. ``--profile`` prints a torch.profiler table of both
sides' training step (the top operators by self CPU time).
"""

from __future__ import annotations

import math
import warnings

import benchlib as bl
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.decoding import greedy_batch, max_new_tokens, strip
from model.transformer import Transformer, TransformerConfig, sinusoidal_encoding
from training.corpora import default_data_dir, encode_pairs, pad_batch, read_pairs, split_file, token_batches


class TorchReference(nn.Module):
    """``torch.nn.Transformer`` with our embedding, positional encoding and (tied) generator."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.src_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.tgt_emb = self.src_emb if cfg.tie_embeddings else nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.generator = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.n_logits, bias=False)
        self.register_buffer("pe", sinusoidal_encoding(cfg.max_len, cfg.d_model), persistent=False)
        self.drop = nn.Dropout(cfg.dropout)
        with warnings.catch_warnings():  # "enable_nested_tensor is True, but ... norm_first was True": expected
            warnings.simplefilter("ignore", UserWarning)
            self.core = self._core(cfg)

    @staticmethod
    def _core(cfg: TransformerConfig) -> nn.Transformer:
        return nn.Transformer(
            d_model=cfg.d_model,
            nhead=cfg.n_heads,
            num_encoder_layers=cfg.n_enc_layers,
            num_decoder_layers=cfg.n_dec_layers,
            dim_feedforward=cfg.d_ff,
            dropout=cfg.dropout,
            activation="relu",
            batch_first=True,
            norm_first=cfg.norm_first,
        )

    def forward(self, src, tgt):
        """``src (B, S)``, ``tgt (B, T)`` -> logits ``(B, T, V)``."""
        S, T, scale = src.size(1), tgt.size(1), math.sqrt(self.cfg.d_model)
        x = self.drop(self.src_emb(src) * scale + self.pe[:S])  # (B, S, D)
        y = self.drop(self.tgt_emb(tgt) * scale + self.pe[:T])  # (B, T, D)
        src_pad = src == self.cfg.pad_id  # (B, S): True = padding (nn.Transformer's convention)
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool, device=src.device), diagonal=1)  # True = masked
        h = self.core(x, y, tgt_mask=causal, src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad, tgt_is_causal=True)
        return self.logits(h)

    def logits(self, h: Tensor) -> Tensor:
        """The same generator as ours: ``(..., D) -> (..., V_tgt)``."""
        return h @ self.tgt_emb.weight[: self.cfg.n_logits].T if self.generator is None else self.generator(h)

    @torch.no_grad()
    def copy_from(self, ours: Transformer) -> None:
        """Load our weights (same function: q/k/v stacked into ``in_proj``)."""

        def mha(dst: nn.MultiheadAttention, m) -> None:
            dst.in_proj_weight.copy_(torch.cat([m.w_q.weight, m.w_k.weight, m.w_v.weight]))
            dst.in_proj_bias.copy_(torch.cat([m.w_q.bias, m.w_k.bias, m.w_v.bias]))
            dst.out_proj.weight.copy_(m.w_o.weight)
            dst.out_proj.bias.copy_(m.w_o.bias)

        def ln(dst: nn.LayerNorm, src: nn.LayerNorm) -> None:
            dst.weight.copy_(src.weight)
            dst.bias.copy_(src.bias)

        def ff(dst, src) -> None:
            dst.linear1.load_state_dict(src.ff.w_1.state_dict())
            dst.linear2.load_state_dict(src.ff.w_2.state_dict())

        self.src_emb.weight.copy_(ours.src_emb.weight)
        if not self.cfg.tie_embeddings:
            self.tgt_emb.weight.copy_(ours.tgt_emb.weight)
            self.generator.weight.copy_(ours.generator.weight)
        for dst, src in zip(self.core.encoder.layers, ours.encoder, strict=True):
            mha(dst.self_attn, src.self_attn)
            ff(dst, src)
            ln(dst.norm1, src.self_attn_norm)
            ln(dst.norm2, src.ff_norm)
        for dst, src in zip(self.core.decoder.layers, ours.decoder, strict=True):
            mha(dst.self_attn, src.self_attn)
            mha(dst.multihead_attn, src.cross_attn)
            ff(dst, src)
            ln(dst.norm1, src.self_attn_norm)
            ln(dst.norm2, src.cross_attn_norm)
            ln(dst.norm3, src.ff_norm)
        if self.cfg.norm_first:  # post-LN: ours has no final norm, nn.Transformer always has one
            ln(self.core.encoder.norm, ours.enc_norm)
            ln(self.core.decoder.norm, ours.dec_norm)


def realistic_batch(loaded, max_tokens: int = 4096):
    """(src (B, S), tgt (B, T), description): a median-sized Multi30k validation batch as in training."""
    cfg, tok = loaded.model.cfg, loaded.tokenizer
    d = default_data_dir()
    if d is not None:
        pairs = read_pairs(split_file(d, "val", "en"), split_file(d, "val", "de"))
        ex = encode_pairs(tok, pairs, cfg.max_len)
        batches = sorted(token_batches(ex, max_tokens, shuffle=False), key=len)
        idx = batches[len(batches) // 2]
        src, tgt = pad_batch([ex[i][0] for i in idx], tok.pad_id), pad_batch([ex[i][1] for i in idx], tok.pad_id)
        return (
            src,
            tgt,
            f"Multi30k val batch of {len(idx)} pairs, padded {src.size(1)} + {tgt.size(1)} tokens (max_tokens={max_tokens})",
        )
    g = torch.Generator().manual_seed(0)
    B, S, T = 96, 18, 22
    src = torch.randint(3, cfg.vocab_size, (B, S), generator=g)
    tgt = torch.randint(3, cfg.n_logits, (B, T), generator=g)
    src[:, -1], tgt[:, 0], tgt[:, -1] = cfg.eos_id, cfg.bos_id, cfg.eos_id
    return src, tgt, f"random ids (Multi30k missing): {B} x ({S} + {T})"


def n_tokens(src, tgt, pad_id: int) -> int:
    """Training's count: non-pad source tokens + non-pad target labels."""
    return int((src != pad_id).sum()) + int((tgt[:, 1:] != pad_id).sum())


def make_pair(loaded):
    """(ours, theirs): trainable float32 copies holding the checkpoint's weights."""
    cfg = loaded.model.cfg
    ours = Transformer(cfg)
    ours.load_state_dict(loaded.model.state_dict())
    theirs = TorchReference(cfg)
    theirs.copy_from(ours)
    return ours, theirs


def check_same_function(ours, theirs, src, tgt) -> float:
    """Largest |logit difference| between the two in eval mode (asserted < 1e-3) on non-pad rows."""
    ours.eval(), theirs.eval()
    with torch.inference_mode():
        a = ours(src, tgt[:, :-1]).logits
        b = theirs(src, tgt[:, :-1])
    keep = tgt[:, :-1] != ours.cfg.pad_id  # (B, T): padded rows differ (nn.Transformer zeroes them in its fast path)
    diff = float((a - b).abs()[keep].max())
    assert diff < 1e-3, f"ours and nn.Transformer compute different logits (max diff {diff})"
    return diff


@torch.inference_mode()
def reference_greedy(theirs: TorchReference, src, max_new: int) -> list[list[int]]:
    """Greedy decoding as ``nn.Transformer`` is used (PyTorch's translation tutorial): the encoder
    once, then the whole decoder over the prefix at every step, since it has no key/value cache.
    Returns each row's ids without <bos>/<eos>, like ``model.decoding.greedy_batch``."""
    cfg, core = theirs.cfg, theirs.core
    scale = math.sqrt(cfg.d_model)
    src_pad = src == cfg.pad_id  # (B, S)
    memory = core.encoder(theirs.src_emb(src) * scale + theirs.pe[: src.size(1)], src_key_padding_mask=src_pad)
    ys = torch.full((src.size(0), 1), cfg.bos_id, dtype=torch.long)  # (B, 1)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_new):
        T = ys.size(1)
        y = theirs.tgt_emb(ys) * scale + theirs.pe[:T]  # (B, T, D)
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # True = masked
        h = core.decoder(y, memory, tgt_mask=causal, memory_key_padding_mask=src_pad, tgt_is_causal=True)  # (B, T, D)
        last = h[:, -1]  # (B, D)
        logits = theirs.logits(last)  # (B, V_tgt)
        nxt = torch.where(done, torch.full_like(done, cfg.pad_id, dtype=torch.long), logits.argmax(-1))  # (B,)
        ys = torch.cat([ys, nxt[:, None]], dim=1)  # (B, T + 1)
        done |= nxt == cfg.eos_id
        if bool(done.all()):
            break
    return [strip([i for i in row if i != cfg.pad_id], cfg.eos_id) for row in ys[:, 1:].tolist()]


def train_step_fn(m, fwd, src, tgt, pad_id: int):
    """One training step of ``m`` (``fwd(src, tgt_in) -> logits``), as training.train does it in float32."""
    decay = [p for p in m.parameters() if p.dim() >= 2]
    no_decay = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-4, betas=(0.9, 0.98), eps=1e-9
    )
    labels = tgt[:, 1:]

    def step():
        logits = fwd(src, tgt[:, :-1])  # (B, T-1, V)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=pad_id, label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        return loss

    return step


def run(loaded, *, repeats: int = 15, warmup: int = 3, profile: bool = False) -> dict:
    cfg = loaded.model.cfg
    src, tgt, batch_desc = realistic_batch(loaded)
    ours, theirs = make_pair(loaded)
    diff = check_same_function(ours, theirs, src, tgt)
    n_tok = n_tokens(src, tgt, cfg.pad_id)

    def infer(fwd):
        def f():
            with torch.inference_mode():
                return fwd(src, tgt[:, :-1])

        return f

    ours.eval(), theirs.eval()
    t_inf = bl.measure_many(
        {"ours": infer(lambda s, t: ours(s, t).logits), "theirs": infer(theirs)}, repeats=repeats, warmup=warmup
    )
    max_new = max_new_tokens(ours, src.size(1))
    ours_out, theirs_out = greedy_batch(ours, src, max_new=max_new), reference_greedy(theirs, src, max_new)
    same_outputs = ours_out == theirs_out
    n_generated = sum(len(o) + 1 for o in ours_out)  # + <eos> (or the budget's last token)
    t_gen = bl.measure_many(
        {"ours": lambda: greedy_batch(ours, src, max_new=max_new), "theirs": lambda: reference_greedy(theirs, src, max_new)},
        repeats=max(3, repeats // 3),
        warmup=1,
    )
    ours.train(), theirs.train()
    for p in [*ours.parameters(), *theirs.parameters()]:
        p.requires_grad_(True)
    steps = {
        "ours": train_step_fn(ours, lambda s, t: ours(s, t).logits, src, tgt, cfg.pad_id),
        "theirs": train_step_fn(theirs, theirs, src, tgt, cfg.pad_id),
    }
    t_train = bl.measure_many(steps, repeats=max(3, repeats // 2), warmup=max(1, warmup // 2))
    rows = []
    for name, t, n in (
        ("inference step (forward)", t_inf, n_tok),
        ("training step (fwd + bwd + AdamW)", t_train, n_tok),
        ("greedy translation of the batch (generated tokens)", t_gen, n_generated),
    ):
        ours_tps, theirs_tps = n / (t["ours"].median_ms / 1000), n / (t["theirs"].median_ms / 1000)
        rows.append(
            {
                "step": name,
                "ours": t["ours"],
                "theirs": t["theirs"],
                "ours_tok_s": ours_tps,
                "theirs_tok_s": theirs_tps,
                "ratio": ours_tps / theirs_tps,
            }
        )
    res = {
        "batch": batch_desc,
        "tokens_per_batch": n_tok,
        "dims": {
            k: getattr(cfg, k)
            for k in (
                "d_model",
                "n_heads",
                "d_ff",
                "n_enc_layers",
                "n_dec_layers",
                "dropout",
                "norm_first",
                "vocab_size",
                "tgt_vocab_size",
            )
        },
        "max_abs_logit_diff": diff,
        "greedy_same_outputs": same_outputs,
        "generated_tokens": n_generated,
        "rows": rows,
        "target": {"what": "ours/theirs tokens/s in both steps", "limit": 1.0, "met": all(r["ratio"] >= 1.0 for r in rows[:2])},
    }
    if profile:
        res["profile"] = profile_steps(steps)
    return res


def profile_steps(steps: dict) -> dict:
    """torch.profiler tables (top operators by self CPU time) of a few training steps per side."""
    from torch.profiler import ProfilerActivity, profile

    out = {}
    for name, step in steps.items():
        step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                step()
        out[name] = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18)
        print(f"\n== torch.profiler, training step, {name} (3 steps) ==\n{out[name]}")
    return out


def table(res: dict) -> str:
    columns = {
        "step": "step",
        "ours (ms)": "ours",
        "nn.Transformer (ms)": "theirs",
        "ours (tok/s)": ("ours_tok_s", "{:,.0f}"),
        "nn.Transformer (tok/s)": ("theirs_tok_s", "{:,.0f}"),
        "ours / theirs": ("ratio", "{:.2f}"),
    }
    return (
        bl.results_table(res["rows"], columns)
        + f"\n\nBatch: {res['batch']}, {res['tokens_per_batch']} tokens. Same weights, logits equal to {res['max_abs_logit_diff']:.1e}."
        + f" Greedy translation: {res['generated_tokens']} tokens generated, "
        + ("the same outputs on both sides" if res["greedy_same_outputs"] else "**outputs differ**")
        + " (ours with its key/value cache; nn.Transformer, which has none, re-runs the decoder over the prefix each step)."
        + "\n"
        + bl.target_line("ours / nn.Transformer >= 1.0 in both", res["target"]["met"])
    )


def main() -> None:
    ap = bl.base_args(__doc__.splitlines()[0])
    ap.add_argument("--profile", action="store_true", help="print torch.profiler tables of both training steps")
    args = ap.parse_args()
    bl.run_script("vs_torch", args, run, table, (15, 3), profile=args.profile)


if __name__ == "__main__":
    main()

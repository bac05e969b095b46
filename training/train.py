"""Train a Transformer translator: ``python -m training.train --corpus multi30k:1.5 --corpus tatoeba:0.5 --out DIR``.

Reads corpora by name (``--corpus NAME[:WEIGHT]``, each a folder of ``{split}.{en,de}.gz`` under
the data root, see ``training.corpora``), mixed each epoch by their sampling weights and validated on
the dev splits of ``--val-corpus`` (default: Multi30k val and Tatoeba dev); or Multi30k's raw files
in one folder (``--data DIR``); or any two aligned text files (``--train-src/--train-tgt``); or
the synthetic ``--task reverse`` data. Batches by token count; label-smoothed
cross-entropy (section 5.4); AdamW with linear warm-up then inverse-square-root or cosine decay
(section 5.3); gradient clipping; an exponential moving average (EMA) of the weights; validation
loss and sacreBLEU each epoch; the best checkpoint (by validation BLEU) is written to ``--out``,
and the full training state every few minutes to ``--out/state`` so ``--resume`` continues.

Options: ``training.config.TrainConfig``, from flags or a TOML file (``--config FILE.toml``, flags override it);
augmentation: the named transforms of ``training.transforms``; a checkpoint's whole lineage: ``training.recipe``.

Output: model.safetensors, config.json, vocab.json, train_log.csv, metrics.json.
"""

from __future__ import annotations

import csv
import json
import math
import multiprocessing
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import sacrebleu
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from model.checkpoint import convert_legacy_state_dict, legacy_name, load_checkpoint, save_checkpoint
from model.decoding import greedy_batch
from model.tokenizer import PieceTokenizer, TiktokenTokenizer
from model.transformer import Transformer, TransformerConfig
from training import transforms
from training.config import TrainConfig, parse_config
from training.corpora import (
    Corpus,
    corpus_dir,
    default_data_dir,
    dev_split,
    encode_pairs,
    pad_batch,
    parse_corpus_spec,
    read_pairs,
    split_file,
    token_batches,
    weighted_mix,
)
from training.transforms.swapper import EntitySwapper

REVERSE_WORDS = [chr(c) for c in range(ord("a"), ord("z") + 1)]


def reverse_pairs(n: int, seed: int, min_len: int = 3, max_len: int = 12) -> list[tuple[str, str]]:
    """Synthetic task: a sequence of single-letter words and the same sequence reversed."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        words = [rng.choice(REVERSE_WORDS) for _ in range(rng.randint(min_len, max_len))]
        pairs.append((" " + " ".join(words), " " + " ".join(reversed(words))))
    return pairs


def lr_at(step: int, peak: float, warmup: int, total: int, schedule: str, time_frac: float = 0.0) -> float:
    """Learning rate at ``step`` (1-based): linear warm-up to ``peak``, then decay.

    inverse_sqrt is section 5.3 of the paper (peak * sqrt(warmup / step)); cosine decays to 0
    at ``total`` steps or when ``time_frac`` (share of a ``--max-minutes`` budget used) reaches 1,
    whichever comes first, so a time-limited run still ends with a decayed learning rate.
    """
    if step < warmup:
        return peak * step / warmup
    if schedule == "inverse_sqrt":
        return peak * math.sqrt(warmup / step)
    frac = min(1.0, max((step - warmup) / max(1, total - warmup), time_frac))
    return peak * 0.5 * (1 + math.cos(math.pi * frac))


@torch.inference_mode()
def evaluate(
    model: Transformer, tok: PieceTokenizer, pairs, examples, device, max_tokens: int, bleu: bool = True
) -> tuple[float, float, list[str]]:
    """Validation loss (per token, no smoothing), greedy sacreBLEU (-1 if not ``bleu``), and the hypotheses."""
    model.eval()
    total, n = 0.0, 0
    hyps: list[str | None] = [None] * len(examples)
    for idx in token_batches(examples, max_tokens, shuffle=False):
        src = pad_batch([examples[i][0] for i in idx], tok.pad_id).to(device)
        tgt = pad_batch([examples[i][1] for i in idx], tok.pad_id).to(device)
        logits = model(src, tgt[:, :-1]).logits
        loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=tok.pad_id, reduction="sum")
        total += loss.item()
        n += int((tgt[:, 1:] != tok.pad_id).sum())
        if bleu:
            for i, out in zip(idx, greedy_batch(model, src), strict=True):
                hyps[i] = tok.decode(out).strip()
    model.train()
    if not bleu:
        return total / max(n, 1), -1.0, []
    refs = [t for _, t in pairs]
    return total / max(n, 1), sacrebleu.corpus_bleu(hyps, [refs]).score, hyps


def bleu_by_corpus(hyps: list[str], val_sets: list[Corpus]) -> str:
    """Greedy sacreBLEU of each validation corpus, e.g. ``"multi30k=35.10 tatoeba=28.02"`` ("" without hyps)."""
    if not hyps or len(val_sets) < 2:
        return ""
    parts, start = [], 0
    for c in val_sets:
        h, start = hyps[start : start + len(c.pairs)], start + len(c.pairs)
        parts.append(f"{c.name}={sacrebleu.corpus_bleu(h, [[t for _, t in c.pairs]]).score:.2f}")
    return " ".join(parts)


def save_state(path: Path, model, ema, opt, meta: dict) -> None:
    """Full training state as safetensors (weights, EMA, AdamW moments) + JSON (counters, RNG seed)."""
    path.mkdir(parents=True, exist_ok=True)
    t = {
        f"model.{k}": v.detach().clone()
        for k, v in model.state_dict().items()
        if k != "tgt_emb.weight" or not model.cfg.tie_embeddings
    }
    t.update({f"ema.{k}": v.clone() for k, v in ema.items()})
    names = {id(p): n for n, p in model.named_parameters()}
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p)
            if st:
                t[f"opt.{names[id(p)]}.exp_avg"] = st["exp_avg"]
                t[f"opt.{names[id(p)]}.exp_avg_sq"] = st["exp_avg_sq"]
                meta.setdefault("opt_step", {})[names[id(p)]] = float(st["step"])
    save_file({k: v.contiguous() for k, v in t.items()}, str(path / "state.safetensors.tmp"))
    (path / "state.safetensors.tmp").replace(path / "state.safetensors")
    (path / "state.json").write_text(json.dumps(meta))


def load_state(path: Path, model, ema, opt) -> dict:
    """Inverse of ``save_state``; returns the JSON meta.

    A state saved under the old parameter names (``model.checkpoint.LEGACY_NAMES``) is renamed as it
    loads: its ``model.``, ``ema.`` and ``opt.`` tensors and the per-parameter AdamW step counts. The
    AdamW moments go to their parameter's device (the file loads on the CPU), and so does the step count
    where the optimizer is fused (on a GPU), which keeps it beside the moments.
    """
    t = convert_legacy_state_dict(load_file(str(path / "state.safetensors")))
    meta = json.loads((path / "state.json").read_text())
    if "opt_step" in meta:
        meta["opt_step"] = {legacy_name(n): s for n, s in meta["opt_step"].items()}
    model.load_state_dict({k[6:]: v for k, v in t.items() if k.startswith("model.")}, strict=False)
    for k in ema:
        ema[k].copy_(t[f"ema.{k}"])
    fused = any(g.get("fused") or g.get("capturable") for g in opt.param_groups)
    for n, p in model.named_parameters():
        if f"opt.{n}.exp_avg" in t:
            opt.state[p] = {
                "step": torch.tensor(meta["opt_step"][n], dtype=torch.float32, device=p.device if fused else "cpu"),
                "exp_avg": t[f"opt.{n}.exp_avg"].to(p.device),
                "exp_avg_sq": t[f"opt.{n}.exp_avg_sq"].to(p.device),
            }
    return meta


def bf16_is_fast() -> bool:
    """True if a bfloat16 matmul beats float32 here (CPUs with AVX512-BF16 or AMX)."""
    import timeit

    x32 = torch.randn(512, 512)
    x16 = x32.bfloat16()
    t32 = min(timeit.repeat(lambda: x32 @ x32, number=5, repeat=3))
    t16 = min(timeit.repeat(lambda: x16 @ x16, number=5, repeat=3))
    return t16 < 0.8 * t32


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    """The run's ``TrainConfig``: ``--config FILE.toml`` if given, the flags on top (``training.config.parse_config``).
    Exits with argparse's usage error (status 2) for a bad flag, key or value."""
    return parse_config(argv, description=__doc__)


def load_data(config: TrainConfig) -> tuple[list[Corpus], list[Corpus]]:
    """Training corpora and validation corpora for ``config``: the training pairs as the transforms leave them before
    training (``training.transforms.prepare``: with ``--drop-context-times`` without the pairs that move a clock time
    12 hours for a reason outside the pair, with ``--times-as-typed`` their German clock times written as the English
    types them), the validation pairs as they are.

    Raises SystemExit with a hint when no data is found.
    """
    train, val = _load_corpora(config)
    return transforms.prepare(config, train), val


def _load_corpora(config) -> tuple[list[Corpus], list[Corpus]]:
    """``load_data`` before any pair is left out."""
    if config.task == "reverse":
        return [Corpus("reverse", reverse_pairs(config.train_size, config.seed))], [
            Corpus("reverse", reverse_pairs(200, config.seed + 1))
        ]
    if config.train_src:
        train = read_pairs(config.train_src, config.train_tgt)
        val = read_pairs(config.val_src, config.val_tgt) if config.val_src else train[-500:]
        return [Corpus("train", train)], [Corpus("val", val)]
    if config.corpus:
        specs = [parse_corpus_spec(c) for c in config.corpus]
        names = [n for n, _ in specs]
        val_names = config.val_corpus or [n for n in ("multi30k", "tatoeba") if n in names] or names
        try:
            train = [Corpus(n, _pairs(corpus_dir(n, config.data_root), "train", config), w) for n, w in specs]
            val = [
                Corpus(n, _pairs(d, dev_split(d, config.src_lang), config))
                for n in val_names
                for d in [corpus_dir(n, config.data_root)]
            ]
        except FileNotFoundError as e:
            raise SystemExit(str(e)) from None
        return train, val
    d = config.data or default_data_dir()
    if d is None:
        raise SystemExit("no data: pass --corpus NAME, --data DIR (Multi30k data/task1/raw) or --train-src/--train-tgt")
    return [Corpus("multi30k", _pairs(d, "train", config))], [Corpus("multi30k", _pairs(d, "val", config))]


def _pairs(folder, split: str, config) -> list[tuple[str, str]]:
    return read_pairs(split_file(folder, split, config.src_lang), split_file(folder, split, config.tgt_lang))


def epoch_examples(train_ex: list[list], weights: list[float], seed: int) -> list[tuple[list[int], list[int]]]:
    """The examples of one training epoch: each corpus sampled by its weight (``weighted_mix``)."""
    return [train_ex[c][i] for c, i in weighted_mix([len(e) for e in train_ex], weights, seed)]


EMBEDDINGS = ("src_emb.weight", "tgt_emb.weight", "generator.weight")


@torch.no_grad()
def copy_weights(src: Transformer, src_tok: PieceTokenizer, dst: Transformer, dst_tok: PieceTokenizer) -> int:
    """Copy a trained model into a new one of the same architecture but another vocabulary.

    Every weight is copied as it is, except the embedding and generator rows ``(V, D)``, which are
    copied by piece: row i of ``dst`` gets the row of ``src`` for the same cl100k piece (the specials by
    position); a piece ``src`` did not have keeps its fresh initialisation. Returns how many rows of
    ``src_emb`` were copied. Raises ValueError if another weight differs in shape.
    """
    old_id = {c: i for i, c in enumerate(src_tok.cl100k_of) if c >= 0}
    s_sd, d_sd = src.state_dict(), dst.state_dict()
    copied = 0
    for name, t in d_sd.items():
        w = s_sd[name]
        if name in EMBEDDINGS:
            pairs = [(i, i if c < 0 else old_id.get(c)) for i, c in enumerate(dst_tok.cl100k_of[: t.shape[0]])]
            pairs = [(i, o) for i, o in pairs if o is not None and o < w.shape[0]]
            new_rows, old_rows = (torch.tensor(x, dtype=torch.long) for x in zip(*pairs, strict=True))
            t[new_rows] = w[old_rows].to(t.dtype)
            copied = max(copied, len(pairs)) if name == "src_emb.weight" else copied
        elif w.shape != t.shape:
            raise ValueError(f"--init-from: {name} has shape {tuple(w.shape)}, the new model {tuple(t.shape)}")
        else:
            t.copy_(w)
    return copied


def init_piece_texts(config) -> list[str]:
    """The texts of the pieces of ``--init-from``'s vocabulary (``--entity-piece-names`` draws from them).

    Raises ValueError without ``--init-from``: a vocabulary built from this stage's data is not known yet."""
    if not config.init_from:
        raise ValueError("--entity-piece-names needs --init-from (its vocabulary's pieces make the names)")
    tok = TiktokenTokenizer.load(Path(config.init_from) / "vocab.json")
    return [tok.piece_text(i) for i in range(tok.vocab_size)]


def swapped_examples(
    tok: PieceTokenizer, train_ex: list[list], swappers: list[EntitySwapper], epoch: int, max_len: int
) -> list[list]:
    """The encoded training examples of each corpus for ``epoch``: ``train_ex`` (from ``encode_pairs``
    over every pair of the corpus, so example k is pair k; pairs too long are ``None``) with this
    epoch's entity swaps (``training.transforms.swapper.EntitySwapper``) encoded in place of the pairs they change."""
    out = []
    for c, ex in enumerate(train_ex):
        ex = list(ex)
        for k, pair in (swappers[c].swapped(epoch) if swappers else {}).items():
            new = encode_pairs(tok, [pair], max_len)
            if new and ex[k] is not None:
                ex[k] = new[0]
        out.append([e for e in ex if e is not None])
    return out


# What ``epoch_data`` reads: set by ``epochs_of`` before a prefetch worker is forked, so the worker has it too.
_EPOCH_INPUTS: tuple | None = None


def epoch_data(epoch: int) -> tuple[list, list[list[int]]]:
    """One epoch's training examples (swapped, sampled by corpus weight) and its batches of example indices.

    Reads ``_EPOCH_INPUTS`` (tokenizer, encoded corpora, entity swappers, corpus weights, seed, max_len,
    max_tokens). Deterministic in ``epoch``: the same whether run inline or in the ``--prefetch`` worker.
    """
    tok, train_ex, swappers, weights, seed, max_len, max_tokens = _EPOCH_INPUTS
    ex = epoch_examples(swapped_examples(tok, train_ex, swappers, epoch, max_len), weights, seed + epoch)
    return ex, list(token_batches(ex, max_tokens, shuffle=True, seed=seed + epoch))


def epochs_of(inputs: tuple, first: int, last: int, prefetch: bool) -> Iterator[tuple[list, list[list[int]]]]:
    """``epoch_data`` of epochs ``first`` .. ``last`` in order, for ``inputs`` (see ``_EPOCH_INPUTS``).

    ``prefetch``: each next epoch is made in a forked worker while the caller trains on the last one; the worker
    only ever runs ``epoch_data`` on Python lists, never CUDA, and ends when the generator is closed or collected.
    """
    global _EPOCH_INPUTS
    _EPOCH_INPUTS = inputs
    if not prefetch:
        yield from (epoch_data(e) for e in range(first, last + 1))
        return
    with multiprocessing.get_context("fork").Pool(1) as pool:  # terminated on leaving the block
        ahead = pool.apply_async(epoch_data, (first,))
        for e in range(first, last + 1):
            data = ahead.get()
            if e < last:
                ahead = pool.apply_async(epoch_data, (e + 1,))
            yield data


def gpu_memory_line(device: torch.device) -> str:
    """On a GPU, what the caching allocator did so far: peak memory, cudaMalloc calls and retries (a retry frees every
    cached block and waits for the device: with batch shapes that vary and several runs sharing one GPU, a cause of
    a host-bound loop). Empty on the CPU."""
    if device.type != "cuda":
        return ""
    s = torch.cuda.memory_stats(device)
    return (
        f" | GPU peak {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB, {s.get('num_device_alloc', 0)} "
        f"cudaMalloc, {s.get('num_alloc_retries', 0)} allocation retries"
    )


class StepProfiler:
    """``--profile-steps``: torch.profiler over training steps ``first .. first + n - 1`` (host, and the GPU's kernels
    when training on one), written as tables to ``path`` when the last one ends: what each step spends its time on."""

    def __init__(self, path: Path, device: torch.device, *, first: int, n: int):
        self.path, self.device, self.first, self.n = path, device, first, n
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.prof = torch.profiler.profile(activities=activities)
        self.t0, self.running = 0.0, False

    def at(self, step: int) -> None:
        """Call at the start of each step (1-based, before the batch moves to the device)."""
        if step == self.first:
            try:
                self.prof.start()
            except Exception as e:  # e.g. no CUPTI for the GPU's kernels
                self._failed(e)
                return
            self.t0, self.running = time.perf_counter(), True
        elif step == self.first + self.n:
            self.close(step)

    def close(self, step: int) -> None:
        """Stop and write the tables, if profiling (``step``: the step about to start, or one past the last). A
        profiler that fails writes why to ``path`` and the run goes on: a profile is never worth a training run."""
        if not self.running:
            return
        self.running = False
        try:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            n = step - self.first
            wall = (time.perf_counter() - self.t0) / max(n, 1)
            self.prof.stop()
            events = self.prof.key_averages()
            lines = [f"{n} steps from step {self.first}, device {self.device}: {wall * 1e3:.1f} ms a step (wall)"]
            lines.append(events.table(sort_by="self_cpu_time_total", row_limit=30))
            if self.device.type == "cuda":
                lines.append(events.table(sort_by="self_device_time_total", row_limit=20))
        except Exception as e:
            self._failed(e)
            return
        self.path.write_text("\n".join(lines) + "\n")
        tqdm.write(f"profile of {n} steps: {self.path} ({wall * 1e3:.1f} ms a step)")

    def _failed(self, e: Exception) -> None:
        self.path.write_text(f"profiling failed: {e!r}\n")
        tqdm.write(f"profiling failed: {e!r}")


LOG_FIELDS = (
    "epoch", "step", "lr", "train_loss", "val_loss", "val_bleu", "ema_val_loss", "ema_val_bleu", "tokens_per_s",
    "minutes", "ema_val_bleu_by_corpus",
)  # fmt: skip


@dataclass
class Run:
    """What one training run works on: its config, device, vocabulary, encoded data and model state."""

    config: TrainConfig
    out: Path
    device: torch.device
    tok: PieceTokenizer
    train_sets: list[Corpus]
    swappers: list[EntitySwapper]
    train_ex: list[list]
    val_sets: list[Corpus]
    val_ex: list
    model: Transformer
    opt: torch.optim.Optimizer
    ema: dict[str, torch.Tensor]


def main(argv: list[str] | None = None) -> dict:
    """``python -m training.train``: parse the options (``parse_args``) and train (``train``)."""
    return train(parse_args(argv))


def train(config: TrainConfig) -> dict:
    """Train a model as ``config`` says; returns the final meta (epoch, step, elapsed seconds, best BLEU, selected)."""
    run = prepare_run(config)
    config, model, tok, ema, opt = run.config, run.model, run.tok, run.ema, run.opt
    live = model.state_dict()  # views of the weights (updated in place), in the order of ``ema``
    ema_pairs = ([ema[k] for k in ema], [live[k] for k in ema])
    weights = [c.weight for c in run.train_sets]
    first_epoch = epoch_examples(swapped_examples(tok, run.train_ex, [], 0, model.cfg.max_len), weights, 0)
    steps_per_epoch = sum(1 for _ in token_batches(first_epoch, config.max_tokens, shuffle=True, seed=0))
    total_steps = steps_per_epoch * config.epochs
    meta = {"epoch": 0, "step": 0, "elapsed": 0.0, "best_bleu": -1.0, "best": None, "batch": 0}
    if config.resume and (run.out / "state" / "state.json").exists():
        meta = load_state(run.out / "state", model, ema, opt)
        print(f"resumed from epoch {meta['epoch']} step {meta['step']}")
    tok.save(run.out / "vocab.json")
    if not (config.resume and (run.out / "train_log.csv").exists()):
        with open(run.out / "train_log.csv", "w", newline="") as f:
            csv.writer(f).writerow(LOG_FIELDS)
    print(describe(run, steps_per_epoch))
    model.train()
    step, elapsed = meta["step"], meta["elapsed"]
    skip = meta.get("batch", 0)  # batches of the current epoch already trained before a --resume
    last_save = time.time()
    stop = False
    inputs = (tok, run.train_ex, run.swappers, weights, config.seed, model.cfg.max_len, config.max_tokens)
    data = epochs_of(inputs, meta["epoch"] + 1, config.epochs, config.prefetch)
    profiler = None
    if config.profile_steps:
        profiler = StepProfiler(run.out / "profile.txt", run.device, first=step + 11, n=config.profile_steps)
    for epoch in range(meta["epoch"] + 1, config.epochs + 1):
        t0 = time.time()
        loss_sum, tok_sum, n_tok_epoch = 0.0, 0, 0
        epoch_ex, batches = next(data)  # with --prefetch, made while the last epoch trained
        bar = tqdm(batches, desc=f"epoch {epoch}/{config.epochs}", disable=config.quiet, mininterval=2.0, initial=skip)
        for b, idx in enumerate(batches[skip:], start=skip + 1):
            src = pad_batch([epoch_ex[i][0] for i in idx], tok.pad_id)
            tgt = pad_batch([epoch_ex[i][1] for i in idx], tok.pad_id)
            # counted on the CPU: reading a GPU tensor would make the host wait for every step
            n_tok = int((tgt[:, 1:] != tok.pad_id).sum()) + int((src != tok.pad_id).sum())
            step += 1
            if profiler is not None:
                profiler.at(step)
            time_frac = (elapsed + time.time() - t0) / (config.max_minutes * 60) if config.max_minutes else 0.0
            lr = lr_at(step, config.lr, config.warmup, total_steps, config.schedule, time_frac)
            loss = train_step(run, src.to(run.device), tgt.to(run.device), lr, step, ema_pairs)
            loss_sum = loss_sum + loss.detach() * n_tok  # stays on the device: no wait per step
            tok_sum += n_tok
            n_tok_epoch += n_tok
            now = time.time()
            bar.update()
            if b % 20 == 0 or b == len(batches):
                bar.set_postfix(loss=f"{loss.item():.3f}", tok_s=f"{n_tok_epoch / (now - t0):.0f}", lr=f"{lr:.2e}")
            if now - last_save > config.save_minutes * 60:
                mid = {"epoch": epoch - 1, "step": step, "elapsed": elapsed + now - t0, "batch": b}
                save_state(run.out / "state", model, ema, opt, {**meta, **mid})
                last_save = now
            if config.max_minutes and elapsed + (now - t0) > config.max_minutes * 60:
                stop = True
                break
        bar.close()
        if profiler is not None:
            profiler.close(step + 1)  # an epoch's end ends a profile: validation is not a training step
        skip = 0
        tps = n_tok_epoch / max(time.time() - t0, 1e-9)
        # Validation is part of the wall-clock budget: --max-minutes bounds training + evaluation.
        bleu_now = stop or not config.max_minutes or (elapsed + time.time() - t0) >= config.bleu_after * config.max_minutes * 60
        row = {"epoch": epoch, "step": step, "lr": lr, "train_loss": float(loss_sum) / max(tok_sum, 1), "tokens_per_s": tps}
        raw = validate(run, row, bleu_now)
        elapsed += time.time() - t0
        row["minutes"] = elapsed / 60
        end_of_epoch(run, row, raw, meta)
        meta.update(epoch=epoch, step=step, elapsed=elapsed, batch=0)
        save_state(run.out / "state", model, ema, opt, meta)
        last_save = time.time()
        write_metrics(run, meta, epoch, elapsed, tps)
        if stop:
            break
    data.close()  # ends a --prefetch worker
    return meta


def prepare_run(config: TrainConfig) -> Run:
    """Seeds, threads and device; the data (transforms applied), the vocabulary, the model (from ``--init-from``'s
    weights where given), AdamW and the EMA copy of the weights. ``config.bf16`` None is resolved here."""
    from model.checkpoint import pick_device

    torch.manual_seed(config.seed)
    random.seed(config.seed)
    if config.threads:
        torch.set_num_threads(config.threads)
    device = pick_device(config.device)
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(config.cudnn_attention)  # the fused kernels then: memory-efficient or math
    if config.bf16 is None:
        fast = torch.cuda.is_bf16_supported() if device.type == "cuda" else device.type == "cpu" and bf16_is_fast()
        config = replace(config, bf16=fast)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    train_sets, val_sets = load_data(config)
    if config.val_limit:
        val_sets = [Corpus(c.name, c.pairs[: config.val_limit]) for c in val_sets]
    train_pairs = [p for c in train_sets for p in c.pairs]
    augmented = transforms.augment(config, train_sets, lambda: init_piece_texts(config))
    train_sets, swappers = augmented.corpora, augmented.swappers
    train_pairs += augmented.vocab_pairs
    fresh_start = not (config.resume and (out / "state" / "state.json").exists())
    init = load_checkpoint(config.init_from, "cpu") if config.init_from and fresh_start else None
    tok = vocabulary(config, out, init, train_pairs)
    cfg = TransformerConfig(
        vocab_size=tok.vocab_size,
        tgt_vocab_size=None if tok.tgt_vocab_size == tok.vocab_size else tok.tgt_vocab_size,
        d_model=config.d_model,
        n_heads=config.n_heads,
        d_ff=config.d_ff,
        n_enc_layers=config.n_enc_layers,
        n_dec_layers=config.n_dec_layers,
        dropout=config.dropout,
        max_len=config.max_len,
        norm_first=not config.post_ln,
        tie_embeddings=not config.no_tie,
        pos_encoding=config.pos_encoding,
    )
    if config.init_from:  # a later stage keeps the architecture of the stage it starts from
        base = TransformerConfig.from_dict(json.loads((Path(config.init_from) / "config.json").read_text()))
        cfg = replace(base, vocab_size=cfg.vocab_size, tgt_vocab_size=cfg.tgt_vocab_size, dropout=config.dropout)
    train_ex = [encode_pairs(tok, c.pairs, cfg.max_len, keep_slots=True) for c in train_sets]
    val_sets = [Corpus(c.name, [p for p in c.pairs if encode_pairs(tok, [p], cfg.max_len)]) for c in val_sets]
    val_ex = encode_pairs(tok, [p for c in val_sets for p in c.pairs], cfg.max_len)
    model = Transformer(cfg)
    if init is not None:
        n = copy_weights(init.model, init.tokenizer, model, tok)
        print(f"initialised from {config.init_from} ({n} of {tok.vocab_size} embedding rows copied by piece)")
    model = model.to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config.lr,
        betas=(0.9, 0.98),
        eps=1e-9,
        fused=device.type == "cuda",  # one kernel for the whole update on a GPU
    )
    ema = {k: v.detach().clone() for k, v in model.state_dict().items() if v.is_floating_point()}
    return Run(config, out, device, tok, train_sets, swappers, train_ex, val_sets, val_ex, model, opt, ema)


def vocabulary(config: TrainConfig, out: Path, init, train_pairs: list[tuple[str, str]]) -> PieceTokenizer:
    """The run's vocabulary: a resumed run's own, ``--init-from``'s with ``--keep-vocab``, else built from the
    training pairs (``--min-freq``; ``--tgt-min-freq`` gives the decoder its own, smaller part)."""
    if config.resume and (out / "vocab.json").exists():
        return TiktokenTokenizer.load(out / "vocab.json")
    if init is not None and config.keep_vocab:
        return init.tokenizer
    if config.tgt_min_freq is None:  # one vocabulary for both sides
        return TiktokenTokenizer.build([s for p in train_pairs for s in p], min_freq=config.min_freq)
    src, tgt = [s for s, _ in train_pairs], [t for _, t in train_pairs]
    return TiktokenTokenizer.build(src, min_freq=config.min_freq, tgt_texts=tgt, tgt_min_freq=config.tgt_min_freq)


def describe(run: Run, steps_per_epoch: int) -> str:
    """The line printed before training: parameters, vocabulary, each corpus's size and weight, the swaps, the
    validation sets, steps per epoch and device."""
    config, sw = run.config, run.swappers
    sizes = zip(run.train_sets, run.train_ex, strict=True)
    return (
        f"{run.model.n_params() / 1e6:.2f}M parameters, vocab {run.tok.vocab_size} (target {run.tok.tgt_vocab_size}), "
        + ", ".join(f"{c.name} {sum(x is not None for x in e)}x{c.weight:g}" for c, e in sizes)
        + (f", entity swap p={config.entity_swap} on {sum(len(s.entities) for s in sw)} pairs" if sw else "")
        + (f" and {sum(len(s.later) for s in sw)} with an evening time" if config.drop_context_times and sw else "")
        + (f" and {sum(len(s.dates) for s in sw)} with a date" if config.entity_dates and sw else "")
        + (f" and {sum(len(s.months) for s in sw)} with a month" if config.entity_dates and sw else "")
        + f" train / {len(run.val_ex)} val pairs ({', '.join(c.name for c in run.val_sets)}), "
        f"{steps_per_epoch} steps/epoch, device {run.device}"
    )


def train_step(run: Run, src: torch.Tensor, tgt: torch.Tensor, lr: float, step: int, ema_pairs: tuple) -> torch.Tensor:
    """One optimiser step on a batch: ``src`` (B, S) and ``tgt`` (B, T) token ids on the device; label-smoothed
    cross-entropy of the next target token, clipped gradients, AdamW at ``lr``, then the EMA update. Returns the loss."""
    config, model, opt = run.config, run.model, run.opt
    for g in opt.param_groups:
        g["lr"] = lr
    with torch.autocast(run.device.type, dtype=torch.bfloat16, enabled=config.bf16):
        logits = model(src, tgt[:, :-1]).logits.float()  # (B, T-1, V)
    labels = tgt[:, 1:]  # (B, T-1)
    loss = F.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), ignore_index=run.tok.pad_id, label_smoothing=config.label_smoothing
    )
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip)
    opt.step()
    if config.ema:
        with torch.no_grad():  # ema = d * ema + (1 - d) * weights, all tensors in one call
            torch._foreach_lerp_(*ema_pairs, 1 - min(config.ema, (1 + step) / (10 + step)))
    return loss


def validate(run: Run, row: dict, bleu: bool) -> dict[str, torch.Tensor]:
    """Validation loss and greedy BLEU of the live weights (BLEU only without an EMA) and of the EMA weights, into
    ``row``; returns a copy of the live weights."""
    pairs = [p for c in run.val_sets for p in c.pairs]
    with_ema = bool(run.config.ema)
    row["val_loss"], row["val_bleu"], _ = evaluate(
        run.model, run.tok, pairs, run.val_ex, run.device, run.config.max_tokens, bleu=bleu and not with_ema
    )
    raw = {k: v.clone() for k, v in run.model.state_dict().items()}
    if with_ema:
        run.model.load_state_dict({**raw, **run.ema})
        row["ema_val_loss"], row["ema_val_bleu"], hyps = evaluate(
            run.model, run.tok, pairs, run.val_ex, run.device, run.config.max_tokens, bleu=bleu
        )
        run.model.load_state_dict(raw)
        row["ema_val_bleu_by_corpus"] = bleu_by_corpus(hyps, run.val_sets)
    return raw


def end_of_epoch(run: Run, row: dict, raw: dict[str, torch.Tensor], meta: dict) -> None:
    """Log the epoch's ``row`` (train_log.csv and a line), and write the checkpoint when the live or the EMA weights
    beat the best validation BLEU so far (``meta`` updated)."""
    with open(run.out / "train_log.csv", "a", newline="") as f:
        csv.DictWriter(f, LOG_FIELDS).writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in row.items()})
    tqdm.write(
        f"epoch {row['epoch']}: train {row['train_loss']:.3f} val loss {row['val_loss']:.3f} BLEU {row['val_bleu']:.2f}"
        + (f" | EMA val loss {row['ema_val_loss']:.3f} BLEU {row['ema_val_bleu']:.2f}" if run.config.ema else "")
        + (f" ({row['ema_val_bleu_by_corpus']})" if row.get("ema_val_bleu_by_corpus") else "")
        + f" | {row['tokens_per_s']:.0f} tok/s, {row['minutes']:.1f} min"
        + gpu_memory_line(run.device)
    )
    for which, bleu, weights in [("raw", row["val_bleu"], raw), ("ema", row.get("ema_val_bleu", -1), {**raw, **run.ema})]:
        if bleu > meta["best_bleu"]:
            loss = row["val_loss" if which == "raw" else "ema_val_loss"]
            meta["best_bleu"], meta["best"] = bleu, {"epoch": row["epoch"], "weights": which, "val_loss": loss}
            run.model.load_state_dict(weights)
            save_checkpoint(run.model, run.tok, run.out)
            run.model.load_state_dict(raw)


def write_metrics(run: Run, meta: dict, epoch: int, elapsed: float, tps: float) -> None:
    """The ``training`` entry of OUT/metrics.json (other entries kept): best BLEU, the selected weights, time, speed,
    size and the config (``TrainConfig.to_dict`` without the run-only options)."""
    metrics = {
        "task": run.config.task,
        "val_bleu_greedy": meta["best_bleu"],
        "selected": meta["best"],
        "epochs_run": epoch,
        "train_minutes": round(elapsed / 60, 2),
        "tokens_per_s": round(tps),
        "n_params": run.model.n_params(),
        "args": run.config.to_dict(run_options=False),
    }
    path = run.out / "metrics.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    old.update({"training": metrics})
    path.write_text(json.dumps(old, indent=2) + "\n")


if __name__ == "__main__":
    main()

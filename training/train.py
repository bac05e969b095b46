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

Output: model.safetensors, config.json, vocab.json, train_log.csv, metrics.json.
"""

from __future__ import annotations

import argparse
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
from training.corpora import (
    EntitySwapper,
    british_spelling,
    capital_pieces,
    corpus_dir,
    default_data_dir,
    dev_split,
    drop_context_times,
    entity_pools,
    nicht_after_object,
    pad_batch,
    parse_corpus_spec,
    read_pairs,
    split_file,
    times_as_typed,
    token_batches,
    weighted_mix,
    word_pieces,
)

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


def encode_pairs(tok: PieceTokenizer, pairs, max_len: int, keep_slots: bool = False) -> list:
    """(src ids + <eos>, <bos> + tgt ids + <eos>), dropping pairs longer than ``max_len``
    (``keep_slots``: None in their place, so that example k is pair k)."""
    out = []
    for s, t in pairs:
        src = tok.encode(s)[: max_len - 1] + [tok.eos_id]
        tgt = [tok.bos_id] + tok.encode(t, target=True) + [tok.eos_id]
        if len(tgt) <= max_len:
            out.append((src, tgt))
        elif keep_slots:
            out.append(None)
    return out


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


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=["translate", "reverse"], default="translate")
    ap.add_argument(
        "--data", help="folder with {train,val}.{SRC,TGT}[.gz] (Multi30k raw); default: $MULTI30K_DIR or ../shared/data/multi30k"
    )
    ap.add_argument(
        "--corpus",
        action="append",
        default=[],
        metavar="NAME[:WEIGHT]",
        help="train on this corpus (a folder under the data root); WEIGHT (default 1) is how many times "
        "each epoch samples it, fractions taking a fresh random share each epoch; repeat for a mix",
    )
    ap.add_argument(
        "--val-corpus",
        action="append",
        default=None,
        metavar="NAME",
        help="validate on this corpus's dev (or val) split; repeat for a dev mix (default: multi30k and tatoeba, "
        "those of them trained on, else every --corpus)",
    )
    ap.add_argument("--data-root", help="folder of corpus folders (default: $ATTN_DATA_ROOT or ../shared/data)")
    ap.add_argument("--src-lang", default="en")
    ap.add_argument("--tgt-lang", default="de")
    ap.add_argument("--train-src")
    ap.add_argument("--train-tgt")
    ap.add_argument("--val-src")
    ap.add_argument("--val-tgt")
    ap.add_argument("--out", required=True)
    ap.add_argument("--min-freq", type=int, default=2, help="keep cl100k pieces seen this often")
    ap.add_argument(
        "--tgt-min-freq",
        type=int,
        default=None,
        help="give the decoder its own vocabulary: target pieces seen this often (default: the shared one)",
    )
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=1024)
    ap.add_argument("--n-enc-layers", type=int, default=3)
    ap.add_argument("--n-dec-layers", type=int, default=3)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--post-ln", action="store_true", help="the paper's post-LN instead of pre-LN")
    ap.add_argument("--no-tie", action="store_true")
    ap.add_argument("--pos-encoding", default="sinusoidal", choices=["sinusoidal", "learned"])
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--max-minutes", type=float, default=None, help="stop after this much training time")
    ap.add_argument("--max-tokens", type=int, default=4096, help="padded src+tgt tokens per batch")
    ap.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    ap.add_argument("--warmup", type=int, default=800, help="warm-up steps")
    ap.add_argument("--schedule", choices=["inverse_sqrt", "cosine"], default="cosine")
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--label-smoothing", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--ema", type=float, default=0.999, help="EMA decay of the weights (0 turns it off)")
    ap.add_argument("--save-minutes", type=float, default=5.0)
    ap.add_argument("--val-limit", type=int, default=None, help="evaluate on the first N validation pairs")
    ap.add_argument(
        "--bleu-after",
        type=float,
        default=0.0,
        help="with --max-minutes: compute validation BLEU only once this share of the budget is used (loss every epoch)",
    )
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default=None)
    ap.add_argument(
        "--bf16",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="bfloat16 autocast for training (default: on where the CPU/GPU supports it)",
    )
    ap.add_argument(
        "--cudnn-attention",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="let F.scaled_dot_product_attention pick cuDNN on a GPU (default off: with our masks and batch shapes "
        "that change every step it spent ~22 ms of host time per call building plans; stage 15's profile)",
    )
    ap.add_argument("--resume", action="store_true")
    ap.add_argument(
        "--init-from",
        metavar="DIR",
        help="start from this checkpoint's weights (a later training stage): its architecture, the vocabulary "
        "rebuilt from this stage's data with embedding rows copied by cl100k piece, a fresh optimizer, "
        "--warmup steps of warm-up and cosine decay to zero at the stage's --max-minutes",
    )
    ap.add_argument(
        "--keep-vocab", action="store_true", help="with --init-from: keep that checkpoint's vocabulary (a later stage)"
    )
    ap.add_argument(
        "--entity-corpus",
        type=float,
        default=0.0,
        metavar="W",
        help="with --entity-swap: add every training pair that shares a name, place or number as one more corpus "
        "of weight W, swapped every time it is drawn (copy practice)",
    )
    ap.add_argument(
        "--entity-swap",
        type=float,
        default=0.0,
        metavar="P",
        help="each epoch, replace the names, places and numbers a training pair shares verbatim on both sides "
        "by random ones (Faker's names and cities, numbers of the same shape) with probability P (training.corpora)",
    )
    ap.add_argument(
        "--entity-splice",
        type=float,
        default=0.0,
        metavar="S",
        help="with --entity-swap: this share of the one-word Latin names drawn is two pool names joined "
        "(copy practice on piece sequences no list holds)",
    )
    ap.add_argument(
        "--entity-full-name",
        type=float,
        default=0.0,
        metavar="F",
        help="with --entity-swap: this share of the first names drawn is followed by a surname (two-word names)",
    )
    ap.add_argument(
        "--entity-years",
        type=float,
        default=0.0,
        metavar="Y",
        help="with --entity-swap: this share of the whole numbers swapped becomes a year (1900-2039), whatever its length",
    )
    ap.add_argument(
        "--entity-long-numbers",
        type=float,
        default=0.0,
        metavar="L",
        help="with --entity-swap: this share of the whole numbers swapped becomes a long number, as a phone number or "
        "postcode is typed (5-9 digits, or 2-3 groups of 2-5: '0176 55512'; training.corpora.random_long_number)",
    )
    ap.add_argument(
        "--entity-digit-repeats",
        type=float,
        default=0.0,
        metavar="R",
        help="with --entity-long-numbers: the chance that a digit of a long number repeats the one before, so that runs "
        "of equal digits are practised ('5552227'; training.corpora.random_long_number)",
    )
    ap.add_argument(
        "--entity-grouped-numbers",
        type=float,
        default=0.0,
        metavar="G",
        help="with --entity-swap: this share of the whole numbers swapped becomes a large or decimal number, English "
        "'3,700,000' / '3.5', German '3.700.000' / '3,5' (training.corpora.random_grouped_number); any G > 0 also swaps the "
        "corpora's grouped and decimal numbers, the German side written with German separators",
    )
    ap.add_argument(
        "--entity-piece-names",
        type=float,
        default=0.0,
        metavar="Q",
        help="with --entity-swap and --init-from: this share of the one-word names drawn is 2-3 random word pieces of "
        'the vocabulary joined and capitalised ("A"+"yes"+"ha"): names whose pieces are English words are copied',
    )
    ap.add_argument(
        "--entity-piece-heads",
        type=float,
        default=0.0,
        metavar="H",
        help="with --entity-piece-names: this share of the piece names begins with a capitalised piece of the "
        'vocabulary ("Tim", "Raj") and 0-2 word pieces: names that are one rare piece are practised as targets',
    )
    ap.add_argument(
        "--times-as-typed",
        action="store_true",
        help='write a training pair\'s German clock time as its English types it ("2.30 Uhr", "halb drei" -> '
        '"2:30 Uhr", "2:30"; 218 pairs), so that no pair teaches turning a typed time into another form '
        "(training.corpora.times_as_typed)",
    )
    ap.add_argument(
        "--drop-context-times",
        action="store_true",
        help="leave out training pairs whose German side writes an English clock time 12 hours later with no "
        "afternoon or evening word in the English (BConTrasT's chats: the conversation decided), and with "
        "--entity-swap swap the other such pairs' times together (training.corpora.later_times)",
    )
    ap.add_argument(
        "--entity-dates",
        action="store_true",
        help='with --entity-swap: an English date that the German writes as a date ("May 5th" / "5. Mai") gets a '
        "random day and month on both sides, the English in any of its four forms (training.corpora.shared_dates), and "
        '"in May" / "im Mai" becomes a random date (training.corpora.shared_months)',
    )
    ap.add_argument(
        "--date-corpus",
        type=int,
        default=0,
        metavar="N",
        help='with --entity-swap and --entity-dates: every training pair with a date or with "in May" / "im Mai" N more times an epoch, '
        'each copy with its own random date ("on 3 May 2003" / "am 3. Mai 2003"; training.corpora.months_to_dates): date practice',
    )
    ap.add_argument(
        "--entity-clock-words",
        type=float,
        default=0.0,
        metavar="W",
        help="with --entity-swap: this share of the clock times swapped is written in words on both sides ('half past "
        "seven' / 'halb acht', 'quarter to eight' / 'Viertel vor acht'; training.corpora.random_clock_words)",
    )
    ap.add_argument(
        "--british-spelling",
        type=float,
        default=0.0,
        metavar="B",
        help="with --entity-swap: this share of the pairs whose English holds an American spelling ('color', 'meters') "
        "gets it spelled the British way each epoch ('colour', 'metres'; training.corpora.british_spelling, breame's list)",
    )
    ap.add_argument(
        "--british-corpus",
        type=int,
        default=0,
        metavar="N",
        help="with --entity-swap: every training pair whose English holds an American spelling N more times an epoch, "
        "spelled the British way, names swapped as in the corpora",
    )
    ap.add_argument(
        "--negation-corpus",
        type=int,
        default=0,
        metavar="N",
        help='every training pair whose English negates and whose German puts "nicht" after a definite or possessive object '
        '("Der Hund fraß das Fleisch nicht."; training.corpora.nicht_after_object) N more times an epoch: negation '
        'practice against affirmative collocations ("überquerte die Straße."); names swapped as in the corpora',
    )
    ap.add_argument(
        "--prefetch",
        action="store_true",
        help="make each next epoch's swapped examples and batches in a forked worker while this one trains "
        "(for a GPU, whose steps outpace the few seconds this takes; on a busy CPU it competes with training)",
    )
    ap.add_argument(
        "--profile-steps",
        type=int,
        default=0,
        metavar="N",
        help="profile N training steps after the first 10 (torch.profiler, host and GPU) into OUT/profile.txt: "
        "where a step's time goes",
    )
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("--train-size", type=int, default=20000, help="reverse task: training pairs")
    a = ap.parse_args(argv)
    if a.date_corpus and not (a.entity_dates and a.entity_swap > 0):
        ap.error("--date-corpus needs --entity-swap and --entity-dates (the dates it practises are theirs)")
    if (a.british_spelling or a.british_corpus) and a.entity_swap <= 0:
        ap.error("--british-spelling and --british-corpus need --entity-swap (the entity swapper spells them)")
    return a


@dataclass(frozen=True)
class Corpus:
    """Named sentence pairs and the weight they are sampled with in each training epoch."""

    name: str
    pairs: list[tuple[str, str]]
    weight: float = 1.0


def load_data(a) -> tuple[list[Corpus], list[Corpus]]:
    """Training corpora and validation corpora for the parsed arguments ``a``; with ``--drop-context-times`` the
    training pairs without those that move a clock time 12 hours for a reason outside the pair
    (``training.corpora.drop_context_times``); with ``--times-as-typed`` their German clock times written as the English
    types them (``training.corpora.times_as_typed``); the validation pairs as they are.

    Raises SystemExit with a hint when no data is found.
    """
    train, val = _load_corpora(a)
    if a.drop_context_times:
        train = [Corpus(c.name, drop_context_times(c.pairs), c.weight) for c in train]
    if a.times_as_typed:
        train = [Corpus(c.name, [times_as_typed(s, t) for s, t in c.pairs], c.weight) for c in train]
    return train, val


def _load_corpora(a) -> tuple[list[Corpus], list[Corpus]]:
    """``load_data`` before any pair is left out."""
    if a.task == "reverse":
        return [Corpus("reverse", reverse_pairs(a.train_size, a.seed))], [Corpus("reverse", reverse_pairs(200, a.seed + 1))]
    if a.train_src:
        train = read_pairs(a.train_src, a.train_tgt)
        val = read_pairs(a.val_src, a.val_tgt) if a.val_src else train[-500:]
        return [Corpus("train", train)], [Corpus("val", val)]
    if a.corpus:
        specs = [parse_corpus_spec(c) for c in a.corpus]
        names = [n for n, _ in specs]
        val_names = a.val_corpus or [n for n in ("multi30k", "tatoeba") if n in names] or names
        try:
            train = [Corpus(n, _pairs(corpus_dir(n, a.data_root), "train", a), w) for n, w in specs]
            val = [Corpus(n, _pairs(d, dev_split(d, a.src_lang), a)) for n in val_names for d in [corpus_dir(n, a.data_root)]]
        except FileNotFoundError as e:
            raise SystemExit(str(e)) from None
        return train, val
    d = a.data or default_data_dir()
    if d is None:
        raise SystemExit("no data: pass --corpus NAME, --data DIR (Multi30k data/task1/raw) or --train-src/--train-tgt")
    return [Corpus("multi30k", _pairs(d, "train", a))], [Corpus("multi30k", _pairs(d, "val", a))]


def _pairs(folder, split: str, a) -> list[tuple[str, str]]:
    return read_pairs(split_file(folder, split, a.src_lang), split_file(folder, split, a.tgt_lang))


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


def init_piece_texts(a) -> list[str]:
    """The texts of the pieces of ``--init-from``'s vocabulary (``--entity-piece-names`` draws from them).

    Raises ValueError without ``--init-from``: a vocabulary built from this stage's data is not known yet."""
    if not a.init_from:
        raise ValueError("--entity-piece-names needs --init-from (its vocabulary's pieces make the names)")
    tok = TiktokenTokenizer.load(Path(a.init_from) / "vocab.json")
    return [tok.piece_text(i) for i in range(tok.vocab_size)]


def swapped_examples(
    tok: PieceTokenizer, train_ex: list[list], swappers: list[EntitySwapper], epoch: int, max_len: int
) -> list[list]:
    """The encoded training examples of each corpus for ``epoch``: ``train_ex`` (from ``encode_pairs``
    over every pair of the corpus, so example k is pair k; pairs too long are ``None``) with this
    epoch's entity swaps (``training.corpora.EntitySwapper``) encoded in place of the pairs they change."""
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


def main(argv=None) -> dict:
    a = parse_args(argv)
    from model.checkpoint import pick_device

    torch.manual_seed(a.seed)
    random.seed(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)
    device = pick_device(a.device)
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(a.cudnn_attention)  # the fused kernels then: memory-efficient or math
    if a.bf16 is None:
        a.bf16 = torch.cuda.is_bf16_supported() if device.type == "cuda" else device.type == "cpu" and bf16_is_fast()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    train_sets, val_sets = load_data(a)
    if a.val_limit:
        val_sets = [Corpus(c.name, c.pairs[: a.val_limit]) for c in val_sets]
    train_pairs = [p for c in train_sets for p in c.pairs]
    swappers = []
    negations = [p for c in train_sets for p in c.pairs if nicht_after_object(*p)] * a.negation_corpus
    if negations and a.entity_swap <= 0:  # negation practice (with --entity-swap below, the copies' names swapped)
        train_sets.append(Corpus("negations", negations))
    if a.entity_swap > 0:
        texts = init_piece_texts(a) if a.entity_piece_names else []  # the vocabulary's pieces make piece names
        gb = a.british_spelling
        pools = entity_pools(
            seed=a.seed, splice=a.entity_splice, full_name=a.entity_full_name, years=a.entity_years,
            piece_names=a.entity_piece_names, pieces=word_pieces(texts),
            piece_heads=a.entity_piece_heads, heads=capital_pieces(texts), long_numbers=a.entity_long_numbers,
            grouped_numbers=a.entity_grouped_numbers, clock_words=a.entity_clock_words,
            digit_repeats=a.entity_digit_repeats,
        )  # fmt: skip
        swappers = [
            EntitySwapper(
                c.pairs, pools, a.entity_swap, seed=a.seed, later=a.drop_context_times, dates=a.entity_dates, british=gb
            )
            for c in train_sets
        ]
        corpora = list(zip(train_sets, swappers, strict=True))
        if a.entity_corpus:  # copy practice: every pair with a shared entity (or date) once more, always swapped
            pairs = [c.pairs[i] for c, sw in corpora for i in sorted(sw.entities | sw.dates | sw.months)]
            train_sets.append(Corpus("entities", pairs, a.entity_corpus))
            swappers.append(EntitySwapper(pairs, pools, 1.0, seed=a.seed + 1, dates=a.entity_dates, british=gb))
        names = frozenset().union(*(sw.names for _, sw in corpora))  # for N copies below: the corpora's names, not theirs
        if a.date_corpus:  # date practice: each pair with a date or "in May" N more times, each copy its own date
            pairs = [c.pairs[i] for c, sw in corpora for i in sorted(sw.dates | sw.months)] * a.date_corpus
            train_sets.append(Corpus("dates", pairs, 1.0))
            swappers.append(EntitySwapper(pairs, pools, 1.0, seed=a.seed + 2, dates=True, names=names))
        if negations:  # negation practice: each copy swapped as its corpus swaps, fresh each epoch
            train_sets.append(Corpus("negations", negations))
            swappers.append(EntitySwapper(negations, pools, a.entity_swap, seed=a.seed + 3, dates=a.entity_dates, names=names))
        if a.british_corpus:  # spelling practice: each pair with an American spelling N more times, spelled the British way
            pairs = [p for c, _ in corpora for p in c.pairs if british_spelling(p[0]) != p[0]] * a.british_corpus
            train_sets.append(Corpus("british", pairs))
            swappers.append(EntitySwapper(pairs, pools, a.entity_swap, seed=a.seed + 4, names=names, british=1.0))
        # the vocabulary also counts one epoch's swapped pairs, so that name pieces get target ids
        train_pairs += [p for sw in swappers for p in sw.swapped(0).values()]
    init = (
        load_checkpoint(a.init_from, "cpu")
        if a.init_from and not (a.resume and (out / "state" / "state.json").exists())
        else None
    )
    if a.resume and (out / "vocab.json").exists():
        tok = TiktokenTokenizer.load(out / "vocab.json")
    elif init is not None and a.keep_vocab:
        tok = init.tokenizer
    else:
        if a.tgt_min_freq is None:  # one vocabulary for both sides
            tok = TiktokenTokenizer.build([s for p in train_pairs for s in p], min_freq=a.min_freq)
        else:  # the decoder gets its own, smaller part of it
            src, tgt = [s for s, _ in train_pairs], [t for _, t in train_pairs]
            tok = TiktokenTokenizer.build(src, min_freq=a.min_freq, tgt_texts=tgt, tgt_min_freq=a.tgt_min_freq)
    cfg = TransformerConfig(
        vocab_size=tok.vocab_size,
        tgt_vocab_size=None if tok.tgt_vocab_size == tok.vocab_size else tok.tgt_vocab_size,
        d_model=a.d_model,
        n_heads=a.n_heads,
        d_ff=a.d_ff,
        n_enc_layers=a.n_enc_layers,
        n_dec_layers=a.n_dec_layers,
        dropout=a.dropout,
        max_len=a.max_len,
        norm_first=not a.post_ln,
        tie_embeddings=not a.no_tie,
        pos_encoding=a.pos_encoding,
    )
    if a.init_from:  # a later stage keeps the architecture of the stage it starts from
        base = TransformerConfig.from_dict(json.loads((Path(a.init_from) / "config.json").read_text()))
        cfg = replace(base, vocab_size=cfg.vocab_size, tgt_vocab_size=cfg.tgt_vocab_size, dropout=a.dropout)
    train_ex = [encode_pairs(tok, c.pairs, cfg.max_len, keep_slots=True) for c in train_sets]
    corpus_weights = [c.weight for c in train_sets]
    val_sets = [Corpus(c.name, [p for p in c.pairs if encode_pairs(tok, [p], cfg.max_len)]) for c in val_sets]
    val_pairs = [p for c in val_sets for p in c.pairs]
    val_ex = encode_pairs(tok, val_pairs, cfg.max_len)
    model = Transformer(cfg)
    if init is not None:
        n = copy_weights(init.model, init.tokenizer, model, tok)
        print(f"initialised from {a.init_from} ({n} of {tok.vocab_size} embedding rows copied by piece)")
    model = model.to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=a.lr,
        betas=(0.9, 0.98),
        eps=1e-9,
        fused=device.type == "cuda",  # one kernel for the whole update on a GPU
    )
    ema = {k: v.detach().clone() for k, v in model.state_dict().items() if v.is_floating_point()}
    live = model.state_dict()  # views of the weights (updated in place), in the order of ``ema``
    ema_pairs = ([ema[k] for k in ema], [live[k] for k in ema])
    steps_per_epoch = sum(
        1
        for _ in token_batches(
            epoch_examples(swapped_examples(tok, train_ex, [], 0, cfg.max_len), corpus_weights, 0),
            a.max_tokens,
            shuffle=True,
            seed=0,
        )
    )
    total_steps = steps_per_epoch * a.epochs
    meta = {"epoch": 0, "step": 0, "elapsed": 0.0, "best_bleu": -1.0, "best": None, "batch": 0}
    if a.resume and (out / "state" / "state.json").exists():
        meta = load_state(out / "state", model, ema, opt)
        print(f"resumed from epoch {meta['epoch']} step {meta['step']}")
    tok.save(out / "vocab.json")
    log_path = out / "train_log.csv"
    fields = [
        "epoch",
        "step",
        "lr",
        "train_loss",
        "val_loss",
        "val_bleu",
        "ema_val_loss",
        "ema_val_bleu",
        "tokens_per_s",
        "minutes",
        "ema_val_bleu_by_corpus",
    ]
    if not (a.resume and log_path.exists()):
        with open(log_path, "w", newline="") as f:
            csv.writer(f).writerow(fields)
    print(
        f"{model.n_params() / 1e6:.2f}M parameters, vocab {tok.vocab_size} (target {tok.tgt_vocab_size}), "
        + ", ".join(f"{c.name} {sum(x is not None for x in e)}x{c.weight:g}" for c, e in zip(train_sets, train_ex, strict=True))
        + (f", entity swap p={a.entity_swap} on {sum(len(sw.entities) for sw in swappers)} pairs" if swappers else "")
        + (f" and {sum(len(sw.later) for sw in swappers)} with an evening time" if a.drop_context_times and swappers else "")
        + (f" and {sum(len(sw.dates) for sw in swappers)} with a date" if a.entity_dates and swappers else "")
        + (f" and {sum(len(sw.months) for sw in swappers)} with a month" if a.entity_dates and swappers else "")
        + f" train / {len(val_ex)} val pairs ({', '.join(c.name for c in val_sets)}), "
        f"{steps_per_epoch} steps/epoch, device {device}"
    )
    model.train()
    step, elapsed = meta["step"], meta["elapsed"]
    skip = meta.get("batch", 0)  # batches of the current epoch already trained before a --resume
    last_save = time.time()
    stop = False
    inputs = (tok, train_ex, swappers, corpus_weights, a.seed, cfg.max_len, a.max_tokens)
    data = epochs_of(inputs, meta["epoch"] + 1, a.epochs, a.prefetch)
    profiler = StepProfiler(out / "profile.txt", device, first=step + 11, n=a.profile_steps) if a.profile_steps else None
    for epoch in range(meta["epoch"] + 1, a.epochs + 1):
        t0 = time.time()
        loss_sum, tok_sum, n_tok_epoch = 0.0, 0, 0
        epoch_ex, batches = next(data)  # with --prefetch, made while the last epoch trained
        bar = tqdm(batches, desc=f"epoch {epoch}/{a.epochs}", disable=a.quiet, mininterval=2.0, initial=skip)
        for b, idx in enumerate(batches[skip:], start=skip + 1):
            src = pad_batch([epoch_ex[i][0] for i in idx], tok.pad_id)
            tgt = pad_batch([epoch_ex[i][1] for i in idx], tok.pad_id)
            # counted on the CPU: reading a GPU tensor would make the host wait for every step
            n_tok = int((tgt[:, 1:] != tok.pad_id).sum()) + int((src != tok.pad_id).sum())
            step += 1
            if profiler is not None:
                profiler.at(step)
            src, tgt = src.to(device), tgt.to(device)
            time_frac = (elapsed + time.time() - t0) / (a.max_minutes * 60) if a.max_minutes else 0.0
            lr = lr_at(step, a.lr, a.warmup, total_steps, a.schedule, time_frac)
            for g in opt.param_groups:
                g["lr"] = lr
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.bf16):
                logits = model(src, tgt[:, :-1]).logits.float()  # (B, T-1, V)
            labels = tgt[:, 1:]  # (B, T-1)
            loss = F.cross_entropy(
                logits.flatten(0, 1), labels.flatten(), ignore_index=tok.pad_id, label_smoothing=a.label_smoothing
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
            opt.step()
            if a.ema:
                with torch.no_grad():  # ema = d * ema + (1 - d) * weights, all tensors in one call
                    torch._foreach_lerp_(*ema_pairs, 1 - min(a.ema, (1 + step) / (10 + step)))
            loss_sum = loss_sum + loss.detach() * n_tok  # stays on the device: no wait per step
            tok_sum += n_tok
            n_tok_epoch += n_tok
            now = time.time()
            bar.update()
            if b % 20 == 0 or b == len(batches):
                bar.set_postfix(loss=f"{loss.item():.3f}", tok_s=f"{n_tok_epoch / (now - t0):.0f}", lr=f"{lr:.2e}")
            if now - last_save > a.save_minutes * 60:
                mid = {"epoch": epoch - 1, "step": step, "elapsed": elapsed + now - t0, "batch": b}
                save_state(out / "state", model, ema, opt, {**meta, **mid})
                last_save = now
            if a.max_minutes and elapsed + (now - t0) > a.max_minutes * 60:
                stop = True
                break
        bar.close()
        if profiler is not None:
            profiler.close(step + 1)  # an epoch's end ends a profile: validation is not a training step
        skip = 0
        tps = n_tok_epoch / max(time.time() - t0, 1e-9)
        # Validation is part of the wall-clock budget: --max-minutes bounds training + evaluation.
        want_bleu = stop or not a.max_minutes or (elapsed + time.time() - t0) >= a.bleu_after * a.max_minutes * 60
        val_loss, val_bleu, _ = evaluate(model, tok, val_pairs, val_ex, device, a.max_tokens, bleu=want_bleu and not a.ema)
        row = {
            "epoch": epoch,
            "step": step,
            "lr": lr,
            "train_loss": float(loss_sum) / max(tok_sum, 1),
            "val_loss": val_loss,
            "val_bleu": val_bleu,
            "tokens_per_s": tps,
        }
        raw = {k: v.clone() for k, v in model.state_dict().items()}
        if a.ema:
            model.load_state_dict({**raw, **ema})
            row["ema_val_loss"], row["ema_val_bleu"], hyps = evaluate(
                model, tok, val_pairs, val_ex, device, a.max_tokens, bleu=want_bleu
            )
            model.load_state_dict(raw)
            row["ema_val_bleu_by_corpus"] = bleu_by_corpus(hyps, val_sets)
        elapsed += time.time() - t0
        row["minutes"] = elapsed / 60
        with open(log_path, "a", newline="") as f:
            csv.DictWriter(f, fields).writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in row.items()})
        tqdm.write(
            f"epoch {epoch}: train {row['train_loss']:.3f} val loss {val_loss:.3f} BLEU {val_bleu:.2f}"
            + (f" | EMA val loss {row['ema_val_loss']:.3f} BLEU {row['ema_val_bleu']:.2f}" if a.ema else "")
            + (f" ({row['ema_val_bleu_by_corpus']})" if row.get("ema_val_bleu_by_corpus") else "")
            + f" | {tps:.0f} tok/s, {elapsed / 60:.1f} min"
            + gpu_memory_line(device)
        )
        for which, bleu, weights in [("raw", val_bleu, raw), ("ema", row.get("ema_val_bleu", -1), {**raw, **ema})]:
            if bleu > meta["best_bleu"]:
                meta["best_bleu"], meta["best"] = (
                    bleu,
                    {"epoch": epoch, "weights": which, "val_loss": row["val_loss" if which == "raw" else "ema_val_loss"]},
                )
                model.load_state_dict(weights)
                save_checkpoint(model, tok, out)
                model.load_state_dict(raw)
        meta.update(epoch=epoch, step=step, elapsed=elapsed, batch=0)
        save_state(out / "state", model, ema, opt, meta)
        last_save = time.time()
        metrics = {
            "task": a.task,
            "val_bleu_greedy": meta["best_bleu"],
            "selected": meta["best"],
            "epochs_run": epoch,
            "train_minutes": round(elapsed / 60, 2),
            "tokens_per_s": round(tps),
            "n_params": model.n_params(),
            "args": {k: v for k, v in vars(a).items() if k not in ("resume", "quiet")},
        }
        mpath = out / "metrics.json"
        old = json.loads(mpath.read_text()) if mpath.exists() else {}
        old.update({"training": metrics})
        mpath.write_text(json.dumps(old, indent=2) + "\n")
        if stop:
            break
    data.close()  # ends a --prefetch worker
    return meta


if __name__ == "__main__":
    main()

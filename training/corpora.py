"""Parallel text: reading corpora by name (Multi30k, Tatoeba, BConTrasT, or any folder of
``{split}.{src,tgt}[.gz]`` under the data root), mixing them with sampling weights, encoding and batching
by token count. What is done to the pairs on the way (entity swap, dates, clock times, negation and spelling
practice) is in ``training.transforms``."""

from __future__ import annotations

import gzip
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from model.tokenizer import PieceTokenizer

MULTI30K_ENV = "MULTI30K_DIR"
DATA_ROOT_ENV = "ATTN_DATA_ROOT"
DEV_SPLITS = ("dev", "val")  # the tuning split's name, in the order it is looked for


def default_data_dir() -> Path | None:
    """Where Multi30k's raw files are: ``$MULTI30K_DIR``, else ``../shared/data/multi30k``,
    else ``data/multi30k`` (relative to the repository). None if none exists."""
    root = Path(__file__).resolve().parent.parent
    candidates = [os.environ.get(MULTI30K_ENV), root.parent / "shared/data/multi30k", root / "data/multi30k"]
    for c in candidates:
        if c and (Path(c) / "train.en.gz").exists() or c and (Path(c) / "train.en").exists():
            return Path(c)
    return None


def data_root() -> Path | None:
    """The folder that holds one folder per corpus: ``$ATTN_DATA_ROOT``, else ``../shared/data``
    beside the clone, else ``data/`` inside it. None if none exists."""
    root = Path(__file__).resolve().parent.parent
    for c in (os.environ.get(DATA_ROOT_ENV), root.parent / "shared/data", root / "data"):
        if c and Path(c).is_dir():
            return Path(c)
    return None


def corpus_dir(name: str, root: str | Path | None = None) -> Path:
    """The folder of corpus ``name`` (``ROOT/name``; Multi30k also honours ``$MULTI30K_DIR``).

    Raises FileNotFoundError naming where it looked.
    """
    if name == "multi30k" and root is None and os.environ.get(MULTI30K_ENV):
        return Path(os.environ[MULTI30K_ENV])
    base = Path(root) if root is not None else data_root()
    if base is None or not (base / name).is_dir():
        raise FileNotFoundError(
            f"corpus {name!r} not found: no folder {name}/ under {base or 'the data root'} (set ${DATA_ROOT_ENV})"
        )
    return base / name


def splits_of(folder: str | Path, lang: str = "en") -> list[str]:
    """Every split name in ``folder`` that has a ``{split}.{lang}[.gz]`` file, sorted."""
    names = {p.name.removesuffix(".gz").removesuffix(f".{lang}") for p in Path(folder).glob(f"*.{lang}*")}
    return sorted(n for n in names if (Path(folder) / f"{n}.{lang}.gz").exists() or (Path(folder) / f"{n}.{lang}").exists())


def dev_split(folder: str | Path, lang: str = "en") -> str:
    """The tuning split of a corpus folder: ``dev``, else ``val``. Raises FileNotFoundError."""
    have = splits_of(folder, lang)
    for s in DEV_SPLITS:
        if s in have:
            return s
    raise FileNotFoundError(f"{folder} has no dev or val split (splits: {have})")


def test_splits(folder: str | Path, lang: str = "en") -> list[str]:
    """The test splits of a corpus folder: every split whose name starts with ``test``."""
    return [s for s in splits_of(folder, lang) if s.startswith("test")]


def parse_corpus_spec(spec: str) -> tuple[str, float]:
    """``"tatoeba"`` -> ("tatoeba", 1.0); ``"multi30k:3"`` -> ("multi30k", 3.0).

    Raises ValueError for an empty name or a weight that is not a positive number.
    """
    name, _, w = spec.partition(":")
    try:
        weight = float(w) if w else 1.0
    except ValueError:
        raise ValueError(f"--corpus {spec!r}: the weight after ':' must be a number") from None
    if not name or not weight > 0:
        raise ValueError(f"--corpus {spec!r}: give NAME or NAME:WEIGHT with WEIGHT > 0")
    return name, weight


def weighted_mix(sizes: list[int], weights: list[float], seed: int) -> list[tuple[int, int]]:
    """One epoch of a weighted mix of corpora: (corpus index, example index) pairs.

    Corpus c contributes ``weights[c] * sizes[c]`` examples: every example ``floor(weight)`` times,
    plus a random ``weight - floor(weight)`` share of its examples once more (fairseq-style
    up/down-sampling). Deterministic for a given ``seed``.
    """
    rng = random.Random(seed)
    out: list[tuple[int, int]] = []
    for c, (n, w) in enumerate(zip(sizes, weights, strict=True)):
        whole, frac = int(w), w - int(w)
        out += [(c, i) for _ in range(whole) for i in range(n)]
        out += [(c, i) for i in rng.sample(range(n), round(frac * n))]
    return out


def read_lines(path: str | Path) -> list[str]:
    """Lines of a UTF-8 text file, gzip-compressed if it ends in ``.gz``; trailing newlines stripped."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def split_file(data_dir: str | Path, split: str, lang: str) -> Path:
    """``DIR/{split}.{lang}.gz`` (Multi30k ``data/task1/raw`` layout) or the uncompressed file.

    Raises FileNotFoundError naming both candidates.
    """
    d = Path(data_dir)
    for p in (d / f"{split}.{lang}.gz", d / f"{split}.{lang}"):
        if p.exists():
            return p
    raise FileNotFoundError(f"no {split}.{lang}.gz or {split}.{lang} in {d}")


def read_pairs(src_path: str | Path, tgt_path: str | Path) -> list[tuple[str, str]]:
    """Aligned (source, target) sentence pairs. Raises ValueError if the files differ in length."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise ValueError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}")
    return list(zip(src, tgt, strict=True))


def pad_batch(seqs: list[list[int]], pad_id: int) -> Tensor:
    """Right-pad id lists into a ``(B, T_max)`` long tensor.

    The rows are padded as Python lists and made into one tensor by one call: a row at a time cost ~20 µs a row,
    ~80 ms for a GPU batch of 48,000 tokens (bench/README 10), more than a GPU step.
    """
    T = max(len(s) for s in seqs)
    return torch.tensor([list(s) + [pad_id] * (T - len(s)) for s in seqs], dtype=torch.long)  # (B, T_max)


def token_batches(
    examples: list[tuple[list[int], list[int]]],
    max_tokens: int,
    *,
    shuffle: bool,
    seed: int = 0,
) -> Iterator[list[int]]:
    """Indices of examples grouped so that each batch holds at most ``max_tokens`` padded tokens
    (source + target, ``B * (S_max + T_max)``); an example longer than that is a batch on its own.
    Every example is in exactly one batch. Examples are sorted by length within shuffled buckets,
    so padding is small.
    """
    rng = random.Random(seed)
    order = list(range(len(examples)))
    if shuffle:
        rng.shuffle(order)
    batches: list[list[int]] = []
    bucket = 100 * 64
    for start in range(0, len(order), bucket):
        chunk = sorted(order[start : start + bucket], key=lambda i: (len(examples[i][0]), len(examples[i][1])))
        cur: list[int] = []
        long_src = long_tgt = 0  # source and target are padded separately: B * (S_max + T_max) tokens
        for i in chunk:
            s, t = len(examples[i][0]), len(examples[i][1])
            if cur and (max(long_src, s) + max(long_tgt, t)) * (len(cur) + 1) > max_tokens:
                batches.append(cur)
                cur, long_src, long_tgt = [], 0, 0
            cur.append(i)
            long_src, long_tgt = max(long_src, s), max(long_tgt, t)
        if cur:
            batches.append(cur)
    if shuffle:
        rng.shuffle(batches)
    yield from batches


@dataclass(frozen=True)
class Corpus:
    """Named sentence pairs and the weight they are sampled with in each training epoch."""

    name: str
    pairs: list[tuple[str, str]]
    weight: float = 1.0


def encode_pairs(tok: PieceTokenizer, pairs, max_len: int, keep_slots: bool = False) -> list:
    """(src ids + <eos>, <bos> + tgt ids + <eos>) for each (source, target) text pair, dropping pairs whose target is
    longer than ``max_len`` tokens (the source is cut to ``max_len``); ``keep_slots``: None in their place, so that
    example k is pair k."""
    out = []
    for source, target in pairs:
        src = tok.encode(source)[: max_len - 1] + [tok.eos_id]
        tgt = [tok.bos_id] + tok.encode(target, target=True) + [tok.eos_id]
        if len(tgt) <= max_len:
            out.append((src, tgt))
        elif keep_slots:
            out.append(None)
    return out

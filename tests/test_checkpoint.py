"""model/checkpoint.py: safetensors + JSON round trips, tying, clear errors, an inference-ready model."""

from __future__ import annotations

import json
import struct

import pytest
import torch

from model.checkpoint import load_checkpoint, pick_device, save_checkpoint
from model.tokenizer import Tokenizer
from model.transformer import Transformer, TransformerConfig

CORPUS = ["A man is riding a bicycle.", "Two dogs are playing in the snow."] * 2

VARIANTS = {
    "tied": {},
    "untied": {"tie_embeddings": False},
    "post-LN-learned": {"norm_first": False, "pos_encoding": "learned"},
}


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.build(CORPUS)


def make_model(tok: Tokenizer, seed: int = 0, **overrides) -> Transformer:
    cfg = dict(vocab_size=tok.vocab_size, d_model=16, n_heads=2, d_ff=32, n_enc_layers=1, n_dec_layers=2, dropout=0.1, max_len=32)
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(**{**cfg, **overrides}))


def sample(tok: Tokenizer):
    src = torch.tensor([tok.encode(" A man is riding a bicycle.") + [tok.eos_id]])
    tgt = torch.tensor([[tok.bos_id] + tok.encode(" Two dogs are playing")])
    return src, tgt


@pytest.mark.parametrize("variant", VARIANTS)
def test_round_trip_equals_the_fp16_cast_model(tok, tmp_path, variant):
    model = make_model(tok, **VARIANTS[variant])
    save_checkpoint(model, tok, tmp_path)
    loaded = load_checkpoint(tmp_path, "cpu")
    # the reference: the saved model with every weight rounded to fp16 and back
    ref = make_model(tok, seed=1, **VARIANTS[variant])
    ref.load_state_dict({k: v.half().float() for k, v in model.state_dict().items()})
    ref.eval()
    src, tgt = sample(tok)
    with torch.no_grad():
        got = loaded.model(src, tgt, need_weights=True)
        want = ref(src, tgt, need_weights=True)
        orig = model.eval()(src, tgt)
    torch.testing.assert_close(got.logits, want.logits, atol=1e-6, rtol=0)
    torch.testing.assert_close(got.cross_attn, want.cross_attn, atol=1e-6, rtol=0)
    torch.testing.assert_close(got.logits, orig.logits, atol=0.05, rtol=0.01)  # within fp16 rounding of the original
    assert loaded.model.cfg == model.cfg
    assert loaded.tokenizer.cl100k_of == tok.cl100k_of
    assert loaded.device == torch.device("cpu") and loaded.path == tmp_path
    for name, p in loaded.model.state_dict().items():
        assert p.dtype == torch.float32, name


def test_float32_storage_is_exact(tok, tmp_path):
    model = make_model(tok).eval()
    save_checkpoint(model, tok, tmp_path, dtype=torch.float32)
    loaded = load_checkpoint(tmp_path, "cpu").model
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("tie", [True, False])
def test_tied_embeddings_stay_tied_and_are_stored_once(tok, tmp_path, tie):
    save_checkpoint(make_model(tok, tie_embeddings=tie), tok, tmp_path)
    m = load_checkpoint(tmp_path, "cpu").model
    header = read_header(tmp_path / "model.safetensors")
    if tie:
        assert m.tgt_emb.weight is m.src_emb.weight
        assert "src_emb.weight" in header and "tgt_emb.weight" not in header
    else:
        assert m.tgt_emb.weight is not m.src_emb.weight and not torch.equal(m.tgt_emb.weight, m.src_emb.weight)
        assert {"src_emb.weight", "tgt_emb.weight", "generator.weight"} <= header.keys()


def read_header(path) -> dict:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert raw[8:9] == b"{", "safetensors: an 8-byte little-endian header length, then a JSON object"
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__", None)
    return header


def test_weights_file_is_safetensors_fp16(tok, tmp_path):
    save_checkpoint(make_model(tok), tok, tmp_path)
    header = read_header(tmp_path / "model.safetensors")
    assert header and all(v["dtype"] == "F16" for v in header.values())
    assert header["src_emb.weight"]["shape"] == [tok.vocab_size, 16]
    assert not (tmp_path / "model.safetensors.tmp").exists()
    assert json.loads((tmp_path / "config.json").read_text())["vocab_size"] == tok.vocab_size
    assert Tokenizer.load(tmp_path / "vocab.json").cl100k_of == tok.cl100k_of


def test_loaded_model_is_frozen_and_in_eval_mode(tok, tmp_path):
    save_checkpoint(make_model(tok), tok, tmp_path)
    m = load_checkpoint(tmp_path, "cpu").model
    assert not any(p.requires_grad for p in m.parameters())
    assert not any(mod.training for mod in m.modules())
    src, tgt = sample(tok)
    with torch.no_grad():  # dropout=0.1 in the config, yet two calls agree: eval mode
        assert torch.equal(m(src, tgt).logits, m(src, tgt).logits)


@pytest.mark.parametrize("missing", ["model.safetensors", "config.json", "vocab.json"])
def test_missing_file_raises_file_not_found_naming_it(tok, tmp_path, missing):
    save_checkpoint(make_model(tok), tok, tmp_path)
    (tmp_path / missing).unlink()
    with pytest.raises(FileNotFoundError, match=missing) as e:
        load_checkpoint(tmp_path, "cpu")
    assert "model.safetensors, config.json, vocab.json" in str(e.value)


def test_missing_folder_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing"):
        load_checkpoint(tmp_path / "nowhere", "cpu")


def test_vocab_that_does_not_match_the_config_raises(tok, tmp_path):
    save_checkpoint(make_model(tok), tok, tmp_path)
    Tokenizer.build(CORPUS + ["Many more words give a bigger vocabulary."] * 2).save(tmp_path / "vocab.json")
    with pytest.raises(ValueError, match="vocab"):
        load_checkpoint(tmp_path, "cpu")


def test_weights_that_do_not_fit_the_config_raise_value_error(tok, tmp_path):
    bigger = Tokenizer.build(CORPUS + ["Many more words give a bigger vocabulary."] * 2)
    save_checkpoint(make_model(bigger), bigger, tmp_path / "big")
    save_checkpoint(make_model(tok), tok, tmp_path / "small")
    (tmp_path / "small" / "model.safetensors").write_bytes((tmp_path / "big" / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match="fit"):
        load_checkpoint(tmp_path / "small", "cpu")
    # a missing layer (a 1-decoder-layer file for a 2-layer config) is caught too
    save_checkpoint(make_model(tok, n_dec_layers=1), tok, tmp_path / "short")
    (tmp_path / "small" / "model.safetensors").write_bytes((tmp_path / "short" / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match="decoder.1"):
        load_checkpoint(tmp_path / "small", "cpu")


def test_pick_device():
    assert pick_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    assert pick_device().type == expected
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            pick_device("cuda")


def test_target_vocabulary_round_trips_and_must_match_the_config(tmp_path):
    tok = Tokenizer.build(CORPUS, tgt_texts=["Two dogs are playing in the snow."] * 2)
    assert tok.tgt_vocab_size < tok.vocab_size
    model = make_model(tok, tgt_vocab_size=tok.tgt_vocab_size)
    save_checkpoint(model, tok, tmp_path)
    loaded = load_checkpoint(tmp_path, "cpu")
    assert loaded.model.cfg.n_logits == loaded.tokenizer.tgt_vocab_size == tok.tgt_vocab_size
    src, tgt = sample(tok)
    with torch.no_grad():
        assert loaded.model(src, tgt).logits.shape[-1] == tok.tgt_vocab_size
    Tokenizer.build(CORPUS).save(tmp_path / "vocab.json")  # same pieces, no target part
    with pytest.raises(ValueError, match="target"):
        load_checkpoint(tmp_path, "cpu")

"""model/checkpoint.py: safetensors + JSON round trips, tying, clear errors, an inference-ready model."""

from __future__ import annotations

import importlib.util
import json
import re
import struct
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from model.checkpoint import (
    PRETRAINED,
    ROOT,
    average_checkpoints,
    convert_legacy_state_dict,
    legacy_name,
    load_checkpoint,
    main,
    pick_device,
    save_checkpoint,
)
from model.tokenizer import PieceTokenizer, TiktokenTokenizer
from model.transformer import Interventions, Transformer, TransformerConfig
from training.train import load_state, save_state

CORPUS = ["A man is riding a bicycle.", "Two dogs are playing in the snow."] * 2

VARIANTS = {
    "tied": {},
    "untied": {"tie_embeddings": False},
    "post-LN-learned": {"norm_first": False, "pos_encoding": "learned"},
}


@pytest.fixture(scope="module")
def tok() -> PieceTokenizer:
    return TiktokenTokenizer.build(CORPUS)


def make_model(tok: PieceTokenizer, seed: int = 0, **overrides) -> Transformer:
    cfg = dict(vocab_size=tok.vocab_size, d_model=16, n_heads=2, d_ff=32, n_enc_layers=1, n_dec_layers=2, dropout=0.1, max_len=32)
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(**{**cfg, **overrides}))


def sample(tok: PieceTokenizer):
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
    assert TiktokenTokenizer.load(tmp_path / "vocab.json").cl100k_of == tok.cl100k_of


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
    TiktokenTokenizer.build(CORPUS + ["Many more words give a bigger vocabulary."] * 2).save(tmp_path / "vocab.json")
    with pytest.raises(ValueError, match="vocab"):
        load_checkpoint(tmp_path, "cpu")


def test_weights_that_do_not_fit_the_config_raise_value_error(tok, tmp_path):
    bigger = TiktokenTokenizer.build(CORPUS + ["Many more words give a bigger vocabulary."] * 2)
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
    tok = TiktokenTokenizer.build(CORPUS, tgt_texts=["Two dogs are playing in the snow."] * 2)
    assert tok.tgt_vocab_size < tok.vocab_size
    model = make_model(tok, tgt_vocab_size=tok.tgt_vocab_size)
    save_checkpoint(model, tok, tmp_path)
    loaded = load_checkpoint(tmp_path, "cpu")
    assert loaded.model.cfg.n_logits == loaded.tokenizer.tgt_vocab_size == tok.tgt_vocab_size
    src, tgt = sample(tok)
    with torch.no_grad():
        assert loaded.model(src, tgt).logits.shape[-1] == tok.tgt_vocab_size
    TiktokenTokenizer.build(CORPUS).save(tmp_path / "vocab.json")  # same pieces, no target part
    with pytest.raises(ValueError, match="target"):
        load_checkpoint(tmp_path, "cpu")


# -- the one-time rename of the sub-layer LayerNorms ------------------------------------------------------------

LEGACY_COMMIT = "5a16ae1be57766ecb8befafe94df8aa67c43773b"  # the last commit with the old names and the old layers


def to_legacy(name: str) -> str:
    """The name a parameter had before the rename (written out here, independently of LEGACY_NAMES)."""
    name = re.sub(r"(encoder\.\d+)\.self_attn_norm\.", r"\1.sub_attn.norm.", name)
    name = re.sub(r"(decoder\.\d+)\.self_attn_norm\.", r"\1.sub_self.norm.", name)
    name = re.sub(r"(decoder\.\d+)\.cross_attn_norm\.", r"\1.sub_cross.norm.", name)
    return re.sub(r"((?:en|de)coder\.\d+)\.ff_norm\.", r"\1.sub_ff.norm.", name)


def git_show(path: str) -> bytes:
    """``path`` as it was at LEGACY_COMMIT; skips the test when git or that history is not here."""
    try:
        r = subprocess.run(["git", "-C", str(ROOT), "show", f"{LEGACY_COMMIT}:{path}"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"git is not available: {e}")
    if r.returncode:
        pytest.skip(f"commit {LEGACY_COMMIT[:7]} is not in this clone's history: {r.stderr.decode().strip()}")
    return r.stdout


@pytest.fixture(scope="module")
def old(tmp_path_factory):
    """The old model/transformer.py (sub-layers ``SubLayer.pre``/``post``, callers projecting K/V), as a module."""
    path = tmp_path_factory.mktemp("legacy") / "legacy_transformer.py"
    path.write_bytes(git_show("model/transformer.py"))
    spec = importlib.util.spec_from_file_location("legacy_transformer", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


INTERVENTION_CASES = [
    Interventions(),
    Interventions(src_hidden={1, 3}, window=3, temperature=1.7),
    Interventions(causal=False, use_pos_encoding=False, ablate={("enc_self", 0, 1), ("cross", 1, 0), ("dec_self", 0, 2)}),
]


def assert_same_outputs(old, old_model, new_model, src, tgt):
    """Logits and every attention map of the old and the new code agree to 1e-6, under each of INTERVENTION_CASES."""
    for interventions in INTERVENTION_CASES:
        old_interventions = old.Interventions(**{f: getattr(interventions, f) for f in interventions.__dataclass_fields__})
        with torch.no_grad():
            want = old_model(src, tgt, old_interventions, need_weights=True)
            fused = new_model(
                src, tgt, interventions
            )  # the inference path: logits through eval()'s (D, V) copy, another sum order
        with torch.enable_grad():  # the old code's arithmetic (h @ w.T), so 1e-6 holds (the weights need no grad)
            got = new_model(src, tgt, interventions, need_weights=True)
        for name in ("logits", "enc_self_attn", "dec_self_attn", "cross_attn"):
            torch.testing.assert_close(getattr(got, name), getattr(want, name), atol=1e-6, rtol=0, msg=f"{name} {interventions}")
        torch.testing.assert_close(fused.logits, want.logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("old_name", "name", "shipped_is_converted"), [("en-de", "en-de-captions", True), ("reverse", "reverse", False)]
)
def test_converted_pretrained_weights_give_the_old_models_outputs(old, tmp_path, old_name, name, shipped_is_converted):
    """The old files of the caption model (pretrained/en-de until the general model replaced it) and of the toy model,
    with their LayerNorm names converted, give the old code's outputs. The caption model ships as that conversion; the
    toy model now ships as its recipe's replay (tests/test_recipe.py), so its old file is converted here."""
    legacy = tmp_path / "model.safetensors"
    legacy.write_bytes(git_show(f"pretrained/{old_name}/model.safetensors"))
    old_tensors = load_file(str(legacy))
    assert any(k != legacy_name(k) for k in old_tensors)
    if shipped_is_converted:  # the committed file is the old one renamed: same tensors, bit for bit, tied weight once
        folder = PRETRAINED / name
        new_tensors = load_file(str(folder / "model.safetensors"))
        assert all(k == legacy_name(k) for k in new_tensors)
        assert {legacy_name(k) for k in old_tensors} == new_tensors.keys()
        for k, v in old_tensors.items():
            assert v.dtype == new_tensors[legacy_name(k)].dtype == torch.float16 and torch.equal(
                v, new_tensors[legacy_name(k)]
            ), k
    else:  # the old file renamed, beside the shipped config and vocabulary
        folder = tmp_path / "converted"
        folder.mkdir()
        save_file({legacy_name(k): v for k, v in old_tensors.items()}, str(folder / "model.safetensors"))
        for f in ("config.json", "vocab.json"):
            (folder / f).write_bytes((PRETRAINED / name / f).read_bytes())
    cfg = json.loads((PRETRAINED / name / "config.json").read_text())
    old_fields = set(old.TransformerConfig.__dataclass_fields__)  # a newer config.json also writes newer defaults
    old_model = old.Transformer(old.TransformerConfig.from_dict({k: v for k, v in cfg.items() if k in old_fields}))
    missing, unexpected = old_model.load_state_dict({k: v.float() for k, v in old_tensors.items()}, strict=False)
    assert set(missing) <= {"tgt_emb.weight"} and not unexpected
    loaded = load_checkpoint(folder, "cpu")
    tok = loaded.tokenizer
    src = torch.tensor([tok.encode(" A dog jumps over a green fence.") + [tok.eos_id]])  # (1, S)
    tgt = torch.tensor([[tok.bos_id] + tok.encode(" Ein Hund springt über einen")])  # (1, T)
    assert_same_outputs(old, old_model.eval(), loaded.model, src, tgt)


@pytest.mark.parametrize("variant", VARIANTS)
def test_legacy_state_dict_converts_into_the_new_layout(old, tok, variant):
    """A random old-code model of each variant (post-LN too), renamed, gives the same outputs in the new code."""
    cfg = dict(vocab_size=tok.vocab_size, d_model=16, n_heads=2, d_ff=32, n_enc_layers=2, n_dec_layers=2, dropout=0.0, max_len=32)
    torch.manual_seed(3)
    old_model = old.Transformer(old.TransformerConfig(**cfg, **VARIANTS[variant])).eval()
    with torch.no_grad():  # LayerNorms (and biases) away from weight 1, bias 0, so a swapped norm would show
        for p in old_model.parameters():
            if p.dim() == 1:
                p.normal_(0.5, 0.3)
    legacy = old_model.state_dict()
    assert any(".sub_cross.norm." in k for k in legacy)
    new_model = make_model(tok, seed=4, **{**cfg, **VARIANTS[variant]}).eval()
    new_model.load_state_dict(convert_legacy_state_dict(legacy), strict=True)
    src, tgt = sample(tok)
    assert_same_outputs(old, old_model, new_model, src, tgt)


def test_legacy_names_map_onto_the_current_ones(tok):
    model = make_model(tok, n_enc_layers=2, n_dec_layers=2)
    current = list(model.state_dict())
    legacy = [to_legacy(k) for k in current]
    assert "encoder.1.sub_attn.norm.weight" in legacy and "decoder.1.sub_self.norm.bias" in legacy
    assert sum(a != b for a, b in zip(current, legacy, strict=True)) == 2 * (2 * 2 + 2 * 3)  # weight + bias per norm
    assert [legacy_name(k) for k in legacy] == current
    assert [legacy_name(k) for k in current] == current  # current names are left alone
    for prefix, suffix in (("model.", ""), ("ema.", ""), ("opt.", ".exp_avg_sq")):
        assert (
            legacy_name(prefix + "decoder.0.sub_cross.norm.weight" + suffix)
            == prefix + "decoder.0.cross_attn_norm.weight" + suffix
        )
    with pytest.raises(ValueError, match="both"):
        convert_legacy_state_dict({"encoder.0.sub_ff.norm.bias": torch.zeros(1), "encoder.0.ff_norm.bias": torch.zeros(1)})


def write_legacy(folder) -> dict:
    """Rewrite ``folder/model.safetensors`` under the old names; returns the current-named tensors."""
    tensors = load_file(str(folder / "model.safetensors"))
    save_file({to_legacy(k): v for k, v in tensors.items()}, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return tensors


@pytest.mark.parametrize("tie", [True, False])
def test_convert_command_rewrites_a_legacy_folder_in_place(tok, tmp_path, capsys, tie):
    model = make_model(tok, tie_embeddings=tie)
    save_checkpoint(model, tok, tmp_path)
    want = write_legacy(tmp_path)
    assert any(".sub_ff.norm." in k for k in read_header(tmp_path / "model.safetensors"))
    before = load_checkpoint(tmp_path, "cpu").model  # old names load too, renamed in memory
    main(["convert", str(tmp_path)])
    assert "renamed 16 tensors" in capsys.readouterr().out  # (1 encoder x 2 + 2 decoders x 3 norms) x (weight, bias)
    header = read_header(tmp_path / "model.safetensors")
    assert header.keys() == want.keys() and all(v["dtype"] == "F16" for v in header.values())
    assert ("tgt_emb.weight" in header) == (not tie)  # a tied weight is still stored once
    got = load_file(str(tmp_path / "model.safetensors"))
    assert all(torch.equal(got[k], want[k]) for k in want)
    after = load_checkpoint(tmp_path, "cpu").model
    src, tgt = sample(tok)
    with torch.no_grad():
        torch.testing.assert_close(after(src, tgt).logits, before(src, tgt).logits, atol=0, rtol=0)
    main(["convert", str(tmp_path)])  # a second run changes nothing
    assert "already uses the current names" in capsys.readouterr().out
    assert load_file(str(tmp_path / "model.safetensors")).keys() == want.keys()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        main(["convert", str(tmp_path / "nowhere")])


def train_setup(tok, seed: int):
    """A model, its EMA dict and AdamW, as training/train.py builds them."""
    model = make_model(tok, seed=seed)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
    ema = {k: v.detach().clone() for k, v in model.state_dict().items() if v.is_floating_point()}
    return model, ema, opt


def test_load_state_accepts_a_state_saved_under_the_old_names(tok, tmp_path):
    model, ema, opt = train_setup(tok, seed=0)
    src, tgt = sample(tok)
    for _ in range(2):  # two AdamW steps: moments and step counts that are not their initial values
        opt.zero_grad()
        model(src, tgt).logits.logsumexp(-1).mean().backward()
        opt.step()
        for k, v in model.state_dict().items():
            ema[k].mul_(0.5).add_(v.detach(), alpha=0.5)
    save_state(tmp_path, model, ema, opt, {"epoch": 1, "step": 2})
    # the same state as the old code wrote it: every model., ema. and opt. key and the step counts under old names
    t = load_file(str(tmp_path / "state.safetensors"))
    legacy = {to_legacy(k): v for k, v in t.items()}
    assert sum(k != to_legacy(k) for k in t) == 16 + 16 + 32  # model. and ema.: 8 norms x (weight, bias); opt.: x 2 moments
    save_file(legacy, str(tmp_path / "state.safetensors"))
    meta = json.loads((tmp_path / "state.json").read_text())
    meta["opt_step"] = {to_legacy(n): s for n, s in meta["opt_step"].items()}
    (tmp_path / "state.json").write_text(json.dumps(meta))

    model2, ema2, opt2 = train_setup(tok, seed=1)
    got_meta = load_state(tmp_path, model2, ema2, opt2)
    assert got_meta["step"] == 2 and set(got_meta["opt_step"]) == {n for n, _ in model.named_parameters()}
    for k, v in model.state_dict().items():
        assert torch.equal(model2.state_dict()[k], v), k
        assert torch.equal(ema2[k], ema[k]), k
    params2 = dict(model2.named_parameters())
    for n, p in model.named_parameters():
        assert torch.equal(opt2.state[params2[n]]["exp_avg"], opt.state[p]["exp_avg"]), n
        assert torch.equal(opt2.state[params2[n]]["exp_avg_sq"], opt.state[p]["exp_avg_sq"]), n
        assert float(opt2.state[params2[n]]["step"]) == float(opt.state[p]["step"]) == 2.0, n


@pytest.mark.parametrize("tie", [True, False])
def test_average_is_the_elementwise_mean_of_the_weights(tok, tmp_path, tie):
    """Checkpoint averaging (section 6.1): every parameter of the result is the mean of the folders' (loaded) ones,
    up to the float16 the result is stored in; tied weights stay tied."""
    dirs = []
    for seed in (1, 2, 3):
        save_checkpoint(make_model(tok, seed, tie_embeddings=tie), tok, tmp_path / f"c{seed}")
        dirs.append(tmp_path / f"c{seed}")
    main(["average", *map(str, dirs), "--out", str(tmp_path / "avg")])
    avg = load_checkpoint(tmp_path / "avg", "cpu").model
    parts = [load_checkpoint(d, "cpu").model.state_dict() for d in dirs]
    for name, got in avg.state_dict().items():
        want = torch.stack([p[name] for p in parts]).mean(dim=0)
        torch.testing.assert_close(got, want.half().float(), rtol=0, atol=0, msg=name)
        if not all(torch.equal(p[name], parts[0][name]) for p in parts):  # LayerNorm's ones are alike in every folder
            assert not torch.equal(got, parts[0][name]), name  # not one folder's weights copied
    assert (avg.tgt_emb.weight is avg.src_emb.weight) == tie
    assert json.loads((tmp_path / "avg" / "metrics.json").read_text())["averaged_from"] == [str(d) for d in dirs]


def test_average_refuses_checkpoints_of_another_shape(tok, tmp_path):
    save_checkpoint(make_model(tok), tok, tmp_path / "a")
    save_checkpoint(make_model(tok, d_ff=64), tok, tmp_path / "b")
    with pytest.raises(ValueError, match="another config"):
        average_checkpoints([tmp_path / "a", tmp_path / "b"], tmp_path / "avg")
    with pytest.raises(ValueError, match="at least two"):
        average_checkpoints([tmp_path / "a"], tmp_path / "avg")

"""Checkpoints (safetensors weights + JSON config and vocabulary) and device choice.

A checkpoint folder holds ``model.safetensors`` (fp16 by default), ``config.json`` (the
``TransformerConfig``) and ``vocab.json`` (the tokenizer). Nothing is ever unpickled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from model.tokenizer import Tokenizer
from model.transformer import Transformer, TransformerConfig

ROOT = Path(__file__).resolve().parent.parent
PRETRAINED = ROOT / "pretrained"


def pick_device(name: str | None = None) -> torch.device:
    """``name`` if given ("cpu", "cuda", "mps"), else CUDA, then Apple MPS, then CPU.

    Raises ValueError if the named device is not available here.
    """
    if name:
        dev = torch.device(name)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device 'cuda' asked for, but CUDA is not available")
        if dev.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError("device 'mps' asked for, but Apple MPS is not available")
        return dev
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def save_checkpoint(model: Transformer, tok: Tokenizer, out_dir: str | Path, *, dtype=torch.float16) -> None:
    """Write ``model.safetensors`` (tied weights stored once, in ``dtype``), ``config.json``, ``vocab.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors, seen = {}, set()
    for name, p in model.state_dict().items():
        if p.data_ptr() in seen:  # a tied weight: stored once under its first name
            continue
        seen.add(p.data_ptr())
        tensors[name] = p.detach().to("cpu", dtype if p.is_floating_point() else p.dtype).contiguous()
    tmp = out / "model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.replace(out / "model.safetensors")
    (out / "config.json").write_text(json.dumps(model.cfg.to_dict(), indent=2) + "\n")
    tok.save(out / "vocab.json")


@dataclass(frozen=True)
class Loaded:
    """A model in eval mode on its device, its tokenizer and the folder it came from."""

    model: Transformer
    tokenizer: Tokenizer
    path: Path
    device: torch.device


def load_checkpoint(path: str | Path, device: str | torch.device | None = None) -> Loaded:
    """Load a checkpoint folder into an eval-mode float32 model.

    Raises:
        FileNotFoundError: if the folder or one of its three files is missing.
        ValueError: if the weights do not fit the config.
    """
    p = Path(path)
    for f in ("model.safetensors", "config.json", "vocab.json"):
        if not (p / f).exists():
            raise FileNotFoundError(f"{p / f} is missing: a checkpoint folder needs model.safetensors, config.json, vocab.json")
    cfg = TransformerConfig.from_dict(json.loads((p / "config.json").read_text()))
    tok = Tokenizer.load(p / "vocab.json")
    if tok.vocab_size != cfg.vocab_size:
        raise ValueError(f"vocab.json has {tok.vocab_size} tokens but config.json says {cfg.vocab_size}")
    if tok.tgt_vocab_size != cfg.n_logits:
        raise ValueError(f"vocab.json has {tok.tgt_vocab_size} target tokens but config.json says {cfg.n_logits}")
    model = Transformer(cfg)
    tensors = {k: v.float() for k, v in load_file(str(p / "model.safetensors")).items()}
    try:
        missing, unexpected = model.load_state_dict(tensors, strict=False)
    except RuntimeError as e:  # a tensor of the wrong shape
        raise ValueError(f"{p / 'model.safetensors'} does not fit config.json: {e}") from None
    tied = {"tgt_emb.weight"} if cfg.tie_embeddings else set()
    if set(missing) - tied or unexpected:
        raise ValueError(f"weights do not fit config: missing {sorted(set(missing) - tied)}, unexpected {unexpected}")
    dev = device if isinstance(device, torch.device) else pick_device(device)
    model.to(dev).eval()
    for prm in model.parameters():
        prm.requires_grad_(False)
    return Loaded(model, tok, p, dev)

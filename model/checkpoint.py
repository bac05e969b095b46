"""Checkpoints (safetensors weights + JSON config and vocabulary) and device choice.

A checkpoint folder holds ``model.safetensors`` (fp16 by default), ``config.json`` (the
``TransformerConfig``) and ``vocab.json`` (the tokenizer). Nothing is ever unpickled. A folder that also holds
``source.spm`` and ``target.spm`` is an imported OPUS-MT model (``convert.marian``): its ``vocab.json`` is
Marian's, read by ``model.spm_tokenizer.SentencePieceTokenizer`` (``load_tokenizer`` picks the tokenizer).

Weights saved before the LayerNorms of each layer got their own names (``encoder.0.sub_attn.norm.weight``,
now ``encoder.0.self_attn_norm.weight``; see ``LEGACY_NAMES``) still load: ``load_checkpoint`` renames
them in memory. To rewrite a folder's ``model.safetensors`` in place, once (dtypes and tensors kept)::

    python -m model.checkpoint convert pretrained/en-de pretrained/reverse
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from model.spm_tokenizer import SentencePieceTokenizer
from model.tokenizer import PieceTokenizer, TiktokenTokenizer
from model.transformer import Transformer, TransformerConfig

ROOT = Path(__file__).resolve().parent.parent
PRETRAINED = ROOT / "pretrained"

LEGACY_NAMES = {
    "sub_attn.norm": "self_attn_norm",  # encoder layer, around self-attention
    "sub_self.norm": "self_attn_norm",  # decoder layer, around causal self-attention
    "sub_cross.norm": "cross_attn_norm",  # decoder layer, around cross-attention
    "sub_ff.norm": "ff_norm",  # both, around the feed-forward network
}
"""Old module path -> new one, for the LayerNorm of each sub-layer (the only parameters renamed)."""

_LEGACY = re.compile(r"(?<![^.])(" + "|".join(re.escape(k) for k in LEGACY_NAMES) + r")(?=\.)")


def legacy_name(name: str) -> str:
    """The current name of parameter ``name``, which may use the old names of ``LEGACY_NAMES``.

    Works on any prefix or suffix (``model.``, ``ema.``, ``opt.`` … ``.exp_avg`` of a training state):
    ``"opt.decoder.1.sub_cross.norm.bias.exp_avg"`` -> ``"opt.decoder.1.cross_attn_norm.bias.exp_avg"``.
    Current names come back unchanged.
    """
    return _LEGACY.sub(lambda m: LEGACY_NAMES[m.group(1)], name)


def convert_legacy_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with every key renamed by ``legacy_name``; the tensors themselves are the same objects.

    Raises ValueError if two keys would get the same name (an old and a new copy of one parameter).
    """
    out = {legacy_name(k): v for k, v in state.items()}
    if len(out) != len(state):
        raise ValueError("state dict holds both the old and the new name of a parameter")
    return out


def convert_checkpoint(folder: str | Path) -> list[str]:
    """Rewrite ``folder/model.safetensors`` with current parameter names, in place; returns the old names renamed.

    Dtypes and values are kept bit for bit, and so is the set of stored tensors (a tied weight stays
    stored once). A file that already uses the current names is left untouched.

    Raises:
        FileNotFoundError: if ``folder/model.safetensors`` is missing.
    """
    path = Path(folder) / "model.safetensors"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing")
    tensors = load_file(str(path))
    renamed = [k for k in tensors if legacy_name(k) != k]
    if renamed:
        tmp = path.with_name("model.safetensors.tmp")
        save_file(convert_legacy_state_dict(tensors), str(tmp), metadata={"format": "pt"})
        tmp.replace(path)
    return renamed


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


def save_checkpoint(model: Transformer, tok: PieceTokenizer, out_dir: str | Path, *, dtype=torch.float16) -> None:
    """Write ``model.safetensors`` (tied weights stored once, in ``dtype``), ``config.json``, and the tokenizer
    (``tok.save(out_dir / "vocab.json")``: vocab.json, and for a SentencePiece tokenizer source.spm, target.spm)."""
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
    tokenizer: PieceTokenizer  # a TiktokenTokenizer, or a SentencePieceTokenizer for an imported model
    path: Path
    device: torch.device


def load_tokenizer(folder: str | Path) -> PieceTokenizer:
    """The tokenizer of a checkpoint folder: ``SentencePieceTokenizer`` if it holds ``source.spm`` (an imported
    OPUS-MT model, whose decoder starts from config.json's ``bos_id``: Marian's ``decoder_start_token_id``), else
    ``TiktokenTokenizer`` (tiktoken pieces). Errors as the two ``load`` methods raise them, and ``json`` for an
    unreadable config.json."""
    p = Path(folder)
    if (p / "source.spm").is_file():
        config = json.loads((p / "config.json").read_text()) if (p / "config.json").is_file() else {}
        return SentencePieceTokenizer.load(p / "vocab.json", bos_id=config.get("bos_id"))
    return TiktokenTokenizer.load(p / "vocab.json")


class CheckpointError(ValueError):
    """A checkpoint folder that does not load: a file missing, unreadable or corrupt, or weights that do not fit the config.

    ``folder`` is the checkpoint folder; ``reason`` says what is wrong and names files by their name in the folder,
    never by a path (a user interface can show it beside the folder's name). ``str(e)`` is the folder's path and the
    reason, for logs and the command line.
    """

    def __init__(self, reason: str, *, folder: str | Path):
        self.folder, self.reason = Path(folder), reason
        super().__init__(f"checkpoint {self.folder}: {reason}")


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """The checkpoint folder, or one of its three files, is missing (a ``FileNotFoundError`` too)."""


def load_checkpoint(path: str | Path, device: str | torch.device | None = None) -> Loaded:
    """Load a checkpoint folder into an eval-mode float32 model.

    Raises:
        CheckpointNotFoundError: if the folder or one of its three files is missing (a ``CheckpointError``
            and a ``FileNotFoundError``).
        CheckpointError: if a file cannot be read or parsed (unreadable, not JSON, not a safetensors file),
            the config or vocabulary is invalid, or the weights do not fit the config. A ``ValueError``.
        ValueError: if the named ``device`` is not available here (``pick_device``).
    """
    p = Path(path)
    for f in ("model.safetensors", "config.json", "vocab.json"):
        if not (p / f).is_file():
            raise CheckpointNotFoundError(
                f"{f} is missing: a checkpoint folder needs model.safetensors, config.json, vocab.json", folder=p
            )
    try:
        cfg = TransformerConfig.from_dict(json.loads((p / "config.json").read_text()))
    except (OSError, ValueError, TypeError) as e:  # unreadable, not JSON (a ValueError), unknown or bad fields
        raise CheckpointError(f"config.json is not a valid model config ({e})", folder=p) from e
    try:
        tok = load_tokenizer(p)
    except ModuleNotFoundError as e:  # an imported model, and no sentencepiece here
        raise CheckpointError(f"its tokenizer needs the {e.name} package: pip install -r requirements.txt", folder=p) from e
    except (OSError, ValueError, TypeError) as e:
        reason = str(e).replace(f"{p}{os.sep}", "")  # the loaders name files by their path: by their name here
        raise CheckpointError(f"vocab.json cannot be read ({reason})", folder=p) from e
    if tok.vocab_size != cfg.vocab_size:
        raise CheckpointError(f"vocab.json has {tok.vocab_size} tokens but config.json says {cfg.vocab_size}", folder=p)
    if tok.tgt_vocab_size != cfg.n_logits:
        raise CheckpointError(f"vocab.json has {tok.tgt_vocab_size} target tokens but config.json says {cfg.n_logits}", folder=p)
    model = Transformer(cfg)
    try:
        tensors = {legacy_name(k): v.float() for k, v in load_file(str(p / "model.safetensors")).items()}
    except (SafetensorError, OSError) as e:  # a corrupt or truncated file
        raise CheckpointError(f"model.safetensors is not a readable safetensors file ({e})", folder=p) from e
    try:
        missing, unexpected = model.load_state_dict(tensors, strict=False)
    except RuntimeError as e:  # a tensor of the wrong shape
        raise CheckpointError(f"model.safetensors does not fit config.json: {e}", folder=p) from None
    tied = {"tgt_emb.weight"} if cfg.tie_embeddings else set()
    if set(missing) - tied or unexpected:
        raise CheckpointError(
            f"model.safetensors does not fit config.json: missing {sorted(set(missing) - tied)}, unexpected {unexpected}",
            folder=p,
        )
    dev = device if isinstance(device, torch.device) else pick_device(device)
    model.to(dev).eval()
    for prm in model.parameters():
        prm.requires_grad_(False)
    return Loaded(model, tok, p, dev)


def average_checkpoints(dirs: Sequence[str | Path], out_dir: str | Path) -> Path:
    """Average the weights of checkpoints of one architecture and vocabulary into ``out_dir``.

    The paper's base models are "a single model obtained by averaging the last 5 checkpoints" (section 6.1): the
    element-wise mean of every parameter, in float32, saved as ``save_checkpoint`` saves (float16). The folders must
    share ``config.json`` and ``vocab.json`` (stages trained with ``--keep-vocab`` from one another do); the first's
    config and vocabulary are copied. Writes ``metrics.json`` with ``averaged_from`` (the folders) and returns
    ``out_dir``.

    Raises:
        ValueError: fewer than two folders, or folders whose config or vocabulary differ (one config, one set of
            tensor names).
        CheckpointError: a folder that ``load_checkpoint`` cannot read.
    """
    if len(dirs) < 2:
        raise ValueError("averaging needs at least two checkpoints")
    loaded = [load_checkpoint(d, "cpu") for d in dirs]
    first = loaded[0]
    for other in loaded[1:]:
        if other.model.cfg != first.model.cfg:
            raise ValueError(f"{other.path} has another config than {first.path}")
        if (other.path / "vocab.json").read_text() != (first.path / "vocab.json").read_text():
            raise ValueError(f"{other.path} has another vocabulary than {first.path}")
    states = [m.model.state_dict() for m in loaded]
    mean = {k: torch.stack([s[k].float() for s in states]).mean(dim=0) for k in states[0]}  # each (n, *shape) -> shape
    model = Transformer(first.model.cfg)
    model.load_state_dict(mean)
    save_checkpoint(model.eval(), first.tokenizer, out_dir)
    out = Path(out_dir)
    (out / "metrics.json").write_text(json.dumps({"averaged_from": [str(m.path) for m in loaded]}, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> None:
    """``python -m model.checkpoint convert DIR [DIR ...]``: rename old parameter names in each folder's weights;
    ``python -m model.checkpoint average DIR DIR [DIR ...] --out DIR``: average checkpoints (section 6.1)."""
    ap = argparse.ArgumentParser(
        prog="python -m model.checkpoint", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="command", required=True)
    conv = sub.add_parser("convert", help="rewrite DIR/model.safetensors with the current parameter names, in place")
    conv.add_argument("dirs", nargs="+", metavar="DIR", help="checkpoint folder(s)")
    avg = sub.add_parser("average", help="average the weights of checkpoints of one config and vocabulary (paper, 6.1)")
    avg.add_argument("dirs", nargs="+", metavar="DIR", help="checkpoint folders (two or more)")
    avg.add_argument("--out", required=True, help="folder for the averaged checkpoint")
    args = ap.parse_args(argv)
    if args.command == "average":
        print(f"averaged {len(args.dirs)} checkpoints into {average_checkpoints(args.dirs, args.out)}")
        return
    for folder in args.dirs:
        renamed = convert_checkpoint(folder)
        print(f"{folder}: renamed {len(renamed)} tensors" if renamed else f"{folder}: already uses the current names")


if __name__ == "__main__":
    main()

"""Score a checkpoint with sacreBLEU: ``python -m model.evaluate --model pretrained/en-de --data DIR --split test_2016_flickr``.

Prints sacreBLEU's score lines (``BLEU = …``, ``chrF2 = …``; cased, detokenized, default 13a
tokenization) and signatures for greedy and beam-search decoding, and records them under
``evaluation.<split>`` in the checkpoint's ``metrics.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from sacrebleu.metrics import BLEU, CHRF
from tqdm import tqdm

from model.analysis import DecodeSettings
from model.checkpoint import load_checkpoint
from model.data import default_data_dir, pad_batch, read_pairs, split_file, token_batches
from model.decoding import beam_search, greedy_batch
from model.train import encode_pairs


def translate(
    loaded,
    sources: list[str],
    *,
    beam_size: int = 1,
    alpha: float = DecodeSettings.alpha,
    early_stop: bool = DecodeSettings.early_stop,
    max_tokens: int = 4096,
    progress: bool = True,
) -> list[str]:
    """Translate ``sources`` with greedy decoding (batched, ``beam_size`` 1) or beam search (one by one).

    Beam search defaults to the app's settings (``DecodeSettings``: the length penalty and stop rule
    chosen on val for pretrained/en-de). Raises ValueError if a source is longer than ``max_len``.
    """
    model, tok = loaded.model, loaded.tokenizer
    ex = [(s, [0]) for s, _ in encode_pairs(tok, [(s, "") for s in sources], model.cfg.max_len)]
    if len(ex) != len(sources):
        raise ValueError("a source is longer than the model's max_len")
    hyps: list[str] = [""] * len(sources)
    if beam_size == 1:
        batches = list(token_batches(ex, max_tokens, shuffle=False))
        for idx in tqdm(batches, desc="greedy", disable=not progress):
            src = pad_batch([ex[i][0] for i in idx], tok.pad_id).to(loaded.device)
            for i, out in zip(idx, greedy_batch(model, src), strict=True):
                hyps[i] = tok.decode(out).strip()
    else:
        for i, (src_ids, _) in enumerate(tqdm(ex, desc=f"beam {beam_size}", disable=not progress)):
            res = beam_search(model, src_ids, beam_size=beam_size, alpha=alpha, early_stop=early_stop)
            hyps[i] = tok.decode(res.hypotheses[0][0]).strip()
    return hyps


def score(hyps: list[str], refs: list[str]) -> dict:
    """sacreBLEU BLEU and chrF2 (cased, detokenized) with their score lines and signatures."""
    bleu, chrf = BLEU(), CHRF()
    b, c = bleu.corpus_score(hyps, [refs]), chrf.corpus_score(hyps, [refs])
    return {
        "bleu": round(b.score, 2),
        "chrf2": round(c.score, 2),
        "bleu_line": str(b),
        "chrf_line": str(c),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="pretrained/en-de")
    ap.add_argument("--data", help="Multi30k raw folder (default: $MULTI30K_DIR or ../shared/data/multi30k)")
    ap.add_argument("--split", default="test_2016_flickr")
    ap.add_argument("--src-lang", default="en")
    ap.add_argument("--tgt-lang", default="de")
    ap.add_argument("--beam-size", type=int, default=5)
    ap.add_argument(
        "--alpha",
        type=float,
        default=DecodeSettings.alpha,
        help=f"GNMT length penalty for beam search (default {DecodeSettings.alpha}: best on val, README 'Scores')",
    )
    ap.add_argument(
        "--early-stop",
        action=argparse.BooleanOptionalAction,
        default=DecodeSettings.early_stop,
        help="beam search stops once beam-size hypotheses have finished (default --no-early-stop: it goes on while a live one "
        "can still beat them; best on val)",
    )
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--greedy-only", action="store_true", help="skip beam search")
    only.add_argument("--beam-only", action="store_true", help="skip greedy decoding")
    ap.add_argument("--limit", type=int, default=None, help="only the first N sentences")
    ap.add_argument("--device", default=None)
    ap.add_argument("--no-save", action="store_true", help="do not write metrics.json")
    ap.add_argument("--hyps-out", help="write the beam hypotheses to this file")
    a = ap.parse_args(argv)
    d = a.data or default_data_dir()
    if d is None:
        raise SystemExit("no data: pass --data DIR (Multi30k data/task1/raw)")
    pairs = read_pairs(split_file(d, a.split, a.src_lang), split_file(d, a.split, a.tgt_lang))[: a.limit]
    loaded = load_checkpoint(a.model, a.device)
    torch.set_grad_enabled(False)
    srcs, refs = [s for s, _ in pairs], [t for _, t in pairs]
    results = {"split": a.split, "sentences": len(pairs)}
    runs = []
    if not a.beam_only:
        runs.append(("greedy", 1))
    if not a.greedy_only:
        runs.append((f"beam{a.beam_size}", a.beam_size))
    for name, beam in runs:
        t0 = time.time()
        hyps = translate(loaded, srcs, beam_size=beam, alpha=a.alpha, early_stop=a.early_stop)
        s = score(hyps, refs) | {"seconds": round(time.time() - t0, 1)}
        if beam > 1:
            s |= {"beam_size": beam, "alpha": a.alpha, "early_stop": a.early_stop}
            if a.hyps_out:
                Path(a.hyps_out).write_text("\n".join(hyps) + "\n")
        results[name] = s
        print(f"[{name}] {s['bleu_line']}")
        print(f"[{name}] {s['chrf_line']}")
    print(f"signature: {results[runs[0][0]]['bleu_signature']}")
    if not a.no_save:
        mpath = Path(a.model) / "metrics.json"
        metrics = json.loads(mpath.read_text()) if mpath.exists() else {}
        metrics.setdefault("evaluation", {}).setdefault(a.split, {}).update(results)
        mpath.write_text(json.dumps(metrics, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()

"""Score a checkpoint with sacreBLEU.

    python -m training.evaluate --corpus tatoeba --split dev            # one corpus's split, by name
    python -m training.evaluate --corpus multi30k --corpus tatoeba --split dev   # each, and their mix
    python -m training.evaluate --data DIR --split test_2016_flickr     # any folder of {split}.{en,de}[.gz]
    python -m training.evaluate --all                                   # every test split of every corpus

A corpus is a folder under the data root (``training.corpora.data_root``); ``--split dev`` and ``--split
test`` name a corpus's own tuning and test splits (``val`` / ``test_2016_flickr`` for Multi30k).
Prints sacreBLEU's score lines (``BLEU = …``, ``chrF2 = …``; cased, detokenized, default 13a
tokenization) and signatures for greedy and beam-search decoding (the app's default settings,
``DecodeSettings``), and records them under ``evaluation.<corpus>/<split>`` (``evaluation.<split>``
with ``--data``) in the checkpoint's ``metrics.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from sacrebleu.metrics import BLEU, CHRF
from tqdm import tqdm

from model.checkpoint import load_checkpoint
from model.decoding import beam_search, greedy_batch
from model.settings import DecodeSettings
from training.corpora import (
    corpus_dir,
    data_root,
    default_data_dir,
    dev_split,
    encode_pairs,
    pad_batch,
    read_pairs,
    split_file,
    test_splits,
    token_batches,
)


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


def eval_sets(args) -> list[tuple[str, list[tuple[str, str]]]]:
    """The (name, sentence pairs) to score for the parsed arguments ``args``.

    Raises SystemExit with a hint when a corpus or split is missing.
    """
    try:
        if args.all:
            root = Path(args.data_root) if args.data_root else data_root()
            if root is None:
                raise FileNotFoundError("no data root: set $ATTN_DATA_ROOT or pass --data-root")
            names = sorted(p.name for p in root.iterdir() if p.is_dir() and test_splits(p, args.src_lang))
            return [(f"{n}/{s}", _pairs(root / n, s, args)) for n in names for s in test_splits(root / n, args.src_lang)]
        if args.corpus:
            out = []
            for n in args.corpus:
                d = corpus_dir(n, args.data_root)
                splits = {"dev": [dev_split(d, args.src_lang)], "test": test_splits(d, args.src_lang)}.get(
                    args.split, [args.split]
                )
                out += [(f"{n}/{s}", _pairs(d, s, args)) for s in splits]
            return out
        d = args.data or default_data_dir()
        if d is None:
            raise FileNotFoundError("no data: pass --corpus NAME, --data DIR or --all")
        return [(args.split, _pairs(d, args.split, args))]
    except FileNotFoundError as e:
        raise SystemExit(str(e)) from None


def _pairs(folder, split: str, args) -> list[tuple[str, str]]:
    return read_pairs(split_file(folder, split, args.src_lang), split_file(folder, split, args.tgt_lang))[: args.limit]


@torch.inference_mode()
def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="pretrained/en-de")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--corpus", action="append", help="a corpus folder under the data root (repeat for several)")
    where.add_argument("--data", help="any folder of {split}.{src,tgt}[.gz] files")
    where.add_argument("--all", action="store_true", help="every test split of every corpus under the data root")
    ap.add_argument("--data-root", help="folder of corpus folders (default: $ATTN_DATA_ROOT or ../shared/data)")
    ap.add_argument(
        "--split",
        default=None,
        help="split name; with --corpus also 'dev' or 'test' for the corpus's own (default: dev with --corpus, "
        "test_2016_flickr with --data)",
    )
    ap.add_argument("--src-lang", default="en")
    ap.add_argument("--tgt-lang", default="de")
    ap.add_argument("--beam-size", type=int, default=DecodeSettings.beam_size)
    ap.add_argument(
        "--alpha",
        type=float,
        default=DecodeSettings.alpha,
        help=f"GNMT length penalty for beam search (default {DecodeSettings.alpha}: the app's, chosen on dev)",
    )
    ap.add_argument(
        "--early-stop",
        action=argparse.BooleanOptionalAction,
        default=DecodeSettings.early_stop,
        help="beam search stops once beam-size hypotheses have finished (default: the app's setting)",
    )
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--greedy-only", action="store_true", help="skip beam search")
    only.add_argument("--beam-only", action="store_true", help="skip greedy decoding")
    ap.add_argument("--limit", type=int, default=None, help="only the first N sentences of each split")
    ap.add_argument("--device", default=None)
    ap.add_argument("--no-save", action="store_true", help="do not write metrics.json")
    ap.add_argument("--hyps-out", help="write the last beam (else greedy) hypotheses to this file")
    args = ap.parse_args(argv)
    if args.split is None:
        args.split = "dev" if args.corpus else "test_2016_flickr"
    sets = eval_sets(args)
    loaded = load_checkpoint(args.model, args.device)
    runs = [] if args.beam_only else [("greedy", 1)]
    runs += [] if args.greedy_only else [(f"beam{args.beam_size}", args.beam_size)]
    results: dict[str, dict] = {}
    mixed: dict[str, tuple[list[str], list[str]]] = {name: ([], []) for name, _ in runs}
    for set_name, pairs in sets:
        srcs, refs = [s for s, _ in pairs], [t for _, t in pairs]
        res = results[set_name] = {"sentences": len(pairs)}
        for name, beam in runs:
            t0 = time.time()
            hyps = translate(loaded, srcs, beam_size=beam, alpha=args.alpha, early_stop=args.early_stop)
            s = score(hyps, refs) | {"seconds": round(time.time() - t0, 1)}
            s["length_ratio"] = round(sum(len(h.split()) for h in hyps) / max(1, sum(len(r.split()) for r in refs)), 3)
            if beam > 1:
                s |= {"beam_size": beam, "alpha": args.alpha, "early_stop": args.early_stop}
            if args.hyps_out:
                Path(args.hyps_out).write_text("\n".join(hyps) + "\n")
            mixed[name][0].extend(hyps)
            mixed[name][1].extend(refs)
            res[name] = s
            print(f"{set_name} [{name}] {s['bleu_line']}")
            print(f"{set_name} [{name}] {s['chrf_line']}")
    if len(sets) > 1 and not args.all:  # a dev mix: the score the beam settings are chosen on
        for name, (hyps, refs) in mixed.items():
            s = score(hyps, refs)
            results.setdefault("mix", {"sets": [n for n, _ in sets]})[name] = s
            print(f"mix [{name}] {s['bleu_line']}")
    print(f"signature: {next(iter(results.values()))[runs[0][0]]['bleu_signature']}")
    if not args.no_save:
        mpath = Path(args.model) / "metrics.json"
        metrics = json.loads(mpath.read_text()) if mpath.exists() else {}
        for set_name, res in results.items():
            if set_name != "mix":
                metrics.setdefault("evaluation", {}).setdefault(set_name, {}).update(res)
        mpath.write_text(json.dumps(metrics, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()

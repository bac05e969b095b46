"""Sequence-level knowledge distillation: a corpus whose targets are a model's own beam translations.

Kim & Rush (2016), "Sequence-Level Knowledge Distillation", section 3.2: train on the teacher's beam
output instead of (or beside) the human reference, and greedy decoding of the student comes close to
beam search. Here the teacher is the shipped model itself (self-distillation), so a later stage learns
to find with one greedy pass what beam search finds with five hypotheses.

    python -m training.distill --model pretrained/en-de --corpus tatoeba --out DIR --every 3 --shard 0/2
    python -m training.distill --model pretrained/en-de --corpus tatoeba --out DIR --every 3 --shard 1/2
    python -m training.distill --model pretrained/en-de --corpus tatoeba --out DIR --every 3 --merge

Generation (``--shard i/n``, one process per core) translates every ``every``-th training source of
shard i with beam search (the app's ``DecodeSettings``: beam 5, length penalty 1.5, no early stop) and
appends ``index<TAB>translation`` lines to ``DIR/beam.i.tsv``; a cut run resumes where it stopped.
``--merge`` then writes ``DIR`` as a corpus folder (``train.{src,tgt}.gz``; the source corpus's other
splits copied unchanged), to be named with ``--data-root``/``--corpus`` like any other corpus:
the teacher's translation where one was made, the human reference elsewhere (``--only-distilled``:
the distilled pairs alone). Dev and test splits are never distilled.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
from pathlib import Path

from tqdm import tqdm

from model.settings import DecodeSettings
from training.corpora import corpus_dir, read_lines, split_file, splits_of


def parse_shard(spec: str) -> tuple[int, int]:
    """``"1/4"`` -> (1, 4). Raises ValueError unless 0 <= i < n."""
    i, _, n = spec.partition("/")
    try:
        shard, shards = int(i), int(n)
    except ValueError:
        raise ValueError(f"shard must look like 0/2, got {spec!r}") from None
    if not 0 <= shard < shards:
        raise ValueError(f"shard must be i/n with 0 <= i < n, got {spec!r}")
    return shard, shards


def chosen_indices(n: int, every: int, shard: int = 0, shards: int = 1) -> list[int]:
    """The training lines distilled: every ``every``-th of ``n`` (0, every, 2 every, …), dealt to ``shards``."""
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    return list(range(shard * every, n, every * shards))  # picks shard, shard + shards, …: every (every * shards)-th line


def read_beam_file(path: Path) -> dict[int, str]:
    """Line index -> teacher translation, from one ``beam.*.tsv`` (none if it does not exist; a line cut by a
    stopped run is left out)."""
    made: dict[int, str] = {}
    for line in whole_lines(path).splitlines():
        i, sep, hyp = line.partition("\t")
        if sep and i.isdigit():
            made[int(i)] = hyp.strip()
    return made


def whole_lines(path: Path) -> str:
    """The text of ``path`` up to its last newline ("" if it does not exist): a line a stopped run cut is left out."""
    if not path.exists():
        return ""
    text = path.read_text(encoding="utf-8")
    return text[: text.rfind("\n") + 1]


def read_beam_files(out: Path) -> dict[int, str]:
    """Line index -> teacher translation, from every ``out/beam.*.tsv``; empty translations left out."""
    return {i: h for f in sorted(out.glob("beam.*.tsv")) for i, h in read_beam_file(f).items() if h}


def generate(loaded, sources: list[str], indices: list[int], beam_file: Path, *, chunk: int = 200, progress: bool = True) -> int:
    """Beam-translate ``sources[i]`` for each i of ``indices`` not yet in ``beam_file``; append them. Returns how many."""
    from training.evaluate import translate

    done = read_beam_file(beam_file)
    if beam_file.exists():  # drop a line a stopped run left unfinished, so that appending starts on a new line
        beam_file.write_text(whole_lines(beam_file), encoding="utf-8")
    todo = [i for i in indices if i not in done]
    s = DecodeSettings()
    with beam_file.open("a", encoding="utf-8") as f, tqdm(total=len(todo), desc=beam_file.name, disable=not progress) as bar:
        for c in range(0, len(todo), chunk):
            part = todo[c : c + chunk]
            hyps = translate(
                loaded, [sources[i] for i in part], beam_size=s.beam_size, alpha=s.alpha, early_stop=s.early_stop, progress=False
            )
            f.writelines(f"{i}\t{h}\n" for i, h in zip(part, hyps, strict=True))
            f.flush()
            bar.update(len(part))
    return len(todo)


def merge(source_dir: Path, out: Path, src_lang: str, tgt_lang: str, *, only_distilled: bool = False) -> dict:
    """Write ``out/train.{src,tgt}.gz`` from the source corpus and the beam files; copy its other splits.

    Returns counts: ``lines`` written, ``distilled`` (teacher targets used), ``changed`` (of those, how many
    differ from the reference). Raises ValueError if the source corpus's two train files differ in length.
    """
    src = read_lines(split_file(source_dir, "train", src_lang))
    tgt = read_lines(split_file(source_dir, "train", tgt_lang))
    if len(src) != len(tgt):
        raise ValueError(f"{source_dir}: train.{src_lang} has {len(src)} lines, train.{tgt_lang} {len(tgt)}")
    made = {i: h for i, h in read_beam_files(out).items() if i < len(src)}
    rows = sorted(made) if only_distilled else range(len(src))
    pairs = [(src[i], made.get(i, tgt[i])) for i in rows]
    for lang, k in ((src_lang, 0), (tgt_lang, 1)):
        with gzip.open(out / f"train.{lang}.gz", "wt", encoding="utf-8") as f:
            f.writelines(p[k] + "\n" for p in pairs)
    for split in splits_of(source_dir, src_lang):
        if split == "train":
            continue
        for lang in (src_lang, tgt_lang):
            p = split_file(source_dir, split, lang)
            shutil.copyfile(p, out / p.name)
    return {"lines": len(pairs), "distilled": len(made), "changed": sum(made[i] != tgt[i] for i in made)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="teacher checkpoint folder")
    ap.add_argument("--corpus", required=True, help="corpus folder name under the data root")
    ap.add_argument("--data-root", help="folder of corpus folders (default: $ATTN_DATA_ROOT or ../shared/data)")
    ap.add_argument("--out", required=True, help="the distilled corpus folder")
    ap.add_argument("--every", type=int, default=1, help="distill every N-th training pair")
    ap.add_argument("--shard", default="0/1", help="i/n: this process's share of the generation")
    ap.add_argument("--merge", action="store_true", help="write the corpus folder from the beam files (no generation)")
    ap.add_argument("--only-distilled", action="store_true", help="with --merge: the distilled pairs alone")
    ap.add_argument("--src-lang", default="en")
    ap.add_argument("--tgt-lang", default="de")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    source_dir = corpus_dir(args.corpus, args.data_root)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        res = merge(source_dir, out, args.src_lang, args.tgt_lang, only_distilled=args.only_distilled)
        print(
            f"{out}: {res['lines']} training pairs, {res['distilled']} with the teacher's target ({res['changed']} differ from the reference)"
        )
        return res
    import torch

    from model.checkpoint import load_checkpoint

    torch.set_num_threads(args.threads)
    shard, shards = parse_shard(args.shard)
    sources = read_lines(split_file(source_dir, "train", args.src_lang))
    n = generate(
        load_checkpoint(args.model), sources, chosen_indices(len(sources), args.every, shard, shards), out / f"beam.{shard}.tsv"
    )
    return {"generated": n}


if __name__ == "__main__":
    main()

"""Benchmark 11: what an imported OPUS-MT model costs on this CPU, without downloading one.

    pip install -r bench/requirements.txt      # transformers, sentencepiece (requirements-import.txt)
    python bench/bench_opus_shape.py [--build DIR] [--threads N] [--quick]

Builds (once, into ``--build``, default ``/tmp/opus-shape``) a random ``MarianMTModel`` of the shape every
``Helsinki-NLP/opus-mt-*`` base model has: 6 + 6 layers, d_model 512, 8 heads, d_ff 2048, swish, a shared vocabulary
of 58,101 pieces tied to the generator (a SentencePiece word model trained here on the benchmark sentences, the rest
of the vocabulary filler pieces that text never produces), saves it with ``save_pretrained`` and imports it with
``convert.marian``: 73.9 M parameters, as the real ones.

Then it times ``analysis.analyze.analyze`` (tokenize, encode, greedy decode with every attention row, the maps as
numpy: what the app computes for a new sentence) of the 5-, 15- and 40-word sentences on the imported model and on
``pretrained/en-de``, interleaved, with ``--threads`` torch threads (default 1: the numbers hold with another process
on the other core), and the matrix floor of one decoding step (``bench_analysis.matrix_floor``). Random weights
write no ``</s>``, so the imported model's decoding is forced (``generate_steps(forced=...)``, as the Steps page forces
a piece; the model computes every step as usual) to write as many pieces and ``</s>`` as ``pretrained/en-de``
writes for the same sentence: both take the same number of decoding steps, and ``analyze`` ends as for any finished
translation.
"""

from __future__ import annotations

import functools
import json
import time
from contextlib import contextmanager
from pathlib import Path

import bench_analysis
import benchlib as bl
import torch

import analysis.analyze
from analysis.analyze import analyze
from convert.marian import OPUS_MT_BASE, import_marian

SHAPE = {**OPUS_MT_BASE, "forced_eos_token_id": None}
"""The config.json fields of Helsinki-NLP/opus-mt-en-de; no forced </s> (this benchmark forces the output itself)."""


def build(folder: Path) -> Path:
    """Write the random OPUS-MT-shaped original to ``folder/original`` and its import to ``folder/imported``."""
    import sentencepiece as spm
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer
    from transformers.utils import logging

    logging.set_verbosity_error()
    orig = folder / "original"
    raw = folder / "spm"
    raw.mkdir(parents=True, exist_ok=True)
    text = [*bl.SENTENCES.values(), *bl.MORE_SENTENCES] * 5
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text),
        model_prefix=str(raw / "sp"),
        vocab_size=400,
        hard_vocab_limit=False,
        model_type="word",  # a few sentences train no useful sub-word model; OPUS-MT's cuts a few words more finely
        bos_id=-1,
        eos_id=0,
        unk_id=1,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=str(raw / "sp.model"))
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(sp.get_piece_size()):
        vocab.setdefault(sp.id_to_piece(i), len(vocab))
    while len(vocab) < SHAPE["vocab_size"] - 1:  # filler pieces: the vocabulary, and the generator, of the real size
        vocab[f"\u2581filler{len(vocab)}"] = len(vocab)
    vocab["<pad>"] = SHAPE["pad_token_id"]
    (raw / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    tok = MarianTokenizer(str(raw / "sp.model"), str(raw / "sp.model"), str(raw / "vocab.json"))
    tok.save_pretrained(str(orig))
    torch.manual_seed(0)
    m = MarianMTModel(MarianConfig(**SHAPE)).eval()
    m.save_pretrained(str(orig))
    import_marian(orig, folder / "imported")
    return folder / "imported"


@contextmanager
def forced_output(ids: list[int]):
    """``analyze`` decodes ``ids`` whatever the model prefers (its ``generate_steps`` gets ``forced=ids``)."""
    free = analysis.analyze.generate_steps
    analysis.analyze.generate_steps = functools.partial(free, forced=ids)
    try:
        yield
    finally:
        analysis.analyze.generate_steps = free


def analyze_forced(m, text: str, ids: list[int]):
    with forced_output(ids):
        return analyze(m.model, m.tokenizer, text)


def run(loaded, *, repeats: int, warmup: int, opus, threads: int) -> dict:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        rows = []
        for n_words, text in bl.SENTENCES.items():
            ours = analyze(loaded.model, loaded.tokenizer, text)
            src = opus.tokenizer.encode(text)
            out = [src[i % len(src)] for i in range(len(ours.out_ids))] + [opus.tokenizer.eos_id]  # as many pieces
            a = {"en-de": ours, "opus": analyze_forced(opus, text, out)}
            assert a["opus"].finished and len(a["opus"].out_ids) == len(ours.out_ids)
            t = bl.measure_many(
                {
                    "en-de": lambda text=text: analyze(loaded.model, loaded.tokenizer, text),
                    "opus": lambda text=text, out=out: analyze_forced(opus, text, out),
                },
                repeats=repeats,
                warmup=warmup,
            )
            rows.append(
                {
                    "words": n_words,
                    "en-de": t["en-de"],
                    "opus": t["opus"],
                    "ratio": t["opus"].median_ms / t["en-de"].median_ms,
                    "tokens": {k: (len(v.source.ids), len(v.out_ids) + int(v.finished)) for k, v in a.items()},
                }
            )
        floor = {
            name: bench_analysis.matrix_floor(m.model, repeats=repeats * 5, warmup=warmup)
            for name, m in (("en-de", loaded), ("opus", opus))
        }
    finally:
        torch.set_num_threads(before)
    return {
        "rows": rows,
        "floor": floor,
        "threads": threads,
        "params": {"en-de": loaded.model.n_params(), "opus": opus.model.n_params()},
    }


def table(res: dict) -> str:
    columns = {
        "words": "words",
        "source / decoding steps, en-de": lambda r: "{} / {}".format(*r["tokens"]["en-de"]),
        "source / decoding steps, OPUS-MT shape": lambda r: "{} / {}".format(*r["tokens"]["opus"]),
        "analyze, en-de (ms)": "en-de",
        "analyze, OPUS-MT shape (ms)": "opus",
        "ratio": ("ratio", "{:.1f}x"),
    }
    fl, p = res["floor"], res["params"]
    return (
        bl.results_table(res["rows"], columns)
        + f"\n\n{res['threads']} torch thread(s). Parameters: en-de {p['en-de'] / 1e6:.1f} M, OPUS-MT shape {p['opus'] / 1e6:.1f} M."
        + "\nMatrix floor of one decoding step: "
        + ", ".join(
            f"{name} {f['step'].median_ms:.2f} ms ({f['weights_mb_per_step']:.0f} MB of weights, of which the output "
            f"projection {f['output_projection'].median_ms:.2f} ms)"
            for name, f in fl.items()
        )
        + "."
    )


def main() -> None:
    ap = bl.base_args(__doc__.splitlines()[0])
    ap.add_argument("--build", default="/tmp/opus-shape", help="folder for the random OPUS-MT-shaped model (built once)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads while timing")
    args = ap.parse_args()
    folder = Path(args.build)
    if not (folder / "imported" / "config.json").is_file():
        t0 = time.perf_counter()
        build(folder)
        print(f"built and imported {folder} in {time.perf_counter() - t0:.0f} s")
    opus = bl.load(str(folder / "imported"))
    bl.run_script("opus_shape", args, run, table, (20, 3), opus=opus, threads=args.threads)


if __name__ == "__main__":
    main()

"""Several corpora by name: finding their splits, the weighted mix of an epoch, training on a mix with a
dev mix, resuming in the middle of an epoch, and ``training.evaluate``'s corpus options."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from training import corpora as data
from training.corpora import corpus_dir, dev_split, parse_corpus_spec, weighted_mix
from training.evaluate import main as evaluate_main
from training.train import epoch_examples, main

WORDS = [chr(c) for c in range(ord("a"), ord("z") + 1)]


def write_corpus(root, name: str, splits: dict[str, int], seed: int) -> None:
    """A folder of gzip'd {split}.{en,de}.gz: the reverse task, so a tiny model can learn something."""
    import random

    rng = random.Random(seed)
    d = root / name
    d.mkdir(parents=True)
    for split, n in splits.items():
        src = [" " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5))) for _ in range(n)]
        tgt = [" " + " ".join(reversed(s.split())) for s in src]
        for lang, lines in (("en", src), ("de", tgt)):
            with gzip.open(d / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")


@pytest.fixture
def root(tmp_path):
    write_corpus(tmp_path, "caps", {"train": 120, "val": 10, "test_2016": 8}, seed=1)
    write_corpus(tmp_path, "chat", {"train": 60, "dev": 12, "test": 9}, seed=2)
    return tmp_path


def test_corpus_folders_and_their_splits(root, monkeypatch):
    monkeypatch.setenv("ATTN_DATA_ROOT", str(root))
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    assert corpus_dir("chat") == root / "chat"
    assert dev_split(root / "caps") == "val" and dev_split(root / "chat") == "dev"
    assert data.test_splits(root / "caps") == ["test_2016"] and data.test_splits(root / "chat") == ["test"]
    with pytest.raises(FileNotFoundError, match="'nope'"):
        corpus_dir("nope")


def test_corpus_spec():
    assert parse_corpus_spec("tatoeba") == ("tatoeba", 1.0)
    assert parse_corpus_spec("multi30k:1.5") == ("multi30k", 1.5)
    for bad in ("x:0", "x:-1", ":2", "x:two"):
        with pytest.raises(ValueError):
            parse_corpus_spec(bad)


@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=4),
    data=st.data(),
    seed=st.integers(0, 10**6),
)
def test_weighted_mix_samples_each_corpus_by_its_weight(sizes, data, seed):
    weights = [data.draw(st.floats(0.05, 3.5)) for _ in sizes]
    mix = weighted_mix(sizes, weights, seed)
    counts = Counter(c for c, _ in mix)
    for c, (n, w) in enumerate(zip(sizes, weights, strict=True)):
        assert counts[c] == int(w) * n + round((w - int(w)) * n)
        per_example = Counter(i for cc, i in mix if cc == c)
        assert all(int(w) <= k <= int(w) + 1 for k in per_example.values())  # never more than one extra copy
        assert all(0 <= i < n for i in per_example)
    assert mix == weighted_mix(sizes, weights, seed)  # deterministic: a resumed epoch is the same epoch


def test_a_fractional_weight_takes_a_fresh_share_each_epoch():
    firsts = {tuple(i for _, i in weighted_mix([100], [0.3], seed)) for seed in range(5)}
    assert len(firsts) == 5  # different sentences each epoch
    ex = [[(["a"], ["b"])] * 10, [(["c"], ["d"])] * 4]
    assert len(epoch_examples(ex, [0.5, 2.0], 0)) == 5 + 8


TINY = [
    "--d-model", "32", "--n-heads", "2", "--d-ff", "64", "--n-enc-layers", "1", "--n-dec-layers", "1",
    "--max-tokens", "400", "--warmup", "5", "--no-bf16", "--quiet", "--min-freq", "1", "--tgt-min-freq", "1",
]  # fmt: skip


def test_training_on_a_mix_validates_on_a_dev_mix_and_resumes_mid_epoch(root, capsys):
    out = root / "run"
    args = [*TINY, "--data-root", str(root), "--corpus", "caps:1.5", "--corpus", "chat:0.5", "--out", str(out)]
    args += ["--val-corpus", "caps", "--val-corpus", "chat"]
    meta = main([*args, "--epochs", "1"])
    printed = capsys.readouterr().out
    assert "caps 120x1.5, chat 60x0.5" in printed and "22 val pairs (caps, chat)" in printed
    log = (out / "train_log.csv").read_text().splitlines()
    assert "caps=" in log[1] and "chat=" in log[1]  # BLEU of each dev corpus, logged per epoch
    n_steps = meta["step"]
    # the vocabulary is built from both corpora
    vocab = json.loads((out / "vocab.json").read_text())
    assert len(vocab["cl100k_ids"]) > 259

    # a save in the middle of epoch 1, after 3 batches: the resumed run trains only the rest of epoch 1
    state = json.loads((out / "state" / "state.json").read_text())
    state.update(epoch=0, step=3, batch=3, elapsed=1.0)
    (out / "state" / "state.json").write_text(json.dumps(state))
    (out / "train_log.csv").write_text(log[0] + "\n")
    meta2 = main([*args, "--epochs", "1", "--resume"])
    assert meta2["epoch"] == 1 and meta2["step"] == n_steps  # 3 + the remaining batches, not a whole epoch more
    assert meta2["batch"] == 0


def test_evaluate_scores_a_corpus_split_a_dev_mix_and_all_test_splits(root, monkeypatch, capsys):
    run = root / "run"
    main([*TINY, "--data-root", str(root), "--corpus", "caps", "--out", str(run), "--epochs", "1"])
    capsys.readouterr()
    res = evaluate_main(["--model", str(run), "--data-root", str(root), "--corpus", "caps", "--corpus", "chat"])
    printed = capsys.readouterr().out
    assert set(res) == {"caps/val", "chat/dev", "mix"}
    assert "caps/val [greedy] BLEU = " in printed and "chat/dev [beam5] chrF2 = " in printed and "mix [greedy] BLEU" in printed
    assert res["caps/val"]["sentences"] == 10 and res["chat/dev"]["sentences"] == 12

    res = evaluate_main(["--model", str(run), "--data-root", str(root), "--all", "--greedy-only"])
    assert set(res) == {"caps/test_2016", "chat/test"}
    saved = json.loads((run / "metrics.json").read_text())["evaluation"]
    assert {"caps/val", "chat/dev", "caps/test_2016", "chat/test"} <= set(saved)
    assert saved["chat/test"]["greedy"]["bleu"] == res["chat/test"]["greedy"]["bleu"]

    res = evaluate_main(["--model", str(run), "--data", str(root / "chat"), "--split", "dev", "--no-save", "--beam-only"])
    assert set(res) == {"dev"} and "beam5" in res["dev"] and "greedy" not in res["dev"]


def test_a_distilled_corpus_has_the_teachers_beam_targets_and_trains_by_name(root, capsys):
    """training.distill: every 2nd training pair gets the teacher's beam translation (the app's settings), the rest
    keep their reference, dev/test are copied unchanged, a cut shard resumes, and the folder trains as a corpus."""
    from model.checkpoint import load_checkpoint
    from model.settings import DecodeSettings
    from training import distill
    from training.evaluate import translate

    teacher = root / "teacher"
    main([*TINY, "--data-root", str(root), "--corpus", "caps", "--out", str(teacher), "--epochs", "1"])
    out = root / "caps_kd"
    args = ["--model", str(teacher), "--data-root", str(root), "--corpus", "caps", "--out", str(out), "--every", "2"]
    assert distill.main([*args, "--shard", "0/2"]) == {"generated": 30}  # lines 0, 4, 8, …: 30 of the 60 chosen
    with (out / "beam.0.tsv").open("a", encoding="utf-8") as f:
        f.write("9999\tcut off by a stop")  # no newline: a line a stopped run left unfinished
    assert distill.main([*args, "--shard", "0/2"]) == {"generated": 0}  # resumed: nothing left to do
    assert distill.main([*args, "--shard", "1/2"]) == {"generated": 30}
    res = distill.main([*args, "--merge"])
    src = data.read_lines(root / "caps/train.en.gz")
    ref = data.read_lines(root / "caps/train.de.gz")
    s = DecodeSettings()
    beam = translate(load_checkpoint(teacher), src[0:120:2], beam_size=s.beam_size, alpha=s.alpha, early_stop=s.early_stop)
    made = [b for b in beam if b]  # an empty translation (a half-trained teacher's) keeps the reference
    assert len(made) >= 30 and res == {
        "lines": 120,
        "distilled": len(made),
        "changed": sum(b != r for b, r in zip(beam, ref[0::2], strict=True) if b),
    }

    new = data.read_lines(out / "train.de.gz")
    assert data.read_lines(out / "train.en.gz") == src and len(new) == 120
    assert all(new[i] == ref[i] for i in range(1, 120, 2))  # not chosen: the reference
    assert new[0:120:2] == [
        b or r for b, r in zip(beam, ref[0::2], strict=True)
    ]  # chosen: the teacher's beam translation, in order
    for name in ("val.en.gz", "val.de.gz", "test_2016.en.gz", "test_2016.de.gz"):
        assert (out / name).read_bytes() == (root / "caps" / name).read_bytes()

    only = distill.main([*args, "--merge", "--only-distilled"])
    assert only["lines"] == len(made) and data.read_lines(out / "train.en.gz") == [
        x for x, b in zip(src[0::2], beam, strict=True) if b
    ]
    run = root / "student"
    meta = main([*TINY, "--data-root", str(root), "--corpus", "caps_kd", "--corpus", "caps", "--out", str(run), "--epochs", "1"])
    assert meta["epoch"] == 1


def test_distill_shards_and_their_spec():
    from training.distill import chosen_indices, parse_shard

    assert parse_shard("1/4") == (1, 4)
    for bad in ("4/4", "-1/2", "a/b", "2"):
        with pytest.raises(ValueError):
            parse_shard(bad)
    parts = [chosen_indices(100, 3, i, 2) for i in range(2)]
    assert sorted(parts[0] + parts[1]) == list(range(0, 100, 3)) and not set(parts[0]) & set(parts[1])
    with pytest.raises(ValueError):
        chosen_indices(10, 0)

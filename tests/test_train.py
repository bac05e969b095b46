"""training/train.py, training/config.py and training/corpora.py: a tiny end-to-end run, resuming, the schedule, batching, Multi30k."""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from model.checkpoint import load_checkpoint
from model.tokenizer import TiktokenTokenizer
from model.transformer import Transformer, TransformerConfig
from training.config import TrainConfig
from training.corpora import default_data_dir, encode_pairs, pad_batch, read_pairs, split_file, token_batches
from training.train import load_data, load_state, lr_at, main, parse_args, reverse_pairs, save_state

TINY = [
    "--task", "reverse", "--d-model", "32", "--n-heads", "2", "--d-ff", "64", "--n-enc-layers", "1", "--n-dec-layers", "1",
    "--train-size", "300", "--val-limit", "20", "--max-tokens", "1024", "--warmup", "10", "--no-bf16", "--quiet",
]  # fmt: skip


def read_log(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_tiny_reverse_run_writes_a_checkpoint_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    meta = main([*TINY, "--epochs", "1", "--out", str(out)])
    for f in ("model.safetensors", "config.json", "vocab.json", "train_log.csv", "metrics.json"):
        assert (out / f).is_file(), f
    assert (out / "state" / "state.safetensors").is_file() and (out / "state" / "state.json").is_file()
    log = read_log(out / "train_log.csv")
    assert [r["epoch"] for r in log] == ["1"]
    steps = meta["step"]
    assert steps > 0 and int(log[0]["step"]) == steps
    metrics = json.loads((out / "metrics.json").read_text())["training"]
    assert metrics["task"] == "reverse" and metrics["epochs_run"] == 1 and metrics["args"]["d_model"] == 32
    loaded = load_checkpoint(out, "cpu")
    assert loaded.model.cfg.d_model == 32 and loaded.model.cfg.vocab_size == loaded.tokenizer.vocab_size
    assert json.loads((out / "state" / "state.json").read_text())["epoch"] == 1
    vocab_before = (out / "vocab.json").read_text()

    capsys.readouterr()
    meta2 = main([*TINY, "--epochs", "2", "--out", str(out), "--resume"])
    assert f"resumed from epoch 1 step {steps}" in capsys.readouterr().out
    log = read_log(out / "train_log.csv")
    assert [r["epoch"] for r in log] == ["1", "2"]  # epoch 1 was not run again
    assert meta2["epoch"] == 2 and meta2["step"] == 2 * steps
    assert json.loads((out / "metrics.json").read_text())["training"]["epochs_run"] == 2
    assert json.loads((out / "state" / "state.json").read_text())["step"] == 2 * steps
    assert (out / "vocab.json").read_text() == vocab_before


def test_profile_steps_writes_where_a_step_spends_its_time(tmp_path, capsys):
    """--profile-steps N: torch.profiler over N steps after the first 10, as tables in OUT/profile.txt."""
    out = tmp_path / "run"
    main([*TINY, "--epochs", "1", "--train-size", "1500", "--out", str(out), "--profile-steps", "3"])  # ~20 steps
    text = (out / "profile.txt").read_text()
    assert text.startswith("3 steps from step 11, device cpu: ") and "ms a step (wall)" in text
    ops = {line.split()[0] for line in text.splitlines() if line.strip().startswith("aten::")}
    assert {"aten::mm", "aten::addmm"} & ops, text  # the model's own products were recorded
    assert "profile of 3 steps" in capsys.readouterr().out


def test_a_failing_profiler_does_not_stop_the_run(tmp_path, monkeypatch):
    """A profiler that cannot start (no CUPTI on a GPU machine, say) writes why and the run trains on."""

    def refuse(self):
        raise RuntimeError("no profiler here")

    monkeypatch.setattr(torch.profiler.profile, "start", refuse)
    out = tmp_path / "run"
    meta = main([*TINY, "--epochs", "1", "--train-size", "1500", "--out", str(out), "--profile-steps", "3"])
    assert (out / "profile.txt").read_text().startswith("profiling failed: RuntimeError('no profiler here')")
    assert meta["step"] > 13 and (out / "model.safetensors").is_file()


def test_prefetched_epochs_train_exactly_as_inline_ones(tmp_path):
    """--prefetch makes each next epoch's data in a forked worker: the same batches, so the same run."""
    logs = []
    for name, extra in [("inline", []), ("prefetch", ["--prefetch"])]:
        main([*TINY, "--epochs", "2", "--out", str(tmp_path / name), *extra])
        logs.append([(r["step"], r["train_loss"], r["val_loss"]) for r in read_log(tmp_path / name / "train_log.csv")])
    assert len(logs[0]) == 2 and logs[0] == logs[1]


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize("fused", [False, True])
def test_save_state_and_load_state_round_trip(tmp_path, device, fused):
    """A resumed run continues exactly, also on a GPU with the fused AdamW that training uses there
    (the state file loads on the CPU: its moments and step counts must reach the parameters' device)."""
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=40, d_model=16, n_heads=2, d_ff=32, n_enc_layers=1, n_dec_layers=1, dropout=0.0)
    model = Transformer(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=fused)
    src, tgt = torch.randint(3, 40, (2, 5), device=device), torch.randint(3, 40, (2, 4), device=device)
    for _ in range(3):
        opt.zero_grad()
        model(src, tgt).logits.square().mean().backward()
        opt.step()
    ema = {k: v.detach().clone() + 1.0 for k, v in model.state_dict().items() if v.is_floating_point()}
    save_state(tmp_path, model, ema, opt, {"epoch": 4, "step": 3})

    torch.manual_seed(1)
    model2 = Transformer(cfg).to(device)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-2, fused=fused)
    ema2 = {k: torch.zeros_like(v) for k, v in ema.items()}
    meta = load_state(tmp_path, model2, ema2, opt2)
    assert meta["epoch"] == 4 and meta["step"] == 3
    for (k, a), b in zip(model.state_dict().items(), model2.state_dict().values(), strict=True):
        assert torch.equal(a, b), k
    assert model2.tgt_emb.weight is model2.src_emb.weight
    for k in ema:
        assert torch.equal(ema[k], ema2[k]), k
    for p, p2 in zip(model.parameters(), model2.parameters(), strict=True):
        s, s2 = opt.state[p], opt2.state[p2]
        assert float(s["step"]) == float(s2["step"]) == 3.0
        assert torch.equal(s["exp_avg"], s2["exp_avg"]) and torch.equal(s["exp_avg_sq"], s2["exp_avg_sq"])
    # and the next step is identical, so a resumed run continues exactly
    for m, o in ((model, opt), (model2, opt2)):
        o.zero_grad()
        m(src, tgt).logits.square().mean().backward()
        o.step()
    for a, b in zip(model.parameters(), model2.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


# -- learning-rate schedule (section 5.3) --------------------------------------------------------------


@pytest.mark.parametrize("schedule", ["cosine", "inverse_sqrt"])
@pytest.mark.parametrize("warmup", [1, 10, 800])
def test_lr_warm_up_is_linear_to_the_peak(schedule, warmup):
    peak, total = 2e-3, 5000
    lrs = [lr_at(s, peak, warmup, total, schedule) for s in range(1, warmup + 1)]
    for s, lr in enumerate(lrs, start=1):
        assert lr == pytest.approx(peak * s / warmup)
    assert lrs[-1] == pytest.approx(peak)  # the peak is reached exactly at the end of warm-up
    assert all(a < b for a, b in zip(lrs, lrs[1:], strict=False))


def test_cosine_decays_to_zero_at_total_steps():
    peak, warmup, total = 1e-3, 100, 1100
    lrs = [lr_at(s, peak, warmup, total, "cosine") for s in range(warmup, total + 50)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:], strict=False))  # non-increasing after warm-up
    assert lr_at(600, peak, warmup, total, "cosine") == pytest.approx(peak / 2)  # half way: cos(pi/2) = 0
    assert lr_at(total, peak, warmup, total, "cosine") == pytest.approx(0, abs=1e-15)
    assert lr_at(total + 10, peak, warmup, total, "cosine") == pytest.approx(0, abs=1e-15)
    assert lr_at(350, peak, warmup, total, "cosine") == pytest.approx(peak * 0.5 * (1 + math.cos(math.pi / 4)))


def test_cosine_follows_the_time_budget_when_it_is_ahead():
    peak, warmup, total = 1e-3, 100, 10_000
    assert lr_at(200, peak, warmup, total, "cosine", time_frac=0.5) == pytest.approx(peak / 2)
    assert lr_at(200, peak, warmup, total, "cosine", time_frac=1.0) == pytest.approx(0, abs=1e-15)
    # the step fraction wins when it is further along than the clock
    assert lr_at(5050, peak, warmup, total, "cosine", time_frac=0.1) == pytest.approx(peak / 2)


def test_inverse_sqrt_is_the_papers_decay():
    peak, warmup = 1e-3, 400
    for s in (400, 800, 1600, 6400):
        assert lr_at(s, peak, warmup, 10**6, "inverse_sqrt") == pytest.approx(peak * math.sqrt(warmup / s))
    assert lr_at(4 * warmup, peak, warmup, 10**6, "inverse_sqrt") == pytest.approx(peak / 2)


# -- batching -----------------------------------------------------------------------------------------------

lengths = st.lists(st.tuples(st.integers(1, 60), st.integers(1, 60)), min_size=0, max_size=300)


@settings(max_examples=150, deadline=None)
@given(lens=lengths, max_tokens=st.integers(1, 400), shuffle=st.booleans(), seed=st.integers(0, 5))
def test_token_batches_respect_max_tokens_and_cover_every_example_once(lens, max_tokens, shuffle, seed):
    examples = [([5] * s, [6] * t) for s, t in lens]
    batches = list(token_batches(examples, max_tokens, shuffle=shuffle, seed=seed))
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(examples)))  # every example exactly once
    for b in batches:
        assert b, "empty batch"
        src = pad_batch([examples[i][0] for i in b], 0)
        tgt = pad_batch([examples[i][1] for i in b], 0)
        padded = src.numel() + tgt.numel()  # B * (S_max + T_max)
        assert len(b) == 1 or padded <= max_tokens, (padded, max_tokens)
    assert batches == list(token_batches(examples, max_tokens, shuffle=shuffle, seed=seed))  # deterministic


def test_token_batches_shuffle_changes_order_and_keeps_batches_full():
    examples = [([5] * (i % 17 + 1), [6] * (i % 13 + 1)) for i in range(500)]
    a = list(token_batches(examples, 256, shuffle=True, seed=1))
    b = list(token_batches(examples, 256, shuffle=True, seed=2))
    assert a != b
    assert sorted(i for x in a for i in x) == sorted(i for x in b for i in x) == list(range(500))
    # batching by tokens, not by count: short examples make bigger batches
    short = [([5] * 2, [6] * 2)] * 100
    assert len(next(iter(token_batches(short, 256, shuffle=False)))) == 64  # 64 * (2 + 2) = 256


def test_pad_batch():
    out = pad_batch([[4, 5, 6], [7]], pad_id=0)
    assert out.tolist() == [[4, 5, 6], [7, 0, 0]] and out.dtype == torch.long


def test_reverse_pairs_and_encoding():
    pairs = reverse_pairs(50, seed=3)
    assert pairs == reverse_pairs(50, seed=3) and pairs != reverse_pairs(50, seed=4)
    for s, t in pairs:
        words = s.split()
        assert s == " " + " ".join(words) and t == " " + " ".join(reversed(words)) and 3 <= len(words) <= 12
    tok = TiktokenTokenizer.build([x for p in reverse_pairs(500, 0) for x in p])
    (src, tgt), *_ = encode_pairs(tok, pairs, max_len=128)
    words = pairs[0][0].split()
    assert src == [tok.encode(" " + w)[0] for w in words] + [tok.eos_id]  # one piece per letter word, then <eos>
    assert tgt == [tok.bos_id] + [tok.encode(" " + w)[0] for w in reversed(words)] + [tok.eos_id]
    # too-long targets are dropped, too-long sources truncated to keep <eos>
    kept = encode_pairs(tok, [(" a b c d e f", " f e d c b a")], max_len=5)
    assert kept == []
    [(src, _)] = encode_pairs(tok, [(" a b c d e f", " a")], max_len=5)
    assert src == tok.encode(" a b c d") + [tok.eos_id]


# -- Multi30k (skipped where the data is not present) ----------------------------------------------------

MULTI30K = default_data_dir()
needs_multi30k = pytest.mark.skipif(
    MULTI30K is None,
    reason="Multi30k not found: set $MULTI30K_DIR or put the raw files in ../shared/data/multi30k or data/multi30k",
)


@needs_multi30k
def test_multi30k_splits_are_aligned_and_complete():
    sizes = {"train": 29000, "val": 1014, "test_2016_flickr": 1000}
    for split, n in sizes.items():
        pairs = read_pairs(split_file(MULTI30K, split, "en"), split_file(MULTI30K, split, "de"))
        assert len(pairs) == n, split
        assert all(s.strip() and t.strip() for s, t in pairs), split
    [train], [val] = load_data(parse_args(["--out", "unused"]))
    assert (train.name, len(train.pairs), len(val.pairs)) == ("multi30k", 29000, 1014)
    assert train.pairs[0] == (
        "Two young, White males are outside near many bushes.",
        "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
    )


@needs_multi30k
def test_multi30k_round_trips_through_the_tokenizer():
    val = read_pairs(split_file(MULTI30K, "val", "en"), split_file(MULTI30K, "val", "de"))
    tok = TiktokenTokenizer.build([x for p in val for x in p])
    for s, t in val:
        assert tok.decode(tok.encode(s)) == s and tok.decode(tok.encode(t)) == t


def test_split_file_names_both_candidates(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"train\.en\.gz or train\.en"):
        split_file(tmp_path, "train", "en")
    (tmp_path / "a.txt").write_text("x\ny\n")
    (tmp_path / "b.txt").write_text("1\n")
    with pytest.raises(ValueError, match="2 lines"):
        read_pairs(tmp_path / "a.txt", tmp_path / "b.txt")


def test_init_from_copies_every_weight_and_the_embedding_rows_by_piece():
    """A later training stage (``--init-from``) with a rebuilt vocabulary: every row of a piece both
    vocabularies hold is the old model's row for that piece; every other weight is copied as it is."""
    from training.train import copy_weights

    old_tok = TiktokenTokenizer.build(["the dog runs", "a cat sleeps"] * 2, min_freq=1)
    new_tok = TiktokenTokenizer.build(["Oluwaseun runs", "the dog sleeps", "Tampere"] * 2, min_freq=1)
    cfg = dict(d_model=16, n_heads=2, d_ff=32, n_enc_layers=1, n_dec_layers=1, dropout=0.0, max_len=16)
    torch.manual_seed(0)
    old = Transformer(TransformerConfig(vocab_size=old_tok.vocab_size, **cfg))
    new = Transformer(TransformerConfig(vocab_size=new_tok.vocab_size, **cfg))
    n = copy_weights(old, old_tok, new, new_tok)
    old_id = {c: i for i, c in enumerate(old_tok.cl100k_of)}
    shared = [(i, old_id[c]) for i, c in enumerate(new_tok.cl100k_of) if c in old_id and c >= 0]
    assert n == len(shared) + 3 and len(shared) > 256  # the bytes, and pieces like " dog"
    for i, o in shared:
        assert torch.equal(new.src_emb.weight[i], old.src_emb.weight[o])
    assert torch.equal(new.src_emb.weight[:3], old.src_emb.weight[:3])  # <pad>, <bos>, <eos>
    fresh = [i for i, c in enumerate(new_tok.cl100k_of) if c >= 0 and c not in old_id]
    assert fresh and not any(torch.equal(new.src_emb.weight[i], old.src_emb.weight[i % old_tok.vocab_size]) for i in fresh)
    for name, w in old.state_dict().items():
        if "emb" not in name:
            assert torch.equal(new.state_dict()[name], w), name


def test_piece_names_are_made_of_the_init_checkpoints_word_pieces(tmp_path):
    """``--entity-piece-names`` draws from ``--init-from``'s vocabulary; without one there is none to draw from."""
    from argparse import Namespace

    from training.train import init_piece_texts
    from training.transforms.entities import word_pieces

    tok = TiktokenTokenizer.build(["Ayesha has yes ha ha yes", "the cats sing"] * 3, min_freq=2)
    tok.save(tmp_path / "vocab.json")
    texts = init_piece_texts(Namespace(init_from=str(tmp_path)))
    assert len(texts) == tok.vocab_size and "yes" in word_pieces(texts)
    assert not any(p.startswith(" ") or not p.islower() for p in word_pieces(texts))
    with pytest.raises(ValueError, match="needs --init-from"):
        init_piece_texts(Namespace(init_from=None))
    args = parse_args(["--out", str(tmp_path), "--entity-swap", "0.5", "--entity-piece-names", "0.3"])
    assert args.entity_piece_names == 0.3


def write_chat(tmp_path: Path, splits: dict[str, list[tuple[str, str]]]) -> None:
    """A corpus folder "chat" under ``tmp_path`` with one ``split.en`` / ``split.de`` pair of files per split."""
    chat = tmp_path / "chat"
    chat.mkdir()
    for split, ps in splits.items():
        (chat / f"{split}.en").write_text("".join(s + "\n" for s, _ in ps))
        (chat / f"{split}.de").write_text("".join(t + "\n" for _, t in ps))


def test_drop_context_times_leaves_evening_times_out_of_training_only(tmp_path):
    pairs = {"train": [("6:55.", "18:55."), ("At 7:30 tonight.", "Um 19:30 Uhr heute Abend."), ("Hi.", "Hallo.")]}
    pairs["dev"] = pairs["train"]
    write_chat(tmp_path, pairs)
    base = ["--corpus", "chat", "--data-root", str(tmp_path), "--out", str(tmp_path / "run")]
    train, val = load_data(parse_args(base))
    assert train[0].pairs == pairs["train"] and val[0].pairs == pairs["dev"]
    train, val = load_data(parse_args([*base, "--drop-context-times"]))
    assert train[0].pairs == pairs["train"][1:] and val[0].pairs == pairs["dev"]  # dev and test are never changed


def test_times_as_typed_rewrites_training_times_only(tmp_path):
    pairs = [("Pick me up at 2:30.", "Hol mich um halb drei ab."), ("It's 9:15.", "Es ist 9.15 Uhr."), ("Hi.", "Hallo.")]
    write_chat(tmp_path, {"train": pairs, "dev": pairs})
    args = ["--corpus", "chat", "--data-root", str(tmp_path), "--out", str(tmp_path / "run"), "--times-as-typed"]
    train, val = load_data(parse_args(args))
    assert [t for _, t in train[0].pairs] == ["Hol mich um 2:30 ab.", "Es ist 9:15 Uhr.", "Hallo."]
    assert val[0].pairs == pairs  # dev and test are scored as they are


def chat_run(tmp_path: Path, train: list[tuple[str, str]]) -> list[str]:
    """A corpus folder "chat" under ``tmp_path`` (``train``; its last pair is the dev split) and the arguments of a
    one-epoch run of the tiny model on it."""
    from test_corpora import TINY as TINY_CORPUS  # the tiny model on a real corpus folder

    write_chat(tmp_path, {"train": train, "dev": train[-1:]})
    return [*TINY_CORPUS, "--corpus", "chat", "--data-root", str(tmp_path), "--epochs", "1"]


def test_entity_dates_swaps_dates_in_training_and_in_copy_practice(tmp_path, capsys):
    """--entity-dates: the training pairs with a date the German writes as a date, or with "in May" / "im Mai", get new
    dates each epoch (and join the copy practice of --entity-corpus); without it the same run counts no date.
    --date-corpus N adds those pairs N times more, and needs --entity-dates."""
    train = [
        ("His birthday is May 5th.", "Er hat am 5. Mai Geburtstag."),
        ("I was born on 12 May 2003.", "Ich wurde am 12. Mai 2003 geboren."),
        ("I was born in October.", "Ich bin im Oktober geboren."),
        ("I like apples.", "Ich mag Äpfel."),
    ]
    tiny = chat_run(tmp_path, train)
    tiny = [*tiny, "--entity-swap", "1.0", "--entity-corpus", "1.0"]
    main([*tiny, "--out", str(tmp_path / "plain")])
    plain = capsys.readouterr().out
    assert "with a date" not in plain and "entities 1x1" in plain  # only 12 May 2003's numbers are entities
    main([*tiny, "--out", str(tmp_path / "dates"), "--entity-dates"])
    dates = capsys.readouterr().out
    # each in chat and in copy practice: two dates, one month
    assert "entities 3x1" in dates and "on 2 pairs and 4 with a date and 2 with a month" in dates
    main([*tiny, "--out", str(tmp_path / "practice"), "--entity-dates", "--date-corpus", "3"])
    practice = capsys.readouterr().out
    assert "dates 9x1" in practice and "10 with a date and 5 with a month" in practice  # three more of each
    with pytest.raises(SystemExit):
        parse_args([*tiny, "--out", str(tmp_path / "x"), "--date-corpus", "3"])  # without --entity-dates
    assert "--date-corpus needs --entity-swap and --entity-dates" in capsys.readouterr().err


def test_negation_corpus_adds_the_negated_pairs_n_times(tmp_path, capsys):
    """--negation-corpus N: the pairs of ``training.transforms.negation.nicht_after_object`` N more times an epoch, with entity
    substitution (the copies' names swapped, "Tom" among them) and without it."""
    train = [
        ("My friend Tom didn't eat the meat.", "Mein Freund Tom aß das Fleisch nicht."),
        ("My friend Tom ate the meat.", "Mein Freund Tom aß das Fleisch."),
        ("I don't understand the question.", "Ich verstehe die Frage nicht."),
        ("My friend Tom likes apples.", "Mein Freund Tom mag Äpfel."),
    ]
    tiny = chat_run(tmp_path, train)
    main([*tiny, "--out", str(tmp_path / "plain")])
    assert "negations" not in capsys.readouterr().out
    main([*tiny, "--out", str(tmp_path / "neg"), "--negation-corpus", "3"])
    assert "negations 6x1" in capsys.readouterr().out  # two pairs, three times each
    main([*tiny, "--out", str(tmp_path / "swap"), "--negation-corpus", "3", "--entity-swap", "1.0"])
    out = capsys.readouterr().out
    assert "negations 6x1" in out and "entity swap p=1.0 on 6 pairs" in out  # chat's three with Tom, the copies' three


def test_british_corpus_adds_the_american_spelled_pairs_n_times_spelled_the_british_way(tmp_path, capsys):
    """--british-corpus N: the pairs whose English holds an American spelling N more times an epoch (British-spelled by
    their swapper); --british-spelling B and it need --entity-swap."""
    train = [
        ("My favorite color is gray.", "Meine Lieblingsfarbe ist grau."),
        ("The theater is big.", "Das Theater ist groß."),
        ("I like apples.", "Ich mag Äpfel."),
    ]
    tiny = [*chat_run(tmp_path, train), "--entity-swap", "1.0"]
    main([*tiny, "--out", str(tmp_path / "plain")])
    assert "british" not in capsys.readouterr().out
    main([*tiny, "--out", str(tmp_path / "gb"), "--british-corpus", "3", "--british-spelling", "0.5"])
    assert "british 6x1" in capsys.readouterr().out  # two pairs, three times each
    no_swap = [a for a in tiny if a not in ("--entity-swap", "1.0")]
    for flag in ("--british-corpus", "--british-spelling"):
        with pytest.raises(SystemExit):
            parse_args([*no_swap, "--out", str(tmp_path / "x"), flag, "1"])
        assert "need --entity-swap" in capsys.readouterr().err


# -- training/config.py: TrainConfig from a TOML file, flags on top --------------------------------------------------


def test_a_config_file_gives_the_options_and_a_flag_overrides_it(tmp_path):
    (tmp_path / "stage.toml").write_text(
        'corpus = ["multi30k:1.0", "tatoeba:2.0"]\nlr = 5e-5\nout = "runs/x"\nentity_dates = true\n'
        "[transforms.entities]\np = 0.7\nsplice = 0.3\n[transforms.dates]\ncorpus = 20\n"
    )
    config = parse_args(["--config", str(tmp_path / "stage.toml"), "--lr", "3e-4", "--corpus", "tatoeba"])
    assert config.lr == 3e-4 and config.out == "runs/x" and config.corpus == ("tatoeba",)  # a flag list replaces
    assert config.entity_swap == 0.7 and config.entity_splice == 0.3 and config.date_corpus == 20
    assert config == replace(TrainConfig.from_toml(tmp_path / "stage.toml"), lr=3e-4, corpus=("tatoeba",))
    assert parse_args(config.to_args()) == config  # the flags a config prints give it back


def test_the_old_flags_parse_as_before(tmp_path):
    """Every flag train.py took keeps its name, type and default (the same namespace values as the flags gave)."""
    config = parse_args(
        ["--out", "o", "--corpus", "a:2", "--corpus", "b", "--post-ln", "--no-bf16", "--cudnn-attention", "--epochs", "3"]
        + ["--entity-swap", "0.5", "--british-spelling", "0.5", "--negation-corpus", "2", "--val-limit", "7"]
    )
    assert config.corpus == ("a:2", "b") and config.post_ln and config.bf16 is False and config.cudnn_attention
    assert config.epochs == 3 and config.entity_swap == 0.5 and config.negation_corpus == 2 and config.val_limit == 7
    assert parse_args(["--out", "o"]) == TrainConfig(out="o") and TrainConfig().bf16 is None and TrainConfig().lr == 1e-3


@pytest.mark.parametrize(
    ("toml", "named"),
    [
        ("learning_rate = 1e-3\n", "learning_rate"),
        ("[transforms.entities]\nsplise = 0.3\n", "transforms.entities.splise"),
        ("[transforms.weather]\nrain = 1\n", "transforms.weather"),
        ("entity_swap = 1.5\n", "entity_swap must be in"),
        ("lr = 0\n", "lr must be > 0"),
        ("task = 'sort'\n", "task must be one of"),
        ("entity_swap = 0.5\n[transforms.entities]\np = 0.5\n", "both as a field and in a transforms table"),
    ],
)
def test_a_config_file_with_an_unknown_key_or_a_bad_value_is_refused_by_name(tmp_path, capsys, toml, named):
    (tmp_path / "bad.toml").write_text(toml)
    with pytest.raises(ValueError, match=re.escape(named)):
        TrainConfig.from_toml(tmp_path / "bad.toml")
    with pytest.raises(SystemExit):
        parse_args(["--config", str(tmp_path / "bad.toml"), "--out", "o"])
    assert named in capsys.readouterr().err


def test_a_config_is_frozen_and_needs_an_out_folder(tmp_path, capsys):
    config = TrainConfig(out="o", corpus=["a", "b"])
    assert config.corpus == ("a", "b")  # lists become tuples
    with pytest.raises(FrozenInstanceError):
        config.lr = 1.0
    with pytest.raises(SystemExit):
        parse_args(["--lr", "1e-3"])
    assert "--out is required" in capsys.readouterr().err

"""Many users' analyses at once: ``analysis.analyze.analyze_many`` (one padded batch) gives each input what its own
``analyze`` gives, and ``ModelWorker.call_many`` batches the calls that wait together and hands each its result."""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from analysis.analyze import analyze, analyze_many
from model.checkpoint import PRETRAINED
from model.decoding import generate_steps, greedy_steps_batch
from model.facts import InputError
from model.settings import DecodeSettings, Interventions
from serving.limits import CallLimit
from serving.worker import ModelWorker

CKPT = PRETRAINED / "en-de"
pytestmark = pytest.mark.skipif(not (CKPT / "model.safetensors").exists(), reason=f"needs the checkpoint {CKPT}")
TEXTS = [
    "A dog runs through grass.",
    "Two young men in blue jackets are playing guitars on a street corner at night.",
    "",  # refused: InputError, and the others still come back
    "Hi",
    "My friend Jakob lives in Stuttgart. <|endoftext|> 😀 Привет",
    "An old woman sat on a bench in the busy market while the children played with a red ball.",
    "word " * 300,  # cut to the model's length
]


def assert_close(a, b) -> None:
    """The same translation and records; maps equal up to float rounding (a batch sums in another order)."""
    assert a.out_ids == b.out_ids and a.translation == b.translation and a.finished == b.finished
    assert a.source == b.source and a.tgt_in_tokens == b.tgt_in_tokens and a.tgt_out_tokens == b.tgt_out_tokens
    for kind in ("enc_self", "dec_self", "cross", "next_probs"):
        x, y = getattr(a.maps, kind), getattr(b.maps, kind)
        assert x.shape == y.shape, kind
        np.testing.assert_allclose(x, y, atol=1e-5, err_msg=kind)
        assert (x == 0).sum() == (y == 0).sum() or kind == "next_probs", f"{kind}: the masked cells differ"
    for kind in a.maps.masks:
        np.testing.assert_array_equal(a.maps.masks[kind].reasons, b.maps.masks[kind].reasons)
        assert a.maps.masks[kind].ablated == b.maps.masks[kind].ablated
    assert len(a.steps) == len(b.steps)
    for s, t in zip(a.steps, b.steps, strict=True):
        assert (s.t, s.prefix_tokens, s.chosen, s.forced) == (t.t, t.prefix_tokens, t.chosen, t.forced)
        assert [c[:2] for c in s.candidates] == [c[:2] for c in t.candidates]
        np.testing.assert_allclose([c[2] for c in s.candidates], [c[2] for c in t.candidates], atol=1e-5)
        np.testing.assert_allclose(s.self_attn, t.self_attn, atol=1e-5)
        np.testing.assert_allclose(s.cross_attn, t.cross_attn, atol=1e-5)
        for kind in s.masks:
            np.testing.assert_array_equal(s.masks[kind].reasons, t.masks[kind].reasons)


INTERVENTION_CASES = [
    Interventions(),
    Interventions(src_hidden=frozenset({1, 3}), temperature=2.0, ablate=frozenset({("cross", 0, 1), ("enc_self", 1, 0)})),
    Interventions(causal=False, window=3),
]


@pytest.mark.parametrize("interventions", INTERVENTION_CASES, ids=["none", "hidden-temperature-ablated", "no-causal-window"])
def test_each_input_of_a_batch_gets_its_own_analysis(loaded, interventions):
    many = analyze_many(loaded.model, loaded.tokenizer, TEXTS, DecodeSettings(), interventions)
    assert len(many) == len(TEXTS)
    for text, b in zip(TEXTS, many, strict=True):
        if not text.strip():
            assert isinstance(b, InputError)
            with pytest.raises(InputError, match=re.escape(str(b))):
                analyze(loaded.model, loaded.tokenizer, text, DecodeSettings(), interventions)
            continue
        assert_close(analyze(loaded.model, loaded.tokenizer, text, DecodeSettings(), interventions), b)


def test_a_budget_cut_output_and_other_methods_match_too(loaded):
    """max_new=3 cuts every output (its last row is then a teacher-forced pass); beam and sampling run one by one."""
    model, tok = loaded.model, loaded.tokenizer
    cut = analyze_many(model, tok, TEXTS[:2], DecodeSettings(max_new=3))
    assert [a.finished for a in cut] == [False, False] and [len(a.out_ids) for a in cut] == [3, 3]
    for text, b in zip(TEXTS[:2], cut, strict=True):
        assert_close(analyze(model, tok, text, DecodeSettings(max_new=3)), b)
    for text, b in zip(TEXTS[:2], analyze_many(model, tok, TEXTS[:2], DecodeSettings(method="sample", seed=4)), strict=True):
        assert_close(analyze(model, tok, text, DecodeSettings(method="sample", seed=4)), b)
    beam = DecodeSettings(method="beam", beam_size=3)
    for text, b in zip(TEXTS[:2], analyze_many(model, tok, TEXTS[:2], beam), strict=True):
        a = analyze(model, tok, text, beam)
        assert a.out_ids == b.out_ids and a.beam.best_path == b.beam.best_path and b.steps is None


def test_batched_steps_equal_one_source_at_a_time(loaded):
    """The decoding itself: same tokens, candidates and attention rows as ``generate_steps`` of each source."""
    model, tok = loaded.model, loaded.tokenizer
    srcs = [tok.encode(t) + [model.cfg.eos_id] for t in ("A man.", "The children are playing in the park near the river.")]
    S = max(map(len, srcs))
    src_t = torch.tensor([s + [model.cfg.pad_id] * (S - len(s)) for s in srcs])  # (B, S)
    enc = model.encode(src_t)
    batch = greedy_steps_batch(model, srcs, k=4, max_new=[20, 20], enc=enc)
    for src, steps in zip(srcs, batch, strict=True):
        alone = list(generate_steps(model, src, k=4, max_new=20))
        assert [s.chosen for s in steps] == [s.chosen for s in alone]
        for s, t in zip(steps, alone, strict=True):
            assert s.self_attn.shape == t.self_attn.shape and s.cross_attn.shape == t.cross_attn.shape == (
                model.cfg.n_dec_layers,
                model.cfg.n_heads,
                len(src),
            )
            np.testing.assert_allclose(s.cross_attn, t.cross_attn, atol=1e-5)
            np.testing.assert_allclose(s.cross_attn.sum(-1), 1.0, atol=1e-5)  # padded keys get nothing


def asked_together(w: ModelWorker, loaded, copies: int) -> None:
    """Every text of ``TEXTS`` ``copies`` times, asked of ``w.call_many`` from as many threads at once: each gets its
    own analysis, and some went in one batch."""
    texts = [t for t in TEXTS if t.strip()] * copies
    alone = {t: analyze(loaded.model, loaded.tokenizer, t) for t in set(texts)}
    start = threading.Barrier(len(texts))

    def ask(text):
        start.wait()
        return text, w.call_many(loaded, analyze_many, analyze, text, DecodeSettings(), Interventions())

    with ThreadPoolExecutor(max_workers=len(texts)) as pool:
        together = list(pool.map(ask, texts))
    for text, a in together:
        assert_close(alone[text], a)
    assert sum(w.batch_sizes) == len(texts) and max(w.batch_sizes) > 1, w.batch_sizes


def test_calls_waiting_together_go_as_one_batch_and_each_gets_its_own(worker, loaded):
    asked_together(worker, loaded, 3)
    with pytest.raises(InputError):  # an input's error reaches its own caller
        worker.call_many(loaded, analyze_many, analyze, "  ", DecodeSettings())


def test_a_spy_for_the_single_call_runs_here(worker, loaded):
    seen = []

    def spy(model, tok, text, *args):  # a local function: cannot travel, so the call is not batched
        seen.append(text)
        return analyze(model, tok, text, *args)

    worker.call_many(loaded, analyze_many, spy, TEXTS[0], DecodeSettings())
    assert seen == [TEXTS[0]]


def test_without_a_worker_the_waiting_calls_batch_in_this_process(loaded):
    """deploy/'s replicas run the model in their own process (ATTENTION_EXPLORER_MODEL_PROCESS=0): batches there too."""
    here = ModelWorker(CallLimit(1, threads=1), enabled=False)
    try:
        asked_together(here, loaded, 2)
    finally:
        here.close()


def test_the_same_item_asked_by_many_is_computed_once(loaded):
    """A class on the Compare page asks for the same sentences at once: a batch computes each distinct one once."""
    here, seen = ModelWorker(CallLimit(1, threads=1), enabled=False), []

    def counting(model, tok, texts, *args):  # a local fn_many: with the worker off it runs here
        seen.append(list(texts))
        return analyze_many(model, tok, texts, *args)

    start = threading.Barrier(12)

    def ask(i):
        start.wait()
        return here.call_many(loaded, counting, analyze, TEXTS[i % 2], DecodeSettings())

    try:
        with ThreadPoolExecutor(max_workers=12) as pool:
            results = list(pool.map(ask, range(12)))
    finally:
        here.close()
    assert all(len(set(texts)) == len(texts) for texts in seen), "no item twice in one batch"
    assert max(here.batch_sizes) > 2 and sum(len(t) for t in seen) < 12
    for i, a in enumerate(results):
        assert a.translation == results[i % 2].translation

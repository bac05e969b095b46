"""Properties of model/decoding.py and analysis/analyze.py on tiny random models and the toy reverse model.

Greedy, beam search, sampling and the step API must agree with one another and with a full
(teacher-forced) pass: beam size 1 is greedy, a padded batch decodes like its sentences one by one,
the step API's attention rows are the rows of the full maps, a forced prefix is kept, sampling is
repeatable and its filters keep a distribution, and ``analyze`` shows the maps of the translation
it made.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.analyze import analyze, data_flow, step_trace, teacher_forced
from analysis.records import BeamTree, trace_view
from model.checkpoint import PRETRAINED, load_checkpoint
from model.decoding import (
    SamplingSettings,
    beam_search,
    filtered_probs,
    generate_ids,
    generate_steps,
    greedy_batch,
    length_penalty,
    max_new_tokens,
)
from model.facts import VISIBLE, cell_reasons
from model.settings import DecodeSettings
from model.transformer import Interventions, Transformer, TransformerConfig

V, PAD, BOS, EOS = 23, 0, 1, 2


def make_model(seed: int = 0, **overrides) -> Transformer:
    """A tiny eval-mode model with random weights and a peaky untied generator, so that outputs vary
    from step to step and from source to source (and end with <eos> at random lengths)."""
    cfg = dict(
        vocab_size=V,
        d_model=16,
        n_heads=4,
        d_ff=32,
        n_enc_layers=2,
        n_dec_layers=2,
        dropout=0.0,
        max_len=24,
        tie_embeddings=False,
    )
    cfg.update(overrides)
    torch.manual_seed(seed)
    model = Transformer(TransformerConfig(**cfg)).eval()
    with torch.no_grad():
        model.generator.weight.normal_(0.0, 1.0)
        model.generator.weight[[PAD, BOS]] = 0.0  # logit 0: rarely the largest
    return model


def src_ids(seed: int, n: int = 6) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, V, (n,), generator=g).tolist() + [EOS]


@pytest.fixture(scope="module")
def reverse():
    return load_checkpoint(PRETRAINED / "reverse", "cpu")


def greedy_one(model, ids, **kw) -> list[int]:
    return greedy_batch(model, torch.tensor([ids]), **kw)[0]


# -- greedy and beam ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("early_stop", [True, False])
def test_beam_size_one_equals_greedy(seed, early_stop):
    model = make_model(seed)
    ids = src_ids(seed)
    res = beam_search(model, ids, beam_size=1, alpha=0.6, early_stop=early_stop)
    assert res.hypotheses[0][0] == greedy_one(model, ids)


def test_beam_size_one_equals_greedy_on_the_reverse_model(reverse):
    tok = reverse.tokenizer
    for text in (" a b c", " q w e r t y", " z y x w v u t s"):
        ids = tok.encode(text) + [tok.eos_id]
        assert beam_search(reverse.model, ids, beam_size=1).hypotheses[0][0] == greedy_one(reverse.model, ids)


@pytest.mark.parametrize("seed", range(4))
def test_beam_scores_are_logprob_over_length_penalty_and_sorted(seed):
    model = make_model(seed)
    ids = src_ids(seed)
    res = beam_search(model, ids, beam_size=4, alpha=1.0)
    scores = [s for _, s in res.hypotheses]
    assert scores == sorted(scores, reverse=True)
    # recompute the best hypothesis's log-probability with one teacher-forced pass
    out = res.hypotheses[0][0]
    end = res.nodes[res.best_path[-1]]
    tgt = torch.tensor([[BOS] + out + ([EOS] if end.token == EOS else [])])
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids]), tgt[:, :-1]).logits[0], -1)  # (T, V)
    total = float(logp[torch.arange(tgt.size(1) - 1), tgt[0, 1:]].sum())
    assert total == pytest.approx(end.logprob, abs=1e-4)
    assert scores[0] == pytest.approx(total / length_penalty(tgt.size(1) - 1, 1.0), abs=1e-4)


@pytest.mark.parametrize("seed", range(6))
def test_searching_on_never_finds_a_worse_best_hypothesis(seed):
    """Without early stopping the search goes on from where it would have stopped: its finished set
    contains the early one, so its best score can only be higher or equal."""
    model = make_model(seed)
    ids = src_ids(seed)
    early = beam_search(model, ids, beam_size=3, alpha=1.5, early_stop=True)
    longer = beam_search(model, ids, beam_size=3, alpha=1.5, early_stop=False)
    assert longer.hypotheses[0][1] >= early.hypotheses[0][1] - 1e-6
    assert len(longer.nodes) >= len(early.nodes)


def test_beam_tree_is_consistent():
    model = make_model(3)
    res = beam_search(model, src_ids(3), beam_size=3, alpha=0.6)
    ids = {n.id for n in res.nodes}
    assert all(n.parent in ids or n.parent == -1 for n in res.nodes)
    assert [n.id for n in res.nodes] == list(range(len(res.nodes)))
    path = res.best_path
    assert path[0] == 0 and res.nodes[path[-1]].finished
    assert all(res.nodes[b].parent == a for a, b in zip(path, path[1:], strict=False))
    assert [res.nodes[i].token for i in path[1:] if res.nodes[i].token != EOS] == res.hypotheses[0][0]


def test_beam_size_must_be_positive():
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(make_model(), src_ids(0), beam_size=0)


@pytest.mark.parametrize("seed", range(3))
def test_a_padded_batch_decodes_like_its_sentences_one_by_one(seed):
    model = make_model(seed)
    rows = [src_ids(seed, 3), src_ids(seed + 10, 7), src_ids(seed + 20, 5)]
    S = max(map(len, rows))
    src = torch.tensor([r + [PAD] * (S - len(r)) for r in rows])
    outs = greedy_batch(model, src, max_new=12)
    assert outs == [greedy_one(model, r, max_new=12) for r in rows]
    assert len({tuple(o) for o in outs}) > 1, "the test model should not give every source the same output"


# -- the step API ---------------------------------------------------------------------------------


@pytest.mark.parametrize("interventions", [Interventions(), Interventions(causal=False), Interventions(ablate={("cross", 0, 1)})])
def test_step_rows_are_the_rows_of_the_full_teacher_forced_maps(interventions):
    model = make_model(5)
    ids = src_ids(5)
    steps = list(generate_steps(model, ids, interventions=interventions, k=3))
    prefix = steps[-1].prefix + [steps[-1].chosen]
    with torch.no_grad():
        full = model(torch.tensor([ids]), torch.tensor([prefix[:-1]]), interventions, need_weights=True)
    # without the causal mask a row changes as the prefix grows: only the last step saw the full prefix
    for s in steps if interventions.causal else steps[-1:]:
        torch.testing.assert_close(s.cross_attn, full.cross_attn[:, 0, :, s.t], atol=1e-5, rtol=0)
        torch.testing.assert_close(s.self_attn, full.dec_self_attn[:, 0, :, s.t, : s.t + 1], atol=1e-5, rtol=0)
    for s in steps:
        torch.testing.assert_close(s.self_attn.sum(-1), torch.ones(s.self_attn.shape[:-1]), atol=1e-5, rtol=0)


def test_step_api_greedy_matches_greedy_batch_and_reports_its_candidates():
    model = make_model(7)
    ids = src_ids(7)
    steps = list(generate_steps(model, ids, k=5))
    assert generate_ids(model, ids) == greedy_one(model, ids)
    for s in steps:
        probs = [p for _, p in s.candidates]
        assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6
        assert s.chosen == s.candidates[0][0] and s.chosen_prob == pytest.approx(probs[0])
        assert not s.forced


def test_fused_steps_give_the_same_tokens_and_probabilities():
    model = make_model(8)
    ids = src_ids(8)
    a = list(generate_steps(model, ids, k=4))
    b = list(generate_steps(model, ids, k=4, need_weights=False))
    assert [s.chosen for s in a] == [s.chosen for s in b]
    for x, y in zip(a, b, strict=True):
        assert [i for i, _ in x.candidates] == [i for i, _ in y.candidates]
        np.testing.assert_allclose([p for _, p in x.candidates], [p for _, p in y.candidates], atol=1e-6)
        assert y.self_attn is None and y.cross_attn is None


def test_a_forced_prefix_is_kept_and_decoding_goes_on_from_it(reverse):
    tok = reverse.tokenizer
    ids = tok.encode(" a b c d") + [tok.eos_id]
    free = [s.chosen for s in generate_steps(reverse.model, ids)]
    other = next(c for c, _ in next(iter(generate_steps(reverse.model, ids, k=5))).candidates if c != free[0])
    steps = list(generate_steps(reverse.model, ids, forced=[other]))
    assert steps[0].chosen == other and steps[0].forced
    assert not any(s.forced for s in steps[1:])
    assert steps[1].prefix == [tok.bos_id, other]
    assert [s.chosen for s in steps] != free


# -- sampling ---------------------------------------------------------------------------------------


def test_sampling_is_repeatable_with_a_seed_and_top_k_one_is_greedy():
    """The seed decides the sample: the same seed gives the same output whatever the global random state, other
    seeds give other outputs, and each output is the draws of ``torch.multinomial`` from a CPU generator seeded with
    it, replayed here step by step on the filtered distribution of a teacher-forced pass (this fails if the seed
    were ignored, replaced by a constant, or the global generator were used)."""
    model = make_model(9)
    ids = src_ids(9)
    s = SamplingSettings("sample", temperature=1.5, seed=4)
    torch.manual_seed(123)
    first = generate_ids(model, ids, sampling=s)
    torch.manual_seed(456)  # another global state: the seed alone decides
    assert generate_ids(model, ids, sampling=s) == first
    assert generate_ids(model, ids, sampling=SamplingSettings("sample", top_k=1, seed=1)) == greedy_one(model, ids)
    samples = {seed: generate_ids(model, ids, sampling=replace(s, seed=seed)) for seed in range(6)}
    assert len({tuple(v) for v in samples.values()}) >= 3, f"six seeds, too few different samples: {samples}"
    for seed, out in samples.items():  # replay: one generator seeded with the seed, one draw per step
        gen = torch.Generator(device="cpu").manual_seed(seed)
        prefix, drawn = [BOS], []
        while len(drawn) < max_new_tokens(model, len(ids)):
            with torch.inference_mode():
                logits = model(torch.tensor([ids]), torch.tensor([prefix])).logits[0, -1]  # (V,)
            token = int(torch.multinomial(filtered_probs(logits, replace(s, seed=seed)), 1, generator=gen))
            if token == EOS:
                break
            drawn.append(token)
            prefix.append(token)
        assert out == drawn, f"seed {seed}"


@settings(max_examples=50, deadline=None)
@given(
    logits=st.lists(st.floats(-20, 20), min_size=2, max_size=30),
    top_k=st.integers(0, 40),
    top_p=st.floats(0.01, 1.0),
    temperature=st.floats(0.1, 5.0),
)
def test_filtered_probs_is_a_distribution_over_the_kept_tokens(logits, top_k, top_p, temperature):
    x = torch.tensor(logits)
    p = filtered_probs(x, SamplingSettings("sample", temperature, top_k, top_p))
    assert torch.isfinite(p).all() and float(p.sum()) == pytest.approx(1.0, abs=1e-5)
    assert int((p > 0).sum()) >= 1
    if top_k:
        assert int((p > 0).sum()) <= top_k  # exactly the top k, even with ties at the k-th value
    q = torch.softmax(x / temperature, dim=-1)  # unfiltered: the kept top is a most probable token
    assert q[int(p.argmax())] == q.max()  # (compared as probabilities: logits 0 and -1e-41 tie after softmax)


def test_top_k_keeps_exactly_k_tokens_under_ties():
    p = filtered_probs(torch.tensor([0.0, 0.0, 1.0]), SamplingSettings("sample", top_k=2))
    assert int((p > 0).sum()) == 2 and int(p.argmax()) == 2


def test_bad_sampling_settings_raise():
    for kw in ({"strategy": "top"}, {"temperature": 0.0}, {"top_p": 0.0}, {"top_k": -1}):
        with pytest.raises(ValueError):
            SamplingSettings(**kw)


# -- analyze -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
def test_analyze_shows_the_maps_of_the_translation_it_made(reverse, method):
    tok = reverse.tokenizer
    a = analyze(reverse.model, tok, " m n o p", DecodeSettings(method, beam_size=3, seed=2))
    assert a.tgt_in_tokens[0] == "<bos>" and len(a.tgt_in_tokens) == len(a.out_ids) + 1
    L, H = reverse.model.cfg.n_dec_layers, reverse.model.cfg.n_heads
    assert a.maps.cross.shape == (L, H, len(a.out_ids) + 1, len(a.source.ids))
    np.testing.assert_allclose(a.maps.cross.sum(-1), 1.0, atol=1e-5)
    if method == "greedy":
        steps = step_trace(reverse.model, tok, a.source.ids)
        assert [s.chosen for s in steps][: len(a.out_ids)] == a.out_ids
        for s in steps:
            np.testing.assert_allclose(s.cross_attn, a.maps.cross[:, :, s.t], atol=1e-5)
            np.testing.assert_allclose(s.self_attn, a.maps.dec_self[:, :, s.t, : s.t + 1], atol=1e-5)


@pytest.mark.parametrize("method", ["greedy", "sample", "beam"])
@pytest.mark.parametrize(
    "interventions", [Interventions(), Interventions(causal=False, temperature=2.0, ablate=frozenset({("cross", 0, 1)}))]
)
def test_the_analysis_holds_the_steps_that_step_trace_gives(reverse, method, interventions):
    """The step view takes the analysis's own steps (no second decoding): the same records ``step_trace`` makes,
    tokens, candidates, hidden cells, and probabilities and weights up to float rounding (the analysis encodes with
    the weights kept, step_trace on the fused path); beam search steps through greedily, so it has none."""
    tok, settings = reverse.tokenizer, DecodeSettings(method, beam_size=3, seed=5, top_k=4)
    a = analyze(reverse.model, tok, " m n o p q", settings, interventions)
    if method == "beam":
        assert a.steps is None
        return
    want = step_trace(reverse.model, tok, a.source.ids, settings=settings, interventions=interventions)
    assert len(a.steps) == len(want) and [s.chosen for s in a.steps][: len(a.out_ids)] == a.out_ids
    for got, w in zip(a.steps, want, strict=True):
        for name, v in vars(w).items():
            g = getattr(got, name)
            if isinstance(v, np.ndarray):
                np.testing.assert_allclose(g, v, atol=1e-6, err_msg=name)
            elif name == "candidates":
                assert [c[:2] for c in g] == [c[:2] for c in v], name
                np.testing.assert_allclose([c[2] for c in g], [c[2] for c in v], atol=1e-6, err_msg=name)
            elif name == "chosen_prob":
                assert g == pytest.approx(v, abs=1e-6), name
            elif name == "masks":
                assert g.keys() == v.keys() and all((g[k].reasons == v[k].reasons).all() for k in v), name
                assert all(g[k].ablated == v[k].ablated for k in v), name
            else:
                assert g == v, name


def decode_time_maps(model, src: list[int], tgt_in: list[int], tgt_out: list[int], interventions: Interventions):
    """The oracle, written without the KV cache or ``analyze``: for every step t, one full forward pass
    over the prefix ``tgt_in[: t + 1]`` (what the decoder had when it chose ``tgt_out[t]``), keeping its
    last query row of each decoder map and the probability of ``tgt_out[t]``."""
    L, H, T, S = model.cfg.n_dec_layers, model.cfg.n_heads, len(tgt_in), len(src)
    dec_self, cross, probs = np.zeros((L, H, T, T)), np.zeros((L, H, T, S)), np.zeros(T)
    with torch.no_grad():
        for t in range(T):
            res = model(torch.tensor([src]), torch.tensor([tgt_in[: t + 1]]), interventions, need_weights=True)
            dec_self[:, :, t, : t + 1] = res.dec_self_attn[:, 0, :, -1].numpy()  # (L, H, t + 1)
            cross[:, :, t] = res.cross_attn[:, 0, :, -1].numpy()  # (L, H, S)
            probs[t] = float(torch.softmax(res.logits[0, -1].float(), -1)[tgt_out[t]])
    return dec_self, cross, probs


SHOWN_INTERVENTIONS = [
    Interventions(),
    Interventions(causal=False),
    Interventions(causal=False, window=2, temperature=0.6),
    Interventions(window=2),
    Interventions(temperature=1.7),
    Interventions(src_hidden={1}),
    Interventions(causal=False, src_hidden={0, 2}, ablate={("dec_self", 1, 0)}),
    Interventions(ablate={("dec_self", 0, 0), ("cross", 1, 1)}),
    Interventions(use_pos_encoding=False),
]


@pytest.mark.parametrize("interventions", SHOWN_INTERVENTIONS)
@pytest.mark.parametrize("method", ["greedy", "sample", "beam"])
@pytest.mark.parametrize("budget", [None, 2])
def test_the_shown_maps_are_the_passes_that_wrote_the_translation(method, interventions, budget):
    """Issue 24: every shown row t is step t's query in step t's pass (no weight on a token not yet
    written) and every shown probability is the one step t gave its token, for each decoding method
    and intervention, the causal mask off included, for finished outputs and outputs cut by the budget
    (whose last row predicts the <eos> that was not reached). Under the causal mask this is also one
    teacher-forced pass (the beam's maps). Failed on the old code (8441648) for every causal=False case."""
    for seed in range(2):
        model = make_model(seed)
        tok = _IdTokenizer()
        a = analyze(
            model, tok, str(seed), DecodeSettings(method, beam_size=3, seed=seed, temperature=1.5, max_new=budget), interventions
        )
        tgt_in, tgt_out = [BOS] + a.out_ids, a.out_ids + [EOS]
        dec_self, cross, probs = decode_time_maps(model, a.source.ids, tgt_in, tgt_out, interventions)
        np.testing.assert_allclose(a.maps.dec_self, dec_self, atol=1e-5, err_msg="decoder self-attention")
        np.testing.assert_allclose(a.maps.cross, cross, atol=1e-5, err_msg="cross-attention")
        np.testing.assert_allclose(a.maps.next_probs, probs, atol=1e-5, err_msg="token probabilities")
        assert (np.triu(a.maps.dec_self, k=1) == 0).all(), "weight on a token not yet written"
        if interventions.causal:
            tf = teacher_forced(model, a.source.ids, tgt_in, tgt_out, interventions)
            np.testing.assert_allclose(a.maps.dec_self, tf.dec_self, atol=1e-5)
            np.testing.assert_allclose(a.maps.next_probs, tf.next_probs, atol=1e-5)
        if budget is not None:
            assert len(a.out_ids) <= budget


class _IdTokenizer:
    """A stand-in tokenizer for the tiny random models: the "text" is a seed, the pieces are ids."""

    pad_id, bos_id, eos_id = PAD, BOS, EOS
    vocab_size = V
    tgt_vocab_size = V

    def encode(self, text: str, target: bool = False) -> list[int]:
        return src_ids(int(text))[:-1]

    def decode(self, ids) -> str:
        return " ".join(map(str, ids))

    def piece_text(self, i: int) -> str:
        return f"<{i}>"


@pytest.mark.parametrize(
    "interventions",
    [
        Interventions(),
        Interventions(window=2, src_hidden={1}, ablate={("cross", 0, 1), ("enc_self", 1, 0)}),
        Interventions(causal=False, src_hidden={0, 2}),
    ],
)
@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_analysis_records_carry_the_cells_their_interventions_hid(reverse, method, interventions):
    """Every kind's reasons are ``cell_reasons`` of the interventions used, hidden cells got no weight
    from the model, and the ablated heads are those of that kind; the step trace agrees row by row."""
    model, tok = reverse.model, reverse.tokenizer
    a = analyze(model, tok, " q r s t u", DecodeSettings(method, beam_size=3), interventions)
    S, T = len(a.source.ids), len(a.tgt_in_tokens)
    for kind, (n_q, n_k) in {"enc_self": (S, S), "dec_self": (T, T), "cross": (T, S)}.items():
        v = a.view(kind)
        want = cell_reasons(
            kind, n_q, n_k, causal=interventions.causal, window=interventions.window, src_hidden=sorted(interventions.src_hidden)
        )
        np.testing.assert_array_equal(v.reasons, want, err_msg=kind)
        assert (v.attn[:, :, v.reasons != VISIBLE] == 0).all(), f"{kind}: a cell marked hidden has weight"
        assert v.ablated == {(l, h) for k, l, h in interventions.ablate if k == kind}
        assert all((v.attn[l, h] == 0).all() for l, h in v.ablated)
    if method == "beam":
        assert isinstance(a.beam, BeamTree) and a.beam.best_path[0] == 0
        assert [a.beam.texts[i] for i in a.beam.best_path[1:]][: len(a.out_ids)] == a.tgt_out_tokens[: len(a.out_ids)]
        return
    steps = step_trace(model, tok, a.source.ids, interventions=interventions)
    n = min(len(steps), T)
    for kind in ("dec_self", "cross"):  # a step never sees later tokens: FUTURE under the mask, else not yet written
        tv = trace_view(steps[:n], kind, a.source.tokens, causal=interventions.causal)
        np.testing.assert_array_equal(tv.reasons, a.view(kind).reasons[:n, : tv.reasons.shape[1]], err_msg=kind)
        assert (tv.attn[:, :, tv.reasons != VISIBLE] == 0).all()


def test_data_flow_lists_the_shapes_of_a_real_forward_pass():
    model = make_model(4, n_enc_layers=3, n_dec_layers=2, tgt_vocab_size=12)
    cfg = model.cfg
    S, T = 6, 4
    with torch.no_grad():
        res = model(
            torch.tensor([src_ids(4, S - 1)]), torch.tensor([[1] + [5] * (T - 1)]), need_weights=True, need_intermediates=True
        )
    it = res.intermediates
    real = {
        "source token ids": (1, S),
        "source embeddings x sqrt(d_model)": it["enc_tok_emb"].shape,
        "positional encoding": it["enc_pos_enc"].shape,
        "encoder input": it["enc_in"].shape,
        "encoder self-attention weights": res.enc_self_attn[:, :1].shape[1:],
        "memory (encoder output)": it["memory"].shape,
        "target token ids": (1, T),
        "target embeddings + PE": it["dec_in"].shape,
        "decoder causal self-attention weights": res.dec_self_attn[:, :1].shape[1:],
        "cross-attention weights": res.cross_attn[:, :1].shape[1:],
        "logits": res.logits.shape,
    }
    real |= {f"encoder layer {i + 1} output": it[f"enc_layer_{i}"].shape for i in range(cfg.n_enc_layers)}
    real |= {f"decoder layer {i + 1} output": it[f"dec_layer_{i}"].shape for i in range(cfg.n_dec_layers)}
    listed = {stage.name: stage.shape for stage in data_flow(cfg, S, T)}
    assert len(listed) == len(data_flow(cfg, S, T)), "stage names must be unique"
    for name, shape in real.items():
        assert listed[name] == tuple(shape), name


def test_a_target_vocabulary_bounds_every_decoder_and_forced_ids():
    """With ``tgt_vocab_size`` the generator scores only the first ids: every strategy writes only
    those, greedy and beam size 1 still agree, and forcing an id outside it is refused."""
    model = make_model(3, tgt_vocab_size=12)
    for seed in range(4):
        ids = src_ids(seed)
        g = greedy_one(model, ids)
        assert all(i < 12 for i in g)
        assert beam_search(model, ids, beam_size=1).hypotheses[0][0] == g
        assert all(n.token < 12 for n in beam_search(model, ids, beam_size=3).nodes)
        steps = list(generate_steps(model, ids, sampling=SamplingSettings("sample", seed=seed)))
        assert all(s.chosen < 12 and all(c < 12 for c, _ in s.candidates) for s in steps)
    with pytest.raises(ValueError, match="target vocabulary"):
        next(generate_steps(model, src_ids(0), forced=[15]))


# -- issue 24: sampling follows its distribution, the length penalty and beam search are what they say ---


def test_different_seeds_give_different_samples_and_the_first_step_follows_filtered_probs():
    """Over 2,000 seeds the first sampled token's frequencies follow ``filtered_probs`` of the first
    step's logits: Pearson's chi-squared statistic stays under the 0.1 % critical value of its degrees
    of freedom (fixed seeds, so the test is deterministic; a sampler that ignored top-k, temperature or
    the seed would exceed it by orders of magnitude)."""
    model = make_model(4)
    ids = src_ids(4)
    s = SamplingSettings("sample", temperature=1.3, top_k=4)
    with torch.no_grad():
        logits = model(torch.tensor([ids]), torch.tensor([[BOS]])).logits[0, -1]  # (V,)
    p = filtered_probs(logits, s)
    kept = torch.nonzero(p).flatten().tolist()
    assert len(kept) == 4
    n = 2000
    with torch.no_grad():
        enc = model.encode(torch.tensor([ids]))  # the same source for every draw: encode it once
    firsts = [next(generate_steps(model, ids, sampling=replace(s, seed=seed), max_new=1, enc=enc)).chosen for seed in range(n)]
    counts = np.bincount(firsts, minlength=V)
    assert set(np.nonzero(counts)[0]) <= set(kept), "a token outside top-k was sampled"
    expected = n * p[kept].numpy()
    chi2 = float(((counts[kept] - expected) ** 2 / expected).sum())
    critical = {1: 10.83, 2: 13.82, 3: 16.27}[len(kept) - 1]  # chi-squared 0.999 quantiles
    assert chi2 < critical, f"chi2 {chi2:.1f} >= {critical} (counts {counts[kept]}, expected {expected.round(1)})"
    outputs = {tuple(generate_ids(model, ids, sampling=replace(s, seed=seed))) for seed in range(8)}
    assert len(outputs) > 1, "different seeds gave the same sample every time"


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
@pytest.mark.parametrize("length", [1, 2, 7, 30])
def test_length_penalty_is_the_gnmt_formula(length, alpha):
    assert length_penalty(length, alpha) == pytest.approx(((5 + length) / 6) ** alpha, rel=1e-12)
    if alpha == 0.0:
        assert length_penalty(length, alpha) == 1.0


def exhaustive_best(model, ids: list[int], max_new: int, alpha: float) -> tuple[list[int], float]:
    """Every output of at most ``max_new`` tokens that beam search could return (ending in <eos>, or
    ``max_new`` tokens without one), scored log p(y) / ((5 + |y|) / 6)^alpha with |y| counting the
    <eos>; the best. The scores come from one teacher-forced pass per output, not from beam_search."""
    n = model.cfg.n_logits
    outputs = [list(y) + [EOS] for k in range(max_new) for y in itertools.product([t for t in range(n) if t != EOS], repeat=k)]
    outputs += [list(y) for y in itertools.product([t for t in range(n) if t != EOS], repeat=max_new)]
    best, best_score = None, -math.inf
    with torch.no_grad():
        for y in outputs:
            logp = torch.log_softmax(model(torch.tensor([ids]), torch.tensor([[BOS] + y[:-1]])).logits[0], -1)  # (|y|, V)
            total = float(logp[torch.arange(len(y)), torch.tensor(y)].sum())
            score = total / ((5 + len(y)) / 6) ** alpha
            if score > best_score:
                best, best_score = y, score
    return [t for t in best if t != EOS], best_score


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("alpha", [0.0, 1.5])
def test_a_beam_as_wide_as_the_search_space_finds_the_exhaustive_best(seed, alpha):
    """A target vocabulary of 5 ids (4 besides <eos>), outputs of up to 3 tokens: 1 + 4 + 16 ending in
    <eos> and 64 cut by the budget, 85 candidates; a beam of 100 without early stopping keeps them all and must return the best,
    and any narrower beam can only score lower or equal."""
    model = make_model(seed, vocab_size=V, tgt_vocab_size=5)
    ids = src_ids(seed)
    want, want_score = exhaustive_best(model, ids, max_new=3, alpha=alpha)
    res = beam_search(model, ids, beam_size=100, alpha=alpha, max_new=3, early_stop=False)
    assert res.hypotheses[0][0] == want
    assert res.hypotheses[0][1] == pytest.approx(want_score, abs=1e-5)
    narrow = beam_search(model, ids, beam_size=2, alpha=alpha, max_new=3, early_stop=False)
    assert narrow.hypotheses[0][1] <= want_score + 1e-6

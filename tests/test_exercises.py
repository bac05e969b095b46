"""The exercise grader (analysis/exercises.py, issue 55) against the real model's numbers.

For every exercise kind: the right answer passes; each typical mistake, computed here from the traced numbers
(not by the grader's own ``mistakes``), gets its own message; an unrelated wrong answer gets the general hint;
answers within the tolerance pass and just outside fail; the inputs shown are the traced pass's values rounded to
2 decimals (``analysis.trace.head_trace``). Hypothesis draws sentences, layers, heads and queries on the toy
``reverse`` checkpoint; a few fixed cases run on ``en-de``.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from analysis import exercises as ex
from analysis.analyze import analyze
from analysis.trace import head_trace
from model.checkpoint import PRETRAINED, load_checkpoint
from model.settings import Interventions
from viz.tokens import display

ROOT = Path(__file__).resolve().parent.parent
REVERSE, EN_DE = PRETRAINED / "reverse", PRETRAINED / "en-de"
TOL = ex.TOLERANCE

if not (REVERSE / "config.json").exists():
    pytest.skip(f"no reverse checkpoint at {REVERSE}", allow_module_level=True)

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def rev():
    return load_checkpoint(REVERSE, device="cpu")


letters = st.lists(st.sampled_from("abcdefghij"), min_size=2, max_size=7).map(lambda xs: "".join(" " + x for x in xs))
where = st.tuples(st.sampled_from(["enc_self", "dec_self", "cross"]), st.integers(0, 1), st.integers(0, 1), st.integers(0, 20))
temperatures = st.sampled_from([1.0, 0.5, 2.0])


def trace_of(loaded, text, kind, layer, head, query, interventions=Interventions()):
    a = analyze(loaded.model, loaded.tokenizer, text, interventions=interventions)
    n_q = len(a.source.tokens if kind == "enc_self" else a.tgt_in_tokens)
    return head_trace(
        loaded.model,
        loaded.tokenizer,
        text,
        kind=kind,
        layer=layer,
        head=head,
        query=query % n_q,
        interventions=interventions,
        analysis=a,
    )


def rounded(x) -> np.ndarray:
    return np.round(np.asarray(x, dtype=np.float64), 2)


def first_code(candidates: dict, right, same) -> dict:
    """Independently computed mistakes, code -> answer, without those equal to the right answer or to an earlier
    one: a given answer can carry one name only (the grader's rule, restated)."""
    kept = {}
    for code, wrong in candidates.items():
        if not same(wrong, right) and not any(same(wrong, k) for k in kept.values()):
            kept[code] = wrong
    return kept


def near(a, b) -> bool:
    return bool(np.max(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))) <= 2 * TOL)


def assert_named(exercise, wrongs: dict) -> None:
    """Each independently computed mistake is graded as that mistake, with its own message and the fix."""
    assert set(wrongs) <= set(ex.MISTAKES)
    messages = set()
    for code, wrong in wrongs.items():
        fb = ex.grade(exercise, wrong)
        assert (fb.correct, fb.mistake) == (False, code), (code, wrong, fb)
        assert fb.message == ex.MISTAKES[code] and fb.fix
        messages.add(fb.message)
    assert len(messages) == len(wrongs)


def assert_tolerance(exercise, right) -> None:
    """Right passes; every number moved by less than the tolerance passes; one moved just past it fails."""
    right = np.asarray(right, dtype=float)
    assert ex.grade(exercise, right).correct
    assert ex.grade(exercise, ", ".join(f"{v:.6f}" for v in right)).correct
    rng = np.random.default_rng(len(right))
    assert ex.grade(exercise, right + rng.uniform(-0.9 * TOL, 0.9 * TOL, len(right))).correct
    for i in range(len(right)):
        for sign in (1, -1):
            moved = right.copy()
            moved[i] += sign * 1.3 * TOL
            fb = ex.grade(exercise, moved)
            assert not fb.correct and fb.mistake != "malformed"


def assert_general_hint(exercise, right) -> None:
    wrong = np.asarray(right, dtype=float) + 0.37 * np.arange(1, len(right) + 1)
    assume(all(not near(wrong, w) for w in ex.mistakes(exercise).values()))
    fb = ex.grade(exercise, wrong)
    assert (fb.correct, fb.mistake, fb.fix) == (False, "other", None) and "not one of the usual slips" in fb.message
    assert fb.solution


# -- the kinds built from one head's trace -------------------------------------------------------------------------------


@SETTINGS
@given(text=letters, at=where, tau=temperatures)
def test_scale(rev, text, at, tau):
    t = trace_of(rev, text, *at, interventions=Interventions(temperature=tau))
    e = ex.scale_exercise(t)
    keys = [int(k.split(":")[0]) for k in e.table["key"]]
    assert e.table["q·k_j"] == rounded(t.scores[keys]).tolist()  # the shown inputs: the traced pass's, rounded
    np.testing.assert_allclose(t.scaled[keys], t.scores[keys] / (math.sqrt(t.d_head) * tau), rtol=1e-5, atol=1e-5)
    s, dh = rounded(t.scores[keys]), t.d_head
    right = s / (math.sqrt(dh) * tau)
    assert np.abs(right - t.scaled[keys]).max() <= 0.005 / math.sqrt(dh) / tau + 1e-4  # rounding moves it this little
    assert_tolerance(e, right)
    wrongs = {
        "no_sqrt": s / tau,
        "divided_by_d_head": s / (dh * tau),
        "times_sqrt": s * math.sqrt(dh) / tau,
        "no_temperature": s / math.sqrt(dh),
        "times_temperature": s * tau / math.sqrt(dh),
    }
    assert_named(e, first_code(wrongs, right, near))
    if tau != 1 and np.abs(s).max() > 1:
        assert "no_temperature" in ex.mistakes(e)
    assert_general_hint(e, right)


@SETTINGS
@given(text=letters, at=where, hide=st.sets(st.integers(0, 3), max_size=1), window=st.sampled_from([None, 2, 3]))
def test_softmax(rev, text, at, hide, window):
    interventions = Interventions(src_hidden=frozenset(hide), window=window)
    t = trace_of(rev, text, *at, interventions=interventions)
    kind, layer, head, _ = at
    others = [
        trace_of(rev, text, kind, layer, head, q, interventions=interventions) for q in (t.query - 1, t.query + 1) if q >= 0
    ]
    e = ex.softmax_exercise(t, others=others)
    x, masked = rounded(t.scaled), t.mask
    assert e.table["scaled score"] == x.tolist() and [bool(m) for m in e.table["masked"]] == masked.tolist()
    keep = ~masked
    assume(keep.any())
    right = np.where(keep, np.exp(x - x[keep].max()), 0)
    right /= right.sum()
    np.testing.assert_allclose(right, t.weights, atol=0.02)  # the rounded inputs give nearly the model's weights
    assert_tolerance(e, right)
    wrongs = {"all_keys": np.exp(x) / np.exp(x).sum()}
    rows = [o for o in others if o.k_tokens == t.k_tokens]
    if rows:
        matrix = np.stack([np.where(r.mask, -np.inf, rounded(r.scaled)) for r in [t, *rows]])  # (R, K)
        col = np.exp(matrix) / np.where(np.isinf(matrix).all(0), 1, np.exp(matrix).sum(0))
        wrongs["wrong_axis"] = np.where(keep, np.nan_to_num(col[0]), 0)
    if x[keep].sum() != 0:
        wrongs["no_exp"] = np.where(keep, x, 0) / x[keep].sum()
    wrongs["argmax"] = (np.arange(len(x)) == np.flatnonzero(keep)[np.argmax(x[keep])]).astype(float)
    assert_named(e, first_code(wrongs, right, near))
    assert_general_hint(e, right)


@SETTINGS
@given(text=letters, at=where, dims=st.lists(st.integers(0, 31), min_size=2, max_size=2, unique=True))
def test_weighted_sum(rev, text, at, dims):
    t = trace_of(rev, text, *at)
    e = ex.weighted_sum_exercise(t, dims=sorted(dims))
    w = rounded(t.weights)
    v = np.stack([rounded(t.v[:, d]) for d in sorted(dims)], axis=1)  # (K, 2)
    assert e.table["w_j"] == w.tolist() and [e.table[f"v_j[{d}]"] for d in sorted(dims)] == v.T.tolist()
    right = w @ v
    np.testing.assert_allclose(right, t.head_out[sorted(dims)], atol=0.05)
    assert_tolerance(e, right)
    wrongs = {"argmax": v[np.argmax(w)], "unweighted_mean": v.mean(0), "plain_sum": v.sum(0)}
    assert_named(e, first_code(wrongs, right, near))
    assert_general_hint(e, right)


def test_weighted_sum_default_dims_are_the_largest_outputs(rev):
    t = trace_of(rev, " a b c", "cross", 1, 0, 1)
    e = ex.weighted_sum_exercise(t)
    assert set(e.params["dims"]) == set(np.argsort(-np.abs(t.head_out))[:2].tolist())
    with pytest.raises(ValueError):
        ex.weighted_sum_exercise(t, dims=[0, t.d_head])


@SETTINGS
@given(
    text=letters,
    at=where,
    hide=st.sets(st.integers(0, 3), max_size=2),
    window=st.sampled_from([None, 1, 2, 3]),
    padding=st.integers(0, 2),
)
def test_mask(rev, text, at, hide, window, padding):
    t = trace_of(rev, text, *at, interventions=Interventions(src_hidden=frozenset(hide), window=window))
    e = ex.mask_exercise(t.kind, t.q_tokens, t.k_tokens, t.query, window=window, hidden=sorted(hide), padding=padding)
    q, n = t.query, len(t.k_tokens)
    right = set(np.flatnonzero(t.mask).tolist()) | set(range(n, n + padding))  # the traced pass's mask, and the padding
    assert ex.solve(e) == right
    why = {j: set() for j in range(n + padding)}
    for j in range(n):
        if t.kind == "dec_self" and j > q:
            why[j].add("future")
        if t.kind != "dec_self" and j in hide:
            why[j].add("hidden")
        if t.kind != "cross" and window and abs(q - j) >= window:
            why[j].add("window")
    for j in range(n, n + padding):
        why[j].add("padding")
    answer = {}
    for j, reasons in why.items():
        if reasons:
            answer.setdefault(sorted(reasons)[0], []).append(j)
    fb = ex.grade(e, answer)
    assert fb.correct and fb.mistake is None, fb
    only = {r: {j for j, w in why.items() if w == {r}} for r in ex.MASK_REASONS}
    wrongs = {}
    if t.kind == "dec_self":
        wrongs |= {"future_unmasked": right - only["future"], "masked_self": right | {q}}
        wrongs["swapped"] = (right - only["future"]) | set(range(q))  # the transposed mask: the past hidden
    wrongs |= {f"{r}_unmasked": right - only[r] for r in ("padding", "hidden", "window")}
    if window and t.kind != "cross":
        wrongs["window_off_by_one"] = (right - only["window"]) | {j for j in only["window"] if abs(q - j) > window}
    for code, keys in first_code(wrongs, right, lambda a, b: a == b).items():
        fb = ex.grade(e, {"future": sorted(keys)})
        assert (fb.correct, fb.mistake, fb.message) == (False, code, ex.MISTAKES[code]), (code, keys)
    if right:  # the right keys, one of them under a reason that does not apply to it
        j0 = min(right)
        bad = next(r for r in ex.MASK_REASONS if r not in why[j0])
        moved = {r: [j for j in js if j != j0] for r, js in answer.items()}
        moved[bad] = moved.get(bad, []) + [j0]
        assert ex.grade(e, moved).mistake == "wrong_reason"
    n_all = n + padding
    other = {"future": [j for j in range(n_all) if j not in right]}  # every visible key masked, every masked one not
    assume(set(other["future"]) not in [right, *ex.mistakes(e).values()])
    assert ex.grade(e, other).mistake == "other"


def test_mask_of_decoder_self_attention_by_hand():
    tokens = ["<bos>", "Ein", "Hund", "bellt"]
    e = ex.mask_exercise("dec_self", tokens, tokens, 1, window=2, padding=1)
    assert ex.solve(e) == {2, 3, 4}
    assert ex.grade(e, {"future": [2, 3], "padding": [4]}).correct
    assert ex.grade(e, {"window": [3], "padding": [4]}).mistake == "future_unmasked"  # key 3 is outside the window too
    assert ex.grade(e, {"future": [0], "window": [3], "padding": [4]}).mistake == "swapped"
    assert ex.grade(e, {"future": [1, 2, 3], "padding": [4]}).mistake == "masked_self"
    assert ex.grade(e, {"future": [2, 3]}).mistake == "padding_unmasked"
    assert ex.grade(e, {"window": [2, 3], "padding": [4]}).mistake == "wrong_reason"
    assert ex.grade(e, {"future": [0]}).mistake == "other"
    assert ex.grade(e, {"why": [1]}).mistake == "malformed" and ex.grade(e, {"future": [9]}).mistake == "malformed"
    assert ex.grade(e, "2, 3").mistake == "malformed"


# -- next token, positional encoding, shapes --------------------------------------------------------------------------


@SETTINGS
@given(text=letters, step=st.integers(0, 10), tau=st.sampled_from([0.5, 0.7, 1.5, 2.0]), asked=st.integers(0, 4))
def test_next_token(rev, text, step, tau, asked):
    steps = analyze(rev.model, rev.tokenizer, text).steps
    s = steps[step % len(steps)]
    asked %= min(len(s.candidates), ex.SHOWN_LOGITS)
    e = ex.next_token_exercise(s, temperature=tau, asked=asked)
    p = np.array([c[2] for c in s.candidates[: ex.SHOWN_LOGITS]])
    z = np.array(e.table["logit"])
    assert e.table["piece"] == [ex.shown(c[0]) for c in s.candidates[: ex.SHOWN_LOGITS]]
    np.testing.assert_allclose(z, rounded(np.log(p) - np.log(p).max() + ex.LOGIT_TOP))  # the logits' differences, rounded
    np.testing.assert_allclose(np.exp(z - z.max()), p / p.max(), rtol=0.02, atol=1e-3)

    def soft(x):
        return np.exp(x - x.max()) / np.exp(x - x.max()).sum()

    right = [soft(z / tau)[asked]]
    assert_tolerance(e, right)
    wrongs = {
        "no_temperature": [soft(z)[asked]],
        "times_temperature": [soft(z * tau)[asked]],
        "argmax": [float(asked == np.argmax(z))],
        "no_exp": [z[asked] / z.sum()],
    }
    assert_named(e, first_code(wrongs, right, near))
    assert_general_hint(e, [right[0] - 0.5])


@settings(max_examples=40, deadline=None)
@given(pos=st.integers(0, 60), dim=st.integers(0, 63), layout=st.sampled_from(["interleaved", "halves"]))
def test_positional(pos, dim, layout):
    e = ex.positional_exercise(pos, dim, 64, layout=layout)
    D = 64
    if layout == "interleaved":
        i, sine = dim // 2, dim % 2 == 0
    else:
        i, sine = dim % (D // 2), dim < D // 2
    angle = pos / 10000 ** (2 * i / D)
    right = [math.sin(angle) if sine else math.cos(angle)]
    assert_tolerance(e, right)
    wrongs = {
        "sin_cos_swapped": [math.cos(angle) if sine else math.sin(angle)],
        "degrees": [math.sin(math.radians(angle)) if sine else math.cos(math.radians(angle))],
        "exponent_index": [(math.sin if sine else math.cos)(pos / 10000 ** (dim / D))],
        "exponent_2dim": [(math.sin if sine else math.cos)(pos / 10000 ** (2 * dim / D))],
    }
    assert_named(e, first_code(wrongs, right, near))


@pytest.mark.parametrize("name", ["reverse", "en-de"])
def test_positional_values_are_the_models(name):
    path = PRETRAINED / name
    if not (path / "config.json").exists():
        pytest.skip(f"no {name} checkpoint")
    m = load_checkpoint(path, device="cpu").model
    pe = m.positional_encoding(40).numpy()
    for pos, dim in [(3, 0), (7, 5), (12, m.cfg.d_model // 2 + 1), (39, m.cfg.d_model - 1)]:
        e = ex.positional_exercise(pos, dim, m.cfg.d_model, layout=getattr(m.cfg, "pe_layout", "interleaved"))
        assert abs(ex.solve(e)[0] - pe[pos, dim]) < 1e-4
        assert ex.grade(e, f"{pe[pos, dim]:.3f}").correct


@pytest.mark.parametrize("name", ["reverse", "en-de"])
def test_shape_for_every_stage(name):
    path = PRETRAINED / name
    if not (path / "config.json").exists():
        pytest.skip(f"no {name} checkpoint")
    loaded = load_checkpoint(path, device="cpu")
    a = analyze(loaded.model, loaded.tokenizer, " a b c d" if name == "reverse" else "The dog barks.")
    cfg = loaded.model.cfg
    S, T = len(a.source.ids), len(a.tgt_in_tokens)
    sizes = {"B": 1, "S": S, "T": T, "d_model": cfg.d_model, "n_heads": cfg.n_heads, "d_head": cfg.d_head}
    sizes |= {"d_ff": cfg.d_ff, "target vocab": cfg.n_logits}
    named = 0
    for stage in a.maps.shapes:
        e = ex.shape_exercise(stage, sizes)
        shape = list(stage.shape)
        letters = ex.stage_letters(stage)
        assert ex.grade(e, str(shape)).correct and ex.grade(e, " x ".join(map(str, shape))).correct
        if letters is None:  # a meaning that does not name the axes: swaps are still named
            assert stage.name == "next-token probabilities", stage
            letters = ["B", "T", "target vocab"]
        assert [sizes[x] for x in letters] == shape
        wrongs = {}
        if letters[0] == "B" and ex.stage_letters(stage):
            wrongs["no_batch"] = shape[1:]
        if "n_heads" in letters:
            wrongs["heads_not_split"] = [cfg.d_model if x == "d_head" else sizes[x] for x in letters if x != "n_heads"]
        if "d_head" in letters:
            wrongs["d_model_for_d_head"] = [cfg.d_model if x == "d_head" else sizes[x] for x in letters]
        if S != T and ({"S", "T"} & set(letters)) and ex.stage_letters(stage):
            wrongs["source_target"] = [{"S": T, "T": S}.get(x, sizes[x]) for x in letters]
        for code, wrong in first_code(wrongs, shape, lambda a, b: a == b).items():
            assert ex.grade(e, wrong).mistake == code
            named += 1
        if len(set(shape)) > 1:
            swapped = shape[::-1] if shape[::-1] != shape else shape[1:] + shape[:1]
            assert ex.grade(e, swapped).mistake in ("swapped", "source_target")
        assert ex.grade(e, shape + [3]).mistake == "other"
        assert ex.grade(e, "[B, S, d_model]").mistake == "malformed"
    assert named >= 10


# -- en-de: a few fixed cases of the shipped model --------------------------------------------------------------------


@pytest.mark.parametrize("kind, layer, head, query", [("enc_self", 0, 0, 2), ("dec_self", 1, 3, 3), ("cross", 1, 1, 1)])
def test_en_de_traces(kind, layer, head, query):
    if not (EN_DE / "config.json").exists():
        pytest.skip("no en-de checkpoint")
    loaded = load_checkpoint(EN_DE, device="cpu")
    t = trace_of(
        loaded, "The little dog sleeps in the garden.", kind, layer, head, query, interventions=Interventions(temperature=2.0)
    )
    for e in (ex.scale_exercise(t), ex.softmax_exercise(t), ex.weighted_sum_exercise(t)):
        right = ex.solve(e)
        assert ex.grade(e, right).correct
        for code, wrong in ex.mistakes(e).items():
            assert ex.grade(e, wrong).mistake == code
    e = ex.scale_exercise(t)
    s = np.array(e.table["q·k_j"])
    assert ex.grade(e, s / 8).mistake == "no_temperature"  # √64 = 8, τ = 2 forgotten
    assert ex.grade(e, s / 2).mistake == "no_sqrt"
    assert ex.grade(e, s / 128).mistake == "divided_by_d_head"
    e = ex.softmax_exercise(t)
    np.testing.assert_allclose(ex.solve(e), t.weights, atol=0.02)


# -- answers that cannot be read; the exercise as data ------------------------------------------------------------------


def test_malformed_answers_get_a_clear_message():
    e = ex.positional_exercise(3, 4, 64)
    for answer, says in [
        ("", "empty"),
        ("   ", "empty"),
        ("abc", "not a number"),
        ("nan", "NaN"),
        ("inf", "NaN"),
        ("0.1 0.2", "Expected 1"),
    ]:
        fb = ex.grade(e, answer)
        assert (fb.correct, fb.mistake) == (False, "malformed") and says in fb.message, (answer, fb.message)
    e2 = ex.Exercise("scale", "t", "p", {"key": ["a", "b"], "q·k_j": [8.0, 4.0]}, {"d_head": 64, "temperature": 1.0}, ["a", "b"])
    assert ex.grade(e2, "1; 0,5").correct  # a decimal comma with ; between the numbers
    assert ex.grade(e2, "1\n0.5").correct and ex.grade(e2, [1, 0.5]).correct and ex.grade(e2, "[1, 0.5]").correct
    assert ex.grade(e2, "1, 0.5, 3").mistake == "malformed" and ex.grade(e2, [1, float("nan")]).mistake == "malformed"
    assert ex.grade(e2, "8, 4").mistake == "no_sqrt"


def test_exercises_round_trip_through_json_and_grade_alike(rev):
    t = trace_of(rev, " a b c d", "dec_self", 1, 1, 2)
    steps = analyze(rev.model, rev.tokenizer, " a b c d").steps
    a = analyze(rev.model, rev.tokenizer, " a b c d")
    sizes = {"B": 1, "S": len(a.source.ids), "T": len(a.tgt_in_tokens), "d_model": 64, "n_heads": 2, "d_head": 32}
    made = [
        ex.scale_exercise(t, source={"model": "reverse", "sentence": " a b c d"}),
        ex.softmax_exercise(t),
        ex.weighted_sum_exercise(t),
        ex.mask_exercise("dec_self", t.q_tokens, t.k_tokens, 2, window=2, padding=1),
        ex.next_token_exercise(steps[0], temperature=0.5),
        ex.positional_exercise(4, 9, 64),
        ex.shape_exercise(a.maps.shapes[4], sizes),
    ]
    assert sorted({e.kind for e in made}) == sorted(ex.EXERCISE_KINDS)
    for e in made:
        back = ex.Exercise.from_dict(json.loads(json.dumps(e.to_dict())))
        assert back == e and back.uid == e.uid
        right = ex.solve(e)
        answer = {"future": sorted(right)} if e.kind == "mask" else right
        assert ex.grade(back, answer) == ex.grade(e, answer)
        assert json.loads(json.dumps(ex.grade(e, answer).to_dict()))["correct"] in (True, False)
        assert e.csv().count("\n") == len(next(iter(e.table.values()))) + 1
    assert made[0].source["model"] == "reverse" and made[0].source["layer"] == 1
    with pytest.raises(ValueError):
        ex.Exercise.from_dict({"kind": "essay"})


def test_importing_exercises_imports_no_torch():
    code = "import sys, analysis.exercises; print(','.join(m for m in ('torch', 'streamlit') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_a_class_result_counts_right_answers_and_the_most_common_mistake():
    e = ex.Exercise("scale", "t", "p", {"key": ["a", "b"], "q·k_j": [8.0, 4.0]}, {"d_head": 64, "temperature": 2.0}, ["a", "b"])
    answers = ["0.5, 0.25", "0.5 0.25", "1, 0.5", "1; 0.5", "4, 2", "what", ex.answer_text([0.5, 0.25])]
    result = ex.class_result(ex.Exercise.from_dict(json.loads(json.dumps(e.to_dict()))), answers)
    assert result.n == 7 and result.share_correct == pytest.approx(3 / 7)
    assert result.mistakes == [("no_temperature", 2), ("no_sqrt", 1)] and result.most_common == "no_temperature"
    assert ex.class_result(e, []).share_correct == 0 and ex.class_result(e, []).most_common is None
    tokens = ["<bos>", "Ein", "Hund"]
    m = ex.mask_exercise("dec_self", tokens, tokens, 0)
    texts = [ex.answer_text({"future": [1, 2]}), ex.answer_text({"future": [2, 1], "window": []}), ex.answer_text({}), "{"]
    got = ex.class_result(m, texts)
    assert (got.n, got.share_correct, got.most_common) == (4, 0.5, "future_unmasked")


@settings(deadline=None)
@given(st.text(max_size=8))
def test_tokens_are_shown_as_the_figures_show_them(token):
    assert ex.shown(token) == display([token])[0]

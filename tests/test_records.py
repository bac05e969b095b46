"""analysis/records.py: the shared facts (mask rule, shift-right, means over heads) and the records
built from them, without torch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.records import KindMask, Maps, StepView, attention_view, head_average, kind_masks, layer_average, trace_view
from model.facts import ABLATED, FUTURE, HIDDEN, KINDS, UNWRITTEN, VISIBLE, WINDOW, cell_reasons, shift_right


def test_importing_records_does_not_import_torch():
    code = "import sys, analysis.records; sys.exit(1 if 'torch' in sys.modules else 0)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, "analysis.records imported torch" + done.stderr


# -- which cells a mask hides -----------------------------------------------------------------------
def test_cell_reasons_follow_the_model_rules():
    m = cell_reasons("dec_self", 4, 4, window=2) != VISIBLE
    np.testing.assert_array_equal(m, ~(np.tri(4, dtype=bool) & ~np.tri(4, k=-2, dtype=bool)))  # keys q-1 .. q
    np.testing.assert_array_equal(cell_reasons("cross", 2, 3, src_hidden=[1], window=1) != VISIBLE, [[False, True, False]] * 2)
    assert (cell_reasons("enc_self", 3, 3) == VISIBLE).all()
    with pytest.raises(ValueError, match="kind must be one of"):
        cell_reasons("encoder", 2, 2)


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    n_q=st.integers(1, 8),
    n_k=st.integers(1, 8),
    causal=st.booleans(),
    window=st.one_of(st.none(), st.integers(1, 8)),
    hidden=st.sets(st.integers(0, 9), max_size=4),
)
def test_cell_reasons_properties(kind, n_q, n_k, causal, window, hidden):
    r = cell_reasons(kind, n_q, n_k, causal=causal, window=window, src_hidden=sorted(hidden))
    assert r.shape == (n_q, n_k) and r.dtype == np.int8
    q, k = np.arange(n_q)[:, None], np.arange(n_k)[None, :]
    later = np.broadcast_to(k > q, r.shape) if kind == "dec_self" else np.zeros(r.shape, bool)
    # a later key is FUTURE under the causal mask, else UNWRITTEN (the row's own step ran before it existed)
    np.testing.assert_array_equal(r == UNWRITTEN, later & (not causal))
    future = later & causal
    far = np.broadcast_to(np.abs(q - k) >= window, r.shape) if kind != "cross" and window else np.zeros(r.shape, bool)
    cols = np.isin(np.arange(n_k), sorted(hidden)) if kind != "dec_self" else np.zeros(n_k, bool)
    np.testing.assert_array_equal(r == FUTURE, future)  # the causal mask wins over every other reason
    future = later  # either wins over the window
    np.testing.assert_array_equal(r == HIDDEN, ~future & cols[None, :])
    np.testing.assert_array_equal(r == WINDOW, ~future & ~cols[None, :] & far)
    assert not (r == ABLATED).any()
    if kind == "dec_self" and causal:
        assert (np.diag(r[:, : min(n_q, n_k)]) != FUTURE).all(), "a query always sees itself under the causal mask"


def test_kind_masks_give_each_kind_its_cells_and_its_own_ablated_heads():
    m = kind_masks(5, 3, causal=True, window=None, src_hidden=[1], ablate=[("cross", 1, 2), ("enc_self", 0, 0)])
    assert set(m) == set(KINDS)
    assert m["enc_self"].reasons.shape == (5, 5) and m["dec_self"].reasons.shape == (3, 3) and m["cross"].reasons.shape == (3, 5)
    assert m["cross"].ablated == {(1, 2)} and m["enc_self"].ablated == {(0, 0)} and m["dec_self"].ablated == frozenset()
    assert (m["cross"].reasons[:, 1] == HIDDEN).all() and (m["dec_self"].reasons == cell_reasons("dec_self", 3, 3)).all()


# -- the decoder's shift ----------------------------------------------------------------------------
@given(out=st.lists(st.integers(3, 50), max_size=12), max_len=st.one_of(st.none(), st.integers(1, 15)))
def test_shift_right_feeds_bos_and_predicts_eos(out, max_len):
    tgt_in, tgt_out = shift_right(out, bos_id=1, eos_id=2, max_len=max_len)
    n = len(out) + 1 if max_len is None else min(len(out) + 1, max_len)
    assert len(tgt_in) == len(tgt_out) == n
    assert tgt_in[0] == 1 and tgt_in[1:] == tgt_out[: n - 1], "row t predicts what row t + 1 reads"
    if max_len is None or len(out) + 1 <= max_len:
        assert tgt_out == [*out, 2] and tgt_in == [1, *out]


# -- means over heads -------------------------------------------------------------------------------
def test_averages_leave_out_all_zero_heads():
    rng = np.random.default_rng(0)
    a = rng.dirichlet(np.ones(5), size=(2, 4, 5)).astype(np.float32)
    a[1, 3] = 0.0
    avg = layer_average(a)
    np.testing.assert_allclose(avg[1], a[1, :3].mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(head_average(a, 0), a[0].mean(axis=0), rtol=1e-6)
    with pytest.raises(ValueError, match="out of range"):
        head_average(a, 2)


# -- views ------------------------------------------------------------------------------------------
def _maps(S: int, T: int, **interventions) -> Maps:
    rng = np.random.default_rng(1)
    return Maps(
        rng.random((2, 2, S, S), np.float32),
        rng.random((1, 2, T, T), np.float32),
        rng.random((1, 2, T, S), np.float32),
        np.ones(T, np.float32),
        kind_masks(S, T, **interventions),
    )


def test_attention_view_carries_the_maps_tokens_and_masks_of_its_kind():
    src, tin, tout = ["a", "b", "<eos>"], ["<bos>", "x"], ["x", "<eos>"]
    maps = _maps(3, 2, src_hidden=[0], ablate=[("cross", 0, 1)])
    maps.cross[0, 1] = 0.0  # the model reports zeros for an ablated head
    v = attention_view(maps, "cross", src=src, tgt_in=tin, tgt_out=tout)
    assert v.attn is maps.cross and (v.q_tokens, v.k_tokens, v.predicted) == (tin, src, tout)
    assert v.reasons is maps.masks["cross"].reasons and v.ablated == {(0, 1)}
    assert attention_view(maps, "enc_self", src=src, tgt_in=tin, tgt_out=tout).predicted is None
    assert (v.map(0, 1).reasons == ABLATED).all() and (v.map(0, 0).reasons[:, 0] == HIDDEN).all()
    np.testing.assert_allclose(v.map(0).w, maps.cross[0, 0], rtol=1e-6)  # the mean leaves the ablated head out
    means = v.layer_means()
    assert means.attn.shape == (1, 1, 2, 3) and means.head_names == ("mean",) and means.ablated == frozenset()
    with pytest.raises(ValueError, match="out of range"):
        v.map(1, 0)


def test_trace_view_stacks_the_steps_rows_and_marks_keys_not_yet_written_as_future():
    S, L, H = 3, 1, 2
    steps = []
    for t in range(3):
        m = kind_masks(S, t + 1, src_hidden=[2])
        steps.append(
            StepView(
                t=t,
                prefix_tokens=["<bos>", "x", "y"][: t + 1],
                candidates=[],
                chosen=5,
                chosen_token="xyz"[t],
                chosen_prob=1.0,
                forced=False,
                self_attn=np.full((L, H, t + 1), 1 / (t + 1), np.float32),
                cross_attn=np.full((L, H, S), 0.5, np.float32),
                masks={k: KindMask(m[k].reasons[-1:], m[k].ablated) for k in ("dec_self", "cross")},
            )
        )
    dec = trace_view(steps, "dec_self", ["a", "b", "<eos>"])
    np.testing.assert_array_equal(dec.reasons == FUTURE, np.triu(np.ones((3, 3), bool), 1))
    np.testing.assert_allclose(dec.attn[0, 0].sum(-1), 1.0)
    assert dec.q_tokens == ["<bos>", "x", "y"] and dec.predicted == ["x", "y", "z"]
    cross = trace_view(steps, "cross", ["a", "b", "<eos>"])
    assert cross.attn.shape == (L, H, 3, S) and (cross.reasons[:, 2] == HIDDEN).all() and (cross.reasons[:, :2] == VISIBLE).all()

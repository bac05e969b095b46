"""``analysis.trace.head_trace``: one head's numbers for one query are the model's own, to 1e-5.

Checked for all three kinds, with and without masks, temperature and ablation, pre-LN and post-LN:
the weights are the maps ``analyze`` returns; they are the softmax of the unmasked scaled scores,
which are q·k_j / (√d_head · τ); the head output is weights @ V; the concatenated heads times W^O is
the sub-layer output, which equals what the module returned inside a real forward pass (caught with a
forward hook); the query's input row, the key/value rows, the residual sum and the LayerNorm are the
tensors the model itself passed between its modules. On the shipped ``reverse`` model (tiny) and on
random-weight models.
"""

from __future__ import annotations

import json
import math
import pickle
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from analysis.analyze import analyze
from analysis.trace import HeadTrace, head_trace, head_trace_many
from model.checkpoint import load_checkpoint
from model.facts import FUTURE, HIDDEN, KINDS, VISIBLE, WINDOW, InputError, shift_right
from model.settings import DecodeSettings
from model.tokenizer import PieceTokenizer, TiktokenTokenizer
from model.transformer import Interventions, Transformer, TransformerConfig

ROOT = Path(__file__).resolve().parent.parent
REVERSE = ROOT / "pretrained" / "reverse"
TEXT = " a b c d e"
TOL = 1e-5

INTERVENTION_CASES = {
    "none": Interventions(),
    "hidden": Interventions(src_hidden=frozenset({1})),
    "window": Interventions(window=2),
    "tau-0.5": Interventions(temperature=0.5),
    "tau-2": Interventions(temperature=2.0),
    "ablated": Interventions(ablate=frozenset({(k, 1, 1) for k in KINDS})),
    "no-causal": Interventions(causal=False),
    "all-masked": Interventions(src_hidden=frozenset(range(6)), window=1),
}


@pytest.fixture(scope="module")
def rev():
    if not (REVERSE / "config.json").exists():
        pytest.skip(f"no reverse checkpoint at {REVERSE}")
    return load_checkpoint(REVERSE, device="cpu")


@pytest.fixture(scope="module")
def tok() -> PieceTokenizer:
    if not (REVERSE / "vocab.json").exists():
        pytest.skip(f"no reverse vocabulary at {REVERSE}")
    return TiktokenTokenizer.load(REVERSE / "vocab.json")


def random_model(norm_first: bool) -> Transformer:
    """The reverse model's shape (vocabulary, 2 + 2 layers), narrower, with random weights."""
    cfg = TransformerConfig.from_dict(json.loads((REVERSE / "config.json").read_text()))
    torch.manual_seed(3)
    return Transformer(replace(cfg, d_model=16, n_heads=4, d_ff=32, max_len=24, norm_first=norm_first)).eval()


def modules(model: Transformer, kind: str, layer: int):
    """(attention module, its own SubLayerNorm, the next sub-layer's SubLayerNorm) of ``kind`` in ``layer``."""
    if kind == "enc_self":
        lay = model.encoder[layer]
        return lay.self_attn, lay.self_attn_norm, lay.ff_norm
    lay = model.decoder[layer]
    if kind == "dec_self":
        return lay.self_attn, lay.self_attn_norm, lay.cross_attn_norm
    return lay.cross_attn, lay.cross_attn_norm, lay.ff_norm


def model_tensors(
    model: Transformer,
    tok: PieceTokenizer,
    text: str,
    settings: DecodeSettings,
    interventions: Interventions,
    kind: str,
    layer: int,
    n_tgt: int | None = None,
):
    """What the model's own modules took and gave in one forward pass over the translation (forward hooks):
    attn ``(args, out)``, own norm and next norm ``[(input, output), ...]`` per call, and the analysis.
    ``n_tgt``: feed only the first n_tgt decoder inputs (the pass of step n_tgt - 1)."""
    a = analyze(model, tok, text, settings, interventions)
    tgt_in, _ = shift_right(a.out_ids, bos_id=model.cfg.bos_id, eos_id=model.cfg.eos_id, max_len=model.cfg.max_len)
    tgt_in = tgt_in[:n_tgt]
    mha, own, nxt = modules(model, kind, layer)
    seen = {"attn": [], "own": [], "next": []}
    hooks = [
        mha.register_forward_hook(lambda m, args, out: seen["attn"].append((args, out))),
        own.register_forward_hook(lambda m, args, out: seen["own"].append((args[0], out))),
        nxt.register_forward_hook(lambda m, args, out: seen["next"].append((args[0], out))),
    ]
    try:
        with torch.inference_mode():
            model(torch.tensor([a.source.ids]), torch.tensor([tgt_in]), interventions)
    finally:
        for h in hooks:
            h.remove()
    return a, seen


def close(a, b, tol: float = TOL) -> None:
    np.testing.assert_allclose(np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32), atol=tol, rtol=0)


def check_trace(
    model: Transformer, tok: PieceTokenizer, t: HeadTrace, settings: DecodeSettings, interventions: Interventions
) -> None:
    """Every property a HeadTrace promises, against the model's own tensors."""
    kind, layer, head, query, Dh = t.kind, t.layer, t.head, t.query, t.d_head
    # the pass that computed the row: without the causal mask a decoder row is its own step's pass, over the prefix
    T = query + 1 if kind != "enc_self" and not interventions.causal else None
    a, seen = model_tensors(model, tok, TEXT, settings, interventions, kind, layer, n_tgt=T)
    n_keys = len(t.k_tokens)
    # shapes and labels
    D = model.cfg.d_model
    assert t.x.shape == t.resid.shape == t.concat.shape == t.attn_out.shape == t.added.shape == t.normed.shape == (D,)
    assert t.q.shape == t.head_out.shape == (Dh,)
    assert t.k.shape == t.v.shape == (n_keys, Dh)
    assert t.scores.shape == t.scaled.shape == t.mask.shape == t.weights.shape == t.reasons.shape == (n_keys,)
    assert all(arr.dtype == np.float32 for arr in (t.x, t.q, t.k, t.v, t.scores, t.scaled, t.weights, t.head_out, t.attn_out))
    assert t.mask.dtype == bool
    src, tgt = a.source.tokens, a.tgt_in_tokens[:T]
    assert (t.q_tokens, t.k_tokens) == {"enc_self": (src, src), "dec_self": (tgt, tgt), "cross": (tgt, src)}[kind]
    assert t.predicted == (None if kind == "enc_self" else a.tgt_out_tokens[:T])
    assert t.temperature == interventions.temperature and t.norm_first == model.cfg.norm_first
    for arr in (t.x, t.q, t.k, t.v, t.scores, t.scaled, t.weights, t.head_out, t.concat, t.attn_out, t.added, t.normed):
        assert np.isfinite(arr).all()

    # the weights are the map analyze returns (the model reports zeros for an ablated head)
    mapped = getattr(a.maps, kind)[layer, head, query]  # (K,) or, for a step's own pass, (T,) with 0 after its K keys
    close(mapped[:n_keys], t.weights * (not t.ablated))
    assert (mapped[n_keys:] == 0).all(), "weight on a key the query's pass did not have"
    assert t.ablated == ((kind, layer, head) in interventions.ablate)
    # the mask is the analysis' reason row; masked keys get weight 0 and score -inf
    assert (t.reasons == a.maps.masks[kind].reasons[query, :n_keys]).all()
    assert (t.mask == (t.reasons != VISIBLE)).all()
    assert (t.weights[t.mask] == 0).all()
    assert np.isneginf(t.masked[t.mask]).all() and (t.masked[~t.mask] == t.scaled[~t.mask]).all()
    # eq. (1), step by step
    close(t.scores, t.k @ t.q, 1e-4)
    close(t.scaled, t.scores / (math.sqrt(Dh) * interventions.temperature))
    if t.mask.all():
        assert (t.weights == 0).all() and (t.head_out == 0).all()
    else:
        e = np.exp(t.scaled[~t.mask] - t.scaled[~t.mask].max())
        close(t.weights[~t.mask], e / e.sum())
        close(t.weights.sum(), 1.0)
    close(t.head_out, t.weights @ t.v)
    close(t.heads[head], t.head_out)
    # q, K, V are the module's projections of x and the key/value rows
    mha, own, nxt = modules(model, kind, layer)
    (x_q, x_kv, allowed), out = seen["attn"][0][0][:3], seen["attn"][0][1]
    assert len(seen["attn"]) == 1
    close(t.x, x_q[0, query])
    close(t.kv_x, x_kv[0])
    sl = slice(head * Dh, (head + 1) * Dh)
    with torch.inference_mode():
        close(t.q, mha.w_q(x_q[0, query])[sl])
        close(t.k, mha.w_k(x_kv[0])[:, sl])
        close(t.v, mha.w_v(x_kv[0])[:, sl])
        # concat: every head side by side, ablated heads zeroed; W^O of it is the sub-layer output
        keep = np.array([h not in t.ablated_heads for h in range(t.n_heads)], dtype=np.float32)
        close(t.concat, (t.heads * keep[:, None]).reshape(-1))
        close(mha.w_o(torch.from_numpy(t.concat)), t.attn_out)
    # the model's own mask for this query: the same keys hidden
    if allowed is None:
        assert not t.mask.any()
    else:
        assert (torch.broadcast_to(allowed, (1, 1, x_q.shape[1], n_keys))[0, 0, query].numpy() == ~t.mask).all()
    # attn_out is the module's own output inside the real forward pass
    close(t.attn_out, out[0][0, query])
    # residual add and LayerNorm: the tensors the model handed its norms
    if model.cfg.norm_first:
        (resid_in, x_out), (added_in, normed_out) = seen["own"][0], seen["next"][0]
        close(t.resid, resid_in[0, query])
        close(t.x, x_out[0, query])
        close(t.added, added_in[0, query])
        close(t.normed, normed_out[0, query])
    else:
        added_in, normed_out = seen["own"][0]
        close(t.resid, t.x)
        close(t.added, added_in[0, query])
        close(t.normed, normed_out[0, query])
    close(t.added, t.resid + t.attn_out)


# -- the shipped reverse model ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", ["none", "hidden", "window", "tau-2", "ablated"])
def test_reverse_model_trace_is_the_models_computation(rev, kind, case):
    settings = DecodeSettings()
    t = head_trace(
        rev.model,
        rev.tokenizer,
        TEXT,
        kind=kind,
        layer=1,
        head=1,
        query=1,  # every case writes at least one piece: <bos> and it are queries 0 and 1
        settings=settings,
        interventions=INTERVENTION_CASES[case],
    )
    check_trace(rev.model, rev.tokenizer, t, settings, INTERVENTION_CASES[case])


@pytest.mark.parametrize("settings", [DecodeSettings(method="beam", beam_size=3), DecodeSettings(method="sample", seed=1)])
def test_trace_follows_beam_and_sampled_translations(rev, settings):
    t = head_trace(rev.model, rev.tokenizer, TEXT, kind="cross", layer=0, head=1, query=3, settings=settings)
    check_trace(rev.model, rev.tokenizer, t, settings, INTERVENTION_CASES["none"])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", ["none", "window", "ablated"])
def test_a_trace_given_the_pages_analysis_is_the_same_trace(rev, kind, case):
    """The pages hand ``head_trace`` the analysis they already have: the same trace, field by field."""
    settings = DecodeSettings(method="beam", beam_size=3)
    a = analyze(rev.model, rev.tokenizer, TEXT, settings, INTERVENTION_CASES[case])
    kw = dict(kind=kind, layer=1, head=1, query=1, settings=settings, interventions=INTERVENTION_CASES[case])
    t, given = head_trace(rev.model, rev.tokenizer, TEXT, **kw), head_trace(rev.model, rev.tokenizer, TEXT, analysis=a, **kw)
    for name, v in vars(t).items():
        w = getattr(given, name)
        assert np.array_equal(v, w) if isinstance(v, np.ndarray) else v == w, name


@pytest.mark.parametrize("case", list(INTERVENTION_CASES), ids=list(INTERVENTION_CASES))
def test_a_batch_of_traces_is_each_ones_own(rev, case):
    """``head_trace_many`` (a class on the page at once, one padded pass) gives each item its own ``head_trace``:
    sentences of different lengths, every kind, several layers, heads and queries, an unfinished translation, and bad
    items refused without spoiling the others."""
    m, tok, chosen = rev.model, rev.tokenizer, INTERVENTION_CASES[case]
    items, analyses, refused = [], {}, []
    for text in (TEXT, " a b", " e d c b a a b c"):
        a = analyses[text] = analyze(m, tok, text, DecodeSettings(), chosen)
        for kind, layer, head in (("enc_self", 0, 1), ("dec_self", 1, 0), ("cross", 1, 1), ("cross", 0, 0)):
            n_q = len(a.source.ids) if kind == "enc_self" else len(a.tgt_in_tokens)
            items += [(text, tuple(a.out_ids), a.finished, kind, layer, head, q) for q in sorted({0, n_q // 2, n_q - 1})]
        refused += [len(items), len(items) + 1]
        items += [(text, tuple(a.out_ids), a.finished, "cross", 0, 0, 99), (text, tuple(a.out_ids), a.finished, "cross", 5, 0, 0)]
    cut = analyze(m, tok, TEXT, DecodeSettings(max_new=2), chosen)  # cut by the token budget: its last row ends in "…"
    items.append((TEXT, tuple(cut.out_ids), cut.finished, "cross", 1, 0, len(cut.tgt_in_tokens) - 1))
    analyses["cut"] = cut
    got = head_trace_many(m, tok, items, chosen)
    assert len(got) == len(items)
    for k, (item, t) in enumerate(zip(items, got, strict=True)):
        if k in refused:
            assert isinstance(t, ValueError)
            continue
        text, _, _, kind, layer, head, query = item
        a = analyses["cut" if k == len(items) - 1 else text]
        one = head_trace(m, tok, text, kind=kind, layer=layer, head=head, query=query, interventions=chosen, analysis=a)
        for name, v in vars(one).items():
            w = getattr(t, name)
            if isinstance(v, np.ndarray) and v.dtype.kind == "f":
                np.testing.assert_allclose(
                    w, v, atol=1e-5 * max(1.0, float(np.abs(v).max(initial=0))), err_msg=name
                )  # float sums
            else:
                assert np.array_equal(v, w) if isinstance(v, np.ndarray) else v == w, name


def test_a_trace_is_plain_data_that_pickles(rev):
    t = head_trace(rev.model, rev.tokenizer, TEXT, kind="enc_self", layer=0, head=0, query=0)
    back = pickle.loads(pickle.dumps(t))  # st.cache_data stores results pickled
    assert back.query_token == t.query_token and (back.weights == t.weights).all()
    assert not any(isinstance(v, torch.Tensor) for v in vars(t).values())


def test_reverse_model_reasons_name_the_mask(rev):
    t = head_trace(rev.model, rev.tokenizer, TEXT, kind="dec_self", layer=0, head=0, query=1)
    assert list(t.reasons[:2]) == [VISIBLE, VISIBLE] and (t.reasons[2:] == FUTURE).all()
    assert t.why[0] is None and "causal" in t.why[2]
    interventions = Interventions(src_hidden=frozenset({0}), window=2)
    t = head_trace(rev.model, rev.tokenizer, TEXT, kind="enc_self", layer=0, head=0, query=3, interventions=interventions)
    assert t.reasons[0] == HIDDEN and t.reasons[1] == WINDOW and t.reasons[3] == VISIBLE
    t = head_trace(rev.model, rev.tokenizer, TEXT, kind="cross", layer=0, head=0, query=0, interventions=interventions)
    assert t.reasons[0] == HIDDEN and (t.reasons[1:] == VISIBLE).all()  # no window in cross-attention


# -- random-weight models, pre-LN and post-LN -------------------------------------------------------------
@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-LN", "post-LN"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(INTERVENTION_CASES))
def test_random_model_trace_is_the_models_computation(tok, norm_first, kind, case):
    model = random_model(norm_first)
    settings = DecodeSettings(max_new=5)
    a = analyze(model, tok, TEXT, settings, INTERVENTION_CASES[case])
    n_q = len(a.source.tokens) if kind == "enc_self" else len(a.tgt_in_tokens)
    for layer, head, query in {(1, 1, n_q - 1), (0, 2, n_q // 2)}:
        t = head_trace(
            model,
            tok,
            TEXT,
            kind=kind,
            layer=layer,
            head=head,
            query=query,
            settings=settings,
            interventions=INTERVENTION_CASES[case],
        )
        check_trace(model, tok, t, settings, INTERVENTION_CASES[case])


def test_every_key_masked_gives_zero_weights_not_nan(tok):
    model = random_model(True)
    interventions = INTERVENTION_CASES["all-masked"]
    for kind in ("enc_self", "cross"):
        t = head_trace(
            model, tok, TEXT, kind=kind, layer=0, head=0, query=0, settings=DecodeSettings(max_new=3), interventions=interventions
        )
        assert t.mask.all() and (t.weights == 0).all() and (t.head_out == 0).all()
        assert np.isneginf(t.masked).all() and np.isfinite(t.scaled).all()


def test_temperature_divides_the_scaled_scores(rev):
    t1 = head_trace(rev.model, rev.tokenizer, TEXT, kind="enc_self", layer=0, head=0, query=1)
    t2 = head_trace(
        rev.model, rev.tokenizer, TEXT, kind="enc_self", layer=0, head=0, query=1, interventions=INTERVENTION_CASES["tau-2"]
    )
    close(t1.scores, t2.scores)  # layer 0: the same input rows, so the same raw scores
    close(t2.scaled, t1.scaled / 2)
    assert t2.weights.max() < t1.weights.max()  # flatter


# -- errors ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(kind="self", layer=0, head=0, query=0), "kind must be one of"),
        (dict(kind="enc_self", layer=2, head=0, query=0), "layer 2 is out of range"),
        (dict(kind="cross", layer=-1, head=0, query=0), "layer -1 is out of range"),
        (dict(kind="dec_self", layer=0, head=2, query=0), "head 2 is out of range"),
        (dict(kind="enc_self", layer=0, head=0, query=99), "query 99 is out of range"),
        (dict(kind="cross", layer=0, head=0, query=-1), "query -1 is out of range"),
    ],
)
def test_out_of_range_raises_value_error(rev, kw, words):
    with pytest.raises(ValueError, match=words):
        head_trace(rev.model, rev.tokenizer, TEXT, **kw)


def test_empty_text_raises_input_error(rev):
    with pytest.raises(InputError):
        head_trace(rev.model, rev.tokenizer, "  ", kind="enc_self", layer=0, head=0, query=0)

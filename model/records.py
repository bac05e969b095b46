"""The facts that model/, viz/ and ui/ share, defined once and free of torch.

- ``KINDS`` and ``KIND_NAMES``: the three kinds of attention and their display names.
- ``key_allowed`` / ``cell_reasons``: which (query, key) cells a mask hides, and why. The rule is
  written with array operators only, so ``model.transformer`` applies it to torch tensors and
  ``model.analysis`` to numpy arrays: one definition, two array libraries.
- ``shift_right``: the decoder reads ``[<bos>, y_1 .. y_n]`` and predicts ``[y_1 .. y_n, <eos>]``
  (section 3.1 of the paper: "the output embeddings are offset by one position").

Importing this module never imports torch (tests/test_records.py checks it), so ``viz/`` can draw
records without a model.
"""

from __future__ import annotations

from collections.abc import Sequence

KINDS = ("enc_self", "dec_self", "cross")
"""The three kinds of attention: encoder self, decoder causal self, decoder cross-attention."""

KIND_NAMES = {
    "enc_self": "Encoder self-attention",
    "dec_self": "Decoder causal self-attention",
    "cross": "Cross-attention",
}
"""Display name of each kind."""

# Why a (query, key) cell is hidden; 0 means the query may read the key.
VISIBLE, FUTURE, HIDDEN, WINDOW = 0, 1, 2, 3
REASONS = {
    FUTURE: "masked: a later token (the causal mask hides the future)",
    HIDDEN: "masked: this source token is hidden",
    WINDOW: "masked: outside the local attention window",
}
"""Hover text of each reason code."""


def key_allowed(q_pos, k_pos, *, causal: bool, window: int | None):
    """The self-attention mask rule: True where the query at position ``q_pos`` may read the key at ``k_pos``.

    ``q_pos`` ``(n_q, 1)`` and ``k_pos`` ``(1, n_k)`` are integer arrays (numpy or torch); the
    result broadcasts to ``(n_q, n_k)`` bool. causal: keys at or before the query (section 3.2.3,
    "we mask out (setting to -inf) all values in the input of the softmax which correspond to
    illegal connections"); window: ``|q_pos - k_pos| < window`` (a local band, an intervention).
    Returns None when every key is allowed (no causal mask, no window).
    """
    allowed = None
    if causal:
        allowed = k_pos <= q_pos
    if window is not None:
        near = abs(q_pos - k_pos) < window
        allowed = near if allowed is None else allowed & near
    return allowed


def cell_reasons(
    kind: str,
    n_q: int,
    n_k: int,
    *,
    causal: bool = True,
    window: int | None = None,
    src_hidden: Sequence[int] = (),
):
    """Reason code per cell of one ``(n_q, n_k)`` map of ``kind``: VISIBLE, FUTURE, HIDDEN or WINDOW.

    Encoder self-attention: hidden source keys and the window; decoder self-attention: the causal
    mask and the window; cross-attention: hidden source keys only. Where several reasons apply the
    first of FUTURE, HIDDEN, WINDOW wins. Returns a numpy ``int8`` array ``(n_q, n_k)``.
    Raises ValueError for an unknown kind.
    """
    import numpy as np  # numpy only: this module stays importable without torch

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    out = np.zeros((n_q, n_k), dtype=np.int8)
    q_pos, k_pos = np.arange(n_q)[:, None], np.arange(n_k)[None, :]
    if kind != "cross" and window is not None:
        out[~key_allowed(q_pos, k_pos, causal=False, window=window)] = WINDOW
    if kind != "dec_self":
        cols = [j for j in src_hidden if 0 <= j < n_k]
        out[:, cols] = HIDDEN
    if kind == "dec_self" and causal:
        out[~key_allowed(q_pos, k_pos, causal=True, window=None)] = FUTURE
    return out


def shift_right(out_ids: Sequence[int], *, bos_id: int, eos_id: int, max_len: int | None = None) -> tuple[list[int], list[int]]:
    """Decoder input and the tokens it predicts: ``([<bos>, y_1 .. y_n], [y_1 .. y_n, <eos>])``.

    Row t of every decoder map is the query at input token t, which predicted output token t.
    ``max_len`` cuts both to that many tokens.
    """
    tgt_in, tgt_out = [bos_id, *out_ids], [*out_ids, eos_id]
    if max_len is not None:
        tgt_in, tgt_out = tgt_in[:max_len], tgt_out[:max_len]
    return tgt_in, tgt_out

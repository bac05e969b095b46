"""Facts the Transformer and everything above it share, free of torch.

- ``KINDS`` and ``KIND_NAMES``: the three kinds of attention and their display names.
- ``key_allowed`` / ``cell_reasons``: which (query, key) cells a mask hides, and why. The rule is
  written with array operators only, so ``model.transformer`` applies it to torch tensors and
  ``analysis`` to numpy arrays: one definition, two array libraries.
- ``shift_right``: the decoder reads ``[<bos>, y_1 .. y_n]`` and predicts ``[y_1 .. y_n, <eos>]``
  (section 3.1 of the paper: "the output embeddings are offset by one position").
- ``BeamNode``: one hypothesis of a beam search (``model.decoding.beam_search`` builds them).
- ``InputError``: the message for input the model cannot take (empty text), shown to the user as it is.

Importing this module never imports torch, so pages and ``viz/`` may import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

KINDS = ("enc_self", "dec_self", "cross")
"""The three kinds of attention: encoder self, decoder causal self, decoder cross-attention."""

KIND_NAMES = {
    "enc_self": "Encoder self-attention",
    "dec_self": "Decoder causal self-attention",
    "cross": "Cross-attention",
}
"""Display name of each kind."""

# Why a (query, key) cell is hidden; 0 means the query may read the key. ABLATED marks every cell
# of a head whose output was zeroed (``cell_reasons`` never returns it; ``MapView`` does). UNWRITTEN:
# with the causal mask off, the decoder map's row t is still step t's own pass, which ran before the
# tokens after t existed (``analysis.analyze.decode_time_maps``): those cells got no weight because
# there was no key yet, not because a mask hid it.
VISIBLE, FUTURE, HIDDEN, WINDOW, ABLATED, UNWRITTEN = 0, 1, 2, 3, 4, 5
REASONS = {
    FUTURE: "masked: a later token (the causal mask hides the future)",
    UNWRITTEN: "not yet written: when this step ran, the decoder had only the tokens up to the query (causal mask off)",
    HIDDEN: "masked: this source token is hidden",
    WINDOW: "masked: outside the local attention window",
    ABLATED: "head ablated: its output is zeroed, so it attends to nothing",
}
"""Hover text of each reason code."""
REASON_NAMES = {FUTURE: "future", HIDDEN: "hidden", WINDOW: "window", ABLATED: "ablated", UNWRITTEN: "not yet written"}
"""Short name of each reason code (figure trace names)."""


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
    """Reason code per cell of one ``(n_q, n_k)`` map of ``kind``: VISIBLE, FUTURE, UNWRITTEN, HIDDEN or WINDOW.

    Encoder self-attention: hidden source keys and the window; decoder self-attention: the causal
    mask (FUTURE) and the window; without the causal mask the keys after the query are UNWRITTEN (each
    decoder row is the pass of its own step, which ran before they existed); cross-attention: hidden
    source keys only. Where several reasons apply the first of FUTURE/UNWRITTEN, HIDDEN, WINDOW wins.
    Returns a numpy ``int8`` array ``(n_q, n_k)``.
    Raises ValueError for an unknown kind.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    out = np.zeros((n_q, n_k), dtype=np.int8)
    q_pos, k_pos = np.arange(n_q)[:, None], np.arange(n_k)[None, :]
    if kind != "cross" and window is not None:
        out[~key_allowed(q_pos, k_pos, causal=False, window=window)] = WINDOW
    if kind != "dec_self":
        cols = [j for j in src_hidden if 0 <= j < n_k]
        out[:, cols] = HIDDEN
    if kind == "dec_self":
        out[~key_allowed(q_pos, k_pos, causal=True, window=None)] = FUTURE if causal else UNWRITTEN
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


@dataclass
class BeamNode:
    """One hypothesis in the beam-search tree.

    id / parent: node ids (parent -1 for the root <bos>); token: the compact id it appended;
    step: its output position (0 for the first output token); logprob: cumulative log-probability
    (natural log); score: logprob / length_penalty for finished hypotheses, else None.
    """

    id: int
    parent: int
    token: int
    step: int
    logprob: float
    finished: bool = False
    score: float | None = None


class InputError(ValueError):
    """Input the model cannot take (e.g. empty text); the message is meant for the user."""

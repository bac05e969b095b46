"""Token text for display: visible spaces and unique, position-tagged labels.

Tokenizer pieces carry their leading space (``" dog"``); on an axis that space is invisible, so
it is shown as ``▁`` (the SentencePiece convention BertViz and most papers use): ``"▁dog"``.
"""

from __future__ import annotations

from viz._common import check_tokens

SPACE = "\u2581"  # ▁
_VISIBLE = {"\n": "\u23ce", "\t": "\u21e5", "\r": "\u240d"}  # ⏎ ⇥ ␍


def _one(t: str) -> str:
    if not t:
        return "\u2205"  # ∅: an empty piece (never produced by model.tokenizer, but never invisible)
    n = len(t) - len(t.lstrip(" "))
    s = SPACE * n + t[n:]
    out = []
    for ch in s:
        if ch in _VISIBLE:
            out.append(_VISIBLE[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(chr(0x2400 + (ord(ch) if ch != "\x7f" else 0x21)))  # Unicode control pictures
        else:
            out.append(ch)
    return "".join(out)


def display(tokens: list[str]) -> list[str]:
    """Display form of each token: leading spaces as ``▁``, newline as ``⏎``, tab as ``⇥``,
    other control characters as their Unicode control pictures; specials (``<bos>``) unchanged.

    The result is plain text (for tables and CSV); figure builders escape it for plotly.

    Raises:
        ValueError: if ``tokens`` is not a list of strings.
    """
    return [_one(t) for t in check_tokens(tokens, "tokens")]


def row_labels(q_tokens: list[str], predicted: list[str] | None = None) -> list[str]:
    """Unique row labels ``"i: tok"``, or ``"i: tok → next"`` when ``predicted`` is given.

    For decoder maps, ``q_tokens`` are the decoder inputs ``[<bos>, y_1 .. y_n]`` and
    ``predicted[t]`` is the token row t predicted (``[y_1 .. y_n, <eos>]``), so row 0 reads
    ``"0: <bos> → ▁Ein"``. The index makes duplicate tokens distinct.

    Raises:
        ValueError: if ``predicted`` is not the same length as ``q_tokens``.
    """
    q = display(q_tokens)
    if predicted is None:
        return [f"{i}: {t}" for i, t in enumerate(q)]
    p = display(check_tokens(predicted, "predicted", len(q), "q_tokens"))
    return [f"{i}: {t} \u2192 {n}" for i, (t, n) in enumerate(zip(q, p, strict=True))]


def col_labels(k_tokens: list[str]) -> list[str]:
    """Unique column labels ``"j: tok"`` (same form as ``row_labels`` without a prediction)."""
    return row_labels(k_tokens)

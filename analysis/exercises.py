"""Exercises on the real model's numbers, and a grader that names the mistake (issue 55).

An ``Exercise`` holds what the student is shown: the inputs of one step of the forward pass, taken from one traced
pass (``analysis.records.HeadTrace``, a decoding ``StepView``, a ``Stage`` of the data flow) and rounded to 2
decimals, plus the few numbers the step needs (d_head, τ, the mask settings). The right answer is computed from
those rounded inputs (``solve``), so a hand or spreadsheet computation can be exactly right; each number of a
numeric answer may be off by ``Exercise.tolerance`` (absolute). ``grade(exercise, answer)`` is a pure function:
it returns a ``Feedback`` that says whether the answer is right and, when it is not, which typical mistake it is,
found by computing that mistake's answer (``mistakes``) and comparing. Exercises are plain data: ``to_dict`` /
``from_dict`` round-trip through JSON, so a teacher's room can send one to a class and grade the answers.

Exercise kinds (``EXERCISE_KINDS``), with the paper's equation or section:

    scale         q·k_j / (√d_head · τ) for a few keys                          eq. 1
    mask          which keys one query may not read, and why (causal, padding,  section 3.2.3
                  hidden token, window)
    softmax       the weights of one query: softmax of its masked, scaled scores  eq. 1
    weighted_sum  Σ_j w_j v_j for two dimensions of the head's output            eq. 1
    next_token    one piece's probability from a few logits, with a temperature  section 3.4
    positional    PE(pos, i) of the sinusoidal encoding                          section 3.5
    shape         the shape of a named tensor for this input                     sections 3.1–3.4

Torch-free: numpy only (tests/test_exercises.py checks that importing it imports no torch).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from analysis.records import HeadTrace, Stage, StepView
from i18n import N_, _
from model.facts import KIND_NAMES, REASON_NAMES

EXERCISE_KINDS = ("scale", "mask", "softmax", "weighted_sum", "next_token", "positional", "shape")
TITLES = {
    "scale": N_("Scale the scores"),
    "mask": N_("Which keys are masked, and why"),
    "softmax": N_("Softmax: the attention weights"),
    "weighted_sum": N_("The weighted sum of the values"),
    "next_token": N_("The next token's probability"),
    "positional": N_("One positional-encoding value"),
    "shape": N_("The shape of a tensor"),
}
"""Display title of each exercise kind (English, marked ``N_``: shown through ``_()``; ``Exercise.title`` keeps it)."""

TOLERANCE = 0.01
"""Absolute tolerance of each number of a numeric answer: 2 decimals are enough."""
MASK_REASONS = ("future", "padding", "hidden", "window")
"""Why a key can be masked: the causal mask, a padding key, a hidden source token, outside the local window."""
REASON_LABELS = {
    "future": N_("causal mask (a later token)"),
    "padding": N_("padding (<pad>, not part of the sentence)"),
    "hidden": N_("hidden source token"),
    "window": N_("outside the local window"),
}
"""What each reason of ``MASK_REASONS`` is called (English, marked ``N_``: shown through ``_()``)."""
SHOWN_KEYS = 5  # keys of the scale exercise: a few minutes with a calculator
SHOWN_LOGITS = 5  # candidates of the next-token exercise
LOGIT_TOP = 10.0  # the largest logit shown (the softmax does not change when one number is added to every logit)


class AnswerError(ValueError):
    """An answer that cannot be graded (empty, text, NaN, the wrong count): the message is for the student."""


@dataclass(frozen=True)
class Exercise:
    """One exercise as plain data (JSON-able through ``to_dict``).

    kind: one of ``EXERCISE_KINDS``. title, prompt: what the student reads (markdown). table: the inputs shown,
    column name -> values (rounded to 2 decimals), all columns of one length (the CSV the student may download).
    params: the other numbers the step needs (d_head, temperature, the mask's settings, ...). labels: one label per
    number asked (numeric kinds) or per key (mask). tolerance: absolute, per number (0: exact). source: where the
    numbers come from (model, sentence, attention kind, layer, head, query), for a teacher's room.
    """

    kind: str
    title: str
    prompt: str
    table: dict[str, list] = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    labels: list[str] = field(default_factory=list)
    tolerance: float = TOLERANCE
    source: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The exercise as a dict of JSON types (``json.dumps`` takes it as it is)."""
        return json.loads(json.dumps(asdict(self)))

    @staticmethod
    def from_dict(d: Mapping) -> Exercise:
        """The exercise ``to_dict`` gave. Raises ValueError for an unknown kind or missing fields."""
        if not isinstance(d, Mapping) or d.get("kind") not in EXERCISE_KINDS:
            raise ValueError(f"not an exercise: kind must be one of {EXERCISE_KINDS}")
        try:
            return Exercise(**{k: d[k] for k in ("kind", "title", "prompt", "table", "params", "labels", "tolerance", "source")})
        except KeyError as e:
            raise ValueError(f"not an exercise: no field {e.args[0]!r}") from None

    @property
    def uid(self) -> str:
        """A short id, the same for equal exercises (a hash of its JSON)."""
        return hashlib.sha1(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:12]

    def csv(self) -> str:
        """The shown inputs as CSV text (one row per table row), for a spreadsheet."""
        cols = list(self.table)
        lines = [",".join(_csv_cell(c) for c in cols)]
        n = len(next(iter(self.table.values()))) if self.table else 0
        for i in range(n):
            lines.append(",".join(_csv_cell(self.table[c][i]) for c in cols))
        return "\n".join(lines) + "\n"


def _csv_cell(v) -> str:
    text = "" if v is None else str(v)
    return '"' + text.replace('"', '""') + '"' if any(ch in text for ch in ',"\n') else text


@dataclass(frozen=True)
class Feedback:
    """What ``grade`` says about one answer.

    correct: within the tolerance. mistake: None when correct, else the code of the named mistake (``MISTAKES``),
    "other" for a wrong answer no named mistake explains, "malformed" for an answer that cannot be read.
    message: what went wrong (markdown). fix: the step that fixes it (None when correct or malformed).
    solution: the worked solution, to show on request.
    """

    correct: bool
    mistake: str | None
    message: str
    fix: str | None
    solution: str

    def to_dict(self) -> dict:
        """The feedback as a dict of JSON types."""
        return asdict(self)


MISTAKES = {
    "no_sqrt": N_("You forgot to divide by √d_head."),
    "divided_by_d_head": N_("You divided by d_head instead of its square root √d_head."),
    "times_sqrt": N_("You multiplied by √d_head instead of dividing."),
    "no_temperature": N_("You forgot the temperature τ."),
    "times_temperature": N_("You multiplied by the temperature τ instead of dividing by it."),
    "all_keys": N_("Your softmax included the masked keys: they must get weight 0."),
    "wrong_axis": N_("You normalised down the column (over queries) instead of along the query's row (over keys)."),
    "no_exp": N_("You normalised by the sum without taking e^x first."),
    "argmax": N_("You took the argmax (all weight on the largest) instead of the weighted sum / the softmax."),
    "unweighted_mean": N_("You averaged the values without the weights."),
    "plain_sum": N_("You added the values without multiplying by the weights."),
    "sin_cos_swapped": N_("You mixed up sin and cos (even and odd dimensions)."),
    "degrees": N_("Your calculator was in degrees: the angle pos / 10000^(2i/d_model) is in radians."),
    "exponent_index": N_("You put the dimension number in the exponent instead of 2i (i: the index of the sin/cos pair)."),
    "exponent_2dim": N_("You used twice the dimension number in the exponent: 2i counts pairs, i is the pair's index."),
    "future_unmasked": N_("You left the future unmasked: the causal mask hides every key after the query."),
    "masked_self": N_("You masked the query's own position: the causal mask allows j ≤ i, itself included."),
    "swapped": N_("Rows and columns are swapped."),
    "padding_unmasked": N_("You left the padding unmasked: <pad> keys are not part of the sentence."),
    "hidden_unmasked": N_("You left a hidden source token unmasked."),
    "window_unmasked": N_("You forgot the local window."),
    "window_off_by_one": N_("The window is one too wide: a key is inside only when |i − j| < window."),
    "wrong_reason": N_("The right keys, but not every reason is right."),
    "no_batch": N_("You left out the batch dimension B."),
    "heads_not_split": N_("The heads are not split: per head the last dimension is d_head, with n_heads as its own axis."),
    "d_model_for_d_head": N_("You used d_model where the width of one head, d_head = d_model / n_heads, belongs."),
    "source_target": N_("You mixed up the source length S and the decoder's length T."),
}
"""Named mistake code -> what the feedback says it is (English, marked ``N_``: ``grade`` and the pages pass it through
``_()``; the codes are identifiers and stay as they are)."""


# -- rounding and parsing ---------------------------------------------------------------------------------------------


def r2(values) -> list[float]:
    """Each value rounded to 2 decimals, as Python floats (what the student is shown)."""
    return [round(float(v), 2) + 0.0 for v in np.atleast_1d(np.asarray(values, dtype=np.float64))]


def parse_numbers(answer, n: int) -> list[float]:
    """The ``n`` numbers of a numeric answer: a sequence of numbers, or text with the numbers separated by commas,
    semicolons, spaces or new lines (a column pasted from a spreadsheet); with ``;`` or new lines as separators a
    decimal comma (``0,25``) is read as a decimal point.

    Raises:
        AnswerError: for an empty answer, text that is not a number, NaN or infinity, or not ``n`` numbers.
    """
    if isinstance(answer, str):
        text = answer.strip().strip("[]()")
        if not text:
            raise AnswerError(
                (_("The answer is empty: type {n} number.") if n == 1 else _("The answer is empty: type {n} numbers.")).format(
                    n=n
                )
            )
        parts = [p for p in re.split(r"[;\s]+", text) if p]
        if len(parts) != n or "." in text:
            parts = [p for p in re.split(r"[,;\s]+", text) if p]
        else:
            parts = [p.replace(",", ".") for p in parts]
        values = []
        for p in parts:
            try:
                values.append(float(p.replace("−", "-")))
            except ValueError:
                raise AnswerError(_("“{text}” is not a number: type numbers only, like 0.25.").format(text=p[:20])) from None
    else:
        try:
            values = [float(v) for v in np.atleast_1d(np.asarray(answer, dtype=object))]
        except (TypeError, ValueError):
            raise AnswerError(_("The answer must be numbers.")) from None
    if not all(math.isfinite(v) for v in values):
        raise AnswerError(_("The answer has NaN or infinity: every number must be finite."))
    if len(values) != n:
        raise AnswerError(
            (_("Expected {n} number, got {got}.") if n == 1 else _("Expected {n} numbers, got {got}.")).format(
                n=n, got=len(values)
            )
        )
    return values


def parse_shape(answer) -> list[int]:
    """A shape typed as ``[1, 7, 256]``, ``1 x 7 x 256`` or ``(1, 7, 256)``, or a sequence of ints.

    Raises:
        AnswerError: for an empty answer, or one that is not whole positive numbers.
    """
    if isinstance(answer, str):
        parts = [p for p in re.split(r"[\s,x×*]+", answer.strip().strip("[]()").lower()) if p]
        if not parts:
            raise AnswerError(_("The answer is empty: type the shape, like [1, 7, 256]."))
    else:
        parts = list(answer)
    try:
        dims = [int(p) for p in parts]
    except (TypeError, ValueError):
        raise AnswerError(_("A shape is whole numbers, like [1, 7, 256] (use the numbers of this input, not letters).")) from None
    if any(d <= 0 for d in dims) or any(float(p) != int(p) for p in parts if not isinstance(p, str)):
        raise AnswerError(_("Every size of a shape is a whole number of at least 1."))
    return dims


def parse_mask(answer, n_keys: int) -> dict[str, set[int]]:
    """A mask answer: reason -> the key positions masked for it (``MASK_REASONS``; a reason may be left out).

    Raises:
        AnswerError: for something else, an unknown reason, or a key position out of range.
    """
    if not isinstance(answer, Mapping):
        raise AnswerError(_("Pick the masked keys for each reason."))
    out = {}
    for reason, picked in answer.items():
        if reason not in MASK_REASONS:
            raise AnswerError(
                _("Unknown reason {reason}: one of {reasons}.").format(reason=repr(reason), reasons=", ".join(MASK_REASONS))
            )
        try:
            got = {int(j) for j in picked}
        except (TypeError, ValueError):
            raise AnswerError(_("Key positions are whole numbers.")) from None
        if any(not 0 <= j < n_keys for j in got):
            raise AnswerError(_("Key positions go from 0 to {last}.").format(last=n_keys - 1))
        out[reason] = got
    return out


# -- building exercises -----------------------------------------------------------------------------------------------


def shown(token: str) -> str:
    """A token as the figures show it (``viz.tokens.display``'s rule; analysis/ may not import viz/): leading spaces as
    ▁, new line ⏎, tab ⇥, carriage return ␍, other control characters as their control pictures, an empty piece ∅."""
    if not token:
        return "\u2205"
    body = token.lstrip(" ")
    out = []
    for ch in "\u2581" * (len(token) - len(body)) + body:
        if ch in "\n\t\r":
            out.append({"\n": "\u23ce", "\t": "\u21e5", "\r": "\u240d"}[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(chr(0x2400 + (ord(ch) if ch != "\x7f" else 0x21)))
        else:
            out.append(ch)
    return "".join(out)


def _key_labels(tokens: Sequence[str]) -> list[str]:
    return [f"{j}: {shown(t)}" for j, t in enumerate(tokens)]


def _where(t: HeadTrace) -> str:
    return _("{kind}, layer {l}, head {h}, query {q}: “{token}”").format(
        kind=_(KIND_NAMES[t.kind]), l=t.layer + 1, h=t.head + 1, q=t.query, token=shown(t.q_tokens[t.query])
    )


def _trace_source(t: HeadTrace, source: Mapping | None) -> dict:
    return {**(source or {}), "attention": t.kind, "layer": t.layer, "head": t.head, "query": t.query}


def scale_exercise(t: HeadTrace, *, keys: Sequence[int] | None = None, source: Mapping | None = None) -> Exercise:
    """Scale the raw scores q·k_j of a few keys: ÷ √d_head, and ÷ τ when a temperature is set (eq. 1).

    ``keys``: the key positions shown (None: up to ``SHOWN_KEYS`` keys nearest the query). Masked keys are scaled
    like the others (the mask comes after). Raises ValueError for a key out of range.
    """
    n_keys = len(t.k_tokens)
    if keys is None:
        keys = sorted(sorted(range(n_keys), key=lambda j: (abs(j - t.query), j))[:SHOWN_KEYS])
    if not keys or any(not 0 <= j < n_keys for j in keys):
        raise ValueError(f"keys must be positions 0 .. {n_keys - 1}, got {list(keys)}")
    labels = [_key_labels(t.k_tokens)[j] for j in keys]
    tau = _(" and the temperature τ = {tau}").format(tau=f"{t.temperature:g}") if t.temperature != 1 else ""
    prompt = _(
        "{where}. The raw scores q·k_j of {n} keys are below. Scale them as eq. 1 does, with "
        "d_head = {d_head}{tau}: type the {n} scaled scores in the order of the table."
    ).format(where=_where(t), n=len(keys), d_head=t.d_head, tau=tau)
    return Exercise(
        "scale",
        TITLES["scale"],
        prompt,
        {"key": labels, "q·k_j": r2(t.scores[list(keys)])},
        {"d_head": int(t.d_head), "temperature": float(t.temperature)},
        labels,
        TOLERANCE,
        _trace_source(t, source),
    )


def mask_exercise(
    attention: str,
    q_tokens: Sequence[str],
    k_tokens: Sequence[str],
    query: int,
    *,
    causal: bool = True,
    window: int | None = None,
    hidden: Sequence[int] = (),
    padding: int = 0,
    source: Mapping | None = None,
) -> Exercise:
    """Which keys query ``query`` of ``attention`` ("enc_self", "dec_self", "cross") may not read, and why.

    The rule is ``model.facts.cell_reasons``'s (section 3.2.3): decoder self-attention hides later keys (causal),
    encoder self- and cross-attention hide the ``hidden`` source positions, self-attention hides keys ``|i − j| ≥
    window``; ``padding`` ``<pad>`` keys are appended to the keys (the sentence in a batch with a longer one) and
    are hidden from every query. Raises ValueError for an unknown kind or a query out of range.
    """
    if attention not in KIND_NAMES:
        raise ValueError(f"attention must be one of {tuple(KIND_NAMES)}, got {attention!r}")
    if not 0 <= query < len(q_tokens):
        raise ValueError(f"query {query} is out of range: {len(q_tokens)} queries (count from 0)")
    keys = [*k_tokens, *["<pad>"] * int(padding)]
    rules = [_("the causal mask is on") if causal else _("the causal mask is off")] if attention == "dec_self" else []
    if window and attention != "cross":
        rules += [_("a local window of {window} (a key is inside when |i − j| < {window})").format(window=window)]
    hid = sorted(j for j in hidden if 0 <= j < len(k_tokens)) if attention != "dec_self" else []
    rules += [_("hidden source tokens at {positions}").format(positions=", ".join(map(str, hid)))] if hid else []
    if padding:
        rules += [_("the sentence is padded with {n} <pad> keys (a batch with a longer sentence)").format(n=padding)]
    prompt = _(
        "{kind}, query {q}: “{token}”. Settings: {settings}. Which keys may this query not read? Pick each masked key "
        "under its reason (one reason is enough)."
    ).format(
        kind=_(KIND_NAMES[attention]),
        q=query,
        token=shown(q_tokens[query]),
        settings="; ".join(rules) if rules else _("no mask is set"),
    )
    labels = _key_labels(keys)
    return Exercise(
        "mask",
        TITLES["mask"],
        prompt,
        {"key": labels},
        {
            "attention": attention,
            "query": int(query),
            "n_keys": len(k_tokens),
            "causal": bool(causal),
            "window": int(window) if window and attention != "cross" else None,
            "hidden": hid,
            "padding": int(padding),
        },
        labels,
        0.0,
        {**(source or {}), "attention": attention, "query": int(query)},
    )


def softmax_exercise(t: HeadTrace, *, others: Sequence[HeadTrace] = (), source: Mapping | None = None) -> Exercise:
    """The softmax weights of one query's masked, scaled scores (eq. 1).

    Every key's scaled score is shown with its mask; ``others``: traces of other queries of the same head with the
    same keys, shown as more rows of the score matrix (their masked cells −∞), so that a softmax over the wrong axis
    can be recognised. Traces with other keys are left out.
    """
    labels = _key_labels(t.k_tokens)
    table = {
        "key": labels,
        "scaled score": r2(t.scaled),
        "masked": [REASON_NAMES.get(int(r), "masked") if m else "" for m, r in zip(t.mask, t.reasons, strict=True)],
    }
    rows = []
    for o in others:
        if o.kind == t.kind and o.layer == t.layer and o.head == t.head and o.query != t.query and o.k_tokens == t.k_tokens:
            rows.append(o.query)
            table[f"row of query {o.query}"] = [None if m else v for m, v in zip(o.mask, r2(o.scaled), strict=True)]
    others_text = (
        _("; and, for comparison, the rows of queries {queries} of the same score matrix (−∞: masked)").format(
            queries=", ".join(map(str, rows))
        )
        if rows
        else ""
    )
    prompt = _(
        "{where}. Below: this query's scaled scores q·k_j / (√d_head · τ) for every key, and which keys are masked"
        "{others}. Type this query's {n} attention weights, in the order of the keys (0 for a masked key)."
    ).format(where=_where(t), others=others_text, n=len(labels))
    return Exercise("softmax", TITLES["softmax"], prompt, table, {"rows": rows}, labels, TOLERANCE, _trace_source(t, source))


def weighted_sum_exercise(t: HeadTrace, *, dims: Sequence[int] | None = None, source: Mapping | None = None) -> Exercise:
    """The head's output Σ_j w_j v_j in two dimensions ``dims`` (0-based; None: the two largest of the output).

    Raises ValueError for dimensions out of range or not two of them.
    """
    if dims is None:
        dims = sorted(np.argsort(-np.abs(t.head_out), kind="stable")[:2].tolist())
    if len(dims) != 2 or any(not 0 <= d < t.d_head for d in dims):
        raise ValueError(f"dims must be two dimensions 0 .. {t.d_head - 1}, got {list(dims)}")
    labels = _key_labels(t.k_tokens)
    table = {"key": labels, "w_j": r2(t.weights)}
    for d in dims:
        table[f"v_j[{d}]"] = r2(t.v[:, d])
    prompt = _(
        "{where}. Below: the attention weights w_j and two columns of the values V (dimensions {d0} and "
        "{d1} of d_head = {d_head}). Type the head's output in these two dimensions, Σ_j w_j v_j."
    ).format(where=_where(t), d0=dims[0], d1=dims[1], d_head=t.d_head)
    asked = [f"output[{d}]" for d in dims]
    return Exercise(
        "weighted_sum", TITLES["weighted_sum"], prompt, table, {"dims": list(dims)}, asked, TOLERANCE, _trace_source(t, source)
    )


def next_token_exercise(
    step: StepView, *, temperature: float, asked: int | None = None, source: Mapping | None = None
) -> Exercise:
    """One piece's probability from the logits of the ``SHOWN_LOGITS`` most probable pieces at ``step``, with a
    temperature: softmax(z / τ) over those pieces (as top-k sampling with k = ``SHOWN_LOGITS`` keeps only them).

    The logits are the model's up to one common constant, recovered from the step's probabilities (z_i − z_1 =
    ln p_i − ln p_1) and shifted so the largest is ``LOGIT_TOP``. ``asked``: the candidate asked (0-based; None: the
    second, else the first). Raises ValueError for a temperature ≤ 0 or a candidate out of range.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    cands = step.candidates[:SHOWN_LOGITS]
    if not cands:
        raise ValueError("the step has no candidates")
    asked = (1 if len(cands) > 1 else 0) if asked is None else asked
    if not 0 <= asked < len(cands):
        raise ValueError(f"asked must be 0 .. {len(cands) - 1}, got {asked}")
    logp = np.log(np.maximum([p for _tok, _id, p in cands], 1e-30))
    pieces = [shown(piece) for piece, _id, _p in cands]
    prompt = _(
        "Decoding step {step}: the decoder's logits for its {n} most probable next pieces (the model's, "
        "less one common constant: that changes no probability). Keep only these pieces, as top-k sampling with k = "
        "{n} does, and use the temperature τ = {tau}: what is the probability of “{piece}”?"
    ).format(step=step.t + 1, n=len(cands), tau=f"{temperature:g}", piece=pieces[asked])
    return Exercise(
        "next_token",
        TITLES["next_token"],
        prompt,
        {"piece": pieces, "logit": r2(logp - logp.max() + LOGIT_TOP)},
        {"temperature": float(temperature), "asked": int(asked)},
        [f"P({pieces[asked]})"],
        TOLERANCE,
        {**(source or {}), "step": int(step.t)},
    )


def positional_exercise(
    pos: int, dim: int, d_model: int, *, layout: str = "interleaved", source: Mapping | None = None
) -> Exercise:
    """PE(pos, dim) of the sinusoidal encoding (section 3.5) for a model of ``d_model`` and ``layout``
    ("interleaved": the paper, sin on even and cos on odd dimensions; "halves": sines first, then cosines).

    Raises ValueError for a position < 0, a dimension out of range or an unknown layout.
    """
    if layout not in ("interleaved", "halves") or not 0 <= dim < d_model or pos < 0:
        raise ValueError(
            f"need pos ≥ 0, 0 ≤ dim < d_model = {d_model} and layout interleaved or halves; got {pos}, {dim}, {layout!r}"
        )
    where = (
        _("sines on the even dimensions 2i, cosines on the odd ones 2i+1 (the paper)")
        if layout == "interleaved"
        else _("sines on dimensions i = 0 .. {last}, cosines on d_model/2 + i").format(last=d_model // 2 - 1)
    )
    prompt = _(
        "This model's positional encoding (section 3.5) has d_model = {d_model}, {where}: "
        "PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)). "
        "What is the value at position {pos}, dimension {dim} (counting from 0)?"
    ).format(d_model=d_model, where=where, pos=pos, dim=dim)
    return Exercise(
        "positional",
        TITLES["positional"],
        prompt,
        {"pos": [int(pos)], "dimension": [int(dim)], "d_model": [int(d_model)]},
        {"pos": int(pos), "dim": int(dim), "d_model": int(d_model), "layout": layout},
        [f"PE({pos}, {dim})"],
        TOLERANCE,
        dict(source or {}),
    )


SIZE_NAMES = ("B", "S", "T", "d_model", "n_heads", "d_head", "d_ff", "target vocab")


def stage_letters(stage: Stage) -> list[str] | None:
    """The size names of each axis of ``stage`` read from its meaning (``"B x n_heads x S x d_head, ..."``), or None
    when the meaning does not name one per axis."""
    head = re.split(r"[,:(]", stage.meaning)[0]
    letters = [p.strip().removesuffix(" per layer").strip() for p in head.split(" x ")]
    letters = ["target vocab" if p.startswith("target vocab") else p for p in letters]
    return letters if len(letters) == len(stage.shape) and all(p in SIZE_NAMES for p in letters) else None


def shape_exercise(stage: Stage, sizes: Mapping[str, int], *, source: Mapping | None = None) -> Exercise:
    """The shape of the tensor of ``stage`` (``Maps.shapes``, the Shapes page) for this input, batch of one.

    ``sizes``: the input's and model's numbers by ``SIZE_NAMES`` (B, S, T, d_model, ...), shown to the student.
    """
    shown = {k: int(v) for k, v in sizes.items() if k in SIZE_NAMES}
    prompt = _(
        "This input and model: {sizes}. What is the shape of the tensor "
        "“{stage}” in one forward pass over this sentence? Type it like [1, 7, 256]."
    ).format(sizes=", ".join(f"{k} = {v}" for k, v in shown.items()), stage=stage.name)
    return Exercise(
        "shape",
        TITLES["shape"],
        prompt,
        {"name": list(shown), "size": list(shown.values())},
        {"stage": stage.name, "shape": [int(d) for d in stage.shape], "letters": stage_letters(stage), "sizes": shown},
        ["shape"],
        0.0,
        dict(source or {}),
    )


# -- solving: the right answer and the typical wrong ones, from the shown (rounded) inputs ------------------------------


def _col(ex: Exercise, name: str) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in ex.table[name]], dtype=np.float64)


def _softmax(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Softmax of ``x`` over the entries where ``keep``; 0 elsewhere (all 0 when nothing is kept)."""
    out = np.zeros_like(x, dtype=np.float64)
    if keep.any():
        z = x[keep] - x[keep].max()
        out[keep] = np.exp(z) / np.exp(z).sum()
    return out


def _masked(ex: Exercise) -> np.ndarray:
    return np.array([bool(m) for m in ex.table["masked"]])


def key_reasons(ex: Exercise) -> list[set[str]]:
    """The mask exercise's reasons per key (empty: the query may read it), by the rule of ``mask_exercise``."""
    p = ex.params
    q, n_real, out = p["query"], p["n_keys"], []
    for j in range(n_real + p["padding"]):
        why = set()
        if j >= n_real:
            why.add("padding")
        elif p["attention"] == "dec_self" and p["causal"] and j > q:
            why.add("future")
        if j < n_real and j in p["hidden"]:
            why.add("hidden")
        if j < n_real and p["window"] and abs(q - j) >= p["window"]:
            why.add("window")
        out.append(why)
    return out


def solve(ex: Exercise):
    """The right answer of ``ex`` from its shown inputs: a list of floats (numeric kinds), the set of masked key
    positions (mask) or the shape (a list of ints)."""
    p = ex.params
    if ex.kind == "scale":
        return list(_col(ex, "q·k_j") / (math.sqrt(p["d_head"]) * p["temperature"]))
    if ex.kind == "mask":
        return {j for j, why in enumerate(key_reasons(ex)) if why}
    if ex.kind == "softmax":
        masked = _masked(ex)
        return list(_softmax(_col(ex, "scaled score"), ~masked))
    if ex.kind == "weighted_sum":
        w = _col(ex, "w_j")
        return [float(w @ _col(ex, f"v_j[{d}]")) for d in p["dims"]]
    if ex.kind == "next_token":
        z = _col(ex, "logit")
        return [float(_softmax(z / p["temperature"], np.ones(len(z), bool))[p["asked"]])]
    if ex.kind == "positional":
        return [_pe(p["pos"], p["dim"], p["d_model"], p["layout"])]
    if ex.kind == "shape":
        return list(p["shape"])
    raise ValueError(f"unknown exercise kind {ex.kind!r}")


def _pe(pos: int, dim: int, d_model: int, layout: str, *, two_i: float | None = None, swap=False, degrees=False) -> float:
    half = d_model // 2
    if layout == "interleaved":
        pair, use_sin = dim // 2, dim % 2 == 0
    else:
        pair, use_sin = (dim, True) if dim < half else (dim - half, False)
    angle = pos / 10000 ** ((2 * pair if two_i is None else two_i) / d_model)
    if degrees:
        angle = math.radians(angle)
    return math.sin(angle) if use_sin != swap else math.cos(angle)


def mistakes(ex: Exercise) -> dict:
    """The typical wrong answers of ``ex``, code -> answer (the form ``solve`` returns), each computed from the shown
    inputs; a mistake that gives the right answer here (τ = 1: forgetting τ changes nothing) is left out."""
    p, right, out = ex.params, solve(ex), {}
    if ex.kind == "scale":
        s, dh, tau = _col(ex, "q·k_j"), p["d_head"], p["temperature"]
        out = {
            "no_sqrt": s / tau,
            "divided_by_d_head": s / (dh * tau),
            "times_sqrt": s * math.sqrt(dh) / tau,
            "no_temperature": s / math.sqrt(dh),
            "times_temperature": s * tau / math.sqrt(dh),
        }
    elif ex.kind == "softmax":
        x, masked = _col(ex, "scaled score"), _masked(ex)
        keep = ~masked
        out["all_keys"] = _softmax(x, np.ones(len(x), bool))
        if p["rows"]:
            rows = np.stack([np.where(masked, np.nan, x)] + [_col(ex, f"row of query {q}") for q in p["rows"]])  # (R, K)
            col = np.zeros(len(x))
            for j in range(len(x)):
                if keep[j]:
                    live = ~np.isnan(rows[:, j])
                    col[j] = _softmax(rows[:, j], live)[0]
            out["wrong_axis"] = col
        if keep.any():
            total = x[keep].sum()
            if total != 0:
                out["no_exp"] = np.where(keep, x, 0) / total
            onehot = np.zeros(len(x))
            onehot[np.flatnonzero(keep)[np.argmax(x[keep])]] = 1
            out["argmax"] = onehot
    elif ex.kind == "weighted_sum":
        w = _col(ex, "w_j")
        v = np.stack([_col(ex, f"v_j[{d}]") for d in p["dims"]], axis=1)  # (K, 2)
        out = {"argmax": v[int(np.argmax(w))], "unweighted_mean": v.mean(axis=0), "plain_sum": v.sum(axis=0)}
    elif ex.kind == "next_token":
        z, tau, a = _col(ex, "logit"), p["temperature"], p["asked"]
        every = np.ones(len(z), bool)
        out = {
            "no_temperature": [_softmax(z, every)[a]],
            "times_temperature": [_softmax(z * tau, every)[a]],
            "argmax": [float(a == int(np.argmax(z)))],
        }
        if z.sum() != 0:
            out["no_exp"] = [z[a] / z.sum()]
    elif ex.kind == "positional":
        args = (p["pos"], p["dim"], p["d_model"], p["layout"])
        out = {
            "sin_cos_swapped": [_pe(*args, swap=True)],
            "degrees": [_pe(*args, degrees=True)],
            "exponent_index": [_pe(*args, two_i=p["dim"])],
            "exponent_2dim": [_pe(*args, two_i=2 * p["dim"])],
        }
    elif ex.kind == "mask":
        reasons, q = key_reasons(ex), p["query"]
        only = {r: {j for j, why in enumerate(reasons) if why == {r}} for r in MASK_REASONS}
        if p["attention"] == "dec_self" and p["causal"]:
            out["future_unmasked"] = right - only["future"]
            out["masked_self"] = right | {q}
            out["swapped"] = (right - only["future"]) | set(range(q))  # the transposed mask: the past hidden
        for r in ("padding", "hidden", "window"):
            out[f"{r}_unmasked"] = right - only[r]
        if p["window"]:
            out["window_off_by_one"] = (right - only["window"]) | {j for j in only["window"] if abs(q - j) > p["window"]}
        return _distinct(out, right, lambda a, b: a == b)
    elif ex.kind == "shape":
        shape, letters, sizes = list(p["shape"]), p["letters"], p["sizes"]
        if letters and letters[0] == "B":
            out["no_batch"] = shape[1:]
        if letters and "n_heads" in letters:
            out["heads_not_split"] = [
                sizes["d_model"] if x == "d_head" else d for x, d in zip(letters, shape, strict=True) if x != "n_heads"
            ]
        if letters and "d_head" in letters:
            out["d_model_for_d_head"] = [sizes["d_model"] if x == "d_head" else d for x, d in zip(letters, shape, strict=True)]
        if letters and ("S" in letters or "T" in letters) and sizes.get("S") != sizes.get("T"):
            other = {"S": sizes.get("T"), "T": sizes.get("S")}
            out["source_target"] = [other.get(x, d) for x, d in zip(letters, shape, strict=True)]
        return _distinct(out, shape, lambda a, b: a == b)
    far = 2 * ex.tolerance + 1e-9
    numbers = {code: [float(v) for v in wrong] for code, wrong in out.items()}
    return _distinct(numbers, right, lambda a, b: np.max(np.abs(np.asarray(a) - np.asarray(b))) <= far)


def _distinct(found: dict, right, same) -> dict:
    """``found`` without the mistakes that give the right answer or the answer of a mistake before them (the first
    name wins: one answer, one message)."""
    kept: dict = {}
    for code, wrong in found.items():
        if not same(wrong, right) and not any(same(wrong, other) for other in kept.values()):
            kept[code] = wrong
    return kept


# -- grading ------------------------------------------------------------------------------------------------------------


def _fmt(v: float) -> str:
    return f"{v:.4f}".rstrip("0").rstrip(".") if v != 0 else "0"


def fix_step(ex: Exercise) -> str:
    """The step that gives the right answer (markdown), with the exercise's numbers."""
    p = ex.params
    if ex.kind == "scale":
        tau = f" · τ = √{p['d_head']} · {p['temperature']:g}" if p["temperature"] != 1 else ""
        return _("Divide each q·k_j by √d_head{tau} = {divisor}.").format(
            tau=tau, divisor=_fmt(math.sqrt(p["d_head"]) * p["temperature"])
        )
    if ex.kind == "mask":
        return _(
            "Go through the keys one by one: in decoder self-attention every key j > i is future; a <pad> key is "
            "padding; a hidden source token is hidden; with a window, a key with |i − j| ≥ window is outside it."
        )
    if ex.kind == "softmax":
        return _(
            "Along the query's row: drop the masked keys, take e^x of each remaining score, divide each by their sum; "
            "masked keys get 0."
        )
    if ex.kind == "weighted_sum":
        return _(
            "For each dimension: multiply each key's weight w_j by its value v_j in that dimension, and add the products "
            "over all keys."
        )
    if ex.kind == "next_token":
        return _("Divide every logit by τ = {tau}, take e^x of each, and divide the asked one by their sum.").format(
            tau=f"{p['temperature']:g}"
        )
    if ex.kind == "positional":
        return _(
            "Find the pair index i, compute the angle pos / 10000^(2i/d_model) in radians, then sin for a sine dimension, "
            "cos for a cosine one."
        )
    return _(
        "Read the tensor's axes from the data flow: batch B first, then positions (S for the source, T for the decoder), "
        "then the width."
    )


def worked_solution(ex: Exercise) -> str:
    """The worked solution of ``ex`` (markdown), computed from the shown inputs."""
    p, right = ex.params, solve(ex)
    if ex.kind == "scale":
        div = math.sqrt(p["d_head"]) * p["temperature"]
        lines = [
            f"- {lab}: {s:g} / {_fmt(div)} = **{_fmt(v)}**" for lab, s, v in zip(ex.labels, ex.table["q·k_j"], right, strict=True)
        ]
        return _("Divide by √{d_head} · τ = {divisor}:").format(d_head=p["d_head"], divisor=_fmt(div)) + "\n" + "\n".join(lines)
    if ex.kind == "mask":
        reasons = key_reasons(ex)
        lines = [
            f"- {ex.labels[j]}: " + _(" and ").join(_(REASON_LABELS[r]) for r in sorted(why))
            for j, why in enumerate(reasons)
            if why
        ]
        return _("Masked keys:") + "\n" + ("\n".join(lines) if lines else "- " + _("none: this query may read every key."))
    if ex.kind == "softmax":
        x, masked = _col(ex, "scaled score"), _masked(ex)
        keep = ~masked
        if not keep.any():
            return _("Every key is masked: every weight is 0.")
        e = np.exp(x[keep] - x[keep].max())
        lines = [
            f"- {lab}: " + (_("masked → **0**") if m else f"e^({s:g} − {x[keep].max():g}) / Σ = **{_fmt(v)}**")
            for lab, s, m, v in zip(ex.labels, x, masked, right, strict=True)
        ]
        return (
            _("Subtract the largest allowed score ({top}) so e^x stays small; Σ e^x over the allowed keys = {total}.").format(
                top=f"{x[keep].max():g}", total=_fmt(e.sum())
            )
            + "\n"
            + "\n".join(lines)
        )
    if ex.kind == "weighted_sum":
        w = ex.table["w_j"]
        parts = []
        for d, v in zip(p["dims"], right, strict=True):
            terms = " + ".join(f"{a:g}·{b:g}" for a, b in zip(w, ex.table[f"v_j[{d}]"], strict=True))
            parts.append(f"- output[{d}] = {terms} = **{_fmt(v)}**")
        return "\n".join(parts)
    if ex.kind == "next_token":
        z, tau = _col(ex, "logit"), p["temperature"]
        e = np.exp((z - z.max()) / tau)
        return _("z / τ = {scaled}; e^(z/τ − max) = {exps}; their sum {total}; P = {asked} / {total} = **{p}**.").format(
            scaled=", ".join(_fmt(v) for v in z / tau),
            exps=", ".join(_fmt(v) for v in e),
            total=_fmt(e.sum()),
            asked=_fmt(e[p["asked"]]),
            p=_fmt(right[0]),
        )
    if ex.kind == "positional":
        D, dim, pos = p["d_model"], p["dim"], p["pos"]
        pair = dim // 2 if p["layout"] == "interleaved" else dim % (D // 2)
        fn = "sin" if (dim % 2 == 0 if p["layout"] == "interleaved" else dim < D // 2) else "cos"
        angle = pos / 10000 ** (2 * pair / D)
        wave = (
            _("Dimension {dim} is a sine with i = {pair}") if fn == "sin" else _("Dimension {dim} is a cosine with i = {pair}")
        ).format(dim=dim, pair=pair)
        return wave + _(": angle = {pos} / 10000^({two_i}/{D}) = {angle} radians; {fn}({angle}) = **{value}**.").format(
            pos=pos, two_i=2 * pair, D=D, angle=_fmt(angle), fn=fn, value=_fmt(right[0])
        )
    letters = p["letters"]
    named = f" ({' x '.join(letters)})" if letters else ""
    return _("“{stage}” is **[{shape}]**{named}.").format(stage=p["stage"], shape=", ".join(map(str, right)), named=named)


def grade(ex: Exercise, answer) -> Feedback:
    """Grade ``answer`` to ``ex``: right within ``ex.tolerance`` (each number), a named mistake (its answer computed by
    ``mistakes``, matched within the same tolerance), or wrong for another reason (a general hint). Pure: the same
    exercise and answer always give the same feedback.

    answer: text or a sequence of numbers (numeric kinds), a shape as text or ints (shape), or reason -> key
    positions (mask). An answer that cannot be read gives ``mistake="malformed"`` and says why.
    """
    solution = worked_solution(ex)
    try:
        if ex.kind == "mask":
            given = parse_mask(answer, len(ex.labels))
        elif ex.kind == "shape":
            given = parse_shape(answer)
        else:
            given = parse_numbers(answer, len(ex.labels))
    except AnswerError as e:
        return Feedback(False, "malformed", str(e), None, solution)
    right, wrong = solve(ex), mistakes(ex)
    if ex.kind == "mask":
        picked = set().union(*given.values()) if given else set()
        if picked == right:
            reasons = key_reasons(ex)
            bad = sorted(j for r, js in given.items() for j in js if r not in reasons[j])
            if not bad:
                return Feedback(True, None, _("Right: exactly these keys are masked, for these reasons."), None, solution)
            which = ", ".join(ex.labels[j] for j in dict.fromkeys(bad))
            said = MISTAKES["wrong_reason"]
            message = _("{mistake} Check: {keys}.").format(mistake=_(said), keys=which)
            return Feedback(False, "wrong_reason", message, fix_step(ex), solution)
        match = next((code for code, keys in wrong.items() if picked == keys), None)
    elif ex.kind == "shape":
        if given == right:
            return Feedback(True, None, _("Right."), None, solution)
        match = next((code for code, shape in wrong.items() if given == shape), None)
        if match is None and sorted(given) == sorted(right):
            match = "swapped"
    else:
        tol = ex.tolerance + 1e-9
        if np.max(np.abs(np.asarray(given) - np.asarray(right))) <= tol:
            return Feedback(
                True, None, _("Right (each number within ±{tolerance}).").format(tolerance=f"{ex.tolerance:g}"), None, solution
            )
        match = next((code for code, v in wrong.items() if np.max(np.abs(np.asarray(given) - np.asarray(v))) <= tol), None)
    if match is None:
        return Feedback(False, "other", _("Not quite, and not one of the usual slips.") + " " + fix_step(ex), None, solution)
    return Feedback(False, match, _(MISTAKES[match]), fix_step(ex), solution)


# -- a class's answers (a teacher's room) -------------------------------------------------------------------------------


def answer_text(answer) -> str:
    """An answer as the text a store of answers keeps (a mask answer as JSON: reason -> sorted key positions)."""
    if isinstance(answer, Mapping):
        return json.dumps({str(r): sorted(int(j) for j in js) for r, js in answer.items()}, sort_keys=True)
    if isinstance(answer, str):
        return answer
    return ", ".join(repr(float(v)) if not isinstance(v, int) else str(v) for v in np.atleast_1d(np.asarray(answer)).tolist())


def read_answer(ex: Exercise, text: str):
    """What ``grade`` takes, from ``answer_text``'s text (text that is not a mask answer stays text: ``grade`` says why)."""
    if ex.kind == "mask":
        try:
            return json.loads(text)
        except (TypeError, ValueError):
            return text
    return text


@dataclass(frozen=True)
class ClassResult:
    """A class's answers to one exercise: how many, the share right (0..1; 0 with no answer), and the named mistakes by
    how often they were made, most common first (``most_common``: the first, or None)."""

    n: int
    share_correct: float
    mistakes: list[tuple[str, int]]

    @property
    def most_common(self) -> str | None:
        """The code of the most common named mistake, or None when nobody made one."""
        return self.mistakes[0][0] if self.mistakes else None


def class_result(ex: Exercise, answers: Sequence[str]) -> ClassResult:
    """Grade every answer (``answer_text`` texts, one per student) of ``ex``: what a teacher's room shows on reveal.
    Unreadable answers count as wrong and are not a named mistake."""
    graded = [grade(ex, read_answer(ex, a)) for a in answers]
    counts: dict[str, int] = {}
    for fb in graded:
        if fb.mistake in MISTAKES:
            counts[fb.mistake] = counts.get(fb.mistake, 0) + 1
    share = sum(fb.correct for fb in graded) / len(graded) if graded else 0.0
    return ClassResult(len(graded), share, sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

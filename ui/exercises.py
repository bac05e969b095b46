"""Exercises on the page (issue 55): the widgets that show one ``analysis.exercises.Exercise`` (its question, its
inputs as a table and CSV, an answer box, "Check", the feedback and the worked solution on request), the student's
progress in this session, and the builders that make each kind of exercise from the sentence in the box.

Used by /exercises (every kind), the "Your turn" mode of /head, /positional and /shapes, and the lesson's "Try it"
boxes. The grading is ``analysis.exercises.grade``: a pure function, so a teacher's room can grade the same
exercise (``Exercise.to_dict``) without this module. Progress lives in the session state only (``keys.EXERCISE_PROGRESS``):
nothing is stored on the server, nothing goes into the URL.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from analysis.exercises import (
    EXERCISE_KINDS,
    MASK_REASONS,
    MISTAKES,
    REASON_LABELS,
    TITLES,
    Exercise,
    Feedback,
    grade,
    mask_exercise,
    next_token_exercise,
    positional_exercise,
    scale_exercise,
    shape_exercise,
    softmax_exercise,
    weighted_sum_exercise,
)
from analysis.records import HeadTrace
from i18n import N_, _
from model.settings import Interventions
from ui import keys, room, state
from ui.widgets import download, md_escape, table_height

HEAD_KINDS = ("scale", "mask", "softmax", "weighted_sum")  # the exercises of one head's trace (/head)
WHERE = {  # kind -> the pages it is also on (translated where shown)
    "scale": N_("Inside one head"),
    "mask": N_("Inside one head; Lesson, step 5"),
    "softmax": N_("Inside one head; Lesson, step 3"),
    "weighted_sum": N_("Inside one head"),
    "next_token": N_("Lesson, step 7"),
    "positional": N_("Positional encoding"),
    "shape": N_("Shapes"),
}


# -- progress in this session ------------------------------------------------------------------------------------------


def progress() -> dict[str, dict]:
    """This session's progress, kind -> {"tries", "solved", "mistakes": {code: count}} (session state only)."""
    return st.session_state.setdefault(keys.EXERCISE_PROGRESS, {})


def record(ex: Exercise, fb: Feedback) -> None:
    """Count one checked answer to ``ex`` in this session's progress (an unreadable answer does not count)."""
    if fb.mistake == "malformed":
        return
    p = progress().setdefault(ex.kind, {"tries": 0, "solved": 0, "mistakes": {}})
    p["tries"] += 1
    if fb.correct:
        p["solved"] += 1
    elif fb.mistake:
        p["mistakes"][fb.mistake] = p["mistakes"].get(fb.mistake, 0) + 1


def progress_table() -> pd.DataFrame:
    """One row per exercise kind: its title, where else it is, answers checked, solved, the most common mistake."""
    rows = []
    for kind in EXERCISE_KINDS:
        p = progress().get(kind, {"tries": 0, "solved": 0, "mistakes": {}})
        named = {c: n for c, n in p["mistakes"].items() if c in MISTAKES}
        common = max(named, key=named.get) if named else ""
        slip = _(MISTAKES[common]) if common in MISTAKES else ""
        rows.append((_(TITLES[kind]), _(WHERE[kind]), p["tries"], p["solved"], slip))
    columns = [_("exercise"), _("also on"), _("answers checked"), _("solved"), _("most common slip")]
    return pd.DataFrame(rows, columns=columns)


# -- one exercise on the page ------------------------------------------------------------------------------------------


def _answer_box(ex: Exercise, base: str):
    """The answer widgets of ``ex``; returns what ``grade`` takes."""
    if ex.kind == "mask":
        labels = ex.labels
        cols = st.columns(len(MASK_REASONS))
        picked = {}
        for col, reason in zip(cols, MASK_REASONS, strict=True):
            picked[reason] = col.multiselect(
                _("Masked: {reason}").format(reason=_(REASON_LABELS[reason])),
                list(range(len(labels))),
                format_func=labels.__getitem__,
                key=f"{base}_{reason}",
            )
        return picked
    if ex.kind == "shape":
        return st.text_input(_("Your answer: the shape"), key=base, placeholder="[1, 7, 256]")
    if len(ex.labels) == 1:
        return st.text_input(_("Your answer: {what}").format(what=ex.labels[0]), key=base, placeholder="0.25")
    return st.text_area(
        _("Your answer: {n} numbers, in the order of the table").format(n=len(ex.labels)),
        key=base,
        height=90,
        placeholder=_("0.12, 0.80, 0.08 (commas, spaces or one per line, as pasted from a spreadsheet)"),
    )


def show(ex: Exercise, place: str) -> bool:
    """Draw ``ex`` (``place`` names where, for the widget keys: one exercise of a kind per place). Returns whether it is
    done: answered right, or its solution shown."""
    base = keys.exercise(place, ex.kind)
    done_key, fb_key, uid_key = f"{base}_done", f"{base}_feedback", f"{base}_uid"
    if st.session_state.get(uid_key) != ex.uid:  # another sentence, head or query: a new exercise starts empty
        for k in [base, done_key, fb_key, f"{base}_solution", *(f"{base}_{r}" for r in MASK_REASONS)]:
            st.session_state.pop(k, None)
        st.session_state[uid_key] = ex.uid
    st.session_state[f"{base}_exercise"] = ex.to_dict()  # what a room (or a test) grades against
    st.markdown(_("**Your turn: {title}.**").format(title=_(ex.title)) + " " + md_escape(ex.prompt))
    if ex.kind != "mask" or len(ex.labels) > 0:
        df = _shown_table(ex)
        st.dataframe(df, hide_index=True, height=min(table_height(df), 420))
    with st.container(horizontal=True, gap="small"):
        download(_("Inputs (CSV)"), ex.csv, f"exercise-{place}-{ex.kind}.csv", "text/csv")
        download(
            _("Exercise (JSON)"),
            lambda: json.dumps(ex.to_dict(), ensure_ascii=False),
            f"exercise-{place}-{ex.kind}.json",
            "application/json",
        )
        room.send_button(ex, f"{base}_send")  # the teacher of a room only: the exercise to every screen
    if ex.tolerance:
        st.caption(
            _("Graded on the rounded numbers shown: each number may be off by ±{tolerance:g}.").format(tolerance=ex.tolerance)
        )
    answer = _answer_box(ex, base)
    if st.button(_("Check"), key=f"{base}_check", type="primary"):
        fb = grade(ex, answer)
        record(ex, fb)
        st.session_state[fb_key] = fb
        st.session_state[done_key] = st.session_state.get(done_key, False) or fb.correct
    fb: Feedback | None = st.session_state.get(fb_key)
    if fb is not None:
        if fb.correct:
            st.success(fb.message)
        elif fb.mistake == "malformed":
            st.warning(md_escape(fb.message))
        else:
            fix = "\n\n" + _("**The step that fixes it:** {fix}").format(fix=md_escape(fb.fix)) if fb.fix else ""
            st.warning(md_escape(fb.message) + fix)
    if st.toggle(_("Show the worked solution"), key=f"{base}_solution"):
        st.markdown(_md(grade(ex, "").solution))
        st.session_state[done_key] = True
    return bool(st.session_state.get(done_key))


# the exercise tables' column names (identifiers the grader reads, kept in English in ``Exercise.table`` and its CSV) and
# the words in their cells, as shown on the page
TABLE_WORDS = {
    "key": N_("key"),
    "scaled score": N_("scaled score"),
    "masked": N_("masked"),
    "piece": N_("piece"),
    "logit": N_("logit"),
    "dimension": N_("dimension"),
    "name": N_("name"),
    "size": N_("size"),
    "future": N_("future"),
    "hidden": N_("hidden"),
    "window": N_("window"),
    "ablated": N_("ablated"),
    "not yet written": N_("not yet written"),
}


def _shown_table(ex: Exercise) -> pd.DataFrame:
    """``ex.table`` as the page shows it: column names and the words in its cells in the session's language."""
    df = pd.DataFrame(ex.table)
    if "masked" in df:
        df["masked"] = [_(TABLE_WORDS[v]) if v in TABLE_WORDS else v for v in df["masked"]]
    row = re.compile(r"row of query (\d+)")

    def header(name: str) -> str:
        if m := row.fullmatch(name):
            return _("row of query {q}").format(q=m.group(1))
        return _(TABLE_WORDS[name]) if name in TABLE_WORDS else name

    return df.rename(columns=header)


def _md(text: str) -> str:
    """``text`` (with tokens in it) escaped for Markdown, keeping its own bold (``**``) and its list lines (``- ``)."""
    escaped = md_escape(text).replace("\\*\\*", "**")
    return re.sub(r"(?m)^\\- ", "- ", escaped)


@dataclass(frozen=True)
class Turn:
    """A "Your turn" exercise of a page: the page asks ``at(kind, ...)`` where a stage is drawn."""

    exercise: Exercise
    place: str

    def at(self, *kinds: str) -> bool:
        """Draw the exercise here when it is one of ``kinds``; True while it is not done (the page then stops: the
        numbers after this point would give the answer away)."""
        if self.exercise.kind not in kinds:
            return False
        done = show(self.exercise, self.place)
        if not done:
            st.caption(_("The rest of this page appears when you have answered (or asked for the solution)."))
        return not done


# -- building the exercises of the sentence in the box ------------------------------------------------------------------


def seed() -> int:
    """The session's exercise seed: "New numbers" adds one."""
    return st.session_state.get(keys.EXERCISE_SEED, 0)


def rng_for(ctx_text: str, kind: str) -> random.Random:
    """The random choices (head, query, step, tensor) of exercise ``kind`` on ``ctx_text``: the same until "New numbers"."""
    return random.Random(f"{ctx_text}|{kind}|{seed()}")


def source_of(ctx: state.Ctx) -> dict:
    """Where an exercise's numbers come from, for a teacher's room: the model's folder name and the sentence."""
    return {"model": ctx.path.rstrip("/").split("/")[-1], "sentence": ctx.text}


def from_trace(kind: str, ctx: state.Ctx, t: HeadTrace, interventions: Interventions) -> Exercise:
    """Exercise ``kind`` (one of ``HEAD_KINDS``) from the trace ``t`` of the page, run under ``interventions``."""
    src = source_of(ctx)
    if kind == "scale":
        return scale_exercise(t, source=src)
    if kind == "weighted_sum":
        return weighted_sum_exercise(t, source=src)
    if kind == "softmax":
        n_q = len(t.q_tokens)
        others = [
            state.run_head_trace(ctx.path, ctx.text, ctx.settings, interventions, t.kind, t.layer, t.head, q)
            for q in (t.query - 1, t.query + 1)
            if 0 <= q < n_q
        ]
        return softmax_exercise(t, others=others, source=src)
    padding = 0 if t.kind == "dec_self" else 2  # the sentence in a batch with a longer one
    return mask_exercise(
        t.kind,
        t.q_tokens,
        t.k_tokens,
        t.query,
        causal=interventions.causal,
        window=interventions.window,
        hidden=sorted(interventions.src_hidden),
        padding=padding,
        source=src,
    )


def traced(ctx: state.Ctx, kind: str, rng: random.Random, interventions: Interventions) -> HeadTrace:
    """A trace of a head, layer and query drawn by ``rng`` (decoder self-attention for ``dec``)."""
    cfg = ctx.cfg
    n_layers = cfg.n_enc_layers if kind == "enc_self" else cfg.n_dec_layers
    analysis = ctx.under(interventions)
    n_q = len(analysis.source.tokens if kind == "enc_self" else analysis.tgt_in_tokens)
    layer, head, query = rng.randrange(n_layers), rng.randrange(cfg.n_heads), rng.randrange(n_q)
    return state.run_head_trace(ctx.path, ctx.text, ctx.settings, interventions, kind, layer, head, query)


def build(kind: str, ctx: state.Ctx) -> Exercise:
    """Exercise ``kind`` on the sentence in the box, its head, query, step or tensor drawn by the session's seed."""
    rng = rng_for(ctx.text, kind)
    src = source_of(ctx)
    attention = rng.choice(["enc_self", "dec_self", "cross"])
    if kind in ("scale", "softmax", "weighted_sum"):
        tau = rng.choice([1.0, 2.0, 0.5]) if kind == "scale" else 1.0
        interventions = Interventions(temperature=tau)
        return from_trace(kind, ctx, traced(ctx, attention, rng, interventions), interventions)
    if kind == "mask":
        analysis = ctx.analysis
        src_tokens, tgt_tokens = analysis.source.tokens, analysis.tgt_in_tokens
        q_tokens, k_tokens = {
            "enc_self": (src_tokens, src_tokens),
            "dec_self": (tgt_tokens, tgt_tokens),
            "cross": (tgt_tokens, src_tokens),
        }[attention]
        query = rng.randrange(len(q_tokens))
        hidden = [rng.randrange(len(src_tokens))] if attention != "dec_self" else []
        window = rng.choice([None, 2, 3]) if attention != "cross" else None
        padding = rng.choice([0, 1, 2])
        return mask_exercise(attention, q_tokens, k_tokens, query, window=window, hidden=hidden, padding=padding, source=src)
    if kind == "next_token":
        steps = ctx.steps()
        step = steps[rng.randrange(len(steps))]
        s = ctx.settings
        tau = s.temperature if s.method == "sample" and s.temperature != 1 else rng.choice([0.5, 2.0])
        return next_token_exercise(step, temperature=tau, source=src)
    if kind == "positional":
        return pe_exercise(ctx.cfg, rng, len(ctx.analysis.source.ids), src)
    if kind == "shape":
        return shapes_exercise(ctx, rng)
    raise ValueError(f"unknown exercise kind {kind!r}")


def pe_exercise(cfg, rng: random.Random, n_pos: int, source: dict) -> Exercise:
    """PE(pos, dim) at a position below ``n_pos`` (at least 1) and a dimension whose angle is between 0.3 and 30
    radians: not a value a glance gives (sin 0 = 0, cos 0 = 1)."""
    pos = rng.randrange(1, max(n_pos, 3))
    D = cfg.d_model
    pairs = [i for i in range(D // 2) if 0.3 <= pos / 10000 ** (2 * i / D) <= 30] or [0]
    pair, cosine = rng.choice(pairs), rng.random() < 0.5
    layout = getattr(cfg, "pe_layout", "interleaved")
    dim = (2 * pair + cosine) if layout == "interleaved" else (pair + cosine * D // 2)
    return positional_exercise(pos, dim, D, layout=layout, source=source)


def shapes_exercise(ctx: state.Ctx, rng: random.Random) -> Exercise:
    """The shape of one tensor of the data flow (the Shapes page) for this input."""
    cfg, analysis = ctx.cfg, ctx.analysis
    sizes = {
        "B": 1,
        "S": len(analysis.source.ids),
        "T": len(analysis.tgt_in_tokens),
        "d_model": cfg.d_model,
        "n_heads": cfg.n_heads,
    }
    sizes |= {"d_head": cfg.d_head, "d_ff": cfg.d_ff, "target vocab": cfg.n_logits}
    stages = [s for s in analysis.maps.shapes if len(s.shape) > 1 and "layer " not in s.name] or list(analysis.maps.shapes)
    return shape_exercise(rng.choice(stages), sizes, source=source_of(ctx))


def new_numbers_button(key: str) -> None:
    """ "New numbers": another head, query, step or tensor for every exercise of this session."""

    def more() -> None:
        st.session_state[keys.EXERCISE_SEED] = seed() + 1

    st.button(_("New numbers"), key=key, icon=":material/casino:", on_click=more, help=_("Another head, query, step or tensor."))


# -- the pages' "Your turn" and the lesson's "Try it" ------------------------------------------------------------------


def head_turn(ctx: state.Ctx, t: HeadTrace, interventions: Interventions) -> Turn | None:
    """/head's "Your turn": a toggle and the stage picked; the exercise of that stage from the page's own trace."""
    c1, c2 = st.columns([1, 3], vertical_alignment="bottom")
    on = c1.toggle(
        _("Your turn"), key=keys.HEAD_TURN, help=_("Do one step of eq. 1 yourself: its numbers stay hidden until you answer.")
    )
    if not on:
        return None
    titles = {k: _(TITLES[k]) for k in HEAD_KINDS}
    kind = c2.selectbox(_("Step"), HEAD_KINDS, format_func=titles.get, key=keys.HEAD_TURN_STEP)
    return Turn(from_trace(kind, ctx, t, interventions), "head")


def page_turn(toggle_key: str, make) -> Turn | None:
    """A "Your turn" toggle; on, the exercise ``make()`` builds."""
    if not st.toggle(_("Your turn"), key=toggle_key, help=_("Work it out yourself: the answer stays hidden until you check.")):
        return None
    new_numbers_button(f"{toggle_key}_new")
    return Turn(make(), toggle_key)


def positional_turn(cfg, path: str) -> Turn | None:
    """/positional's "Your turn": one value PE(pos, i) from the formula."""
    name = path.rstrip("/").split("/")[-1]
    return page_turn(keys.PE_TURN, lambda: pe_exercise(cfg, random.Random(f"pe|{seed()}"), 40, {"model": name}))


def shapes_turn(ctx: state.Ctx) -> Turn | None:
    """/shapes's "Your turn": the shape of one tensor for this input."""
    return page_turn(keys.SHAPES_TURN, lambda: shapes_exercise(ctx, rng_for(ctx.text, "shape")))


LESSON_TRY = {"attention": "softmax", "causal": "mask", "next_token": "next_token"}  # lesson step key -> exercise kind


def lesson_try(ctx: state.Ctx, step_key: str) -> None:
    """The lesson's "Try it" box under the steps on self-attention, the causal mask and the decoding step."""
    kind = LESSON_TRY.get(step_key)
    if kind is None:
        return
    with st.expander(_("Try it: {title}").format(title=_(TITLES[kind])), expanded=False):
        rng = rng_for(ctx.text, f"lesson-{kind}")
        if kind == "softmax":
            ex = from_trace("softmax", ctx, traced(ctx, "enc_self", rng, state.NO_INTERVENTIONS), state.NO_INTERVENTIONS)
        elif kind == "mask":
            T = len(ctx.analysis.tgt_in_tokens)
            tokens = ctx.analysis.tgt_in_tokens
            ex = mask_exercise("dec_self", tokens, tokens, rng.randrange(T), padding=1, source=source_of(ctx))
        else:
            ex = build("next_token", ctx)
        show(ex, "lesson")
